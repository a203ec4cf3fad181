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
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code topk}, the op added through the op registry: on the host backend and in the reference interpreter against plain
 * loops (k passes over each row, each taking the first largest element not yet taken, a NaN the largest); its refusals;
 * its JSON round trip.
 */
public class TopKHostTest {

    /** The expected positions by plain loops: k passes over a row, each the first NaN not taken, else the first largest not taken. */
    static long[][] expectedPositions(double[] x, long[] exact, int cols, int k) {
        int rows = (exact != null ? exact.length : x.length) / cols;
        long[][] out = new long[rows][k];
        for (int r = 0; r < rows; r++) {
            boolean[] taken = new boolean[cols];
            for (int i = 0; i < k; i++) {
                int best = -1;
                for (int j = 0; j < cols; j++) {
                    if (taken[j]) continue;
                    if (best < 0) { best = j; continue; }
                    boolean better;
                    if (exact != null) better = exact[r * cols + j] > exact[r * cols + best];
                    else {
                        double v = x[r * cols + j], b = x[r * cols + best];
                        better = !Double.isNaN(b) && (Double.isNaN(v) || v > b);
                    }
                    if (better) best = j;
                }
                taken[best] = true;
                out[r][i] = best;
            }
        }
        return out;
    }

    static Graph graph(DType t, long[] shape, int k) {
        var g = Gatun.graph("top");
        var top = g.input("x", t, java.util.Arrays.stream(shape).boxed().toArray()).topk(k);
        g.output("values", top.values());
        g.output("indices", top.indices());
        return g.build();
    }

