package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.host.ArgmaxHostTest;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** argmax on the GPU: rows of a vocabulary's width and short ones, ties and NaNs, against plain loops. */
@RequiresGpu
class ArgmaxGpuTest {
    @Test
    void theFirstLargestElementOfEveryRow() {
        var rnd = new java.util.Random(9);
        for (int cols : new int[]{128256, 7, 1000})
            for (DType t : List.of(DType.F32, DType.BF16, DType.F16, DType.F64)) {
                var g = Gatun.graph("greedy");
                g.output("next", g.input("logits", t, 8, cols).argmax(-1));
                double[] x = new double[8 * cols];
                for (int i = 0; i < x.length; i++) x[i] = rnd.nextInt(50) - 25;   // many ties
                x[3 * cols + cols / 2] = Double.NaN;
                x[3 * cols + cols - 1] = Double.NaN;                   // the first NaN wins
                x[5 * cols + cols - 1] = 1000;
                for (int j = 0; j < cols; j++) x[cols + j] = j % 3 == 0 ? -1 : j % 3 == 1 ? -0.0 : 0.0;  // -0 equals +0
                for (int j = 0; j < cols; j++) x[6 * cols + j] = Double.NEGATIVE_INFINITY;
                x[7 * cols + cols - 1] = 25;                           // the largest in the last block
                NDArray logits = NDArray.of(t, x, 8, cols);
                long[] want = ArgmaxHostTest.firstLargest(logits.toDoubleArray(), cols);
                try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
                    NDArray next = s.runToHost(Map.of("logits", logits)).get("next");
                    for (int r = 0; r < 8; r++) assertThat((long) next.get(r)).as("%s cols %d row %d", t, cols, r).isEqualTo(want[r]);
                    // a second call: the output words are cleared again before the blocks fold their keys in
                    NDArray again = s.runToHost(Map.of("logits", NDArray.full(t, -3, 8, cols))).get("next");
                    for (int r = 0; r < 8; r++) assertThat((long) again.get(r)).isZero();
                }
            }
    }
}
