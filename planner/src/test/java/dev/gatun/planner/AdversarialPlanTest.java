package dev.gatun.planner;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.ir.testing.RandomGraphs;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.function.Consumer;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/** Hand-made graphs aimed at the planner's rules: cross-rank lifetimes, path-2 inputs, in-place reuse. */
class AdversarialPlanTest {

    static Plan plan(String name, int world, Consumer<GraphBuilder> body) { return plan(name, world, PlanOptions.DEFAULT, body); }

    static Plan plan(String name, int world, PlanOptions options, Consumer<GraphBuilder> body) {
        var g = Gatun.graph(name).world(world);
        g.register(RandomGraphs.SPLIT_SIGN);
        g.register(RandomGraphs.SCALED_ADD);
        body.accept(g);
        Plan p = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(world)), options);
        assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
        return p;
    }

    static Step.Place place(Plan p, String buffer) {
        return p.steps().stream().filter(s -> s instanceof Step.Place pl && pl.buffer().name().equals(buffer)).map(s -> (Step.Place) s).findFirst().orElseThrow();
    }

    static Step.CallUserOp userOp(Plan p) {
        return p.steps().stream().filter(s -> s instanceof Step.CallUserOp).map(s -> (Step.CallUserOp) s).findFirst().orElseThrow();
    }

    /** A copy of {@code p} with {@code buffer} moved to {@code offset} (its Place step and its placement). */
    static Plan moved(Plan p, String buffer, long offset) {
        PlanBuffer old = p.buffer(buffer);
        PlanBuffer moved = old.withPlacement(new PlanBuffer.Placement(old.placement().pool(), offset, old.placement().bytes()));
        var buffers = new ArrayList<>(p.buffers());
        buffers.set(old.id(), moved);
        var steps = new ArrayList<Step>();
        for (Step s : p.steps())
            steps.add(s instanceof Step.Place pl && pl.buffer() == old ? new Step.Place(moved, pl.pool(), offset, pl.bytes(), null, false) : s);
        return new Plan(p.lowered(), buffers, p.pools(), steps, p.kernels(), p.partitions(), p.slots(), "mutated", p.plainOrderPeak(), p.estimatedPeak(), p.options());
    }

    // ------------------------------------------------------------------ cross-rank lifetime

    /**
     * split_sign reads its symmetric input t from peers and ends with no barrier; u = pos * 2 is written into
     * the same pool before the all-reduce whose barrier frees t. Locally t is dead when u is written, but a
     * peer may still read it: u must not take t's slot.
     */
    static void peerReadWithoutBarrier(GraphBuilder g) {
        var x = g.input("x", F32, 4, 4);
        var r = g.call("split_sign", x.add(1));
        var y = r.get(0).mul(2).allReduce(SUM);
        g.output("y", y.add(r.get(1)));
    }

    @Test
    void slotReadByPeersWithoutABarrierIsNotReusedBeforeTheNextBarrier() {
        Plan p = plan("cross_rank", 2, AdversarialPlanTest::peerReadWithoutBarrier);
        String t = userOp(p).inputs().getFirst().name();
        String u = p.steps().stream().flatMap(s -> s.collectives().stream()).map(c -> c.input().name()).findFirst().orElseThrow();
        var tAt = p.placement(t);
        var uAt = p.placement(u);
        assertThat(tAt.pool()).isEqualTo(uAt.pool());
        assertThat(p.pool(tAt.pool()).kind()).isEqualTo(Pool.Kind.COMM);
        assertThat(uAt.offset()).as(p.toString()).isNotEqualTo(tAt.offset());
        assertThat(p.pool(tAt.pool()).maxLive()).as("both slots count towards max-live").isEqualTo(128);
        // the checker catches the mistake the planner avoided
        Plan bad = moved(p, u, tAt.offset());
        assertThat(PlanChecks.overlaps(bad)).singleElement().asString().contains(t).contains(u);
    }

    @Test
    void withPerRankLifetimesTheSameSlotWouldHaveBeenReused() {
        // sanity of the previous test: if the user op's input were local (no symmetric input), the slot is reusable
        Plan p = plan("local_reuse", 2, g -> {
            var x = g.input("x", F32, 4, 4);
            var y = g.call1("scaled_add", x.add(1), x.add(2));
            g.output("y", y.mul(2).allReduce(SUM));
        });
        assertThat(p.pools().stream().filter(x -> x.kind() == Pool.Kind.COMM)).singleElement().extracting(Pool::bytes).isEqualTo(64L);
    }

    @Test
    void pathTwoInputReadByPeersGetsABarrierBeforeTheCallReturns() {
        Plan p = plan("userop_input", 2, g -> {
            var x = g.input("x", F32, 4, 4);
            var r = g.call("split_sign", x);
            g.output("p", r.get(0));
            g.output("n", r.get(1));
        });
        assertThat(p.pools()).anySatisfy(x -> assertThat(x.kind()).isEqualTo(Pool.Kind.SYMM_INPUTS));
        assertThat(p.steps()).anySatisfy(s -> assertThat(s).isInstanceOf(Step.CopyIn.class));
        var barriers = p.steps().stream().filter(s -> s instanceof Step.Barrier).map(s -> (Step.Barrier) s).toList();
        assertThat(barriers).as(p.toString()).singleElement().satisfies(b -> {
            assertThat(b.group()).isEqualTo("world");
            assertThat(b.why()).contains("x");
        });
        int barrierAt = p.steps().indexOf(barriers.getFirst());
        assertThat(p.partitions().getFirst().last()).isGreaterThanOrEqualTo(barrierAt);
    }

    @Test
    void communicationBufferReadByPeersLastGetsAFinalBarrier() {
        Plan p = plan("final_barrier", 2, g -> {
            var x = g.input("x", F32, 4, 4);
            var r = g.call("split_sign", x.add(1));
            g.output("p", r.get(0));
            g.output("n", r.get(1));
        });
        int barrier = -1, release = -1;
        for (int i = 0; i < p.steps().size(); i++) {
            if (p.steps().get(i) instanceof Step.Barrier) barrier = i;
            if (p.steps().get(i) instanceof Step.Release) release = i;
        }
        assertThat(barrier).isGreaterThan(0).isLessThan(release);
    }

    @Test
    void subgroupAndWorldPoolsAreSeparate() {
        Plan p = plan("sub", 4, g -> {
            g.group("sub", 0, 1);
            var x = g.input("x", F32, 4, 4);
            var t = x.add(1).allReduce(SUM, "sub");
            var r = g.call("split_sign", t);
            g.output("u", r.get(0).add(x).allReduce(SUM).add(r.get(1)));
        });
        var comm = p.pools().stream().filter(x -> x.kind() == Pool.Kind.COMM).toList();
        assertThat(comm).extracting(Pool::group).containsExactlyInAnyOrder("sub", "world");
        assertThat(p.steps().stream().filter(s -> s instanceof Step.Release)).hasSize(2);
    }

    @Test
    void twoShotAndNcclPlansAreValid() {
        for (var lo : new LoweringOptions[]{LoweringOptions.world(3).withThresholds(0, 1 << 20), LoweringOptions.world(3).withSymmetricMemory(false)}) {
            var g = Gatun.graph("seeds").world(3);
            var x = g.input("x", F32, 4, 4);
            var a = x.add(1).allReduce(SUM);
            var b = x.add(2).allReduce(SUM);
            g.output("d", a.add(b).allReduce(SUM));
            Plan p = Planner.plan(Lowering.lower(g.build(), lo));
            assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
            if (!lo.symmetricMemory()) assertThat(p.pools()).noneMatch(Pool::isSymmetric);
        }
    }

    // ------------------------------------------------------------------ path 2 and outputs

    @Test
    void inputThatIsAlsoAnOutputIsCopiedOutOfSymmetricMemory() {
        Plan p = plan("in_out", 2, g -> {
            var x = g.input("x", F32, 4, 4);
            g.output("y", x.allReduce(SUM));
            g.output("x", x);
        });
        String xOut = p.outputs().get("x").name();
        var at = p.placement(PlanChecks.storage(p, xOut));
        assertThat(at).isNotNull();
        assertThat(p.pool(at.pool()).isSymmetric()).isFalse();
        // one path-2 copy: a copy_in step, or the collective's own (fused) copy
        assertThat(p.steps().stream().filter(s -> s instanceof Step.CopyIn || s instanceof Step.Collective c && c.copiesIn())).hasSize(1);
    }

    @Test
    void symmetricRegionValuesThatAreOutputsAreCopiedOut() {
        Plan p = plan("region", 2, g -> {
            var x = g.input("x", F32, 4, 4);
            var t = g.symmetric("world", () -> x.add(1).exp());
            g.output("t", t);
            g.output("s", t.sum(0));
        });
        assertThat(PlanChecks.commRules(p)).isEmpty();
    }

    @Test
    void sameCommunicationBufferReadByTwoCollectivesLivesUntilTheSecond() {
        Plan p = plan("twice", 2, g -> {
            var t = g.input("x", F32, 4, 4).add(1);
            g.output("a", t.allReduce(SUM));
            g.output("b", t.allReduce(SUM).mul(3));
            g.output("c", t.mul(2).allReduce(SUM));
        });
        assertThat(PlanChecks.overlaps(p)).isEmpty();
    }

    // ------------------------------------------------------------------ in-place reuse

    @Test
    void elementwiseKernelWritesInPlaceOfADeadRegularInput() {
        Plan p = plan("in_place", 1, g -> {
            var x = g.input("x", F32, 8, 8);
            var w = g.input("w", F32, 8, 8);
            var m = x.matmul(w);              // regular, extern
            var e = m.exp().add(1);           // one kernel reading m element by element, m dead after it
            g.output("y", e.matmul(w));
        });
        var inPlace = p.steps().stream().filter(s -> s instanceof Step.Place pl && pl.inPlace()).map(s -> (Step.Place) s).toList();
        assertThat(inPlace).as(p.toString()).singleElement().satisfies(pl -> {
            assertThat(p.placement(pl.reuses()).offset()).isEqualTo(pl.offset());
            assertThat(p.pool(pl.pool()).kind()).isEqualTo(Pool.Kind.REGULAR);
            assertThat(pl.format()).contains("in place of " + pl.reuses());
        });
        Plan without = plan("in_place", 1, PlanOptions.DEFAULT.withInPlace(false), g -> {
            var x = g.input("x", F32, 8, 8);
            var w = g.input("w", F32, 8, 8);
            g.output("y", x.matmul(w).exp().add(1).matmul(w));
        });
        assertThat(without.steps()).noneMatch(s -> s instanceof Step.Place pl && pl.inPlace());
    }

    @Test
    void noInPlaceWhenTheInputIsReadLaterOrTransposedOrAnOutput() {
        Plan later = plan("read_later", 1, g -> {
            var x = g.input("x", F32, 8, 8);
            var w = g.input("w", F32, 8, 8);
            var m = x.matmul(w);
            var e = m.exp();
            g.output("y", e.matmul(w).add(m.matmul(w)));
        });
        Plan transposed = plan("transposed", 1, g -> {
            var x = g.input("x", F32, 8, 8);
            var w = g.input("w", F32, 8, 8);
            g.output("y", x.matmul(w).t().exp().matmul(w));
        });
        Plan output = plan("output", 1, g -> {
            var x = g.input("x", F32, 8, 8);
            var w = g.input("w", F32, 8, 8);
            var m = x.matmul(w);
            g.output("m", m);
            g.output("y", m.exp().matmul(w));
        });
        for (Plan p : new Plan[]{later, transposed, output}) {
            for (Step s : p.steps()) {
                if (!(s instanceof Step.Place pl) || !pl.inPlace()) continue;
                // whatever is written in place, it is never over a buffer read later, a viewed one or an output
                assertThat(p.outputs().values().stream().map(PlanBuffer::name)).doesNotContain(pl.reuses());
                assertThat(p.lowered().buffers()).noneMatch(b -> b instanceof dev.gatun.lowering.ViewBuffer v && v.base().name().equals(pl.reuses()));
            }
        }
        assertThat(transposed.steps()).noneMatch(s -> s instanceof Step.Place pl && pl.inPlace());
        assertThat(output.steps()).noneMatch(s -> s instanceof Step.Place pl && pl.inPlace());
    }

    @Test
    void communicationBuffersAreNeverWrittenInPlace() {
        Plan p = plan("comm_in_place", 2, g -> {
            var x = g.input("x", F32, 8, 8);
            var w = g.input("w", F32, 8, 8);
            var m = x.matmul(w);                                  // regular, dead after the next kernel
            g.output("y", m.exp().allReduce(SUM));                // exp(m) is written straight into the pool
        });
        var coll = p.steps().stream().flatMap(s -> s.collectives().stream()).findFirst().orElseThrow();
        assertThat(place(p, coll.input().name()).inPlace()).isFalse();
        assertThat(p.pool(place(p, coll.input().name()).pool()).kind()).isEqualTo(Pool.Kind.COMM);
    }

    @Test
    void aGraphOutputTakesTheSlotOfADeadInputOfItsSize() {
        Plan p = plan("output_in_place", 1, g -> {
            var x = g.input("x", F32, 8, 8);
            var w = g.input("w", F32, 8, 8);
            g.output("y", x.matmul(w).exp());                     // exp writes over the product, dead after it
        });
        var regular = p.pools().stream().filter(q -> q.kind() == Pool.Kind.REGULAR).findFirst().orElseThrow();
        assertThat(regular.bytes()).as(p.toString()).isEqualTo(8 * 8 * 4);
        PlanBuffer y = p.outputs().get("y");
        assertThat(place(p, y.name()).inPlace()).isTrue();
        // but an output is never the input written over
        Plan q = plan("output_kept", 1, g -> {
            var x = g.input("x", F32, 8, 8);
            var m = x.matmul(g.input("w", F32, 8, 8));
            g.output("m", m);
            g.output("y", m.exp());
        });
        assertThat(q.steps()).noneMatch(s -> s instanceof Step.Place pl && pl.inPlace());
    }

    @Test
    void inPlaceOnlyOnceEveryOtherReaderIsDone() {
        // every reader of t is done once the kernel reading it (exp and add, fused side by side) runs: it may write over t
        Plan done = plan("others_done", 1, g -> {
            var t = g.input("x", F32, 8, 8).matmul(g.input("w", F32, 8, 8));
            var u = t.exp().matmul(g.input("v", F32, 8, 8));
            g.output("y", u.add(t.add(1)));
        });
        String t = done.steps().stream().filter(s -> s instanceof Step.Matmul).map(s -> ((Step.Matmul) s).output().name()).findFirst().orElseThrow();
        assertThat(done.steps()).as(done.toString()).anyMatch(s -> s instanceof Step.Place pl && pl.inPlace() && t.equals(pl.reuses()));
        // a reader of t still to come (the second matmul): nothing may write over t before it. (e is an output, so it is
        // stored anyway and stays before the matmul; were it private, fusion would make it after, beside the add.)
        Plan pending = plan("reader_pending", 1, g -> {
            var t2 = g.input("x", F32, 8, 8).matmul(g.input("w", F32, 8, 8));
            var e = t2.exp();
            g.output("e", e);
            g.output("y", e.add(t2.matmul(g.input("v", F32, 8, 8))));
        });
        assertThat(pending.toString()).doesNotContain("made in this kernel, after");
        String t2 = pending.steps().stream().filter(s -> s instanceof Step.Matmul).map(s -> ((Step.Matmul) s).output().name()).findFirst().orElseThrow();
        assertThat(pending.steps()).as(pending.toString()).noneMatch(s -> s instanceof Step.Place pl && pl.inPlace() && t2.equals(pl.reuses()));
    }

    @Test
    void neverInPlaceOfAProducerFusedIntoTheSameKernel() {
        // t and u are made by one kernel from x, element by element; t is also stored for the matmul that comes later.
        // Were u written over t's slot (in place of its own fused producer), the matmul would read 2(x+1) for x+1.
        Plan p = plan("fused_producer", 1, g -> {
            var t = g.input("x", F32, 8, 8).add(1);
            var u = t.mul(2);
            g.output("y", u.add(t.matmul(g.input("w", F32, 8, 8))));
        });
        var kernel = p.kernels().getFirst();
        assertThat(kernel.ops()).as(p.toString()).containsSubsequence("add", "mul");
        assertThat(kernel.outputs()).hasSize(2);
        String t = kernel.outputs().get(0).name(), u = kernel.outputs().get(1).name();
        var tAt = p.buffer(t).placement();
        var uAt = p.buffer(u).placement();
        assertThat(tAt.offset() + tAt.bytes() <= uAt.offset() || uAt.offset() + uAt.bytes() <= tAt.offset())
                .as("%s and %s overlap in %s", t, u, p).isTrue();
    }

    // ------------------------------------------------------------------ the checker itself

    @Test
    void checkerFlagsOverlappingLiveBuffers() {
        Plan p = SeedsPlanTest.plan(2);
        var first = p.kernels().getFirst().outputs();
        Plan bad = moved(p, first.get(1).name(), p.placement(first.get(0).name()).offset());
        assertThat(PlanChecks.overlaps(bad)).isNotEmpty();
        assertThat(PlanChecks.all(p)).isEmpty();
    }

    @Test
    void checkerFlagsAPlacementOutsideItsPool() {
        Plan p = SeedsPlanTest.plan(2);
        Plan bad = moved(p, p.kernels().getFirst().outputs().getFirst().name(), 1024);
        assertThat(PlanChecks.poolSizes(bad)).isNotEmpty();
    }

    // ------------------------------------------------------------------ states updated in place

    /**
     * A decode step's cache writes: both caches updated at a run-time position, then read (a product of the new key and
     * value caches). The graph refuses any other read of a state it updates (GraphTest); the updates write in place of
     * the states, and the checks model the state pool (alive from call to call) and the updates (in place of their
     * target, in a batch or alone), so the plan passes them; a plan that read a state's slot after its update, or gave
     * an update another state's slot, does not.
     */
    static void cacheWrites(GraphBuilder g) {
        var at = g.input("at", dev.gatun.ir.DType.I32);
        var kv = g.input("kv", F32, 2, 4, 1).mul(2);
        var k2 = g.state("k", F32, 4, 8).updateSlice(1, kv.slice(0, 0, 1).reshape(4, 1), at);
        var v2 = g.state("v", F32, 8, 4).updateSlice(0, kv.slice(0, 1, 2).reshape(1, 4), at);
        g.output("k", k2);
        g.output("v", v2);
        g.output("scores", k2.matmul(v2));
    }

    @Test
    void updatesInPlaceOfStatesPassTheChecksAndTheChecksCatchAReadAfterOrASharedSlot() {
        Plan p = plan("cache_writes", 1, AdversarialPlanTest::cacheWrites);
        assertThat(PlanChecks.updates(p)).as(p.toString()).hasSize(2)
                .allSatisfy(u -> assertThat(place(p, u.output().name()).inPlace()).as("written in place of " + u.target().name()).isTrue());
        // the update's step once more after itself: it reads the states' slots after they were written
        var steps = new ArrayList<>(p.steps());
        int update = 0;
        while (!(UpdateSliceCall.is(steps.get(update)) || steps.get(update) instanceof Step.UpdateSlices)) update++;
        steps.add(update + 1, steps.get(update));
        String first = "reads k after step " + update;
        Plan again = new Plan(p.lowered(), p.buffers(), p.pools(), steps, p.kernels(), p.partitions(), p.slots(), "mutated", p.plainOrderPeak(),
                p.estimatedPeak(), p.options());
        assertThat(PlanChecks.updatesAfterReads(again)).as(again.toString()).isNotEmpty()
                .anySatisfy(m -> assertThat(m).contains(first));
        // an update's result moved onto the other state's slot
        UpdateSliceCall one = PlanChecks.updates(p).getFirst();
        String other = PlanChecks.updates(p).getLast().target().name();
        Plan moved = moved(p, one.output().name(), p.placement(other).offset());
        assertThat(PlanChecks.overlaps(moved)).as(moved.toString()).isNotEmpty();
    }
}
