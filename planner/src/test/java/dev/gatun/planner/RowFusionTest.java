package dev.gatun.planner;

import dev.gatun.dsl.Tensor;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.planner.kernel.Kernel;
import org.junit.jupiter.api.Test;

import java.util.List;

import static dev.gatun.ir.DType.BF16;
import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Row kernels: a reduction and the pointwise work before and after it, and other reductions over the same rows, in
 * one kernel that reads each input once. Byte counts come from the shapes (elements times 4 for f32), not from the
 * planner.
 */
class RowFusionTest {

    static Kernel only(Plan p) {
        assertThat(p.kernels()).as(p.toString()).hasSize(1);
        return p.kernels().getFirst();
    }

    static List<ReduceFn> reductions(Kernel k) { return k.reductions().stream().map(Kernel.Reduction::fn).toList(); }

    static void assertTraffic(Kernel k, long read, long written) {
        assertThat(k.traffic().read()).as(k.name() + " reads").isEqualTo(SymInt.of(read));
        assertThat(k.traffic().written()).as(k.name() + " writes").isEqualTo(SymInt.of(written));
    }

    static Tensor softmax(Tensor x) {
        var e = x.sub(x.max(true, -1)).exp();
        return e.div(e.sum(true, -1));
    }

    @Test
    void softmaxIsOneKernelReadingItsRowOnce() {
        Plan p = FusionTest.plan("softmax", 1, g -> g.output("y", softmax(g.input("x", F32, 4, 16))));
        Kernel k = only(p);
        assertThat(reductions(k)).containsExactly(ReduceFn.MAX, ReduceFn.SUM);
        assertThat(PlanChecks.names(k.inputs())).containsExactly("x");
        assertTraffic(k, 4 * 16 * 4, 4 * 16 * 4);
        assertThat(p.toString()).contains("kernel " + k.name() + "(x) -> ", "# reads 256 B, writes 256 B");
        // nothing but the output is placed: the exponentials are recomputed, never stored
        assertThat(FusionTest.placed(p)).containsOnly(p.outputs().get("y").name());
    }

    @Test
    void rmsNormIsOneKernel() {
        Plan p = FusionTest.plan("rmsnorm", 1, g -> {
            var x = g.input("x", BF16, 8, 32);
            var rms = x.mul(x).mean(true, -1).add(1e-6).rsqrt();
            g.output("y", x.mul(rms).mul(g.input("w", BF16, 32)));
        });
        Kernel k = only(p);
        assertThat(reductions(k)).containsExactly(ReduceFn.MEAN);
        assertThat(PlanChecks.names(k.inputs())).containsExactlyInAnyOrder("x", "w");
        assertTraffic(k, 8 * 32 * 2 + 32 * 2, 8 * 32 * 2);
    }

    @Test
    void layerNormAfterAMatmulIsTheMatmulAndOneKernelWritingInPlace() {
        Plan p = FusionTest.plan("layernorm", 1, g -> {
            var x = g.input("a", F32, 4, 8).matmul(g.input("b", F32, 8, 16));
            var d = x.sub(x.mean(true, -1));
            var r = d.mul(d).mean(true, -1).add(1e-5).rsqrt();
            g.output("y", d.mul(r).mul(g.input("w", F32, 16)).add(g.input("bias", F32, 16)));
        });
        var device = FusionTest.deviceSteps(p);
        assertThat(device).hasSize(2);
        assertThat(device.getFirst()).isInstanceOf(Step.Matmul.class);
        Kernel k = only(p);
        assertThat(reductions(k)).containsExactly(ReduceFn.MEAN, ReduceFn.MEAN);
        assertTraffic(k, 4 * 16 * 4 + 16 * 4 + 16 * 4, 4 * 16 * 4);
        // the normalised rows go where the matmul's rows were: one slot in the whole plan
        String y = p.outputs().get("y").name();
        var place = p.steps().stream().filter(s -> s instanceof Step.Place pl && pl.buffer().name().equals(y)).map(s -> (Step.Place) s).findFirst().orElseThrow();
        assertThat(place.inPlace()).as(p.toString()).isTrue();
        assertThat(p.pools()).singleElement().extracting(Pool::bytes).isEqualTo(4L * 16 * 4);
    }

    @Test
    void theRowsPointwiseTailJoinsItsReduction() {
        // [R,1] keepdim results: the sum, then add and mul on each row, one kernel storing once per row
        Kernel k = only(FusionTest.plan("keepdim_tail", 1, g -> g.output("y", g.input("x", F32, 4, 8).sum(true, -1).add(1).mul(2))));
        assertThat(k.stores()).singleElement().satisfies(s -> assertThat(s.perRow()).isTrue());
        assertTraffic(k, 4 * 8 * 4, 4 * 4);
        // and a reduction plus another input of the rows' shape
        Kernel j = only(FusionTest.plan("sum_add", 1, g -> g.output("y", g.input("x", F32, 4, 8).sum(-1).add(g.input("b", F32, 4)))));
        assertTraffic(j, 4 * 8 * 4 + 4 * 4, 4 * 4);
    }

