package dev.gatun.planner;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Updates at one run-time position, back to back, become one launch ({@link UpdateBatching}): a key and a value
 * written into their caches. Not batched: updates at different positions, an update that reads another's result,
 * and two updates of one state. (The values a batch writes are checked on the host backend, which runs its members
 * one after the other, by the runtime's update_slice and Llama tests, and on the GPU by UpdateSliceGpuTest.)
 */
class UpdateBatchingTest {

    /** The graph's plan, which must pass every independent check (states and updates in place included). */
    static Plan plan(dev.gatun.ir.graph.Graph g) {
        Plan p = Planner.plan(Lowering.lower(g, LoweringOptions.world(1)));
        assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
        return p;
    }

    static List<Step.UpdateSlices> batches(Plan p) {
        return p.steps().stream().filter(s -> s instanceof Step.UpdateSlices).map(s -> (Step.UpdateSlices) s).toList();
    }

    static long singles(Plan p) { return p.steps().stream().filter(UpdateSliceCall::is).count(); }

    @Test
    void aKeyAndAValueAtOnePositionAreOneLaunch() {
        var g = Gatun.graph("kv");
        var at = g.input("at", DType.I32);
        var kv = g.input("kv", DType.F32, 2, 4, 1, 8).mul(2);
        g.output("k", g.state("k", DType.F32, 4, 8, 16).updateSlice(2, kv.slice(0, 0, 1).reshape(4, 8, 1), at));
        g.output("v", g.state("v", DType.F32, 4, 16, 8).updateSlice(1, kv.slice(0, 1, 2).reshape(4, 1, 8), at));
        Plan p = plan(g.build());
        assertThat(batches(p)).as(p.toString()).hasSize(1);
        assertThat(batches(p).getFirst().members()).extracting(u -> u.target().name()).containsExactlyInAnyOrder("k", "v");
        assertThat(singles(p)).isZero();
        assertThat(p.toString()).contains("update_slice×2(").contains("# one launch for 2, each in place: ");
    }

    @Test
    void updatesAtTwoPositionsOrOfOneStateOrReadingEachOtherStayApart() {
        var g = Gatun.graph("apart");
        var u = g.input("u", DType.F32, 4, 1).mul(2);
        g.output("a", g.state("a", DType.F32, 4, 8).updateSlice(1, u, g.input("i", DType.I32)));
        g.output("b", g.state("b", DType.F32, 4, 8).updateSlice(1, u, g.input("j", DType.I32)));
        Plan p = plan(g.build());
        assertThat(batches(p)).as("different positions: " + p).isEmpty();
        assertThat(singles(p)).isEqualTo(2);

        var h = Gatun.graph("twice");
        var at = h.input("at", DType.I32);
        var w = h.input("w", DType.F32, 4, 1).mul(2);
        var once = h.state("s", DType.F32, 4, 8).updateSlice(1, w, at);
        h.output("s", once.updateSlice(1, w.add(1), at));
        Plan q = plan(h.build());
        assertThat(batches(q)).as("one state updated twice: " + q).isEmpty();

        var r = Gatun.graph("reads");
        var pos = r.input("at", DType.I32);
        var first = r.state("x", DType.F32, 4, 8).updateSlice(1, r.input("v", DType.F32, 4, 1).mul(3), pos);
        r.output("x", first);
        r.output("y", r.state("y", DType.F32, 4, 8).updateSlice(1, first.slice(1, 0, 1), pos));
        Plan t = plan(r.build());
        assertThat(batches(t)).as("an update reading another's result: " + t).isEmpty();
    }

    /**
     * Updates of states and of computed tensors (a copy of the target made for the call, updated in place), their new
     * slices computed by kernels: every plan passes {@link PlanChecks}, batched or not, so one launch writing a batch
     * writes nothing over what any member reads ({@code PlanChecks.joinedLaunches}).
     */
    @Test
    void aBatchWritesNothingOverWhatItsMembersRead() {
        int batched = 0;
        for (int n : new int[]{4, 64})
            for (int v = 0; v < 4; v++) {
                int variant = v;
                Plan p = PlanChecks.checkedPlan(PlanOptions.DEFAULT, g -> {
                    var pos = g.input("pos", DType.I32, 1);
                    var a = g.input("a", DType.F32, 2, n).exp();
                    var b = g.input("b", DType.F32, 2, n).neg();
                    var ua = g.input("ua", DType.F32, 2, 1).neg();
                    var ub = g.input("ub", DType.F32, 2, 1).exp();
                    var x = (variant % 2 == 0 ? a : g.state("s", DType.F32, 2, n)).updateSlice(1, ua, pos);
                    var y = (variant / 2 == 0 ? b : g.state("t", DType.F32, 2, n)).updateSlice(1, ub, pos);
                    g.output("x", x.mul(2.0));
                    g.output("y", y.add(1.0));
                });
                batched += (int) p.steps().stream().filter(s -> s instanceof Step.UpdateSlices).count();
            }
        assertThat(batched).as("plans with a batch of updates among them").isPositive();
    }
}
