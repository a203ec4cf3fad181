package dev.gatun.planner;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.Algorithm;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

import java.util.List;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/** The seeds' example graph of docs/DESIGN.md, planned: the figures the design states. */
public class SeedsPlanTest {

    public static Graph seeds() {
        var g = Gatun.graph("seeds");
        var x = g.input("x", F32, 4, 4);
        var a = x.add(1).allReduce(SUM);
        var b = x.add(2).allReduce(SUM);
        var c = x.add(3).allReduce(SUM);
        g.output("d", a.add(b).add(c).allReduce(SUM));
        return g.build();
    }

    /** The seeds' plan with each collective a launch of its own (the step structure the tests below look at). */
    public static Plan plan(int world) { return Planner.plan(Lowering.lower(seeds(), LoweringOptions.world(world)), UNFUSED); }

    /** The seeds' plan as it runs by default: all-reduces fused with the kernels around them. */
    public static Plan fused(int world) { return Planner.plan(Lowering.lower(seeds(), LoweringOptions.world(world))); }

    static final PlanOptions UNFUSED = PlanOptions.DEFAULT.withFusedCollectives(false);

    @ParameterizedTest
    @ValueSource(ints = {2, 3, 4})
    void communicationPoolIs192BytesAtItsMaxLiveBound(int world) {
        Plan p = plan(world);
        var comm = p.pools().stream().filter(x -> x.kind() == Pool.Kind.COMM).toList();
        assertThat(comm).hasSize(1);
        assertThat(comm.getFirst().bytes()).isEqualTo(192);
        assertThat(comm.getFirst().maxLive()).isEqualTo(192);
        assertThat(comm.getFirst().group()).isEqualTo("world");
        assertThat(p.toString()).contains("alloc_symmetric(192 B");
    }

    @Test
    void firstKernelReadsXOnceAndWritesAllThreeSlots() {
        Plan p = plan(2);
        var launches = p.steps().stream().filter(s -> s instanceof Step.Launch).map(s -> ((Step.Launch) s).kernel()).toList();
        assertThat(launches).hasSize(2);
        var first = launches.getFirst();
        assertThat(PlanChecks.names(first.inputs())).containsExactly("x");
        var loadsOfX = first.locals().stream().flatMap(e -> PlanChecks.loads(e).stream()).filter(l -> l.input() == 0).count();
        assertThat(loadsOfX).as("x is loaded once per local, one kernel input").isEqualTo(3);
        var collectives = p.steps().stream().flatMap(s -> PlanChecks.collectives(s).stream()).toList();
        var firstThreeInputs = collectives.subList(0, 3).stream().map(Step.Collective::input).toList();
        assertThat(first.outputs()).containsExactlyInAnyOrderElementsOf(firstThreeInputs);
        // the three slots are the three 64-byte slots of the communication pool
        var offsets = first.outputs().stream().map(PlanBuffer::placement).toList();
        assertThat(offsets).allSatisfy(at -> assertThat(p.pool(at.pool()).kind()).isEqualTo(Pool.Kind.COMM));
        assertThat(offsets.stream().map(PlanBuffer.Placement::offset).toList()).containsExactlyInAnyOrder(0L, 64L, 128L);
    }

    @Test
    void sumOfThreeIsOneFusedKernelWritingIntoAReusedCommSlot() {
        Plan p = plan(2);
        var launches = p.steps().stream().filter(s -> s instanceof Step.Launch).map(s -> ((Step.Launch) s).kernel()).toList();
        var second = launches.get(1);
        assertThat(second.ops()).containsExactly("add", "add");
        assertThat(second.outputs()).hasSize(1);
        assertThat(second.inputs()).hasSize(3);
        PlanBuffer out = second.outputs().getFirst();
        var place = p.steps().stream().filter(s -> s instanceof Step.Place pl && pl.buffer() == out).map(s -> (Step.Place) s).findFirst().orElseThrow();
        assertThat(p.pool(place.pool()).kind()).isEqualTo(Pool.Kind.COMM);
        assertThat(place.reuses()).as("a+b+c reuses a slot whose occupant every rank has finished reading").isNotNull();
        assertThat(place.inPlace()).isFalse();
        // the earlier occupant is one of the first kernel's outputs, freed by its one-shot all-reduce's barrier
        assertThat(PlanChecks.names(launches.getFirst().outputs())).contains(place.reuses());
        assertThat(p.toString()).contains("# reuse");
    }