    @Property(tries = 60)
    void theHostAndTheReferenceMatchPlainLoops(@ForAll @IntRange(min = 1, max = 3) int rank, @ForAll @IntRange(min = 1, max = 3) int lead,
                                               @ForAll @IntRange(min = 1, max = 12) int cols, @ForAll @IntRange(min = 0, max = 12) int kPick,
                                               @ForAll @IntRange(min = 0, max = 4) int type, @ForAll @IntRange(min = 0, max = 1000) int seed) {
        DType t = List.of(DType.F32, DType.F64, DType.BF16, DType.I32, DType.I64).get(type);
        int k = kPick == 0 ? cols : 1 + kPick % cols;   // k = the row's size often
        long[] shape = new long[rank];
        java.util.Arrays.fill(shape, lead);
        shape[rank - 1] = cols;
        int numel = (int) java.util.Arrays.stream(shape).reduce(1, (a, b) -> a * b);
        var rnd = new Random(seed);
        double[] x = null;
        long[] exact = null;
        NDArray in;
        if (t.isFloating()) {
            double[] pool = {-2, -1, -0.0, 0, 1, 2, Double.NaN};   // few values: ties everywhere, signed zeros, NaNs
            x = new double[numel];
            for (int i = 0; i < numel; i++) x[i] = pool[rnd.nextInt(pool.length)];
            in = NDArray.of(t, x, shape);
        } else {
            exact = new long[numel];
            long big = t == DType.I64 ? 1L << 60 : 0;   // past 2^53: i64 values compare exactly, not as doubles
            for (int i = 0; i < numel; i++) exact[i] = big + rnd.nextInt(4) - 2;
            in = t == DType.I64 ? NDArray.of(exact, shape) : NDArray.of(java.util.Arrays.stream(exact).mapToInt(v -> (int) v).toArray(), shape);
        }
        long[][] want = expectedPositions(x, exact, cols, k);
        Graph graph = graph(t, shape, k);
        var inputs = Map.of("x", in);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().toString()).contains("= topk(").contains("k=" + k);
            check(s.runToHost(inputs), in, want, cols, k, "host");
        }
        check(ReferenceInterpreter.evaluate(graph, List.of(inputs)).getFirst(), in, want, cols, k, "reference");
    }

    private static void check(Map<String, NDArray> out, NDArray in, long[][] want, int cols, int k, String where) {
        NDArray values = out.get("values"), indices = out.get("indices");
        assertThat(values.dtype()).isEqualTo(in.dtype());
        assertThat(indices.dtype()).isEqualTo(DType.I64);
        long[] shape = in.shape();
        shape[shape.length - 1] = k;
        assertThat(values.shape()).containsExactly(shape);
        assertThat(indices.shape()).containsExactly(shape);
        for (int r = 0; r < want.length; r++)
            for (int i = 0; i < k; i++) {
                long at = (long) r * k + i, from = (long) r * cols + want[r][i];
                assertThat(indices.getLong(at)).as("%s row %d place %d", where, r, i).isEqualTo(want[r][i]);
                if (in.dtype().isFloating())
                    assertThat(Double.doubleToLongBits(values.get(at))).as("%s value at row %d place %d", where, r, i).isEqualTo(Double.doubleToLongBits(in.get(from)));
                else assertThat(values.getLong(at)).as("%s value at row %d place %d", where, r, i).isEqualTo(in.getLong(from));
            }
    }

    /** A transposed view is copied to packed rows first; the plan prints the op with its attribute and both outputs. */
    @Test
    void aViewInputAndThePrintedPlan() {
        var g = Gatun.graph("top_of_view");
        var top = g.input("x", DType.F32, 5, 2).transpose(0, 1).topk(3);
        g.output("values", top.values());
        g.output("indices", top.indices());
        Graph graph = g.build();
        assertThat(graph.toString()).contains("topk(%1, k=3) : f32[2,3]").contains("output1(%2, 1) : i64[2,3]");
        NDArray x = NDArray.of(new float[]{3, 0, 1, 9, 3, 9, 7, 1, 2, 2}, 5, 2);   // columns: [3,1,3,7,2] and [0,9,9,1,2]
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            var out = s.runToHost(Map.of("x", x));
            assertThat(out.get("values").toDoubleArray()).containsExactly(7, 3, 3, 9, 9, 2);
            assertThat(out.get("indices").toDoubleArray()).containsExactly(3, 0, 2, 1, 2, 4);
        }
    }

    @Test
    void refusalsNameTheOpTheTensorAndK() {
        var g = Gatun.graph("bad");
        var x = g.input("x", DType.F32, 4, 8);
        assertThatThrownBy(() -> x.topk(9)).isInstanceOf(GraphException.class)
                .hasMessageContaining("topk('x' f32[4,8], k=9)").hasMessageContaining("k=9 is outside 1 to 8").hasMessageContaining("last dimension of 'x'");
        assertThatThrownBy(() -> x.topk(0)).isInstanceOf(GraphException.class).hasMessageContaining("k=0 is outside 1 to 8");
        assertThatThrownBy(() -> g.input("n", DType.F32, 4, "n").topk(1)).isInstanceOf(GraphException.class)
                .hasMessageContaining("topk('n'").hasMessageContaining("symbolic");
        assertThatThrownBy(() -> g.input("b", DType.BOOL, 3).topk(1)).isInstanceOf(GraphException.class).hasMessageContaining("is bool");
        assertThatThrownBy(() -> g.input("s", DType.F32).topk(1)).isInstanceOf(GraphException.class).hasMessageContaining("is a scalar");
    }

    /** Written and read back: the same graph; a file without k, or with k out of range, is refused naming the node. */
    @Test
    void jsonRoundTripAndBadFiles() {
        Graph graph = graph(DType.F32, new long[]{2, 6}, 6);
        String json = GraphJson.toJson(graph);
        assertThat(json).contains("\"op\": \"topk\"").contains("\"k\": 6");
        Graph back = GraphJson.fromJson(json);
        assertThat(back.toString()).isEqualTo(graph.toString());
        assertThat(GraphJson.toJson(back)).isEqualTo(json);
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"k\": 6,", ""))).isInstanceOf(GraphException.class)
                .hasMessageContaining("(topk)").hasMessageContaining("missing field 'k'");
        assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"k\": 6", "\"k\": 7"))).isInstanceOf(GraphException.class)
                .hasMessageContaining("(topk)").hasMessageContaining("k=7 is outside 1 to 6");
    }
}
