package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A failed GPU call's message: what an index_select or update_slice kernel recorded when it stopped the call (read
 * from the {@link DeviceFault} record, filled here as the kernel fills it), and the barrier hint where ranks meet.
 */
class FailureHintsTest {

    static Plan plan(dev.gatun.ir.graph.Graph g) {
        return Planner.plan(Lowering.lower(g, LoweringOptions.world(g.worldSize() == null ? 1 : g.worldSize())));
    }

    /** The record as gatun_fail writes it: code, step, four numbers. */
    static MemorySegment record(Arena arena, int code, int step, long a, long b, long c) {
        MemorySegment r = arena.allocate(DeviceFault.RECORD_BYTES, 8);
        r.set(ValueLayout.JAVA_INT, 0, code);
        r.set(ValueLayout.JAVA_INT, 4, step);
        r.set(ValueLayout.JAVA_LONG, 8, a);
        r.set(ValueLayout.JAVA_LONG, 16, b);
        r.set(ValueLayout.JAVA_LONG, 24, c);
        return r;
    }

    static int indexOf(Plan p, Class<? extends Step> kind) { return indexOf(p, kind::isInstance, kind.getSimpleName()); }

    static int indexOf(Plan p, java.util.function.Predicate<Step> kind, String what) {
        for (int i = 0; i < p.steps().size(); i++) if (kind.test(p.steps().get(i))) return i;
        throw new AssertionError("no " + what + " step in " + p.name());
    }

    @Test
    void aBadIndexIsNamedWithItsStepPositionAndTheTablesRows() {
        var g = Gatun.graph("embed");
        g.output("rows", g.input("table", DType.F32, 10, 4).indexSelect(0, g.input("ids", DType.I32, 3)));
        var p = plan(g.build());
        int step = indexOf(p, Step.OpCall.class);
        try (var arena = Arena.ofConfined()) {
            assertThat(DeviceFault.describe(record(arena, 0, 0, 0, 0, 0), p)).as("an empty record").isNull();
            assertThat(DeviceFault.describe(record(arena, DeviceFault.INDEX_SELECT, step, 130, 2, 10), p))
                    .startsWith("step " + step + " (")
                    .contains("index_select(table, ids)")
                    .contains("index 130 at position 2 of the indices is outside the 10 rows of the table (valid: 0 to 9)");
        }
    }

    /**
     * gather and scatter_add name the value, its position and coordinates in the index, the bound and the dimension, in
     * the words the host backend refuses the same index with.
     */
    @Test
    void aBadGatherOrScatterIndexIsNamedAsTheHostNamesIt() {
        var g = Gatun.graph("pick");
        g.output("y", g.input("x", DType.F32, 4, 3).gather(1, g.input("ids", DType.I64, 2, 2)));
        var gather = plan(g.build());
        var s = Gatun.graph("combine");
        s.output("y", s.input("x", DType.F32, 4, 3).scatterAdd(0, s.input("ids", DType.I32, 2, 3), s.input("src", DType.F32, 2, 3)));
        var scatter = plan(s.build());
        try (var arena = Arena.ofConfined()) {
            int step = indexOf(gather, Step.OpCall.class);
            MemorySegment r = record(arena, DeviceFault.INDEX_ALONG, step, 7, 3, 3);
            r.set(ValueLayout.JAVA_LONG, 32, 1);   // the dimension, as the kernel records it
            String want = "index 7 at position 3 [1, 1] of the index is outside the 3 elements of dimension 1 of x (valid: 0 to 2)";
            assertThat(DeviceFault.describe(r, gather)).startsWith("step " + step + " (").contains("gather(x, ids, dim=1)").contains(want);
            assertThat(dev.gatun.ir.ops.Gather.SPEC.refusal(java.util.List.of(dev.gatun.runtime.NDArray.zeros(DType.F32, 4, 3),
                    dev.gatun.runtime.NDArray.of(DType.I64, new double[]{0, 1, 2, 7}, 2, 2)), gather.steps().get(step) instanceof Step.OpCall o ? o.attrs() : null))
                    .as("the host's words").isEqualTo(want);

            step = indexOf(scatter, Step.OpCall.class);
            r = record(arena, DeviceFault.INDEX_ALONG, step, -1, 4, 4);
            assertThat(DeviceFault.describe(r, scatter)).contains("scatter_add(").contains("of the index is outside")
                    .contains("index -1 at position 4 [1, 1] of the index is outside the 4 elements of dimension 0 of x (valid: 0 to 3)");
            r = record(arena, DeviceFault.INDEX_ALONG, step, 0, 0, 0);
            assertThat(DeviceFault.describe(r, scatter)).contains("index 0 at position 0 [0, 0] of the index is outside the 0 elements of dimension 0 of x (it has none)");
        }
    }

