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
}
