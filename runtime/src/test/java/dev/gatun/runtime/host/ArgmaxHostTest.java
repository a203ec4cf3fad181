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

    /** Symbolic sizes (a batch of n rows, n token ids) on the host and in the reference, against plain loops. */
    @Test
    void symbolicSizesOnTheHostAndInTheReference() {
        var g = Gatun.graph("symbolic_greedy");
        var ids = g.input("ids", DType.I64, "n");
        var table = g.input("table", DType.F32, 5, 4);
        g.output("rows", table.indexSelect(0, ids));
        g.output("next", g.input("logits", DType.F32, "n", 6).argmax(-1));
        Graph graph = g.build();
        for (int n : new int[]{1, 3}) {
            long[] picks = new long[n];
            for (int k = 0; k < n; k++) picks[k] = (k * 3 + 1) % 5;
            NDArray tab = NDArray.randn(DType.F32, 8, 5, 4), logits = NDArray.randn(DType.F32, n, n, 6);
            var in = Map.of("ids", NDArray.of(picks, n), "table", tab, "logits", logits);
            long[] want = firstLargest(logits.toDoubleArray(), 6);
            double[] t = tab.toDoubleArray();
            NDArray ref;
            try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
                var out = s.runToHost(in);
                var refs = ReferenceInterpreter.evaluate(graph, List.of(in)).getFirst();
                for (var got : List.of(out, refs)) {
                    assertThat(got.get("next").shape()).containsExactly(n);
                    assertThat(got.get("rows").shape()).containsExactly(n, 4);
                    for (int k = 0; k < n; k++) {
                        assertThat((long) got.get("next").get(k)).isEqualTo(want[k]);
                        for (int j = 0; j < 4; j++) assertThat(got.get("rows").get(k, j)).isEqualTo(t[(int) picks[k] * 4 + j]);
                    }
                }
            }
        }
    }

    @Test
    void onlyTheLastDimensionOfAFloatingTensor() {
        var g = Gatun.graph("bad");
        var x = g.input("x", DType.F32, 4, 5);
        assertThatThrownBy(() -> x.argmax(0)).isInstanceOf(GraphException.class).hasMessageContaining("only the last dimension");
        assertThatThrownBy(() -> g.input("i", DType.I32, 4).argmax(-1)).hasMessageContaining("must be a floating dtype");
        assertThatThrownBy(() -> g.input("s", DType.F32).argmax(-1)).hasMessageContaining("a scalar");
        assertThatThrownBy(() -> g.input("empty", DType.F32, 3, 0).argmax(-1)).isInstanceOf(GraphException.class)
                .hasMessageContaining("argmax('empty'): the last dimension is empty");
        assertThat(x.argmax(1).node().type().toString()).isEqualTo(x.argmax(-1).node().type().toString());
    }
}
