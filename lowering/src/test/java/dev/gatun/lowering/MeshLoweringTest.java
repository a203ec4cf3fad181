package dev.gatun.lowering;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import org.junit.jupiter.api.Test;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** How meshes and groups lower: what the DSL's MeshTest leaves to the world known only at compile time. */
class MeshLoweringTest {

    @Test
    void aMeshBuiltForOneWorldIsRefusedForAnother() {
        var g = Gatun.graph("m").mesh("dp", 2, "tp", 2);
        g.output("y", g.input("x", F32, 4).allReduce(SUM, "tp"));
        assertThatThrownBy(() -> Lowering.lower(g.build(), LoweringOptions.world(8))).isInstanceOf(dev.gatun.ir.CompilationException.class)
                .hasMessageContaining("built for a world of 4 ranks (its mesh of axes [dp, tp]) but is compiled for 8");
    }

    @Test
    void shapeChangingCollectivesOverAGroupThatLeavesRanksOutAreRefused() {
        // world known only at compile time: refused there
        var later = Gatun.graph("g").group("pair", 0, 1);
        later.output("y", later.input("x", F32, 4).reduceScatter(SUM, "pair"));
        Graph graph = later.build();
        assertThatThrownBy(() -> Lowering.lower(graph, LoweringOptions.world(4))).isInstanceOf(GraphException.class)
                .hasMessageContaining("group 'pair' [0, 1] leaves out ranks [2, 3] of the world of 4");
        Lowering.lower(graph, LoweringOptions.world(2)); // the pair is the whole world of 2: fine
    }

    @Test
    void aBroadcastRootOutsideTheGroupIsRefusedAtCompileTimeEvenWithoutADeclaredWorld() {
        var g = Gatun.graph("b");
        g.output("y", g.input("x", F32, 4).broadcast(3));
        Graph graph = g.build();
        assertThatThrownBy(() -> Lowering.lower(graph, LoweringOptions.world(2))).isInstanceOf(dev.gatun.ir.CompilationException.class)
                .hasMessageContaining("broadcast root 3 is not a rank of group 'world', which has 2 ranks in a world of 2");
        Lowering.lower(graph, LoweringOptions.world(4));
    }

    @Test
    void aCollectiveAmongOneRankIsTheIdentity() {
        var g = Gatun.graph("one").world(1);
        var x = g.input("x", F32, 4, 4);
        g.output("y", x.add(1).allReduce(SUM).allGather().reduceScatter(SUM).broadcast(0));
        var lowered = Lowering.lower(g.build(), LoweringOptions.world(1));
        assertThat(lowered.buffers()).noneMatch(b -> b instanceof dev.gatun.lowering.ExternBuffer);
        assertThat(lowered.buffers()).noneMatch(b -> b.isSymmetric());
        assertThat(lowered.explain()).contains("all_reduce  [over \"world\", a world of one rank: the identity]")
                .contains("the result is the input itself: no kernel, no barrier, no copy");
        // a slice of one rank too: the dp axis of a 1 x 2 mesh
        var m = Gatun.graph("m").mesh("dp", 1, "tp", 2);
        m.output("y", m.input("x", F32, 2).allGather("dp").allReduce(SUM, "tp"));
        var lm = Lowering.lower(m.build(), LoweringOptions.world(2));
        assertThat(lm.explain()).contains("over \"dp\", a group of one rank: the identity").contains("all_reduce.one_shot");
    }
}
