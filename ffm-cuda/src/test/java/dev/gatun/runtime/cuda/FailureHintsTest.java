package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.lower.Lowering;
import dev.gatun.ir.lower.LoweringOptions;
import dev.gatun.planner.Planner;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/** A failed GPU call's message says which of the plan's deliberate traps could have stopped it, naming the step. */
class FailureHintsTest {

    static dev.gatun.planner.Plan plan(dev.gatun.ir.graph.Graph g) {
        return Planner.plan(Lowering.lower(g, LoweringOptions.world(g.worldSize() == null ? 1 : g.worldSize())));
    }

    @Test
    void anIndexSelectOrUpdateSliceIsNamedAndABarrierOnlyWhereRanksMeet() {
        var g = Gatun.graph("embed");
        g.output("rows", g.input("table", DType.F32, 10, 4).indexSelect(0, g.input("ids", DType.I32, 3)));
        var p = plan(g.build());
        String hints = CudaExecutable.failureHints(p, false);
        assertThat(hints).contains("GATUN_INDEX_SELECT was printed, an index was outside its table in the step ")
                .contains("= index_select(table, 0, ids)").doesNotContain("GATUN_BARRIER_TIMEOUT");

        var two = Gatun.graph("two").world(2);
        var t = two.input("table", DType.F32, 10, 4);
        two.output("a", t.indexSelect(0, two.input("i", DType.I32, 3)).allReduce(ReduceOp.SUM));
        two.output("b", t.indexSelect(0, two.input("j", DType.I64, 2)));
        String both = CudaExecutable.failureHints(plan(two.build()), true);
        assertThat(both).contains("GATUN_BARRIER_TIMEOUT").contains("one of the steps ");

        var kv = Gatun.graph("kv");
        kv.output("c", kv.state("c", DType.F32, 4, 8).updateSlice(1, kv.input("u", DType.F32, 4, 1), kv.input("at", DType.I32)));
        assertThat(CudaExecutable.failureHints(plan(kv.build()), false))
                .contains("GATUN_UPDATE_SLICE was printed, a position put an update outside its target in the step ")
                .contains("= update_slice(c, u, at, dim=1)").doesNotContain("in place:").doesNotContain("INDEX_SELECT");

        var plain = Gatun.graph("plain");
        plain.output("y", plain.input("x", DType.F32, 4).add(1));
        assertThat(CudaExecutable.failureHints(plan(plain.build()), false)).isEmpty();
    }
}
