package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/** index_select on the GPU: rows of tables of every width picked by i32 and i64 indices, against plain loops. */
@RequiresGpu
class IndexSelectGpuTest {
    @Test
    void rowsArePickedExactly() {
        var rnd = new SplittableRandom(3);
        // row widths in bytes: 16-byte multiples (vector copies) and not (byte copies)
        for (long[] shape : new long[][]{{1000, 4096}, {37, 5}, {128256, 64}})
            for (DType t : List.of(DType.F32, DType.BF16))
                for (DType idType : List.of(DType.I32, DType.I64)) {
                    var g = Gatun.graph("lookup");
                    g.output("y", g.input("table", t, shape[0], shape[1]).indexSelect(0, g.input("ids", idType, 3, 7)));
                    NDArray table = NDArray.random(t, rnd.nextLong(), shape[0], shape[1]);
                    double[] ids = new double[21];
                    for (int k = 0; k < ids.length; k++) ids[k] = rnd.nextLong(shape[0]);
                    ids[0] = shape[0] - 1;
                    try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
                        for (int call = 0; call < 2; call++) {
                            NDArray y = s.runToHost(Map.of("table", table, "ids", NDArray.of(idType, ids, 3, 7))).get("y");
                            for (int k = 0; k < ids.length; k++)
                                for (long c = 0; c < shape[1]; c++)
                                    assertThat(y.get(k * shape[1] + c)).as("%s %s row %d", t, idType, k).isEqualTo(table.get((long) ids[k] * shape[1] + c));
                        }
                    }
                }
    }
}
