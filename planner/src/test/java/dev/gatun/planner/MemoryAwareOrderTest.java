package dev.gatun.planner;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;

class MemoryAwareOrderTest {

    /**
     * A layered DAG written layer by layer: first K large matmul results, then K small reductions of them,
     * then a sum of the reductions. The plain (written) order keeps all K large results alive at once; an
     * order that reduces each result right after making it keeps one.
     */
    static Plan layered(int k, PlanOptions options) {
        var g = Gatun.graph("layered");
        var x = g.input("x", F32, 32, 32);
        var big = new ArrayList<Tensor>();
        for (int i = 0; i < k; i++) big.add(x.matmul(g.input("w" + i, F32, 32, 32)));
        var small = new ArrayList<Tensor>();
        for (Tensor b : big) small.add(b.sum(1));
        Tensor acc = small.getFirst();
        for (int i = 1; i < k; i++) acc = acc.add(small.get(i));
        g.output("y", acc);
        return Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)), options);
    }

    @Test
    void plannerFindsAStrictlyLowerPeakThanTheBadPlainOrder() {
        Plan p = layered(6, PlanOptions.DEFAULT);
        assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
        long big = 32 * 32 * 4;
        assertThat(p.plainOrderPeak()).isGreaterThanOrEqualTo(6 * big);
        assertThat(p.estimatedPeak()).as(p.orderChoice()).isLessThan(p.plainOrderPeak()).isLessThan(3 * big);
        assertThat(p.orderChoice()).doesNotStartWith("plain");
        // and the arena follows: smaller than with the plain order
        Plan plain = layered(6, PlanOptions.DEFAULT.withReorder(false));
        assertThat(PlanChecks.all(plain)).isEmpty();
        assertThat(plain.orderChoice()).startsWith("plain");
        assertThat(plain.estimatedPeak()).isEqualTo(plain.plainOrderPeak());
        long arena = p.pools().stream().filter(x -> x.kind() == Pool.Kind.REGULAR).mapToLong(Pool::bytes).sum();
        long plainArena = plain.pools().stream().filter(x -> x.kind() == Pool.Kind.REGULAR).mapToLong(Pool::bytes).sum();
        assertThat(arena).isLessThan(plainArena);
    }

    @Test
    void aGoodPlainOrderIsKept() {
        var g = Gatun.graph("chain");
        var x = g.input("x", F32, 16, 16);
        var w = g.input("w", F32, 16, 16);
        Tensor t = x;
        for (int i = 0; i < 5; i++) t = t.matmul(w).tanh();
        g.output("y", t);
        Plan p = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)));
        assertThat(p.orderChoice()).startsWith("plain");
        assertThat(p.estimatedPeak()).isEqualTo(p.plainOrderPeak());
        assertThat(PlanChecks.all(p)).isEmpty();
    }
}