    @Test
    void siblingReductionsOfOneInputAreOnePass() {
        Plan p = FusionTest.plan("sum_amax", 1, g -> {
            var x = g.input("x", F32, 6, 10);
            g.output("s", x.sum(-1));
            g.output("m", x.max(-1));
        });
        Kernel k = only(p);
        assertThat(reductions(k)).containsExactly(ReduceFn.SUM, ReduceFn.MAX);
        assertTraffic(k, 6 * 10 * 4, 2 * 6 * 4);
    }

    @Test
    void aPointwiseSiblingOfAReductionJoinsIt() {
        Plan p = FusionTest.plan("sum_cos", 1, g -> {
            var x = g.input("x", F32, 6, 10);
            g.output("s", x.sum(-1));
            g.output("c", x.cos());
        });
        Kernel k = only(p);
        assertTraffic(k, 6 * 10 * 4, 6 * 4 + 6 * 10 * 4);
        // the other way round: the reduction turns the cos's kernel into a row kernel
        Plan q = FusionTest.plan("cos_sum", 1, g -> {
            var x = g.input("x", F32, 6, 10);
            g.output("c", x.cos());
            g.output("s", x.sum(-1));
        });
        assertTraffic(only(q), 6 * 10 * 4, 6 * 4 + 6 * 10 * 4);
    }

    @Test
    void aWholeTensorReductionDoesNotTakeTheTensorsPointwiseWork() {
        // one row of 2^20 elements: a backend would run the cos on one worker
        Plan p = FusionTest.plan("total", 1, g -> {
            var x = g.input("x", F32, 1 << 20);
            g.output("s", x.sum(0));
            g.output("c", x.cos());
        });
        assertThat(p.kernels()).hasSize(2);
        // over two dimensions lowering splits it (rows of the last dimension first, their sums folded): the rows are
        // many, and the cos runs in the same kernel as they are read
        Plan q = FusionTest.plan("split", 1, g -> {
            var x = g.input("x", F32, 1024, 1024);
            g.output("s", x.sum(0, 1));
            g.output("c", x.cos());
        });
        assertThat(q.kernels()).as(q.toString()).hasSize(1);
        assertThat(q.kernels().getFirst().folds()).as(q.toString()).hasSize(1);
    }

    @Test
    void rowsThatAreNotTheReductionsStayApart() {
        // the column sums are not per row of the softmax: two kernels
        Plan p = FusionTest.plan("columns", 1, g -> {
            var x = g.input("x", F32, 4, 16);
            g.output("y", softmax(x));
            g.output("c", x.sum(0));
        });
        assertThat(p.kernels()).hasSize(2);
        // a reduction's result read at another row than its own is read from memory, after the kernel that made it
        Plan q = FusionTest.plan("shifted", 1, g -> {
            var x = g.input("x", F32, 4, 16);
            var m = x.max(true, -1);
            g.output("y", x.sub(m.slice(0, 0, 1, 1).expand(4, 16)));
        });
        assertThat(q.kernels()).hasSize(2);
    }

    /**
     * K branches of one input, each two pointwise temporaries feeding a matmul, summed: fusing the branches'
     * pointwise work horizontally would keep all 2K temporaries alive at once. The peak stays at what the branches
     * one by one need: x, two temporaries, the product and the running sum (the sum's add may take a product's slot).
     */
    @Test
    void branchesOfOneInputAreNotFusedAboveTheUnfusedPeak() {
        for (int k : new int[]{4, 8}) {
            Plan p = FusionTest.plan("branches" + k, 1, g -> {
                var x = g.input("x", F32, 256, 256);
                Tensor acc = null;
                for (int i = 0; i < k; i++) {
                    var prod = x.mul(i + 1).matmul(x.add(i + 1));
                    acc = acc == null ? prod : acc.add(prod);
                }
                g.output("y", acc);
            });
            long tensor = 256L * 256 * 4;
            long regular = p.pools().stream().filter(x -> x.kind() == Pool.Kind.REGULAR).mapToLong(Pool::bytes).sum();
            assertThat(regular).as(p.toString()).isLessThanOrEqualTo(4 * tensor);
            assertThat(p.toString()).contains("kept out of the kernel making", "made together they would be alive together");
        }
    }

