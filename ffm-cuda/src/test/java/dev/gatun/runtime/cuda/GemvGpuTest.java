package dev.gatun.runtime.cuda;

import dev.gatun.cuda.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.offset;

/**
 * A few rows by a weight read transposed ({@code x @ w.mT}, a decode step's linear layer) against plain loops: the
 * weight-streaming kernel's shapes (one row; rows of the weight that end mid-way through a warp's sweep; one column),
 * the cuBLAS shapes around it (several rows, a row length that is no whole number of 16-byte vectors), and products
 * written into their slices of a concatenation (rows of the output further apart than its width).
 */
@RequiresGpu
class GemvGpuTest {

    static double[] linear(NDArray x, NDArray w, int m, int n, int k) {
        double[] y = new double[m * n];
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double acc = 0;
                for (int p = 0; p < k; p++) acc += x.get((long) i * k + p) * w.get((long) j * k + p);
                y[i * n + j] = acc;
            }
        return y;
    }

    static void check(String what, DType t, double[] want, double[] got, int k) {
        double tol = (t == DType.F32 ? 1e-5 : t == DType.F16 ? 2e-3 : 1e-2) * Math.sqrt(k);
        assertThat(got).hasSameSizeAs(want);
        for (int i = 0; i < want.length; i++) assertThat(got[i]).as("%s element %d", what, i).isCloseTo(want[i], offset(tol * (1 + Math.abs(want[i]) / Math.sqrt(k))));
    }

    @Test
    void fewRowsByATransposedWeightMatchPlainLoops() {
        for (DType t : List.of(DType.BF16, DType.F16, DType.F32))
            for (int[] mnk : new int[][]{{1, 1000, 2048}, {1, 37, 2056}, {1, 1, 64}, {3, 37, 2056}, {8, 64, 64}, {2, 17, 12}}) {
                int m = mnk[0], n = mnk[1], k = mnk[2];
                if (t == DType.F32 && k == 12) k = 13;   // not a whole number of 16-byte vectors in any dtype: cuBLAS
                var g = Gatun.graph("linear");
                g.output("y", g.input("x", t, m, k).matmul(g.input("w", t, n, k).transpose(0, 1)));
                var x = NDArray.randn(t, 1 + m, m, k);
                var w = NDArray.randn(t, 2 + n, n, k);
                try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
                    for (int call = 0; call < 2; call++)
                        check(t + " m " + m + " n " + n + " k " + k, t, linear(x, w, m, n, k), s.runToHost(Map.of("x", x, "w", w)).get("y").toDoubleArray(), k);
                }
            }
    }

    @Test
    void productsWrittenIntoTheirSlicesOfAConcatenation() {
        int m = 1, k = 256, n1 = 24, n2 = 40;
        var g = Gatun.graph("two");
        var x = g.input("x", DType.BF16, m, k);
        g.output("y", x.matmul(g.input("w1", DType.BF16, n1, k).transpose(0, 1)).cat(1, x.matmul(g.input("w2", DType.BF16, n2, k).transpose(0, 1))));
        var xv = NDArray.randn(DType.BF16, 7, m, k);
        var w1 = NDArray.randn(DType.BF16, 8, n1, k);
        var w2 = NDArray.randn(DType.BF16, 9, n2, k);
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
            assertThat(s.plan().kernels()).as("both products write straight into the concatenation").isEmpty();
            double[] got = s.runToHost(Map.of("x", xv, "w1", w1, "w2", w2)).get("y").toDoubleArray();
            double[] a = linear(xv, w1, m, n1, k), b = linear(xv, w2, m, n2, k), want = new double[m * (n1 + n2)];
            for (int i = 0; i < m; i++) {
                System.arraycopy(a, i * n1, want, i * (n1 + n2), n1);
                System.arraycopy(b, i * n2, want, i * (n1 + n2) + n1, n2);
            }
            check("cat", DType.BF16, want, got, k);
        }
    }
}
