package dev.gatun.planner;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.lowering.Realization;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The seeds' graph with its all-reduces forced barrier-free: rotating slots instead of a communication pool. */
class BarrierFreePlanTest {

    static Plan plan(int world) {
        var lowered = Lowering.lower(SeedsPlanTest.seeds(), LoweringOptions.world(world).withForcedAllReduce(Algorithm.BARRIER_FREE));
        return Planner.plan(lowered);
    }

    @ParameterizedTest
    @ValueSource(ints = {2, 3, 4})
    void inputsStayInTheArenaAndEachAllReduceHasARotatingRegion(int world) {
        Plan p = plan(world);
        // no communication pool and no copy into one: the inputs are read in place
        assertThat(p.pools()).noneMatch(x -> x.kind() == Pool.Kind.COMM);
        var rotating = p.pools().stream().filter(x -> x.kind() == Pool.Kind.ROTATING).toList();
        assertThat(rotating).singleElement().satisfies(pool -> assertThat(pool.group()).isEqualTo("world"));
        var collectives = p.steps().stream().flatMap(s -> PlanChecks.collectives(s).stream()).toList();
        assertThat(collectives).hasSize(4).allSatisfy(c -> {
            assertThat(c.call().algorithm()).isEqualTo(Algorithm.BARRIER_FREE);
            assertThat(c.input().isSymmetric()).isFalse();
            // the counters and three rounds of one 16-float slot per rank
            assertThat(c.slots().bytes()).isEqualTo(RotatingSlots.HEADER + 3 * Math.ceilDiv(world * 16 * 4, 16) * 16L);
            assertThat(c.slots().ranks()).isEqualTo(world);
            assertThat(c.format()).contains("no barrier: pushes into the members' rotating slots " + rotating.getFirst().name() + "[");
        });
        // regions do not overlap and fit the pool
        var regions = collectives.stream().map(Step.Collective::slots).sorted(java.util.Comparator.comparingLong(RotatingSlots::offset)).toList();
        for (int i = 1; i < regions.size(); i++) assertThat(regions.get(i).offset()).isGreaterThanOrEqualTo(regions.get(i - 1).offset() + regions.get(i - 1).bytes());
        assertThat(regions.getLast().offset() + regions.getLast().bytes()).isLessThanOrEqualTo(rotating.getFirst().bytes());
        // no steps for symmetric memory: no barrier, no copy kernel, no release
        assertThat(p.steps()).noneMatch(s -> s instanceof Step.Barrier || s instanceof Step.Release || s instanceof Step.CollectiveBatch);
        assertThat(p.kernels()).hasSize(2);
        assertThat(p.toString()).contains("alloc_symmetric_persistent(", "rotating slots, group=\"world\")");
    }

    @Test
    void aPushedInputsSlotIsFreeOnceItsAllReduceReturns() {
        Plan p = plan(2);
        // the first all-reduce's input slot is reused by the next all-reduce's output at once: peers never read it
        assertThat(p.toString()).containsPattern("buf3 = pool\\d+\\.at\\(\\d+, f32\\[4,4\\] strides \\[4,1\\]\\)   # reuse of buf0's slot");
    }

    @Test
    void theExplanationSaysTheInputIsPushedInPlace() {
        var lowered = Lowering.lower(SeedsPlanTest.seeds(), LoweringOptions.world(2).withForcedAllReduce(Algorithm.BARRIER_FREE));
        assertThat(lowered.realizations()).allSatisfy(r -> assertThat(r.path()).isEqualTo(Realization.Path.PUSHED));
        assertThat(lowered.explain()).contains("all_reduce.barrier_free  [forced by options]", "read in place and pushed into the peers' rotating slots");
    }

    @Test
    void theFingerprintCoversTheRegions() {
        assertThat(plan(2).fingerprint()).isNotEqualTo(Planner.plan(Lowering.lower(SeedsPlanTest.seeds(), LoweringOptions.world(2))).fingerprint());
    }

    @Test
    void rotatingSlotsHoldOnlyFloatingTypesWhoseSentinelIsANaN() {
        assertThatThrownBy(() -> new RotatingSlots("p", 0, 2, 4, DType.INT32)).hasMessageContaining("f32, f16 and bf16");
        for (DType t : new DType[]{DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16}) {
            long s = RotatingSlots.sentinel(t);
            double v = switch (t) {
                case FLOAT32 -> Float.intBitsToFloat((int) s);
                case FLOAT16 -> Float.float16ToFloat((short) s);
                default -> Float.intBitsToFloat((int) (s << 16));
            };
            assertThat(v).isNaN();
            assertThat(RotatingSlots.pushed(t, s)).isNotEqualTo(s);
            assertThat(RotatingSlots.pushed(t, 0x8000L)).isEqualTo(0x8000L);
        }
    }
}
