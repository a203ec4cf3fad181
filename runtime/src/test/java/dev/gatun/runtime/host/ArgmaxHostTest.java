package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** argmax over the last dimension: the first largest element, NaN the largest, on the host and in the reference. */
public class ArgmaxHostTest {

    /** The expected positions, by plain loops: the first NaN, else the first of the largest. */
    public static long[] firstLargest(double[] x, int cols) {
        long[] out = new long[x.length / cols];
        for (int r = 0; r < out.length; r++) {
            int best = -1;
            for (int j = 0; j < cols && (best < 0 || !Double.isNaN(x[r * cols + best])); j++)
                if (best < 0 || Double.isNaN(x[r * cols + j]) || x[r * cols + j] > x[r * cols + best]) best = j;
            out[r] = best;
        }
        return out;
    }

    @Test
    void theFirstLargestElementOfEachRowWithTiesAndNaNs() {
        for (DType t : List.of(DType.F32, DType.BF16, DType.F64)) {
            var g = Gatun.graph("greedy");
            g.output("next", g.input("logits", t, 2, 3, 7).mul(2).argmax(-1));
            Graph graph = g.build();
            double[] x = new double[2 * 3 * 7];
            var rnd = new java.util.Random(4);
            for (int i = 0; i < x.length; i++) x[i] = rnd.nextInt(5) - 2;   // small integers: ties everywhere
            x[7 + 3] = Double.NaN;      // row 1: its first NaN wins
            x[7 + 5] = Double.NaN;
            x[14 + 6] = 9;              // row 2: the largest at the end
            NDArray logits = NDArray.of(t, x, 2, 3, 7);
            double[] held = logits.toDoubleArray();
            for (int i = 0; i < held.length; i++) held[i] *= 2;
            long[] want = firstLargest(held, 7);
            try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
                assertThat(s.plan().toString()).contains("= argmax(");
                NDArray next = s.runToHost(Map.of("logits", logits)).get("next");
                assertThat(next.dtype()).isEqualTo(DType.I64);
                assertThat(next.shape()).containsExactly(2, 3);
                for (int r = 0; r < 6; r++) assertThat((long) next.get(r)).as("%s row %d", t, r).isEqualTo(want[r]);
                assertThat(want[1]).isEqualTo(3);
                assertThat(want[2]).isEqualTo(6);
                NDArray ref = ReferenceInterpreter.evaluate(graph, List.of(Map.of("logits", logits))).getFirst().get("next");
                assertThat(ref.mismatch(next, 0, 0)).isNull();
            }
            assertThat(GraphJson.fromJson(GraphJson.toJson(graph)).toString()).isEqualTo(graph.toString());
        }
    }

    @Test
    void onlyTheLastDimensionOfAFloatingTensor() {
        var g = Gatun.graph("bad");
        var x = g.input("x", DType.F32, 4, 5);
        assertThatThrownBy(() -> x.argmax(0)).isInstanceOf(GraphException.class).hasMessageContaining("only the last dimension");
        assertThatThrownBy(() -> g.input("i", DType.I32, 4).argmax(-1)).hasMessageContaining("must be a floating dtype");
        assertThatThrownBy(() -> g.input("s", DType.F32).argmax(-1)).hasMessageContaining("a scalar");
        assertThat(x.argmax(1).node().type().toString()).isEqualTo(x.argmax(-1).node().type().toString());
    }
}
