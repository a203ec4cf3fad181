package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Graph files written before {@code index_select} and {@code sample} moved onto the op registry read back as the same
 * graph, write back as the same text, and run: the file below is what {@code GraphJson.toJson} wrote then.
 */
class RegisteredOpFilesTest {
    static final String WRITTEN_BEFORE = """
            {
              "format": "gatun.graph",
              "version": 1,
              "name": "lookup_and_draw",
              "world_size": null,
              "groups": [],
              "user_ops": [],
              "nodes": [
                {"id": 0, "op": "input", "name": "embed", "type": "f32[6,4]"},
                {"id": 1, "op": "input", "name": "ids", "type": "i32[2]"},
                {"id": 2, "op": "index_select", "inputs": [0, 1], "type": "f32[2,4]"},
                {"id": 3, "op": "input", "name": "params", "type": "f32[2,5]"},
                {"id": 4, "op": "input", "name": "seeds", "type": "i64[2]"},
                {"id": 5, "op": "input", "name": "steps", "type": "i64[1]"},
                {"id": 6, "op": "input", "name": "context", "type": "i64[2,3]"},
                {"id": 7, "op": "sample", "inputs": [2, 3, 4, 5, 6], "type": "i64[2]"}
              ],
              "outputs": {"next": 7}
            }
            """;

    @Test
    void aFileWrittenBeforeTheRegistryReadsWritesAndRuns() {
        Graph g = GraphJson.fromJson(WRITTEN_BEFORE);
        Node select = g.nodes().get(2), draw = g.nodes().get(7);
        assertThat(select.op()).isInstanceOfSatisfying(Op.Registered.class, r -> assertThat(r.spec()).isSameAs(dev.gatun.ir.ops.IndexSelect.SPEC));
        assertThat(draw.op()).isInstanceOfSatisfying(Op.Registered.class, r -> assertThat(r.spec()).isSameAs(dev.gatun.ir.ops.Sample.SPEC));
        assertThat(GraphJson.toJson(g).replaceAll("\\s+", "")).isEqualTo(WRITTEN_BEFORE.replaceAll("\\s+", ""));

        // temperature 0: each row's token is the first largest of the row the index picked, by plain loops
        double[] table = new double[24];
        for (int i = 0; i < table.length; i++) table[i] = (i * 7 % 11) - 5;
        long[] ids = {4, 1};
        long[] want = new long[2];
        for (int b = 0; b < 2; b++) {
            int best = 0;
            for (int j = 1; j < 4; j++) if (table[(int) ids[b] * 4 + j] > table[(int) ids[b] * 4 + best]) best = j;
            want[b] = best;
        }
        var in = Map.of("embed", NDArray.of(DType.F32, table, 6, 4), "ids", NDArray.of(DType.I32, new double[]{ids[0], ids[1]}, 2),
                "params", NDArray.of(DType.F32, new double[]{0, 0, 1, 0, 1, 0, 0, 1, 0, 1}, 2, 5), "seeds", NDArray.of(new long[]{3, 4}, 2),
                "steps", NDArray.of(new long[]{0}, 1), "context", NDArray.of(new long[]{-1, -1, -1, -1, -1, -1}, 2, 3));
        try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
            NDArray got = s.runToHost(in).get("next");
            NDArray ref = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst().get("next");
            for (int b = 0; b < 2; b++) {
                assertThat(got.getLong(b)).as("row %d", b).isEqualTo(want[b]);
                assertThat(ref.getLong(b)).as("row %d, reference", b).isEqualTo(want[b]);
            }
        }
    }

    /** What {@code GraphJson.toJson} wrote for update_slice and attention before they moved onto the registry. */
    static final String CACHE_WRITTEN_BEFORE = """
            {"format": "gatun.graph", "version": 1, "name": "cache_and_attend", "world_size": null, "groups": [], "user_ops": [],
              "nodes": [
                {"id": 0, "op": "input", "name": "pos", "type": "i32[1]"},
                {"id": 1, "op": "input", "name": "k", "state": true, "type": "f32[2,4,6]"},
                {"id": 2, "op": "input", "name": "k_new", "type": "f32[2,4,1]"},
                {"id": 3, "op": "update_slice", "inputs": [1, 2, 0], "dim": -1, "type": "f32[2,4,6]"},
                {"id": 4, "op": "input", "name": "v", "type": "f32[2,6,4]"},
                {"id": 5, "op": "input", "name": "q", "type": "f32[2,3,4]"},
                {"id": 6, "op": "attention", "inputs": [5, 3, 4, 0], "scale": 0.5, "type": "f32[2,3,4]"}
              ],
              "outputs": {"y": 6, "k": 3}}
            """;

    @Test
    void aCacheUpdateAndAnAttentionWrittenBeforeTheRegistryReadWriteAndRun() {
        Graph g = GraphJson.fromJson(CACHE_WRITTEN_BEFORE);
        assertThat(g.nodes().get(3).op()).isInstanceOfSatisfying(Op.Registered.class, r -> assertThat(r.spec()).isSameAs(dev.gatun.ir.ops.UpdateSlice.SPEC));
        assertThat(g.nodes().get(6).op()).isInstanceOfSatisfying(Op.Registered.class, r -> assertThat(r.spec()).isSameAs(dev.gatun.ir.ops.Attention.SPEC));
        assertThat(GraphJson.toJson(g).replaceAll("\\s+", "")).isEqualTo(CACHE_WRITTEN_BEFORE.replaceAll("\\s+", ""));
        assertThat(g.stateOf(g.nodes().get(3))).isEqualTo("k");

        NDArray kNew = NDArray.randn(DType.F32, 1, 2, 4, 1), v = NDArray.randn(DType.F32, 2, 2, 6, 4), q = NDArray.randn(DType.F32, 3, 2, 3, 4);
        double[] cache = new double[48];
        try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
            for (int at : new int[]{0, 3, 5}) {
                var in = Map.of("pos", NDArray.of(DType.I32, new double[]{at}, 1), "k_new", kNew, "v", v, "q", q);
                var out = s.runToHost(in);
                for (int b = 0; b < 2; b++) for (int e = 0; e < 4; e++) cache[(b * 4 + e) * 6 + at] = kNew.get(b * 4 + e);
                assertThat(out.get("k").toDoubleArray()).containsExactly(cache);
                double[] want = attention(q.toDoubleArray(), cache, v.toDoubleArray(), at);
                for (int i = 0; i < want.length; i++) assertThat(out.get("y").get(i)).as("y[%d] at %d", i, at).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-5));
            }
        }
    }

    /** softmax(0.5 q kT) v over positions 0 to {@code at}, q [2, 3, 4], kT [2, 4, 6], v [2, 6, 4], by plain loops in double. */
    private static double[] attention(double[] q, double[] kT, double[] v, int at) {
        double[] out = new double[24];
        for (int b = 0; b < 2; b++)
            for (int r = 0; r < 3; r++) {
                double[] w = new double[at + 1];
                double max = Double.NEGATIVE_INFINITY, sum = 0;
                for (int p = 0; p <= at; p++) {
                    for (int e = 0; e < 4; e++) w[p] += 0.5 * q[(b * 3 + r) * 4 + e] * kT[(b * 4 + e) * 6 + p];
                    max = Math.max(max, w[p]);
                }
                for (int p = 0; p <= at; p++) sum += w[p] = Math.exp(w[p] - max);
                for (int e = 0; e < 4; e++)
                    for (int p = 0; p <= at; p++) out[(b * 3 + r) * 4 + e] += w[p] / sum * v[(b * 6 + p) * 4 + e];
            }
        return out;
    }
}
