package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Where the plan makes its kernels programmatic launches by default ({@code ProgrammaticLaunch.AUTO}, {@code Plan.launches()}):
 * the Llama decode step at batch 1 and 8, whose products are all Gatun's GEMV's (1 to 8 rows by weights); not in float32
 * at batch 8 (cuBLAS's products), not the prefill, not at two ranks (collectives), not a product of two computed tensors. And which
 * attention steps load their cache before the wait ({@code LaunchChoice.early}, the planner's {@code LaunchChoices}).
 */
class ProgrammaticChoiceTest {
    static final LlamaConfig C = new LlamaConfig(2048, 2, 32, 8, 8192, 128256, 500000, 1e-5, true);

    static Plan plan(dev.gatun.ir.graph.Graph g, int world) { return Planner.plan(Lowering.lower(g, LoweringOptions.world(world))); }

    @Test
    void theDecodeStepAtBatchOneToEightAndNothingElse() {
        assertThat(plan(LlamaDecoder.decode(C, 1, 544, 1, DType.BF16), 1).launches().programmatic()).isTrue();
        assertThat(plan(LlamaDecoder.decode(C, 1, 544, 1, DType.F32), 1).launches().programmatic()).isTrue();
        assertThat(plan(LlamaDecoder.decode(C, 8, 544, 1, DType.BF16), 1).launches().programmatic()).isTrue();
        assertThat(plan(LlamaDecoder.decode(C, 9, 544, 1, DType.BF16), 1).launches().programmatic()).as("9 rows: cuBLAS").isFalse();
        assertThat(plan(LlamaDecoder.decode(C, 8, 544, 1, DType.F32), 1).launches().programmatic()).as("8 rows of float32: cuBLAS").isFalse();
        assertThat(plan(LlamaDecoder.prefill(C, 64, 96, 1, DType.BF16), 1).launches().programmatic()).isFalse();
        // at TP 2 the all-reduces between the products are launched as always; the GEMVs around them programmatically
        Plan tp2 = plan(LlamaDecoder.decode(C, 1, 544, 2, DType.BF16), 2);
        assertThat(tp2.launches().programmatic()).isTrue();
        assertThat(tp2.launches().why()).contains("the collectives launched as always");
    }

    @Test
    void thePlanPrintsTheDecisionAndEachProductsKernel() {
        Plan p = plan(LlamaDecoder.decode(C, 1, 544, 1, DType.BF16), 1);
        assertThat(p.toString()).contains("# launches: programmatic (every product the GEMV by a weight no step writes)")
                .contains("# gemv");
        Plan prefill = plan(LlamaDecoder.prefill(C, 64, 96, 1, DType.BF16), 1);
        assertThat(prefill.toString()).doesNotContain("launches: programmatic");
        assertThat(prefill.launches().why()).contains("the library's");
        // the prompt's 64 rows are the library's; only the logits of the last position, one row, are the GEMV's
        var products = prefill.steps().stream().flatMap(st -> st.parts().stream())
                .filter(st -> st instanceof dev.gatun.planner.Step.Matmul).map(st -> (dev.gatun.planner.Step.Matmul) st).toList();
        assertThat(products).filteredOn(m -> m.a().shape().sizes()[0] == 64).isNotEmpty().noneMatch(dev.gatun.planner.Step.Matmul::gemv);
        assertThat(products).filteredOn(dev.gatun.planner.Step.Matmul::gemv).allSatisfy(m -> assertThat(m.a().shape().sizes()[0]).isEqualTo(1));
    }

    @Test
    void aProductOfComputedTensorsOrNoProductKeepsPlainLaunches() {
        var g = dev.gatun.dsl.Gatun.graph("computed");
        var x = g.input("x", DType.F32, 1, 64);
        var w = g.input("w", DType.F32, 32, 64);
        g.output("y", x.matmul(w.exp().transpose(0, 1)));   // the weight is a kernel's result: its loads must wait
        assertThat(plan(g.build(), 1).launches().programmatic()).isFalse();
        var h = dev.gatun.dsl.Gatun.graph("none");
        h.output("y", h.input("x", DType.F32, 4).exp());
        assertThat(plan(h.build(), 1).launches().programmatic()).isFalse();
    }

    /** The steps of {@code kind} among {@code steps}, each asserted to load its cache before the wait. */
    static int earlyAttentions(Plan plan, java.util.function.Predicate<dev.gatun.planner.Step> kind) {
        var steps = plan.steps();
        int found = 0;
        for (int i = 0; i < steps.size(); i++)
            if (kind.test(steps.get(i))) {
                assertThat(plan.choice(steps.get(i)).early()).as("step %d", i).isTrue();
                assertThat(plan.toString()).contains("attention[early, positions=");
                found++;
            }
        return found;
    }

    /** The decode step's attention loads its cache before the wait (the update just before it is of its caches); over input caches it does not. */
    @Test
    void theDecodeStepsAttentionLoadsItsCacheEarly() {
        for (int batch : new int[]{1, 8}) {
            var steps = plan(LlamaDecoder.decode(C, batch, 544, 1, DType.BF16), 1);
            assertThat(earlyAttentions(steps, dev.gatun.planner.Step.UpdateAttention.class::isInstance)).as("batch %d", batch).isEqualTo(C.layers());
            // with the update a launch of its own, the attention after it loads early too
            var apart = Planner.plan(Lowering.lower(LlamaDecoder.decode(C, batch, 544, 1, DType.BF16), LoweringOptions.world(1)),
                    dev.gatun.planner.PlanOptions.DEFAULT.withAttentionUpdates(false));
            assertThat(earlyAttentions(apart, dev.gatun.planner.AttentionCall::is)).as("batch %d, apart", batch).isEqualTo(C.layers());
        }
        var inputs = plan(dev.gatun.runtime.host.AttentionHostTest.graph(DType.BF16, DType.I32, 2, 4, 64, 100, 0.125), 1);
        for (var s : inputs.steps())
            if (dev.gatun.planner.AttentionCall.is(s)) assertThat(inputs.choice(s).early()).isFalse();
    }
}
