package dev.gatun.dsl;

import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.ir.graph.ProcessGroup;
import org.junit.jupiter.api.Test;

import java.util.List;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Device meshes, groups that leave ranks out, and collectives among one rank, as the graph and lowering see them. */
class MeshTest {

    @Test
    void aMeshOfTwoByFourLaysRanksOutRowMajor() {
        var g = Gatun.graph("m").mesh("dp", 2, "tp", 4);
        g.output("y", g.input("x", F32, 4).allReduce(SUM, "tp"));
        Graph graph = g.build();
        assertThat(graph.worldSize()).isEqualTo(8);
        assertThat(graph.groups().get("tp").slices(8)).isEqualTo(List.of(List.of(0, 1, 2, 3), List.of(4, 5, 6, 7)));
        assertThat(graph.groups().get("dp").slices(8)).isEqualTo(List.of(List.of(0, 4), List.of(1, 5), List.of(2, 6), List.of(3, 7)));
        assertThat(graph.groups().get("dp").members(8, 6)).containsExactly(2, 6);
        assertThat(graph.groups().get("tp").members(8, 6)).containsExactly(4, 5, 6, 7);
        assertThat(graph.groups().get("tp").size(8)).isEqualTo(4);
        assertThat(graph.toString()).contains("\"tp\"[[0, 1, 2, 3], [4, 5, 6, 7]]");
    }

    @Test
    void threeAxes() {
        var axes = ProcessGroup.meshAxes(List.of("dp", "pp", "tp"), List.of(2, 2, 2));
        assertThat(axes.get(0).slices(8)).isEqualTo(List.of(List.of(0, 4), List.of(1, 5), List.of(2, 6), List.of(3, 7)));
        assertThat(axes.get(1).slices(8)).isEqualTo(List.of(List.of(0, 2), List.of(1, 3), List.of(4, 6), List.of(5, 7)));
        assertThat(axes.get(2).slices(8)).isEqualTo(List.of(List.of(0, 1), List.of(2, 3), List.of(4, 5), List.of(6, 7)));
    }

    @Test
    void shapeChangingCollectivesRunAlongAnAxisWithTheSliceSize() {
        var g = Gatun.graph("m").mesh("dp", 2, "tp", 4);
        var x = g.input("x", F32, 8, 3);
        assertThat(x.reduceScatter(SUM, "tp").type().shape().sizes()).containsExactly(2, 3);
        assertThat(x.allGather("dp").type().shape().sizes()).containsExactly(16, 3);
        assertThat(x.reduceScatter(SUM).type().shape().sizes()).containsExactly(1, 3); // world: 8 ranks
    }

    @Test
    void badMeshesAreNamed() {
        assertThatThrownBy(() -> Gatun.graph("m").mesh("dp", 0, "tp", 2)).isInstanceOf(GraphException.class)
                .hasMessageContaining("mesh axis 'dp' must have at least 1 rank, not 0");
        assertThatThrownBy(() -> Gatun.graph("m").mesh("tp", 2, "tp", 2)).isInstanceOf(GraphException.class)
                .hasMessageContaining("names an axis twice");
        assertThatThrownBy(() -> Gatun.graph("m").group("tp", 0, 1).mesh("dp", 2, "tp", 2)).isInstanceOf(GraphException.class)
                .hasMessageContaining("mesh axis 'tp' clashes with the group 'tp'");
        assertThatThrownBy(() -> Gatun.graph("m").world(4).mesh("dp", 2, "tp", 4)).isInstanceOf(GraphException.class)
                .hasMessageContaining("is a world of 8 but the graph is declared for 4");
        assertThatThrownBy(() -> Gatun.graph("m").mesh("dp", 2, "tp", 4).world(4)).isInstanceOf(GraphException.class)
                .hasMessageContaining("the mesh (axis 'dp') is a world of 8, not 4");
    }

    @Test
    void meshesSurviveJson() {
        var g = Gatun.graph("m").mesh("dp", 2, "tp", 2);
        var x = g.input("x", F32, 4, 2);
        g.output("y", x.reduceScatter(SUM, "tp").allGather("tp").allReduce(SUM, "dp"));
        Graph graph = g.build();
        Graph back = GraphJson.fromJson(GraphJson.toJson(graph));
        assertThat(back.groups()).isEqualTo(graph.groups());
        assertThat(back.toString()).isEqualTo(graph.toString());
    }

    @Test
    void shapeChangingCollectivesOverAGroupThatLeavesRanksOutAreRefused() {
        // world known at build: refused there
        var known = Gatun.graph("g").world(3).group("pair", 0, 1);
        var x = known.input("x", F32, 4);
        assertThatThrownBy(() -> x.allGather("pair")).isInstanceOf(GraphException.class)
                .hasMessageContaining("all_gather('x' f32[4]): group 'pair' [0, 1] leaves out ranks [2] of the world of 3")
                .hasMessageContaining("mesh axis");
        // world known only at compile time: refused there (MeshLoweringTest in the lowering module)
    }
}
