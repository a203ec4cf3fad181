package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.offset;

/**
 * A product joined with the SwiGLU after it ({@code Step.GatedProduct}) on the host backend, which runs the two steps it
 * holds: the same bits as the plan that keeps them apart, and the values of float64 loops.
 */
class GatedProductHostTest {

    @Test
    void joinedOrNotTheSameValuesAsPlainLoops() {
        int rows = 4, h = 24, k = 32;
        for (DType t : new DType[]{DType.BF16, DType.F32}) {
            var x = NDArray.randn(t, 3, rows, k);
            var w = NDArray.randn(t, 4, 2 * h, k);
            double[][] ys = new double[2][];
            for (int joined = 0; joined < 2; joined++) {
                var g = Gatun.graph("mlp");
                var y = g.input("x", t, rows, k).matmul(g.input("w", t, 2 * h, k).transpose(0, 1));
                g.output("out", y.slice(1, 0, h).silu().mul(y.slice(1, h, 2 * h)));
                try (var s = Session.compile(g.build(), CompileOptions.world(1).gatedProducts(joined == 1))) {
                    assertThat(s.plan().toString().contains("launch swiglu_0 {")).as(s.plan().toString()).isEqualTo(joined == 1);
                    ys[joined] = s.runToHost(Map.of("x", x, "w", w)).get("out").toDoubleArray();
                }
            }
            assertThat(ys[1]).as(t.toString()).containsExactly(ys[0]);
            double[] xs = x.toDoubleArray(), ws = w.toDoubleArray();
            for (int r = 0; r < rows; r++)
                for (int j = 0; j < h; j++) {
                    double gate = 0, up = 0;
                    for (int p = 0; p < k; p++) {
                        gate += xs[r * k + p] * ws[j * k + p];
                        up += xs[r * k + p] * ws[(h + j) * k + p];
                    }
                    double want = gate / (1 + Math.exp(-gate)) * up;
                    double tol = t == DType.F32 ? 1e-4 : 0.05 + 0.02 * Math.abs(want);
                    assertThat(ys[1][r * h + j]).as("%s row %d column %d", t, r, j).isCloseTo(want, offset(tol));
                }
        }
    }
}