    @Test
    void fourOneShotCollectivesTheFirstThreeInOneLaunchOnePartitionAndAValidPlan() {
        Plan p = plan(2);
        var collectives = p.steps().stream().flatMap(s -> PlanChecks.collectives(s).stream()).toList();
        assertThat(collectives).hasSize(4);
        assertThat(collectives).allSatisfy(c -> {
            assertThat(c.call().algorithm()).isEqualTo(Algorithm.ONE_SHOT);
            assertThat(c.freed()).isEqualTo(c.input().name());
        });
        // the three independent all-reduces of the same group, pool, dtype and operation are one batch
        var batches = p.steps().stream().filter(s -> s instanceof Step.CollectiveBatch).map(s -> (Step.CollectiveBatch) s).toList();
        assertThat(batches).singleElement().satisfies(b -> assertThat(b.members()).containsExactlyElementsOf(collectives.subList(0, 3)));
        // switched off, they are three steps again
        Plan unbatched = Planner.plan(Lowering.lower(seeds(), LoweringOptions.world(2)), UNFUSED.withBatchCollectives(1));
        assertThat(unbatched.steps()).noneMatch(s -> s instanceof Step.CollectiveBatch);
        assertThat(unbatched.steps().stream().filter(s -> s instanceof Step.Collective)).hasSize(4);
        assertThat(unbatched.fingerprint()).isNotEqualTo(p.fingerprint());
        assertThat(PlanChecks.all(unbatched)).isEmpty();
        assertThat(p.partitions()).hasSize(1);
        assertThat(p.outputs()).containsOnlyKeys("d");
        assertThat(p.steps().getLast()).isInstanceOf(Step.Release.class);
        assertThat(p.steps().stream().filter(s -> s instanceof Step.Barrier).toList()).as("every collective ends with a barrier").isEmpty();
        assertThat(PlanChecks.all(p)).isEmpty();
    }

    @Test
    void fingerprintIsStableAndDependsOnTheWorld() {
        assertThat(plan(2).fingerprint()).isEqualTo(plan(2).fingerprint()).hasSize(64);
        assertThat(plan(2).fingerprint()).isNotEqualTo(plan(3).fingerprint());
        assertThat(plan(2).toString()).isEqualTo(plan(2).toString());
    }

    @Test
    void communicationPoolRoundsToTheBackendsGranularity() {
        Plan p = Planner.plan(Lowering.lower(seeds(), LoweringOptions.world(2)), PlanOptions.DEFAULT.withCommGranularity(2 << 20));
        var comm = p.pools().stream().filter(x -> x.kind() == Pool.Kind.COMM).findFirst().orElseThrow();
        assertThat(comm.bytes()).isEqualTo(192);
        assertThat(comm.allocationBytes()).isEqualTo(2 << 20);
        assertThat(p.toString()).contains("alloc_symmetric(192 B -> 2 MiB");
        assertThat(p.fingerprint()).isNotEqualTo(plan(2).fingerprint());
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> PlanOptions.DEFAULT.withCommGranularity(0))
                .isInstanceOf(dev.gatun.ir.CompilationException.class);
    }

    @Test
    void planTextShowsOneLineAStepWithReuseAndBounds() {
        String text = plan(2).toString();
        assertThat(text).startsWith("plan \"seeds\"  world=2  fingerprint=");
        assertThat(text).contains("# max-live 192 B", "release pool0", "return d=", "# ends with a barrier", "# reuse of ");
        assertThat(text.lines().filter(l -> l.contains("all_reduce.one_shot×3("))).hasSize(1);
        assertThat(text.lines().filter(l -> l.contains("all_reduce.one_shot("))).hasSize(1);
    }

    @Test
    void withoutCollectivesThereIsNoCommunicationPool() {
        var g = Gatun.graph("local");
        var x = g.input("x", F32, 4, 4);
        g.output("y", x.add(1).mul(2));
        Plan p = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)));
        assertThat(p.pools()).noneMatch(Pool::isSymmetric);
        assertThat(p.kernels()).hasSize(1);
        assertThat(p.kernels().getFirst().outputs()).containsExactly(p.outputs().get("y"));
        assertThat(PlanChecks.all(p)).isEmpty();
        assertThat(List.copyOf(p.steps())).noneMatch(s -> s instanceof Step.Release);
    }
}
