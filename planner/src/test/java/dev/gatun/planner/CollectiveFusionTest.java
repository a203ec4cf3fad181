package dev.gatun.planner;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.List;
import java.util.function.Consumer;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/** {@link CollectiveFusion}: which kernels an all-reduce takes in, and which it must leave as launches of their own. */
class CollectiveFusionTest {

    /** Steps that launch work on a device: a fused collective counts once. */
    static List<Step> launches(Plan p) {
        return p.steps().stream().filter(s -> s.isDeviceWork() && !(s instanceof Step.CopyIn)).toList();
    }

    static Plan plan(int world, Algorithm forced, Consumer<GraphBuilder> body) {
        var g = Gatun.graph("g").world(world);
        body.accept(g);
        var lowering = LoweringOptions.world(world);
        if (forced != null) lowering = lowering.withForcedAllReduce(forced);
        Plan p = Planner.plan(Lowering.lower(g.build(), lowering));
        assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
        return p;
    }

    @ParameterizedTest
    @ValueSource(ints = {2, 3, 4})
    void theSeedsGraphIsTwoLaunches(int world) {
        Plan p = SeedsPlanTest.fused(world);
        assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
        assertThat(launches(p)).as(p.toString()).hasSize(2);
        var fused = (Step.FusedCollective) launches(p).getFirst();
        assertThat(fused.prologue().kernel().ops()).containsExactly("add", "add", "add");
        assertThat(fused.collective()).isInstanceOf(Step.CollectiveBatch.class);
        assertThat(fused.epilogue().kernel().ops()).containsExactly("add", "add");
        assertThat(p.toString()).contains("launch collective_0 {", "prologue kernel fused_add_add_add_0", "epilogue kernel fused_add_add_1",
                "after the trailing barrier");
        // the same graph unfused: four launches, and a different fingerprint
        assertThat(launches(SeedsPlanTest.plan(world))).hasSize(4);
        assertThat(SeedsPlanTest.plan(world).fingerprint()).isNotEqualTo(p.fingerprint());
    }

    @ParameterizedTest
    @ValueSource(ints = {1, 8, 64, 256})
    void allReduceResidualAndRmsNormAreOneLaunch(int tokens) {
        for (int hidden : new int[]{4096, 8192})
            for (Algorithm a : new Algorithm[]{null, Algorithm.ONE_SHOT, Algorithm.BARRIER_FREE}) {
                Plan p = plan(2, a, g -> arNorm(g, tokens, hidden));
                assertThat(launches(p)).as(p.toString()).singleElement().isInstanceOf(Step.FusedCollective.class);
                var f = (Step.FusedCollective) launches(p).getFirst();
                assertThat(f.epilogue().kernel().isReduction()).isTrue();
                assertThat(f.epilogue().kernel().outputs()).hasSize(2);
            }
    }

    /**
     * A prologue before a row epilogue (a tensor-parallel layer: the product's copy into symmetric memory, the
     * all-reduce, the residual add and RMSNorm): an item is a row, and the prologue writes that row's elements, which
     * the tile check (PlanChecks.fusedTiles) must take as the item's own, not as elements of other rows.
     */
    @Test
    void aPrologueBeforeARowEpilogueIsTileSafe() {
        for (int tokens : new int[]{1, 8})
            for (Algorithm a : new Algorithm[]{null, Algorithm.ONE_SHOT, Algorithm.BARRIER_FREE}) {
                Plan p = plan(2, a, g -> {
                    Tensor x = g.input("x", DType.BF16, tokens, 64).mul(2), residual = g.input("residual", DType.BF16, tokens, 64);
                    Tensor h = x.allReduce(SUM).add(residual);
                    g.output("y", h.mul(h.mul(h).mean(true, -1).add(1e-6).rsqrt()));
                });
                var f = (Step.FusedCollective) launches(p).stream().filter(s -> s instanceof Step.FusedCollective).findFirst().orElseThrow();
                assertThat(f.prologue()).as(p.toString()).isNotNull();
                assertThat(f.epilogue().kernel().isReduction()).isTrue();
                assertThat(PlanChecks.fusedTiles(p)).as(p.toString()).isEmpty();
            }
    }

    /** {@code h = all_reduce(x) + residual; y = h * rsqrt(mean(h * h, -1) + eps) * w}, outputs y and h, bf16. */
    static void arNorm(GraphBuilder g, int tokens, int hidden) {
        Tensor x = g.input("x", DType.BF16, tokens, hidden), residual = g.input("residual", DType.BF16, tokens, hidden), w = g.input("w", DType.BF16, hidden);
        Tensor h = x.allReduce(SUM).add(residual);
        g.output("y", h.mul(h.mul(h).mean(true, -1).add(1e-6).rsqrt()).mul(w));
        g.output("h", h);
    }

    @Test
    void aBarrierFreeAllReduceTakesItsProducerAndConsumer() {
        Plan p = plan(2, Algorithm.BARRIER_FREE, g -> g.output("y", g.input("x", F32, 8, 8).add(1).allReduce(SUM).mul(2)));
        var f = (Step.FusedCollective) launches(p).getFirst();
        assertThat(launches(p)).hasSize(1);
        assertThat(f.collective().collectives().getFirst().call().algorithm()).isEqualTo(Algorithm.BARRIER_FREE);
        assertThat(f.prologue()).isNotNull();
        assertThat(f.epilogue()).isNotNull();
        assertThat(p.toString()).doesNotContain("after the trailing barrier");
    }