    /**
     * The loop-ordering seed: {@code y = sum(sum(x, -1)); z = x / 10; z_t = z.t().contiguous().t()}. The transposing
     * copy joins the row kernel with its loop reordered to the kernel's (a transposing store), so x is read once and
     * z is never stored; the sum of the 8 row sums is folded into the same kernel (its last block adds them): one
     * kernel.
     */
    @Test
    void theLoopOrderSeedIsOneKernelThatReadsXOnceAndNeverStoresZ() {
        Plan p = FusionTest.plan("loop_order", 1, g -> {
            var x = g.input("x", F32, 8, 16);
            g.output("y", x.sum(-1).sum(0));
            g.output("z_t", x.div(10).t().copy().t());
        });
        assertThat(p.kernels()).as(p.toString()).hasSize(1);
        Kernel main = p.kernels().getFirst();
        assertThat(PlanChecks.names(main.inputs())).containsExactly("x");
        // x once; the 8 row sums, z_t and y once
        assertTraffic(main, 8 * 16 * 4, 8 * 4 + 16 * 8 * 4 + 4);
        // the copy's store goes where the [16,8] copy keeps element (i1, i0)
        assertThat(main.stores()).anySatisfy(s -> assertThat(s.strides()).containsExactly(SymInt.ONE, SymInt.of(8)));
        assertThat(main.folds()).singleElement().satisfies(f -> {
            assertThat(f.fn()).isEqualTo(ReduceFn.SUM);
            assertThat(main.stores().get(f.of()).perRow()).isTrue();
        });
        assertThat(p.toString()).contains("loop reordered to the kernel's", "over the rows, by the last block to finish (one launch, not two)");
        assertThat(p.kernelSources()).contains("over the rows (after them, in this kernel)");
    }

    @Test
    void theLoopOrderSeedOnASquareIsTheSame() {
        // a square x: the copy's loop also fits the kernel in its own order, which would read z transposed
        Plan p = FusionTest.plan("loop_order_square", 1, g -> {
            var x = g.input("x", F32, 16, 16);
            g.output("y", x.sum(-1).sum());
            g.output("z_t", x.div(10).t().copy().t());
        });
        assertThat(p.kernels()).as(p.toString()).hasSize(1);
        assertTraffic(p.kernels().getFirst(), 16 * 16 * 4, 16 * 4 + 16 * 16 * 4 + 4);
    }

    /** More rows than one block reads back quickly: the sum of the row sums stays a second kernel. */
    @Test
    void aFoldOfManyRowsStaysApart() {
        Plan p = FusionTest.plan("many", 1, g -> g.output("y", g.input("x", F32, 20000, 4).sum(-1).sum()));
        assertThat(p.kernels()).as(p.toString()).hasSize(2);
        assertThat(p.kernels()).allSatisfy(k -> assertThat(k.folds()).isEmpty());
    }

    /** A whole reduction that does more than fold the row results (here: scales them) stays a kernel of its own. */
    @Test
    void aWholeReductionThatComputesStaysApart() {
        Plan p = FusionTest.plan("scaled", 1, g -> {
            var x = g.input("x", F32, 8, 16);
            g.output("y", x.sum(-1).mul(x.sum(-1)).sum(0));
        });
        assertThat(p.kernels()).as(p.toString()).hasSize(2);
        assertThat(p.kernels()).allSatisfy(k -> assertThat(k.folds()).isEmpty());
    }

    @Test
    void transposingCopiesJoinTheirProducer() {
        Kernel k = only(FusionTest.plan("copy_t", 1, g -> g.output("y", g.input("x", F32, 6, 10).add(1).t().copy())));
        assertTraffic(k, 6 * 10 * 4, 6 * 10 * 4);
        assertThat(k.stores()).singleElement().satisfies(s -> assertThat(s.strides()).isNotNull());
    }

    /** The remaining failure classes of the fusion issue, each one kernel now, with the bytes the plan reports. */
    @Test
    void aKernelTakesEveryProducerItCan() {
        // a four-step accumulation of four inputs' sines
        Kernel acc = only(FusionTest.plan("acc4", 1, g -> g.output("y", g.input("a", F32, 8).sin().add(g.input("b", F32, 8).sin())
                .add(g.input("c", F32, 8).sin()).add(g.input("d", F32, 8).sin()))));
        assertTraffic(acc, 4 * 8 * 4, 8 * 4);
        // four column sums of one input and their sum
        Kernel cols = only(FusionTest.plan("sums4", 1, g -> {
            var x = g.input("x", F32, 8, 8);
            var s = x.sum(0);
            for (int i = 1; i < 4; i++) s = s.add(x.mul(i).sum(0));
            g.output("y", s);
        }));
        assertTraffic(cols, 8 * 8 * 4, 8 * 4);
        // a reshape that must copy (of a transposed result) is the producer's kernel storing through strides
        Kernel reshape = only(FusionTest.plan("reshape_t", 1, g -> g.output("y", g.input("x", F32, 6, 10).add(1).t().reshape(60))));
        assertTraffic(reshape, 6 * 10 * 4, 6 * 10 * 4);
        // a layer norm of an intermediate: one kernel, its output in the intermediate's... nowhere: the intermediate is
        // a local, so the pool holds the output alone
        Plan ln = FusionTest.plan("ln_intermediate", 1, g -> {
            var x = g.input("x", F32, 128, 128).mul(2);
            var d = x.sub(x.mean(true, -1));
            g.output("y", d.mul(d.mul(d).mean(true, -1).add(1e-5).rsqrt()));
        });
        assertTraffic(only(ln), 128 * 128 * 4, 128 * 128 * 4);
        assertThat(ln.pools()).singleElement().extracting(Pool::bytes).isEqualTo(128L * 128 * 4);
    }
}
