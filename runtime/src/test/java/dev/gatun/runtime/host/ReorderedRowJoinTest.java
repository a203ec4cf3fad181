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
 * A sum joining a kernel whose member was joined with its loop reordered (a square transpose) must keep that member's
 * order: before the fix the row kernel matched the member's ranges in order, read it transposed, and the sum was wrong.
 * Found by the random gradient chains; the expected values are plain loops.
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
}
