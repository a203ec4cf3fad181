package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

/**
 * A whole reduction of a row kernel's per-row results runs in that kernel (Kernel.Fold): one kernel, and the values of
 * plain loops here, over several calls (on a GPU the last block's counter must be back at zero for the next).
 */
public class GridFoldTest {
    @Test
    void foldsOfRowResultsAreOneKernelAndRightOnTheHost() {
        foldsAreRight(CompileOptions.world(1).backend("host"));
    }

    /** The loop-ordering seed, a mean of bf16 row maxima, a sum of int32 row sums and a max of f32 row sums. */
    public static void foldsAreRight(CompileOptions co) {
        var g = Gatun.graph("folds");
        var in = g.input("x", DType.F32, 64, 48);
        g.output("y", in.sum(-1).sum());
        g.output("z_t", in.div(10).t().copy().t());
        g.output("m", g.input("b", DType.BF16, 300, 500).max(-1).mean());
        g.output("s", g.input("i", DType.I32, 33, 100).sum(-1).sum());
        g.output("t", g.input("f", DType.F32, 64, 64, 8).sum(-1).max());
        // no rows: the fold still writes its value (on a GPU one block runs for it)
        var none = g.input("e", DType.F32, 0, 8);
        g.output("z0", none.sum(-1).sum());
        g.output("zm", none.max(-1).mean());
        NDArray xs = NDArray.random(DType.F32, 1, 64, 48), bs = NDArray.randn(DType.BF16, 2, 300, 500), fs = NDArray.randn(DType.F32, 4, 64, 64, 8);
        int[] ints = new int[33 * 100];
        for (int k = 0; k < ints.length; k++) ints[k] = (k * 7919) % 2001 - 1000;
        NDArray is = NDArray.of(ints, 33, 100);
        double[] x = xs.toDoubleArray(), b = bs.toDoubleArray(), f = fs.toDoubleArray();
        double y = 0, m = 0, t = Double.NEGATIVE_INFINITY;
        long s = 0;
        for (double v : x) y += v;
        for (int r = 0; r < 300; r++) {
            double mx = Double.NEGATIVE_INFINITY;
            for (int c = 0; c < 500; c++) mx = Math.max(mx, b[r * 500 + c]);
            m += mx;
        }
        m /= 300;
        for (int v : ints) s += v;
        for (int r = 0; r < 64 * 64; r++) {
            double exact = 0;
            for (int c = 0; c < 8; c++) exact += f[r * 8 + c];
            t = Math.max(t, (float) exact); // the row sums are stored as f32
        }
        try (var session = Session.compile(g.build(), co)) {
            // the two reductions of the empty input share a row kernel, which folds both
            assertThat(session.plan().kernels()).as(session.plan().toString()).hasSize(5).allSatisfy(k -> assertThat(k.folds()).isNotEmpty());
            assertThat(session.plan().kernels().stream().mapToInt(k -> k.folds().size()).sum()).isEqualTo(6);
            for (int call = 0; call < 3; call++) {
                var out = session.runToHost(Map.of("x", xs, "b", bs, "i", is, "f", fs, "e", NDArray.zeros(DType.F32, 0, 8)));
                assertThat(out.get("z0").toDoubleArray()[0]).isEqualTo(0.0);
                assertThat(out.get("zm").toDoubleArray()[0]).isNaN();
                assertThat(out.get("y").toDoubleArray()[0]).as("call %d", call).isCloseTo(y, within(1e-5 * Math.abs(y)));
                float[] zt = out.get("z_t").toFloatArray();
                for (int k = 0; k < zt.length; k++) assertThat(zt[k]).isCloseTo((float) (x[k] / 10), within(Math.ulp((float) (x[k] / 10))));
                assertThat(out.get("m").toDoubleArray()[0]).isCloseTo(m, within(FloatIntermediatesTest.bf16Step(m)));
                assertThat(out.get("s").toDoubleArray()[0]).isEqualTo((double) s);
                assertThat(out.get("t").toDoubleArray()[0]).isCloseTo(t, within(1e-5 * Math.abs(t)));
            }
        }
    }
}
