package dev.gatun.planner;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.lowering.Buffer;
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

    /**
     * A work that reads a large value and writes a small one (a loss's sum), placed last by an order: moved to just after
     * the value's other readers, where the value dies, the order stays a topological permutation and peaks lower.
     */
    @Test
    void aShrinkingWorkMovesToWhereItsInputDies() {
        var g = Gatun.graph("late");
        var x = g.input("x", F32, 32, 32);
        Tensor shared = x.matmul(g.input("ws", F32, 32, 32));
        g.output("s", shared.sum());
        Tensor acc = null;
        for (int i = 0; i < 4; i++) {
            Tensor r = shared.matmul(g.input("w" + i, F32, 32, 32)).tanh().matmul(g.input("v" + i, F32, 32, 32)).sum(1);
            acc = acc == null ? r : acc.add(r);
        }
        g.output("y", acc);
        // after the readers of the shared product, work that holds four values of its size at once
        Tensor t1 = x.matmul(g.input("a", F32, 32, 32)), t2 = x.matmul(g.input("b", F32, 32, 32)), t3 = x.matmul(g.input("c", F32, 32, 32));
        g.output("z", t1.matmul(t2).matmul(t3).sum(1));
        var lowered = Lowering.lower(g.build(), LoweringOptions.world(1));
        var outputs = new ByBuffer.Set(lowered);
        lowered.outputs().values().forEach(o -> outputs.add(o.storage()));
        var works = Fusion.fuse(lowered, BufferTable.of(lowered));
        var s = Scheduler.of(works, outputs, lowered.buffers().size());
        int sum = -1, lastReaderOfShared = -1;
        for (int i = 0; i < works.size(); i++) if (works.get(i).writes().contains(lowered.outputs().get("s").storage())) sum = i;
        assertThat(sum).isGreaterThanOrEqualTo(0);
        // the order with the sum last: valid (nothing reads it), and it keeps the shared product to the end
        int[] late = new int[works.size()];
        int k = 0;
        for (int i = 0; i < works.size(); i++) if (i != sum) late[k++] = i;
        late[k] = sum;
        int[] moved = s.shrinkingEarly(late);
        assertThat(moved).containsExactlyInAnyOrder(late);
        int[] pos = new int[moved.length];
        for (int i = 0; i < moved.length; i++) pos[moved[i]] = i;
        Buffer sharedBuffer = works.get(sum).reads().getFirst().storage();
        for (int i = 0; i < works.size(); i++) {
            for (Buffer b : works.get(i).reads())
                for (int w = 0; w < works.size(); w++)
                    if (works.get(w).writes().contains(b)) assertThat(pos[w]).as("work %d reads what work %d writes", i, w).isLessThan(pos[i]);
            if (i != sum && works.get(i).reads().contains(sharedBuffer)) lastReaderOfShared = Math.max(lastReaderOfShared, pos[i]);
        }
        assertThat(pos[sum]).as("right after the shared product's last other reader").isEqualTo(lastReaderOfShared + 1);
        assertThat(s.peak(moved)).isLessThan(s.peak(late));
    }

    /** A pool's peak: the step where its live slots add up to the max-live bound, those slots, and their description. */
    @Test
    void thePeakNamesWhatIsLiveThere() {
        Plan p = layered(6, PlanOptions.DEFAULT.withReorder(false));
        Pool pool = p.pools().stream().filter(x -> x.kind() == Pool.Kind.REGULAR).findFirst().orElseThrow();
        Plan.Peak peak = p.peak(pool.name());
        assertThat(peak.bytes()).isEqualTo(pool.maxLive());
        assertThat(peak.live()).allSatisfy(s -> assertThat(peak.step()).isBetween(s.first(), s.last()));
        assertThat(peak.live().stream().mapToLong(Plan.Slot::bytes).sum()).isEqualTo(peak.bytes());
        // every slot live at that step is listed
        long live = p.slots().stream().filter(s -> s.pool().equals(pool.name()) && s.first() <= peak.step() && peak.step() <= s.last()).count();
        assertThat(peak.live()).hasSize((int) live).hasSizeGreaterThanOrEqualTo(6);   // the plain order holds the six products at once
        String text = peak.describe(p.steps(), 2);
        assertThat(text).startsWith(pool.name() + "'s peak: ").contains(peak.live().getFirst().buffer().name()).contains("and " + (live - 2) + " more");
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