    /** expert_matmul's bad id is named by its value, position, coordinates and the experts, in the host refusal's words. */
    @Test
    void aBadExpertIdIsNamedAsTheHostNamesIt() {
        var g = Gatun.graph("routed");
        g.output("y", g.input("x", DType.F32, 2, 8).expertMatmul(g.input("w", DType.F32, 3, 4, 8), g.input("ids", DType.I64, 2, 2)));
        var p = plan(g.build());
        int step = indexOf(p, Step.OpCall.class);
        try (var arena = Arena.ofConfined()) {
            MemorySegment r = record(arena, DeviceFault.EXPERT, step, 3, 2, 3);
            r.set(ValueLayout.JAVA_LONG, 32, 2);   // k, as the kernel records it
            String want = "expert id 3 at position 2 [1, 0] of the ids is outside the 3 experts of w (valid: 0 to 2)";
            assertThat(DeviceFault.describe(r, p)).startsWith("step " + step + " (").contains("expert_matmul(").contains(want);
            assertThat(dev.gatun.ir.ops.ExpertMatmul.SPEC.refusal(java.util.List.of(dev.gatun.runtime.NDArray.zeros(DType.F32, 2, 8),
                    dev.gatun.runtime.NDArray.zeros(DType.F32, 3, 4, 8), dev.gatun.runtime.NDArray.of(new long[]{0, 1, 3, 0}, 2, 2)), null))
                    .as("the host's words").isEqualTo(want);
        }
    }

    @Test
    void aBadPositionIsNamedWithItsStepAndTheValidRange() {
        var kv = Gatun.graph("kv");
        kv.output("c", kv.state("c", DType.F32, 4, 8).updateSlice(1, kv.input("u", DType.F32, 4, 3), kv.input("at", DType.I32)));
        var p = plan(kv.build());
        int step = indexOf(p, dev.gatun.planner.UpdateSliceCall::is, "update_slice");
        try (var arena = Arena.ofConfined()) {
            assertThat(DeviceFault.describe(record(arena, DeviceFault.UPDATE_SLICE, step, 6, 3, 8), p))
                    .contains("update_slice(c, u, at, dim=1)").doesNotContain("in place:")
                    .contains("position 6 puts the update's 3 elements outside the 8 of the target along its dimension (valid: 0 to 5)");
        }
    }

    @Test
    void anAttentionPositionOutsideTheCacheIsNamedWithItsStep() {
        var g = Gatun.graph("attend");
        g.output("y", g.input("q", DType.BF16, 2, 4, 64).attention(g.input("kT", DType.BF16, 2, 64, 100), g.input("v", DType.BF16, 2, 100, 64),
                g.input("at", DType.I32, 1), 0.125));
        var p = plan(g.build());
        int step = indexOf(p, dev.gatun.planner.AttentionCall::is, "attention");
        try (var arena = Arena.ofConfined()) {
            assertThat(DeviceFault.describe(record(arena, DeviceFault.ATTENTION, step, 100, 100, 0), p))
                    .startsWith("step " + step + " (").contains("attention(q, kT, v, up to at, scale=0.125)").doesNotContain("# scores")
                    .contains("position 100 is outside the 100 positions of the cache (valid: 0 to 99)");
        }
    }

    /** A batch of updates (one launch, two caches) names the member whose position did not fit. */
    @Test
    void aBatchOfUpdatesNamesTheMemberThatStopped() {
        var kv = Gatun.graph("kv");
        var at = kv.input("at", DType.I32);
        var u = kv.input("u", DType.F32, 2, 4, 1).mul(2);
        kv.output("k", kv.state("k", DType.F32, 4, 8).updateSlice(1, u.slice(0, 0, 1).reshape(4, 1), at));
        kv.output("v", kv.state("v", DType.F32, 4, 8).updateSlice(1, u.slice(0, 1, 2).reshape(4, 1), at));
        var p = plan(kv.build());
        int step = indexOf(p, Step.UpdateSlices.class);
        var second = ((Step.UpdateSlices) p.steps().get(step)).members().get(1);
        try (var arena = Arena.ofConfined()) {
            MemorySegment r = record(arena, DeviceFault.UPDATE_SLICE, step, 9, 1, 8);
            r.set(ValueLayout.JAVA_LONG, 32, 1);   // the member, as the two-update kernel records it
            assertThat(DeviceFault.describe(r, p)).startsWith("step " + step + " (" + second.format().replaceFirst("\\s+#.*", "") + ")")
                    .contains("position 9 puts the update's 1 elements outside the 8 of the target along its dimension (valid: 0 to 7)");
        }
    }

    @Test
    void theBarrierHintOnlyWhereRanksMeet() {
        assertThat(CudaExecutable.failureHints(true)).contains("GATUN_BARRIER_TIMEOUT");
        assertThat(CudaExecutable.failureHints(false)).isEmpty();
    }
}
