package dev.gatun.planner;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.function.Consumer;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

class FusionTest {

    static Plan plan(String name, int world, Consumer<GraphBuilder> body) {
        var g = Gatun.graph(name);
        if (world > 1) g.world(world);
        body.accept(g);
        Plan p = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(world)));
        assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
        return p;
    }

    static List<Step> deviceSteps(Plan p) { return p.steps().stream().filter(Step::isDeviceWork).toList(); }

    static boolean uses(KExpr e, PointwiseFn fn) {
        return switch (e) {
            case KExpr.Apply a -> a.fn() == fn || a.args().stream().anyMatch(x -> uses(x, fn));
            case KExpr.Cast c -> uses(c.x(), fn);
            default -> false;
        };
    }

    @Test
    void aReductionAbsorbsAWholePrivateChainAndReadsItsInputOnce() {
        Plan p = plan("chain_sum", 1, g -> g.output("y", g.input("x", F32, 4, 8).add(1).sub(2).mul(3).sum(0, 1)));
        assertThat(p.kernels()).hasSize(1);
        Kernel k = p.kernels().getFirst();
        assertThat(k.isReduction()).isTrue();
        assertThat(PlanChecks.names(k.inputs())).containsExactly("x");
        assertThat(k.locals().stream().flatMap(e -> PlanChecks.loads(e).stream())).hasSize(1);
        // a link read twice by the next is not inlined twice (the body would grow with every such link): it is a
        // local of the row kernel, computed once per element
        Plan q = plan("squares", 1, g -> {
            var t = g.input("x", F32, 4, 8).add(1);
            var u = t.mul(t);
            g.output("y", u.mul(u).sum(0, 1));
        });
        assertThat(q.kernels()).hasSize(1);
        assertThat(q.kernels().getFirst().locals()).hasSizeLessThanOrEqualTo(4);
    }

    @Test
    void aConsumerOfTwoKernelsPullsTheEarlierOneIn() {
        Plan p = plan("two_sins", 1, g -> g.output("y", g.input("b", F32, 8).sin().add(g.input("c", F32, 8).sin())));
        assertThat(p.kernels()).hasSize(1);
        assertThat(p.kernels().getFirst().ops()).containsExactly("sin", "sin", "add");
        assertThat(p.kernels().getFirst().outputs()).containsExactly(p.outputs().get("y"));
        // not when something already placed between the two reads the earlier kernel's result
        Plan q = plan("reader_between", 1, g -> {
            var b = g.input("b", F32, 8, 8).sin();
            var m = b.matmul(g.input("w", F32, 8, 8));           // an extern call reads sin(b)
            g.output("y", b.add(m.cos()));
        });
        assertThat(PlanChecks.all(q)).isEmpty();
        // nor when the earlier result is read transposed
        Plan t = plan("transposed", 1, g -> {
            var b = g.input("b", F32, 8, 8).sin();
            g.output("y", b.t().add(g.input("c", F32, 8, 8).sin()));
        });
        assertThat(t.kernels()).hasSizeGreaterThan(1);
    }

    @Test
    void aPrivateKernelIsMadeAfterAnExternCallWhenThatKeepsNoMoreAlive() {
        // the SwiGLU of a Llama MLP: silu(gate) is made before the up projection runs; its product with up is after
        Plan p = plan("swiglu", 1, g -> {
            var x = g.input("x", F32, 64, 256);
            var gate = x.matmul(g.input("wg", F32, 256, 512)).silu();
            var up = x.matmul(g.input("wu", F32, 256, 512));
            g.output("y", gate.mul(up).matmul(g.input("wd", F32, 512, 256)));
        });
        assertThat(p.kernels()).extracting(Kernel::ops).containsExactly(List.of("silu", "mul"));
        assertThat(p.toString()).contains("silu", "made in this kernel, after the matmul making");
        // silu's result is neither stored nor placed: the kernel stores only the product
        assertThat(p.kernels().getFirst().stores()).hasSize(1);
        // not when what the moved kernel reads is larger than what it stops storing (a narrowing cast)
        Plan q = plan("narrowing", 1, g -> {
            var x = g.input("x", F32, 64, 256);
            var a = x.matmul(g.input("wa", F32, 256, 512)).cast(dev.gatun.ir.DType.BF16);
            var b = x.matmul(g.input("wb", F32, 256, 512)).cast(dev.gatun.ir.DType.BF16);
            g.output("y", a.mul(b));
        });
        assertThat(q.kernels()).hasSize(2);
        assertThat(q.toString()).doesNotContain("made in this kernel, after");
    }

    @Test
    void sizeOneDimensionsDoNotStopFusion() {
        // lowering loads a [2,1] buffer with stride 0 in its size-1 dimension; the index there is always 0
        Plan p = plan("keepdim", 1, g -> g.output("y", g.input("x", F32, 2, 1).add(1e-5).rsqrt()));
        assertThat(p.kernels()).hasSize(1);
        assertThat(p.kernels().getFirst().ops()).containsExactly("add", "rsqrt");
        // a keepdim reduction's pointwise tail joins the reduction's kernel (see RowFusionTest)
        Plan q = plan("keepdim_tail", 1, g -> g.output("y", g.input("x", F32, 4, 8).sum(true, -1).add(1).mul(2)));
        assertThat(q.kernels()).extracting(Kernel::ops).containsExactly(List.of("sum", "add", "mul"));
        // and the same chain on [2,16] stays one kernel, as before
        assertThat(plan("wide", 1, g -> g.output("y", g.input("x", F32, 2, 16).add(1e-5).rsqrt())).kernels()).hasSize(1);
    }

    @Test
    void verticalChainIsOneKernelStoringOnlyTheLastValue() {
        Plan p = plan("chain", 1, g -> g.output("y", g.input("x", F32, 8, 8).add(1).mul(2).exp().neg()));
        assertThat(p.kernels()).hasSize(1);
        Kernel k = p.kernels().getFirst();
        assertThat(k.locals()).hasSize(4);
        assertThat(PlanChecks.names(k.inputs())).containsExactly("x");
        assertThat(k.outputs()).containsExactly(p.outputs().get("y"));
        assertThat(k.stores()).singleElement().extracting(Kernel.Store::local).isEqualTo(3);
        // intermediates are neither stored nor placed anywhere
        assertThat(placed(p)).containsOnly(p.outputs().get("y").name());
        assertThat(p.pools()).singleElement().extracting(Pool::bytes).isEqualTo(256L);
    }

    @Test
    void horizontalSiblingsReadingOneInputAreOneKernel() {
        Plan p = plan("siblings", 1, g -> {
            var x = g.input("x", F32, 4, 4);
            g.output("a", x.add(1));
            g.output("b", x.mul(2));
            g.output("c", x.exp());
        });
        assertThat(p.kernels()).hasSize(1);
        Kernel k = p.kernels().getFirst();
        assertThat(PlanChecks.names(k.inputs())).containsExactly("x");
        assertThat(k.outputs()).containsExactlyInAnyOrderElementsOf(p.outputs().values());
        assertThat(k.name()).startsWith("fused_");
    }

    @Test
    void unrelatedPointwiseOpsOnDifferentInputsStayApart() {
        Plan p = plan("apart", 1, g -> {
            g.output("a", g.input("x", F32, 4, 4).add(1));
            g.output("b", g.input("y", F32, 4, 4).add(1));
        });
        assertThat(p.kernels()).hasSize(2);
    }

    @Test
    void differentIterationSpacesDoNotFuse() {
        Plan p = plan("shapes", 1, g -> {
            var x = g.input("x", F32, 4, 4);
            g.output("a", x.sum(1));                  // a row kernel over [4] rows of [4]
            // [16], neither the rows nor the whole [4,4]: the broadcast operand keeps the loop over [16]
            g.output("b", x.reshape(16).add(g.input("z", F32, 1)));
        });
        assertThat(p.kernels().stream().map(Kernel::ranges).distinct()).hasSizeGreaterThanOrEqualTo(2);
        for (Kernel k : p.kernels()) if (!k.isReduction()) assertThat(k.locals()).hasSize(1);
        // with a scalar instead, the add runs over x's own shape through the reshape (not made) and joins the row kernel
        Plan q = plan("through_reshape", 1, g -> {
            var x = g.input("x", F32, 4, 4);
            g.output("a", x.sum(1));
            g.output("b", x.reshape(16).add(1));
        });
        assertThat(q.kernels()).as(q.toString()).singleElement().satisfies(k -> assertThat(k.ops()).containsExactly("sum", "add"));
    }

    @Test
    void reductionAbsorbsAPrivatePointwiseProducer() {
        Plan p = plan("absorb", 1, g -> g.output("s", g.input("x", F32, 4, 8).mul(2).sum(1)));
        assertThat(p.kernels()).as(p.toString()).hasSize(1);
        Kernel k = p.kernels().getFirst();
        assertThat(k.isReduction()).isTrue();
        assertThat(PlanChecks.names(k.inputs())).containsExactly("x");
        assertThat(k.locals()).anySatisfy(e -> assertThat(uses(e, PointwiseFn.MUL)).isTrue());
        assertThat(placed(p)).containsOnly(p.outputs().get("s").name());
    }

    @Test
    void aProducerReadThroughAViewIsStoredNotAbsorbed() {
        Plan p = plan("absorbT", 1, g -> g.output("s", g.input("x", F32, 4, 8).mul(2).t().sum(1)));
        assertThat(p.kernels()).hasSize(2);
        Kernel mul = p.kernels().getFirst(), red = p.kernels().getLast();
        assertThat(red.isReduction()).isTrue();
        assertThat(red.inputs()).containsExactlyElementsOf(mul.outputs());
        // the reduction reads the stored product transposed: buf[i0 + 8*i1]
        var load = red.locals().stream().flatMap(e -> PlanChecks.loads(e).stream()).findFirst().orElseThrow();
        assertThat(load.strides().stream().map(Object::toString).toList()).containsExactly("1", "8");
    }

    /**
     * Only the reduction's direct producer is absorbed: in {@code exp(x * 2).sum(1)} the exp joins the reduction
     * and the multiply stays a kernel of its own (a fusion opportunity left open, not an error).
     */
    @Test
    void reductionAbsorbsItsDirectProducerOfAChain() {
        Plan p = plan("absorbChain", 1, g -> g.output("s", g.input("x", F32, 4, 8).mul(2).exp().sum(1)));
        Kernel red = p.kernels().getLast();
        assertThat(red.isReduction()).isTrue();
        assertThat(red.locals()).anySatisfy(e -> assertThat(uses(e, PointwiseFn.EXP)).isTrue());
        assertThat(p.kernels()).hasSizeLessThanOrEqualTo(2);
    }

    @Test
    void reductionDoesNotAbsorbAProducerOthersNeed() {
        Plan p = plan("shared", 1, g -> {
            var t = g.input("x", F32, 4, 8).mul(2);
            g.output("s", t.sum(1));
            g.output("t", t);
        });
        // not inlined into the sum: stored, by the one kernel that computes both
        assertThat(p.kernels()).hasSize(1);
        Kernel k = p.kernels().getFirst();
        assertThat(PlanChecks.names(k.inputs())).containsExactly("x");
        assertThat(k.outputs()).containsExactlyInAnyOrder(p.outputs().get("t"), p.outputs().get("s"));
    }

    @Test
    void collectivesAreFusionBarriers() {
        var g = Gatun.graph("coll").world(2);
        g.output("y", g.input("x", F32, 4, 4).add(1).allReduce(SUM).mul(2));
        Plan p = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(2)), PlanOptions.DEFAULT.withFusedCollectives(false));
        assertThat(PlanChecks.all(p)).as(p.toString()).isEmpty();
        var dev = deviceSteps(p);
        assertThat(dev).hasSize(3);
        assertThat(dev.get(0)).isInstanceOf(Step.Launch.class);
        assertThat(dev.get(1)).isInstanceOf(Step.Collective.class);
        assertThat(dev.get(2)).isInstanceOf(Step.Launch.class);
    }

    @Test
    void matmulIsAFusionBarrier() {
        Plan p = plan("mm", 1, g -> {
            var x = g.input("x", F32, 4, 4);
            var w = g.input("w", F32, 4, 4);
            g.output("y", x.add(1).matmul(w).mul(2));
        });
        var dev = deviceSteps(p);
        assertThat(dev).hasSize(3);
        assertThat(dev.get(1)).isInstanceOf(Step.Matmul.class);
        assertThat(p.kernels()).allSatisfy(k -> assertThat(k.locals()).hasSize(1));
    }

    @Test
    void userOpsAreFusionBarriers() {
        Plan p = plan("user", 1, g -> {
            g.register(RandomGraphs.SCALED_ADD);
            var x = g.input("x", F32, 4, 4);
            var y = g.call1("scaled_add", x.add(1), x.mul(2));
            g.output("z", y.exp());
        });
        var dev = deviceSteps(p);
        assertThat(dev).hasSize(3);
        assertThat(dev.get(0)).isInstanceOf(Step.Launch.class);
        assertThat(((Step.Launch) dev.get(0)).kernel().outputs()).hasSize(2);
        assertThat(dev.get(1)).isInstanceOf(Step.CallUserOp.class);
        assertThat(dev.get(2)).isInstanceOf(Step.Launch.class);
    }

    @Test
    void fusedIntermediateThatIsAlsoAnOutputIsStored() {
        Plan p = plan("stored", 1, g -> {
            var t = g.input("x", F32, 4, 4).add(1);
            g.output("t", t);
            g.output("u", t.mul(2).neg());
        });
        assertThat(p.kernels()).hasSize(1);
        Kernel k = p.kernels().getFirst();
        assertThat(k.locals()).hasSize(3);
        assertThat(k.outputs()).containsExactlyInAnyOrder(p.outputs().get("t"), p.outputs().get("u"));
        assertThat(placed(p)).hasSize(2);
    }

    @Test
    void fusedIntermediateReadByALaterKernelOutsideIsStored() {
        Plan p = plan("escape", 2, g -> {
            var t = g.input("x", F32, 4, 4).add(1);
            var r = t.mul(2).allReduce(SUM);
            g.output("y", r.add(t));
        });
        var first = p.kernels().getFirst();
        var last = p.kernels().getLast();
        assertThat(first.outputs()).hasSize(2);
        assertThat(last.inputs()).containsAnyElementsOf(first.outputs());
    }

    @Test
    void transposedReadOfAFusedValueIsNotFusedVertically() {
        Plan p = plan("transpose", 1, g -> {
            var t = g.input("x", F32, 4, 4).add(1);
            g.output("y", t.t().mul(2));
        });
        // either t is stored and read by a second kernel, or y is computed straight from x; never a Local read across indices
        for (Kernel k : p.kernels())
            for (int i = 0; i < k.locals().size(); i++)
                if (k.locals().get(i) instanceof KExpr.Apply a && a.args().stream().anyMatch(x -> x instanceof KExpr.Local))
                    assertThat(PlanChecks.loads(a)).allSatisfy(l -> assertThat(l.strides()).isNotEqualTo(List.of()));
        // the mul's loop is reordered to the add's: one kernel, y stored transposed
        assertThat(p.kernels()).hasSize(1);
        assertThat(p.kernels().getFirst().stores()).singleElement().satisfies(s -> assertThat(s.strides()).containsExactly(dev.gatun.ir.SymInt.ONE, dev.gatun.ir.SymInt.of(4)));
    }

    /** The names of the buffers the plan placed in a pool. */
    static List<String> placed(Plan p) { return p.buffers().stream().filter(b -> b.placement() != null).map(PlanBuffer::name).toList(); }
}
