package dev.gatun.planner;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;

/** {@link AttentionUpdates}: which updates of an attention's caches join it as one launch, and which stay apart. */
class AttentionUpdatesTest {

    static Plan plan(PlanOptions options, Consumer<GraphBuilder> body) { return PlanChecks.checkedPlan(options, body); }

    /** A decode layer's caches ([batch, heads, head_dim, positions] and [batch, heads, positions, head_dim]), written at pos, attended. */
    static void layer(GraphBuilder g, Tensor position, int b, int heads, int d, int len, DType t) {
        Tensor q = g.input("q", t, b * heads, 4, d);
        Tensor k = g.state("k", t, b, heads, d, len).updateSlice(3, g.input("k_new", t, b, heads, d, 1), position);
        Tensor v = g.state("v", t, b, heads, len, d).updateSlice(2, g.input("v_new", t, b, heads, 1, d), position);
        g.output("y", q.attention(k.reshape(b * heads, d, len), v.reshape(b * heads, len, d), position, 0.125));
    }

    @Test
    void theUpdateOfTheCachesJoinsTheAttention() {
        Plan p = plan(PlanOptions.DEFAULT, g -> layer(g, g.input("pos", DType.I32, 1), 2, 3, 16, 40, DType.F32));
        assertThat(p.steps()).as(p.toString()).filteredOn(s -> s instanceof Step.UpdateAttention).singleElement().satisfies(s -> {
            var u = (Step.UpdateAttention) s;
            assertThat(u.keys().dim()).isEqualTo(3);
            assertThat(u.values().dim()).isEqualTo(2);
        });
        assertThat(p.steps()).noneMatch(s -> s instanceof Step.UpdateSlices || AttentionCall.is(s));
        assertThat(p.toString()).contains("launch attend_0 {", "update_slice×2(", "= attention(", "the new key and value written into the caches");
        // the option off: the batch of updates, then the attention; the same placements
        Plan apart = plan(PlanOptions.DEFAULT.withAttentionUpdates(false), g -> layer(g, g.input("pos", DType.I32, 1), 2, 3, 16, 40, DType.F32));
        assertThat(apart.steps()).filteredOn(s -> s instanceof Step.UpdateSlices).hasSize(1);
        assertThat(apart.steps()).filteredOn(s -> AttentionCall.is(s)).hasSize(1);
        assertThat(apart.pools()).isEqualTo(p.pools());
    }

    @Test
    void anUpdateAtAnotherPositionOrOfOneCacheStaysApart() {
        // the values written at another position than the attention's
        Plan other = plan(PlanOptions.DEFAULT, g -> {
            Tensor pos = g.input("pos", DType.I32, 1), at = g.input("at", DType.I32, 1);
            Tensor q = g.input("q", DType.F32, 2, 4, 16);
            Tensor k = g.state("k", DType.F32, 2, 16, 40).updateSlice(2, g.input("k_new", DType.F32, 2, 16, 1), pos);
            Tensor v = g.state("v", DType.F32, 2, 40, 16).updateSlice(1, g.input("v_new", DType.F32, 2, 1, 16), at);
            g.output("y", q.attention(k, v, pos, 0.25));
        });
        assertThat(other.steps()).as(other.toString()).noneMatch(s -> s instanceof Step.UpdateAttention);
        // only the keys' cache updated
        Plan one = plan(PlanOptions.DEFAULT, g -> {
            Tensor pos = g.input("pos", DType.I32, 1);
            Tensor q = g.input("q", DType.F32, 2, 4, 16);
            Tensor k = g.state("k", DType.F32, 2, 16, 40).updateSlice(2, g.input("k_new", DType.F32, 2, 16, 1), pos);
            g.output("y", q.attention(k, g.input("v", DType.F32, 2, 40, 16), pos, 0.25));
        });
        assertThat(one.steps()).as(one.toString()).noneMatch(s -> s instanceof Step.UpdateAttention);
        assertThat(one.steps()).filteredOn(s -> AttentionCall.is(s)).hasSize(1);
    }

    /**
     * The new key and value computed by kernels (a decode layer's rotary embedding and its product) and dead after the
     * update: joined, the launch still reads them while it writes the attention's output, so the output must not take
     * their slot ({@code PlanChecks.joinedLaunches}, run by {@link #plan}); apart, it may.
     */
    @Test
    void theAttentionsOutputNeverTakesTheSlotOfTheNewKeyOrValue() {
        for (int b : new int[]{1, 2})
            for (int len : new int[]{8, 40}) {
                Plan p = plan(PlanOptions.DEFAULT, g -> {
                    int heads = 2, d = 16;
                    Tensor pos = g.input("pos", DType.I32, 1);
                    Tensor q = g.input("q", DType.F32, b * heads, 4, d).neg();
                    Tensor kNew = g.input("k_in", DType.F32, b, heads, d, 1).neg(), vNew = g.input("v_in", DType.F32, b, heads, 1, d).exp();
                    Tensor k = g.state("k", DType.F32, b, heads, d, len).updateSlice(3, kNew, pos);
                    Tensor v = g.state("v", DType.F32, b, heads, len, d).updateSlice(2, vNew, pos);
                    g.output("y", q.attention(k.reshape(b * heads, d, len), v.reshape(b * heads, len, d), pos, 0.125).neg());
                });
                assertThat(p.steps()).as(p.toString()).filteredOn(s -> s instanceof Step.UpdateAttention).hasSize(1);
            }
    }
}
