package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** index_select (an embedding lookup): types, the plan step, the host backend against plain loops, bad indices. */
class IndexSelectHostTest {

    static Graph embedding(DType table, DType ids, long... idShape) {
        var g = Gatun.graph("embedding");
        var e = g.input("embed", table, 10, 3);
        var i = g.input("ids", ids, (Object[]) java.util.Arrays.stream(idShape).boxed().toArray(Long[]::new));
        // a lookup, then pointwise work on the rows, as a model's first layer does
        g.output("y", e.indexSelect(0, i).mul(2).add(1));
        return g.build();
    }

    @Test
    void rowsArePickedByIndexOfEitherIntegerType() {
        for (DType idType : List.of(DType.I32, DType.I64)) {
            Graph g = embedding(DType.F32, idType, 2, 3);
            NDArray table = NDArray.zeros(DType.F32, 10, 3);
            for (int i = 0; i < 30; i++) table.set(i, i * 0.5 - 3);
            NDArray ids = NDArray.of(idType, new double[]{9, 0, 4, 4, 7, 1}, 2, 3);
            // the op's own step, and (gather fusion, the default) the kernel after it reading the table through the indices
            for (boolean fused : new boolean[]{false, true})
            try (var s = Session.compile(g, CompileOptions.world(1).backend("host").gatherFusion(fused))) {
                assertThat(s.plan().toString()).contains(fused ? "reads index_select(embed, ids) -> buf0 through its indices" : "= index_select(");
                NDArray y = s.runToHost(Map.of("embed", table, "ids", ids)).get("y");
                assertThat(y.shape()).containsExactly(2, 3, 3);
                int[] rows = {9, 0, 4, 4, 7, 1};
                for (int k = 0; k < 6; k++)
                    for (int c = 0; c < 3; c++) assertThat(y.get(k * 3L + c)).isEqualTo((rows[k] * 3 + c) * 0.5 * 2 - 6 + 1);
                // the reference agrees
                assertThat(ReferenceInterpreter.evaluate(g, List.of(Map.of("embed", table, "ids", ids))).getFirst().get("y").mismatch(y, 0, 0)).isNull();
            }
        }
    }

    @Test
    void anIndexOutsideTheTableFailsTheCallNamingIt() {
        Graph g = embedding(DType.BF16, DType.I32, 4);
        try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
            var table = NDArray.zeros(DType.BF16, 10, 3);
            assertThatThrownBy(() -> s.runToHost(Map.of("embed", table, "ids", NDArray.of(DType.I32, new double[]{1, 10, 2, 3}, 4))))
                    .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("index 10 at position 1").hasMessageContaining("outside the 10 rows");
            assertThatThrownBy(() -> s.runToHost(Map.of("embed", table, "ids", NDArray.of(DType.I32, new double[]{-1, 0, 0, 0}, 4))))
                    .hasMessageContaining("index -1 at position 0");
        }
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(g, List.of(Map.of("embed", NDArray.zeros(DType.BF16, 10, 3),
                "ids", NDArray.of(DType.I32, new double[]{0, 0, 11, 0}, 4))))).hasMessageContaining("index 11 at position 2");
    }

    @Test
    void theGraphSaysWhatIsWrongWithTheOperands() {
        var g = Gatun.graph("bad");
        var e = g.input("embed", DType.F32, 10, 3);
        assertThatThrownBy(() -> e.indexSelect(0, g.input("f", DType.F32, 4))).isInstanceOf(GraphException.class)
                .hasMessageContaining("are f32; they must be i32 or i64");
        assertThatThrownBy(() -> e.indexSelect(1, g.input("i", DType.I32, 4))).hasMessageContaining("only dimension 0");
        assertThatThrownBy(() -> g.input("s", DType.F32).indexSelect(0, g.input("j", DType.I32, 4))).hasMessageContaining("is a scalar");
    }

    @Test
    void itSurvivesJsonAndRunsOnSeveralRanks() {
        Graph g = embedding(DType.F32, DType.I64, 5);
        assertThat(GraphJson.fromJson(GraphJson.toJson(g)).toString()).isEqualTo(g.toString());
        var in = new java.util.ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < 2; r++)
            in.add(Map.of("embed", NDArray.randn(DType.F32, r, 10, 3), "ids", NDArray.of(DType.I64, new double[]{r, 9 - r, 3, 3, 5}, 5)));
        var want = ReferenceInterpreter.evaluate(g, in);
        var wide = Gatun.graph("embedding").world(2);
        try (var s = Session.compile(embeddingOn(wide), CompileOptions.world(2).backend("host").randomDelays(5))) {
            var got = s.runToHost(in);
            for (int r = 0; r < 2; r++) assertThat(want.get(r).get("y").mismatch(got.get(r).get("y"), 0, 0)).isNull();
        }
    }

    static Graph embeddingOn(dev.gatun.dsl.GraphBuilder g) {
        var e = g.input("embed", DType.F32, 10, 3);
        g.output("y", e.indexSelect(0, g.input("ids", DType.I64, 5)).mul(2).add(1));
        return g.build();
    }
}
