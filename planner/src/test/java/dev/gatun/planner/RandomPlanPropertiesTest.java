package dev.gatun.planner;

import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.Algorithm;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.ir.testing.RandomGraphs;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Properties (a)-(g) of the planner over hundreds of random graphs, world sizes 1 to 4, several lowering
 * option sets (default thresholds, everything two-shot, NCCL only) and planner option sets (default,
 * no reordering, no in-place, a 2 MiB communication granularity).
 */
class RandomPlanPropertiesTest {
    /** Graphs per world size and property; raise with -Dgatun.planner.graphs=N for a longer hunt. */
    static final int GRAPHS_PER_WORLD = Integer.getInteger("gatun.planner.graphs", 120);

    record Case(long seed, int world, String variant, Plan plan) {
        @Override public String toString() { return "seed " + seed + " world " + world + " " + variant; }
    }

    static List<LoweringOptions> loweringVariants(int world) {
        var base = LoweringOptions.world(world);
        return List.of(base, base.withThresholds(0, Long.MAX_VALUE / 4), base.withThresholds(0, 0), base.withSymmetricMemory(false),
                base.withForcedAllReduce(Algorithm.ONE_SHOT));
    }

    static final List<PlanOptions> PLAN_VARIANTS = List.of(PlanOptions.DEFAULT, PlanOptions.DEFAULT.withReorder(false),
            PlanOptions.DEFAULT.withInPlace(false), PlanOptions.DEFAULT.withCommGranularity(2 << 20));

    static RandomGraphs.Options options(int world, long seed) {
        var o = RandomGraphs.Options.defaults().withWorldSize(world).withMaxNodes(8 + (int) (seed % 5) * 8);
        return seed % 7 == 0 ? o.withOutputs(1) : o;
    }

    /** Checks every case, collecting failures so one run shows them all. */
    static void forAll(int perWorld, Function<Case, List<String>> check) {
        var failures = new ArrayList<String>();
        int n = 0;
        for (int world = 1; world <= 4; world++) {
            var lowerings = loweringVariants(world);
            for (long seed = 0; seed < perWorld; seed++) {
                Graph g = RandomGraphs.generate(1000L * world + seed, options(world, seed));
                int li = (int) (seed % lowerings.size());
                LoweredGraph lowered = Lowering.lower(g, lowerings.get(li));
                PlanOptions po = PLAN_VARIANTS.get((int) ((seed / lowerings.size()) % PLAN_VARIANTS.size()));
                var c = new Case(1000L * world + seed, world, "lowering#" + li + " " + po, Planner.plan(lowered, po));
                n++;
                for (String f : check.apply(c)) failures.add(c + ": " + f + "\n" + c.plan);
            }
        }
        assertThat(n).isGreaterThanOrEqualTo(4 * perWorld);
        assertThat(failures).as(failures.size() + " failures; first:\n" + (failures.isEmpty() ? "" : failures.getFirst())).isEmpty();
    }

    @Test
    void liveBuffersNeverOverlapInMemory() { forAll(GRAPHS_PER_WORLD, c -> PlanChecks.overlaps(c.plan)); }

    @Test
    void communicationBuffersAreNeverReusedInPlaceNorOutputs() { forAll(GRAPHS_PER_WORLD, c -> PlanChecks.commRules(c.plan)); }

    @Test
    void everyPoolIsAtLeastItsMaxLiveBound() { forAll(GRAPHS_PER_WORLD, c -> PlanChecks.poolSizes(c.plan)); }

    @Test
    void stepsComeInAValidOrder() { forAll(GRAPHS_PER_WORLD, c -> PlanChecks.order(c.plan)); }

    @Test
    void path2CopiesSitInTheFirstPartitionOnly() {
        forAll(GRAPHS_PER_WORLD, c -> {
            var bad = new ArrayList<String>(PlanChecks.copyIns(c.plan));
            bad.addAll(PlanChecks.partitions(c.plan));
            return bad;
        });
    }

    @Test
    void everyPeerReadIsFollowedByABarrierBeforeTheCallReturns() { forAll(GRAPHS_PER_WORLD, c -> PlanChecks.barrierBeforeReturn(c.plan)); }

    @Test
    void chosenOrderIsNeverWorseThanThePlainOrder() {
        forAll(GRAPHS_PER_WORLD, c -> c.plan.estimatedPeak() <= c.plan.plainOrderPeak() ? List.of()
                : List.of("peak " + c.plan.estimatedPeak() + " > plain " + c.plan.plainOrderPeak()));
    }

    @Test
    void planningIsDeterministicWithinOneJvm() {
        forAll(40, c -> {
            var again = Planner.plan(c.plan.lowered(), optionsOf(c));
            return again.fingerprint().equals(c.plan.fingerprint()) && again.toString().equals(c.plan.toString()) ? List.of()
                    : List.of("fingerprint differs on re-planning:\n" + again);
        });
    }

    private static PlanOptions optionsOf(Case c) {
        for (PlanOptions po : PLAN_VARIANTS) if (c.variant.endsWith(po.toString())) return po;
        throw new AssertionError(c.variant);
    }
}
