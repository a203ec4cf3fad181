package dev.gatun.planner;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * How all_to_all is planned: its inputs (an uneven one's rows and its row counts alike) become communication buffers
 * by the three paths of every symmetric collective and are placed by the same rules (the communication pool of the
 * group, the persistent pool of path-2 inputs, freed on every rank at its trailing barrier); an uneven one's result is
 * its receive buffer, the capacity's rows in the communication pool of its group, which the senders write into and
 * which no other buffer shares from the group's barrier before it on (a regular buffer where it is a graph output);
 * the even one's result lies in the regular arena; through NCCL nothing is symmetric. {@link PlanChecks} passes on these plans and on random graphs with
 * all_to_alls (even, uneven, along mesh axes; worlds 1 to 4; every lowering variant).
 */
class AllToAllPlanTest {

    static Plan plan(int world, LoweringOptions lowering, Consumer<GraphBuilder> body) {
        var g = Gatun.graph("moe").world(world);
        body.accept(g);
        Plan p = Planner.plan(Lowering.lower(g.build(), lowering), PlanOptions.DEFAULT);
        assertThat(PlanChecks.all(p)).as("%s", p).isEmpty();
        return p;
    }

    /** Tokens routed to ranks: rows computed by a kernel (path 1), counts a graph input (path 2), then the even all_to_all of a view (path 3). */
    static void moe(GraphBuilder g, int world) {
        var x = g.input("x", DType.F32, 8, 4);
        var r = x.mul(2).allToAll("world", g.input("counts", DType.I64, world), 12);
        g.output("y", r.values().add(1));
        g.output("received", r.counts());
        g.output("even", g.input("wide", DType.BF16, 4 * world + 1, 4).slice(0, 1, 4 * world + 1).allToAll("world"));
    }

    static Plan.Slot slot(Plan p, String buffer) {
        return p.slots().stream().filter(s -> s.buffer().name().equals(buffer)).findFirst().orElseThrow();
    }

    /** The index in {@link Plan#steps()} of the step that runs {@code c}. */
    static int stepOf(Plan p, Step.Collective c) {
        for (int i = 0; i < p.steps().size(); i++) if (p.steps().get(i).collectives().contains(c)) return i;
        throw new AssertionError(c.format() + " is no step of the plan");
    }

    static Step.Collective collective(Plan p, String output) {
        return p.steps().stream().flatMap(s -> s.collectives().stream()).filter(c -> c.output().name().equals(output)).findFirst().orElseThrow();
    }

    @Test
    void anUnevenAllToAllsRowsCountsAndReceiveBufferLieInSymmetricMemory() {
        Plan p = plan(2, LoweringOptions.world(2), g -> moe(g, 2));
        String text = p.toString();
        var a2a = p.steps().stream().flatMap(s -> s.collectives().stream()).filter(Step.Collective::uneven).findFirst().orElseThrow();
        assertThat(a2a.call().opName()).isEqualTo("all_to_all.symm_mem");
        Pool rowsPool = p.pool(a2a.input().placement().pool()), countsPool = p.pool(a2a.counts().placement().pool()),
                outPool = p.pool(a2a.output().placement().pool());
        assertThat(rowsPool.kind()).isEqualTo(Pool.Kind.COMM);             // path 1: the kernel writes straight into the pool
        assertThat(rowsPool.isSymmetric()).isTrue();
        assertThat(countsPool.isSymmetric()).isTrue();                     // path 2: the counts' persistent symmetric slot
        assertThat(countsPool.kind()).isNotEqualTo(Pool.Kind.COMM);
        assertThat(outPool.kind()).isEqualTo(Pool.Kind.COMM);               // the receive buffer the senders write into
        assertThat(outPool).isSameAs(rowsPool);
        assertThat(a2a.output().shape().dim(0).size()).isEqualTo(12);
        assertThat(a2a.output().placement().bytes()).isEqualTo(12 * 4 * 4);   // the capacity's rows of 4 f32
        String rows = a2a.input().name(), out = a2a.output().name();
        var at = a2a.output().placement();
        // joined with the even all_to_all of the counts (no path between them): one barrier pair, each part as it moves
        assertThat(text).contains("launch all_to_all_0 {   # one launch: two all_to_alls of group \"world\" with no path between them: one barrier pair;"
                + " ends with a barrier: " + rows + ", counts free on all ranks");
        assertThat(text).contains("\n    " + out + " = all_to_all.symm_mem(" + rows + ", counts, capacity=12, \"world\")   # senders write into receive buffer "
                + out + " (12 rows, the capacity) at " + at.pool() + "+" + at.offset() + ", 192 B");
        // the plan says how the rows move: the senders push into the receive buffer
        assertThat(a2a.format()).endsWith("; push: after a starting barrier each member writes its rows into the others' receive buffers");
        assertThat(p.lowered().decisions()).contains(out + ": receive buffer of 12 rows (the capacity) in symmetric memory of group 'world': the senders write their rows into it");
        assertThat(p.explain()).contains("input " + rows + ": path 1 (zero copy").contains("input counts: path 2 (graph input")
                .contains("path 3 (identity copy into a new communication buffer)");
        // the received counts are the even all_to_all of the counts: another step over the same symmetric slot
        assertThat(text).containsPattern("buf\\d+ = all_to_all\\.symm_mem\\(counts, \"world\"\\)");
    }

    @Test
    void throughNcclNothingIsSymmetric() {
        Plan p = plan(2, LoweringOptions.world(2).withSymmetricMemory(false), g -> moe(g, 2));
        assertThat(p.pools()).noneMatch(Pool::isSymmetric);
        assertThat(p.toString()).contains("all_to_all.nccl(").doesNotContain("symm_mem").contains("capacity=12");
        assertThat(p.explain()).contains("no communication buffer: nccl runs through NCCL's own buffers");
    }

    @Test
    void anUnevenAllToAllOfOneRankCopiesItsRowsAndTheEvenOneIsTheIdentity() {
        Plan p = plan(1, LoweringOptions.world(1), g -> moe(g, 1));
        var steps = p.steps().stream().flatMap(s -> s.collectives().stream()).toList();
        assertThat(steps).hasSize(1);   // the even ones (of the counts and of the view) are identities
        assertThat(steps.getFirst().uneven()).isTrue();
        assertThat(steps.getFirst().call().opName()).isEqualTo("all_to_all.nccl");
        assertThat(p.pools()).noneMatch(Pool::isSymmetric);
    }

    /** Three layers of an all_to_all of rows by given counts, then one back by the counts it received, over 4 ranks. */
    static final Consumer<GraphBuilder> THREE_LAYERS = g -> {
            var h = g.input("h", DType.F32, 16, 8);
            var counts = g.input("counts", DType.I64, 4);
            for (int layer = 0; layer < 3; layer++) {
                var d = h.mul(layer + 1).allToAll("world", counts, 16);
                h = d.values().add(1).allToAll("world", d.counts(), 16).values();
            }
            g.output("h", h);
    };

    /** Two layers of dispatch: the second's rows may take the first's communication slot only once its barrier freed it. */
    @Test
    void layersReuseACommunicationSlotOnlyAfterTheTrailingBarrier() {
        Plan p = plan(4, LoweringOptions.world(4), THREE_LAYERS);
        assertThat(p.steps().stream().flatMap(s -> s.collectives().stream()).filter(Step.Collective::uneven)).hasSize(6);
        assertThat(p.toString()).contains("reuse of");
    }

    /**
     * A buffer x of the communication pool (made in a symmetric region) read only here, last by the kernel that writes
     * the rows, just before the dispatch: by this rank's lifetimes alone the receive buffer, written at the dispatch,
     * could take x's slot; but a sender may reach the dispatch, and write, while this rank still reads x (no barrier of
     * the group comes between). The planner keeps them apart, and the checks catch a plan moved onto x's slot by hand.
     */
    static void receiveAfterALocalCommunicationBuffer(GraphBuilder g) {
        var h = g.input("h", DType.F32, 8, 4);
        var x = g.symmetric("world", () -> h.add(3));
        var r = x.mul(5).add(h).allToAll("world", g.input("counts", DType.I64, 2), 8);
        g.output("y", r.values().mul(2));
        g.output("received", r.counts());
    }

    @Test
    void aReceiveBufferNeverTakesASlotAPeerMayStillFindInUse() {
        Plan p = plan(2, LoweringOptions.world(2), AllToAllPlanTest::receiveAfterALocalCommunicationBuffer);
        var a2a = p.steps().stream().flatMap(s -> s.collectives().stream()).filter(Step.Collective::uneven).findFirst().orElseThrow();
        String out = a2a.output().name();
        var x = p.buffers().stream().filter(b -> b.placement() != null && b.isSymmetric() && !b.name().equals(out)
                && !b.name().equals(a2a.input().name()) && p.pool(b.placement().pool()).kind() == Pool.Kind.COMM).findFirst().orElseThrow();
        var lives = PlanChecks.lifetimes(p);
        int dispatch = PlanChecks.steps(p).indexOf(a2a);
        // x dies here before the dispatch, with no barrier of "world" in between: only the peers' writes keep them apart
        assertThat(lives.get(x.name()).end()).as(p.toString()).isLessThan(dispatch);
        assertThat(lives.get(out).start()).isEqualTo(0);
        // the planner's own slot history: the receive buffer's slot is held while x is still in use here
        assertThat(slot(p, out).first()).as(p.toString()).isLessThanOrEqualTo(slot(p, x.name()).localLast()).isLessThan(stepOf(p, a2a));
        assertThat(a2a.output().placement().pool()).isEqualTo(x.placement().pool());
        assertThat(a2a.output().placement().offset()).as(p.toString()).isNotEqualTo(x.placement().offset());
        Plan bad = AdversarialPlanTest.moved(p, out, x.placement().offset());
        assertThat(PlanChecks.overlaps(bad)).as(bad.toString()).singleElement().asString().contains(out).contains(x.name());
    }

    @Test
    void theChecksRefuseAReceiveBufferOutsideItsGroupsCommunicationPool() {
        Plan p = plan(2, LoweringOptions.world(2), g -> moe(g, 2));
        var a2a = p.steps().stream().flatMap(s -> s.collectives().stream()).filter(Step.Collective::uneven).findFirst().orElseThrow();
        PlanBuffer old = a2a.output();
        Pool regular = p.pools().stream().filter(x -> x.kind() == Pool.Kind.REGULAR).findFirst().orElseThrow();
        PlanBuffer moved = old.withPlacement(new PlanBuffer.Placement(regular.name(), 0, old.placement().bytes()));
        var buffers = new ArrayList<>(p.buffers());
        buffers.set(old.id(), moved);
        var steps = new ArrayList<Step>();
        var replaced = new Step.Collective(moved, a2a.input(), a2a.counts(), a2a.call(), a2a.freed(), a2a.copiesIn(), a2a.slots());
        for (Step s : p.steps())
            steps.add(s == a2a ? replaced : s instanceof Step.JoinedAllToAll j && j.members().contains(a2a)
                    ? new Step.JoinedAllToAll(j.name(), j.members().stream().map(c -> c == a2a ? replaced : c).toList(), j.why()) : s);
        Plan bad = new Plan(p.lowered(), buffers, p.pools(), steps, p.kernels(), p.partitions(), p.slots(), "mutated", p.plainOrderPeak(),
                p.estimatedPeak(), p.options());
        assertThat(PlanChecks.receiveBuffers(bad)).singleElement().asString().contains("receive buffer " + old.name()).contains("not in the communication pool");
    }

    /**
     * Only an uneven all_to_all's receive buffer is written by peers: an even one's result made in a symmetric region
     * lies in the communication pool too, but its own rank writes it, so it holds its slot from its own step only.
     */
    @Test
    void aSymmetricRegionsCollectiveResultIsHeldFromItsOwnStep() {
        Plan p = plan(2, LoweringOptions.world(2), g -> {
            var x = g.input("x", DType.F32, 8, 4);
            var y = x.mul(2).allReduce(dev.gatun.ir.graph.ReduceOp.SUM);
            var z = g.symmetric("world", () -> y.add(1).allToAll("world"));
            g.output("z", z.mul(3));
        });
        var even = p.steps().stream().flatMap(s -> s.collectives().stream()).filter(c -> c.call().kind() == dev.gatun.ir.graph.CollectiveKind.ALL_TO_ALL)
                .findFirst().orElseThrow();
        assertThat(even.output().isSymmetric()).as(p.toString()).isTrue();
        assertThat(PlanChecks.lifetimes(p).get(even.output().name()).start()).isEqualTo(PlanChecks.steps(p).indexOf(even));
        // the planner's own slot history: held from the collective's step
        assertThat(slot(p, even.output().name()).first()).isEqualTo(stepOf(p, even));
        assertThat(p.toString()).doesNotContain("senders write into");
    }

    /** Where the result is a graph output it stays a regular buffer (the members read the senders' rows), and the plan is fine. */
    @Test
    void anUnevenAllToAllThatIsAGraphOutputReceivesIntoTheArena() {
        Plan p = plan(2, LoweringOptions.world(2), g -> g.output("r", g.input("x", DType.F32, 8, 4).mul(2).allToAll("world", g.input("counts", DType.I64, 2), 12).values()));
        var a2a = p.steps().stream().flatMap(s -> s.collectives().stream()).filter(Step.Collective::uneven).findFirst().orElseThrow();
        assertThat(a2a.output().isSymmetric()).isFalse();
        assertThat(p.lowered().decisions()).anySatisfy(d -> assertThat(d).contains("in regular memory because it is a graph output"));
        // the plan says how the rows move: each member reads its rows out of the senders' buffers
        assertThat(a2a.format()).contains("; pull: after a starting barrier each member reads its part of every member's rows").doesNotContain("push:");
    }

    @Test
    void randomGraphsWithAllToAllsKeepEveryPlanningRule() {
        var failures = new ArrayList<String>();
        int uneven = 0, symmetric = 0, plans = 0;
        for (int world = 1; world <= 4; world++) {
            var lowerings = RandomPlanPropertiesTest.loweringVariants(world);
            for (long seed = 0; seed < 80; seed++) {
                var opts = RandomPlanPropertiesTest.options(world, seed).withAllToAll(true);
                if (world == 4 && seed % 2 == 0) opts = opts.withMesh(2, 2);
                Graph g = RandomGraphs.generate(7000L * world + seed, opts);
                var lowering = lowerings.get((int) (seed % lowerings.size()));
                PlanOptions po = RandomPlanPropertiesTest.PLAN_VARIANTS.get((int) (seed / lowerings.size() % RandomPlanPropertiesTest.PLAN_VARIANTS.size()));
                Plan p = Planner.plan(Lowering.lower(g, lowering), po);
                plans++;
                for (var c : p.steps().stream().flatMap(s -> s.collectives().stream()).toList()) {
                    if (c.uneven()) uneven++;
                    if (c.uneven() && c.call().algorithm().isSymmetric()) symmetric++;
                }
                for (String f : PlanChecks.all(p)) failures.add("seed " + seed + " world " + world + ": " + f + "\n" + p);
            }
        }
        assertThat(plans).isEqualTo(320);
        assertThat(uneven).as("uneven all_to_all steps").isGreaterThan(30);
        assertThat(symmetric).as("uneven all_to_all steps on symmetric memory").isGreaterThan(10);
        assertThat(failures).as(failures.isEmpty() ? "" : failures.getFirst()).isEmpty();
    }

    /**
     * Dispatch as mixture-of-experts sends it: the rows and each row's metadata by the same counts, and the counts
     * themselves (what each member will receive). The three read only the graph's inputs (each copied into symmetric
     * memory by its collective, path 2), so the schedule places them together and the planner joins them: one starting
     * barrier, three parts, one ending barrier.
     */
    static void dispatch(GraphBuilder g, int world) {
        var x = g.input("x", DType.F32, 8, 4);
        var meta = g.input("meta", DType.I64, 8, 1);
        var counts = g.input("counts", DType.I64, world);
        var rows = x.allToAll("world", counts, 12);
        var ids = meta.allToAll("world", counts, 12);
        g.output("y", rows.values().mul(ids.values().cast(DType.F32)));
        g.output("received", rows.counts());
    }

    static List<Step.JoinedAllToAll> joined(Plan p) {
        return p.steps().stream().filter(s -> s instanceof Step.JoinedAllToAll).map(s -> (Step.JoinedAllToAll) s).toList();
    }

    @Test
    void independentAllToAllsOfOneGroupRunAsOneStepAndThePlanSaysWhy() {
        for (int world : new int[]{2, 4}) {
            Plan p = plan(world, LoweringOptions.world(world), g -> dispatch(g, world));
            var j = joined(p);
            assertThat(j).as(p.toString()).singleElement();
            var step = j.getFirst();
            // the rows and the metadata (the counts' own all_to_all is scheduled where its result is needed)
            assertThat(step.members()).hasSize(2);
            assertThat(step.members()).filteredOn(Step.Collective::uneven).hasSize(2);
            assertThat(step.why()).isEqualTo("two all_to_alls of group \"world\" with no path between them: one barrier pair");
            assertThat(p.steps().stream().filter(s -> s instanceof Step.Collective c && c.call().kind() == CollectiveKind.ALL_TO_ALL)).hasSize(1);
            // one line naming the step and why, then each part as it moves, no barrier of its own
            String text = p.toString();
            assertThat(text).contains("launch all_to_all_0 {   # one launch: two all_to_alls of group \"world\" with no path between them: one barrier pair; ends with a barrier: ");
            for (Step.Collective c : step.members()) assertThat(text).contains("\n    " + c.output().name() + " = all_to_all.symm_mem(").contains(c.partFormat());
            assertThat(step.members().stream().map(Step.Collective::partFormat)).noneMatch(f -> f.contains("barrier:"));
            assertThat(p.explain()).contains("all_to_all_0: ").contains(" joined: two all_to_alls of group \"world\" with no path between them: one barrier pair");
            // every part's buffers: read and written by the one step
            assertThat(step.reads()).containsAll(step.members().stream().flatMap(c -> c.reads().stream()).toList());
            assertThat(step.writes()).containsExactlyElementsOf(step.members().stream().map(Step.Collective::output).toList());
        }
    }

    @Test
    void withoutBatchingEachAllToAllHasItsOwnBarrierPair() {
        var g = Gatun.graph("moe").world(2);
        dispatch(g, 2);
        Plan p = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(2)), PlanOptions.DEFAULT.withBatchCollectives(1));
        assertThat(PlanChecks.all(p)).isEmpty();
        assertThat(joined(p)).isEmpty();
        assertThat(p.steps().stream().filter(s -> s instanceof Step.Collective c && c.call().kind() == CollectiveKind.ALL_TO_ALL)).hasSize(3);
        assertThat(p.notes()).anyMatch(n -> n.contains(" not joined with ") && n.contains("joining is off"));
    }

    @Test
    void allToAllsStayApartWhereTheyCannotJoinAndThePlanSaysWhy() {
        // a path between them: the second sends what the first received
        Plan path = plan(2, LoweringOptions.world(2), g -> {
            var counts = g.input("counts", DType.I64, 2);
            var r = g.input("x", DType.F32, 8, 4).mul(2).allToAll("world", counts, 12);
            g.output("y", r.values().allToAll("world", r.counts(), 12).values());
        });
        for (var j : joined(path))
            for (var c : j.members())
                for (var d : j.members()) assertThat(d.reads()).as(path.toString()).noneMatch(b -> b.storage() == c.output().storage());
        assertThat(path.notes()).anyMatch(n -> n.contains(" not joined with ") && n.contains("(a path between them)"));
        // another group: a mesh's two axes
        var g = Gatun.graph("mesh").mesh("a", 2, "b", 2);
        var x = g.input("x", DType.F32, 8, 4);
        g.output("ya", x.mul(2).allToAll("a"));
        g.output("yb", x.mul(3).allToAll("b"));
        Plan mesh = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(4)), PlanOptions.DEFAULT);
        assertThat(PlanChecks.all(mesh)).as("%s", mesh).isEmpty();
        assertThat(joined(mesh)).as("%s", mesh).isEmpty();
        assertThat(mesh.notes()).as("%s", mesh).anyMatch(n -> n.contains(" not joined with ") && n.contains("another group"));
        assertThat(mesh.explain()).contains("another group");
        // NCCL's path: no barrier pair to share
        Plan nccl = plan(2, LoweringOptions.world(2).withSymmetricMemory(false), h -> {
            var y = h.input("x", DType.F32, 8, 4);
            h.output("y1", y.mul(2).allToAll("world"));
            h.output("y2", y.mul(3).allToAll("world"));
        });
        assertThat(joined(nccl)).isEmpty();
        assertThat(nccl.notes()).anyMatch(n -> n.contains("takes NCCL's path"));
    }

    /**
     * In a joined step every part's peers read its rows and counts, and write its receive buffer, until the one ending
     * barrier. Planned for separate steps (joining off), the second all_to_all's result may take the first's rows' slot
     * (free once the first's own barrier passed); the same two joined by hand are refused by the checks, which hold every
     * part's buffers for the whole joined step. Planned joined, the memory planner keeps them apart.
     */
    @Test
    void theChecksHoldEveryPartsBuffersForTheWholeJoinedStep() {
        Consumer<GraphBuilder> layers = THREE_LAYERS;
        var g = Gatun.graph("moe").world(4);
        layers.accept(g);
        Plan p = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(4)), PlanOptions.DEFAULT.withBatchCollectives(1));
        assertThat(PlanChecks.all(p)).isEmpty();
        // two all_to_alls adjacent but for placements, the second's result over the first's rows
        var steps = p.steps();
        int a = -1, b = -1;
        for (int i = 0; i < steps.size() && b < 0; i++) {
            if (!(steps.get(i) instanceof Step.Collective c) || c.call().kind() != CollectiveKind.ALL_TO_ALL) continue;
            int j = i + 1;
            while (j < steps.size() && steps.get(j) instanceof Step.Place) j++;
            if (j < steps.size() && steps.get(j) instanceof Step.Collective d && d.call().kind() == CollectiveKind.ALL_TO_ALL
                    && CollectivePasses.overlaps(d.output(), c.input())) {
                a = i;
                b = j;
            }
        }
        assertThat(b).as("%s", p).isPositive();
        var joinedByHand = new ArrayList<Step>(steps.subList(0, a));
        joinedByHand.addAll(steps.subList(a + 1, b));   // the placements first, as the pass moves them
        joinedByHand.add(new Step.JoinedAllToAll("by_hand", List.of((Step.Collective) steps.get(a), (Step.Collective) steps.get(b)), "joined by hand"));
        joinedByHand.addAll(steps.subList(b + 1, steps.size()));
        Plan bad = new Plan(p.lowered(), p.buffers(), p.pools(), joinedByHand, p.kernels(), p.partitions(), p.slots(), "mutated", p.plainOrderPeak(),
                p.estimatedPeak(), p.options());
        var first = (Step.Collective) steps.get(a);
        var second = (Step.Collective) steps.get(b);
        assertThat(PlanChecks.overlaps(bad)).as(bad.toString()).anySatisfy(v -> assertThat(v).contains(second.output().name()).contains(first.input().name()));
        // planned joined: the same pair is one step, its buffers apart
        Plan joined = plan(4, LoweringOptions.world(4), layers);
        assertThat(joined(joined)).as("%s", joined).anySatisfy(j -> assertThat(j.members().stream().map(c -> c.output().name()))
                .contains(first.output().name(), second.output().name()));
    }
}
