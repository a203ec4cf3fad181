package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static dev.gatun.ir.DType.F64;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.data.Offset.offset;

/**
 * Kernels with a member joined with its loop reordered (a transpose of a square-ish shape, whose sizes match in either
 * order): a reduction that makes such a kernel a row kernel must keep that member's order, and a kernel pulled in
 * beside it must be read where the reordered loop holds it. Before the fixes both read the member transposed and gave
 * wrong values. Found by the random gradient chains; the expected values are plain loops.
 */
class ReorderedRowJoinTest {

    @Test
    void sumOfATransposedProductBesideASibling() {
        var g = Gatun.graph("reordered");
        var x = g.input("x", F64, 1, 2, 2);
        var w = g.constant(F64, new long[]{2, 2, 1}, 1, 2, 3, 4);
        g.output("loss", x.sin().permute(1, 0, 2).permute(2, 0, 1).mul(w).sum());
        g.output("cos", x.cos());
        Graph graph = g.build();
        double[] xs = {1, 2, 3, 4}, ws = {1, 2, 3, 4};
        // y[i][j] = sin(x[0][j][i]) (the two permutes), loss = sum y * w
        double want = 0;
        for (int i = 0; i < 2; i++) for (int j = 0; j < 2; j++) want += Math.sin(xs[j * 2 + i]) * ws[i * 2 + j];
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            var out = s.runToHost(Map.of("x", NDArray.of(xs, 1, 2, 2)));
            assertThat(out.get("loss").get(0)).isCloseTo(want, offset(1e-12));
            assertThat(out.get("cos").toDoubleArray()[3]).isCloseTo(Math.cos(4), offset(1e-15));
        }
    }

    /**
     * v = 1 - w (its own kernel), u = 2 y, b = permute(u) * z (joins u's kernel reordered), c = b * v: c joins with b's
     * order and pulls v's kernel in, which must then be read at c's own element, not at the reordered loop's.
     */
    @Test
    void pulledInKernelBesideAReorderedMember() {
        var g = Gatun.graph("pulled");
        var w = g.input("w", F64, 2, 4, 2);
        var y = g.input("y", F64, 2, 4, 2);
        var z = g.input("z", F64, 2, 4, 2);
        var v = w.neg().add(1);
        var b = y.mul(2).permute(2, 1, 0).mul(z);
        g.output("c", b.mul(v));
        double[] ws = new double[16], ys = new double[16], zs = new double[16];
        for (int i = 0; i < 16; i++) {
            ws[i] = Math.sin(i);
            ys[i] = Math.cos(3 * i);
            zs[i] = 1 + i;
        }
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            double[] c = s.runToHost(Map.of("w", NDArray.of(ws, 2, 4, 2), "y", NDArray.of(ys, 2, 4, 2), "z", NDArray.of(zs, 2, 4, 2)))
                    .get("c").toDoubleArray();
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 4; j++)
                    for (int k = 0; k < 2; k++) {
                        int at = (i * 4 + j) * 2 + k, from = (k * 4 + j) * 2 + i;   // permute(2, 1, 0): b[i][j][k] = 2 y[k][j][i] z[i][j][k]
                        assertThat(c[at]).as("c[%d][%d][%d]", i, j, k).isCloseTo(2 * ys[from] * zs[at] * (1 - ws[at]), offset(1e-12));
                    }
        }
    }
}
