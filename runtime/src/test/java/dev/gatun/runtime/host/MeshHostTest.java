package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.Algorithm;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Meshes, subgroups and collectives among one rank on the host backend: random graphs with collectives on every
 * axis against the reference interpreter, and small cases whose values are worked out by hand in the test.
 */
class MeshHostTest {

    static List<Map<String, NDArray>> rankValues(int world, long n) {
        var in = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) in.add(Map.of("x", NDArray.full(F32, r + 1, n)));
        return in;
    }

    @Test
    void randomGraphsOnTwoByTwoAndTwoByFourMeshesMatchTheReference() {
        int checked = 0;
        for (Integer[] mesh : new Integer[][]{{2, 2}, {2, 4}, {4, 2}}) {
            for (long seed = 0; seed < 40; seed++) {
                var opts = RandomGraphs.Options.defaults().withMesh(mesh).staticOnly();
                Graph g = RandomGraphs.generate(seed, opts);
                boolean onAxis = g.nodes().stream().anyMatch(n -> n.op() instanceof dev.gatun.ir.graph.Op.Collective c && c.group().startsWith("ax"));
                var co = CompileOptions.world(opts.worldSize()).backend("host").randomDelays(seed + 1).roundEachOp();
                HostDifferentialTest.check(seed, opts, seed % 3 == 0 ? co.forceAllReduce(Algorithm.TWO_SHOT) : co);
                if (onAxis) checked++;
            }
        }
        assertThat(checked).as("graphs with a collective along a mesh axis").isGreaterThan(60);
    }

    /**
     * dp=2 x tp=4, rank r holds r+1: tp slices {0..3} and {4..7} sum to 10 and 26; dp slices {i, i+4} sum to 2i+6;
     * the tp reduce-scatter of [8] gives each rank its quarter (2 elements) of its slice's sum.
     */
    @Test
    void twoByFourByHand() {
        var g = Gatun.graph("m").mesh("dp", 2, "tp", 4);
        var x = g.input("x", F32, 8);
        g.output("tp", x.allReduce(SUM, "tp"));
        g.output("dp", x.allReduce(SUM, "dp"));
        g.output("both", x.allReduce(SUM, "tp").allReduce(SUM, "dp"));
        g.output("rs", x.reduceScatter(SUM, "tp"));
        g.output("ag", x.allGather("dp"));
        g.output("bc", x.broadcast(1, "tp"));
        try (var s = Session.compile(g.build(), CompileOptions.world(8).backend("host").randomDelays(5))) {
            var out = s.runToHost(rankValues(8, 8));
            for (int r = 0; r < 8; r++) {
                var o = out.get(r);
                float tp = r < 4 ? 10 : 26, dp = 2 * (r % 4) + 6;
                assertThat(o.get("tp").toFloatArray()).as("rank %d tp", r).containsOnly(tp);
                assertThat(o.get("dp").toFloatArray()).as("rank %d dp", r).containsOnly(dp);
                assertThat(o.get("both").toFloatArray()).as("rank %d both", r).containsOnly(36);
                assertThat(o.get("rs").shape()).containsExactly(2);
                assertThat(o.get("rs").toFloatArray()).containsOnly(tp);
                float[] ag = o.get("ag").toFloatArray();
                assertThat(ag).hasSize(16);
                for (int i = 0; i < 16; i++) assertThat(ag[i]).isEqualTo(i < 8 ? r % 4 + 1 : r % 4 + 5);
                assertThat(o.get("bc").toFloatArray()).as("rank %d bc", r).containsOnly(r < 4 ? 2 : 6); // group rank 1 of each tp slice
            }
        }
    }

    @Test
    void twoByTwoByHand() {
        var g = Gatun.graph("m").mesh("dp", 2, "tp", 2);
        var x = g.input("x", F32, 4);
        g.output("y", x.mul(10).allReduce(SUM, "tp").add(x).allReduce(SUM, "dp"));
        try (var s = Session.compile(g.build(), CompileOptions.world(4).backend("host"))) {
            var out = s.runToHost(rankValues(4, 4));
            // tp: {0,1} -> 30, {2,3} -> 70; + own x; dp {0,2}: 31 + 73 = 104, {1,3}: 32 + 74 = 106
            float[] want = {104, 106, 104, 106};
            for (int r = 0; r < 4; r++) assertThat(out.get(r).get("y").toFloatArray()).as("rank %d", r).containsOnly(want[r]);
        }
    }

    /** all_reduce and broadcast over {0,1}: members get the pair's result, the others keep their input. */
    @ParameterizedTest
    @ValueSource(ints = {2, 3, 4})
    void shapePreservingCollectivesOverASubgroupByHand(int world) {
        var g = Gatun.graph("sub").group("pair", 0, 1);
        var x = g.input("x", F32, 4);
        g.output("ar", x.allReduce(SUM, "pair"));
        g.output("bc", x.broadcast(1, "pair"));
        for (Algorithm a : new Algorithm[]{Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL}) {
            try (var s = Session.compile(g.build(), CompileOptions.world(world).backend("host").forceAllReduce(a).randomDelays(world))) {
                var out = s.runToHost(rankValues(world, 4));
                for (int r = 0; r < world; r++) {
                    assertThat(out.get(r).get("ar").toFloatArray()).as("%s rank %d", a, r).containsOnly(r < 2 ? 3 : r + 1);
                    assertThat(out.get(r).get("bc").toFloatArray()).as("%s rank %d", a, r).containsOnly(r < 2 ? 2 : r + 1);
                }
            }
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 2, 3})
    void aCollectiveAmongOneRankPlansNothing(int world) {
        // the seeds' graph at world 1, and the same over a group of one rank in a bigger world
        var g = Gatun.graph("seeds").group("solo", world - 1);
        var x = g.input("x", F32, 4, 4);
        String grp = world == 1 ? "world" : "solo";
        var a = x.add(1).allReduce(SUM, grp);
        var b = x.add(2).allReduce(SUM, grp);
        var c = x.add(3).allReduce(SUM, grp);
        g.output("d", a.add(b).add(c).allReduce(SUM, grp));
        g.output("raw", x.allReduce(SUM, grp)); // an output that is the input itself
        Graph graph = g.build();
        try (var s = Session.compile(graph, CompileOptions.world(world).backend("host"))) {
            assertThat(s.plan().steps()).noneMatch(st -> st instanceof Step.Collective || st instanceof Step.Barrier);
            assertThat(s.plan().toString()).doesNotContain("alloc_symmetric");
            var in = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < world; r++) in.add(Map.of("x", NDArray.random(F32, 70 + r, 4, 4)));
            var want = ReferenceInterpreter.evaluate(graph, in);
            var got = s.runToHost(in);
            for (int r = 0; r < world; r++)
                for (String o : List.of("d", "raw"))
                    assertThat(want.get(r).get(o).mismatch(got.get(r).get(o), 1e-6, 1e-6)).as("rank %d %s", r, o).isNull();
            // d = (x+1) + (x+2) + (x+3) on the one rank of the group, by hand
            float[] xs = in.get(world - 1).get("x").toFloatArray(), d = got.get(world - 1).get("d").toFloatArray();
            for (int i = 0; i < 16; i++) assertThat(d[i]).isCloseTo(3 * xs[i] + 6, org.assertj.core.data.Offset.offset(1e-5f));
        }
    }
}