    @Test
    void aConsumerReadingTheResultTransposedStaysALaunchOfItsOwn() {
        // element (i, j) of the result goes with element (j, i): another block reduced it
        Plan p = plan(2, Algorithm.ONE_SHOT, g -> {
            Tensor r = g.input("x", F32, 16, 16).add(1).allReduce(SUM);
            g.output("y", r.add(r.t()));
        });
        var f = (Step.FusedCollective) launches(p).stream().filter(s -> s instanceof Step.FusedCollective).findFirst().orElseThrow();
        assertThat(f.epilogue()).isNull();
        assertThat(launches(p)).hasSize(2);
        assertThat(p.toString()).contains("# not the epilogue of all_reduce.one_shot(", "other than element for element");
    }

    /**
     * The byte-level tile check ({@link PlanChecks#fusedTiles}, which knows nothing of the pass's rules) finds the hazard
     * the pass avoids: the transposed consumer taken in by hand, as a fusion without the rule would take it.
     */
    @Test
    void theTileCheckFindsAnEpilogueReadingOtherTiles() {
        Plan p = plan(2, Algorithm.ONE_SHOT, g -> {
            Tensor r = g.input("x", F32, 16, 16).add(1).allReduce(SUM);
            g.output("y", r.add(r.t()));
        });
        var steps = new java.util.ArrayList<>(p.steps());
        int at = -1;
        for (int i = 0; i < steps.size(); i++) if (steps.get(i) instanceof Step.FusedCollective) at = i;
        var f = (Step.FusedCollective) steps.get(at);
        int next = at + 1;
        while (!(steps.get(next) instanceof Step.Launch)) next++;
        var bad = new Step.FusedCollective("bad", f.prologue(), f.collective(), (Step.Launch) steps.get(next));
        assertThat(PlanChecks.fusedTiles(List.of(bad))).isNotEmpty().anyMatch(m -> m.contains("reads"));
        assertThat(PlanChecks.fusedTiles(List.of(f))).isEmpty();
    }

    /** Over random graphs with every all-reduce algorithm that fuses: fused launches occur, and each passes the tile check. */
    @Test
    void randomGraphsFusedLaunchesAreTileSafe() {
        int fused = 0;
        for (Algorithm a : new Algorithm[]{null, Algorithm.ONE_SHOT, Algorithm.BARRIER_FREE})
            for (long seed = 0; seed < 200; seed++) {
                int world = 2 + (int) (seed % 3);
                var g = dev.gatun.ir.testing.RandomGraphs.generate(seed, dev.gatun.ir.testing.RandomGraphs.Options.defaults().withWorldSize(world).staticOnly());
                var lowering = LoweringOptions.world(world);
                if (a != null) lowering = lowering.withForcedAllReduce(a);
                Plan p = Planner.plan(Lowering.lower(g, lowering));
                fused += (int) p.steps().stream().filter(s -> s instanceof Step.FusedCollective).count();
                assertThat(PlanChecks.fusedTiles(p)).as("seed %d %s\n%s", seed, a, p).isEmpty();
            }
        assertThat(fused).as("fused launches among the random plans").isGreaterThan(30);
    }

    @Test
    void aReductionAcrossRowsOfTheResultStaysALaunchOfItsOwn() {
        // a sum over dimension 0 reads a column: rows other blocks reduced
        Plan p = plan(2, Algorithm.ONE_SHOT, g -> g.output("y", g.input("x", F32, 16, 16).add(1).allReduce(SUM).sum(0)));
        var f = (Step.FusedCollective) launches(p).getFirst();
        assertThat(f.epilogue()).isNull();
        assertThat(launches(p)).hasSize(2);
        assertThat(p.toString()).contains("# not the epilogue of all_reduce.one_shot(");
    }

    @Test
    void aReductionIsNoPrologue() {
        // the all-reduce's input is a row sum: a row kernel, not a pointwise producer of the collective's tile
        Plan p = plan(2, Algorithm.ONE_SHOT, g -> g.output("y", g.input("x", F32, 16, 16).sum(1).allReduce(SUM)));
        assertThat(launches(p)).hasSize(2);
        assertThat(launches(p)).noneMatch(s -> s instanceof Step.FusedCollective);
        assertThat(p.toString()).contains("# not the prologue of all_reduce.one_shot(", "a row kernel's rows are not the collective's tiles");
    }

    @Test
    void nothingIsFusedWhenSwitchedOffAndTwoShotTakesNothing() {
        Graph g = seedsLike();
        Plan off = Planner.plan(Lowering.lower(g, LoweringOptions.world(2)), PlanOptions.DEFAULT.withFusedCollectives(false));
        assertThat(off.steps()).noneMatch(s -> s instanceof Step.FusedCollective);
        Plan twoShot = Planner.plan(Lowering.lower(g, LoweringOptions.world(2).withForcedAllReduce(Algorithm.TWO_SHOT)));
        assertThat(twoShot.steps()).noneMatch(s -> s instanceof Step.FusedCollective);
        assertThat(PlanChecks.all(off)).isEmpty();
        assertThat(PlanChecks.all(twoShot)).isEmpty();
    }

    private static Graph seedsLike() {
        var g = Gatun.graph("s").world(2);
        g.output("y", g.input("x", F32, 8, 8).add(1).allReduce(SUM).mul(3));
        return g.build();
    }
}
