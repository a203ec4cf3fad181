package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.CompilationException;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Planner;
import dev.gatun.runtime.CompileOptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.assertThatCode;

/**
 * Which registered ops the CUDA backend has kernels for, and what it refuses when a plan is loaded (an all_to_all with
 * run-time counts among it), before any GPU work: no GPU needed.
 */
class RegisteredOpsTest {
    static dev.gatun.planner.Plan plan(dev.gatun.ir.graph.Graph g) { return Planner.plan(Lowering.lower(g, LoweringOptions.world(1))); }

    /** Every registered op has a kernel: the dispatch table's names are the registry's. */
    @Test
    void everyRegisteredOpHasAKernel() {
        assertThat(CudaBackend.REGISTERED_OPS_WITH_KERNELS)
                .containsExactlyInAnyOrderElementsOf(dev.gatun.ir.graph.OpRegistry.all().stream().map(dev.gatun.ir.graph.OpSpec::name).toList());
    }

    /** topk, gather and scatter_add load; the two that index can stop a call on a bad index, topk cannot. */
    @Test
    void topkGatherAndScatterAddHaveKernelsAndTheIndexingOnesCanStopACall() {
        var g = Gatun.graph("top");
        var top = g.input("x", F32, 4, 8).topk(3);
        g.output("values", top.values());
        g.output("indices", top.indices());
        var topk = plan(g.build());
        assertThat(topk.toString()).contains("topk(");
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(topk)).doesNotThrowAnyException();
        assertThat(DeviceFault.needed(topk)).isFalse();

        var d = Gatun.graph("dispatch");
        d.output("picked", d.input("x", F32, 4, 8).gather(1, d.input("ids", dev.gatun.ir.DType.I64, 4, 2)));
        var gather = plan(d.build());
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(gather)).doesNotThrowAnyException();
        assertThat(DeviceFault.needed(gather)).as("an index outside x traps through DeviceFault").isTrue();

        var c = Gatun.graph("combine");
        c.output("sums", c.input("x", F32, 4, 8).scatterAdd(0, c.input("ids", dev.gatun.ir.DType.I64, 2, 8), c.input("src", F32, 2, 8)));
        var scatter = plan(c.build());
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(scatter)).doesNotThrowAnyException();
        assertThat(DeviceFault.needed(scatter)).isTrue();
    }

    /** The kernels take tensors of up to 8 dimensions: a gather or scatter_add of rank 9 is refused at load, naming the op and what to do. */
    @Test
    void gatherAndScatterAddOfMoreThanEightDimensionsAreRefusedNamingTheOp() {
        Object[] nine = {2, 1, 1, 1, 1, 1, 1, 1, 3};
        var g = Gatun.graph("deep");
        g.output("y", g.input("x", F32, nine).gather(-1, g.input("ids", dev.gatun.ir.DType.I64, nine)));
        var deep = plan(g.build());
        assertThatThrownBy(() -> new CudaBackend().load(deep, CompileOptions.world(1))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("plan 'deep'").hasMessageContaining("gather of tensors of rank 9").hasMessageContaining("at most 8 dimensions")
                .hasMessageContaining("reshape");
        var c = Gatun.graph("deep_sum");
        c.output("y", c.input("x", F32, nine).scatterAdd(0, c.input("ids", dev.gatun.ir.DType.I64, nine), c.input("src", F32, nine)));
        var deepSum = plan(c.build());
        assertThatThrownBy(() -> CudaBackend.refuseOpsWithoutKernels(deepSum)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("scatter_add of tensors of rank 9");
        var ok = Gatun.graph("eight");
        Object[] eight = {2, 1, 1, 1, 1, 1, 1, 3};
        ok.output("y", ok.input("x", F32, eight).gather(-1, ok.input("ids", dev.gatun.ir.DType.I64, eight)));
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(plan(ok.build()))).doesNotThrowAnyException();
    }

    /**
     * The mixture-of-experts decoders (their router's topk) load on the CUDA backend: the prefill and decode plans of the
     * mixtral, qwen2_moe and qwen3_moe reference checkpoints call topk and nothing the backend refuses; the decode
     * step's experts are expert_matmul's.
     */
    @ParameterizedTest
    @ValueSource(strings = {"mixtral", "qwen2_moe", "qwen3_moe"})
    void theMixtureOfExpertsDecodersLoad(String name) throws java.io.IOException {
        dev.gatun.models.llama.LlamaConfig c;
        try (var ckpt = dev.gatun.models.llama.LlamaCheckpoint.open(DecoderReferencesGpuTest.Reference.decoders().resolve(name))) {
            c = ckpt.config();
        }
        for (var g : java.util.List.of(dev.gatun.models.llama.LlamaPrefill.graph(c, 12, 1, dev.gatun.ir.DType.F32),
                dev.gatun.models.llama.LlamaDecoder.prefill(c, 12, 28, 1, dev.gatun.ir.DType.F32), dev.gatun.models.llama.LlamaDecoder.decode(c, 28, 1, dev.gatun.ir.DType.F32))) {
            var p = plan(g);
            assertThat(p.steps()).as(name).anyMatch(s -> s instanceof dev.gatun.planner.Step.OpCall o && o.spec() == dev.gatun.ir.ops.TopK.SPEC);
            // the decode step (one token: 1 * k < experts) routes; the prompt's prefill is dense
            boolean decode = g.name().contains("decode");
            assertThat(p.steps().stream().anyMatch(s -> s instanceof dev.gatun.planner.Step.OpCall o && o.spec() == dev.gatun.ir.ops.ExpertMatmul.SPEC))
                    .as(name + " " + g.name()).isEqualTo(decode);
            assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(p)).as(name).doesNotThrowAnyException();
        }
    }

    /**
     * NCCL's send and receive take their counts from the host: an all_to_all with run-time counts runs on symmetric memory
     * only (SymmetricAllToAll), and one through NCCL is refused at load naming the op; the even one loads either way.
     */
    @Test
    void anUnevenAllToAllThroughNcclIsRefusedAtLoadNamingTheOpAndOnSymmetricMemoryIsNot() {
        var g = Gatun.graph("dispatch").world(2);
        var r = g.input("x", F32, 8, 4).allToAll("world", g.input("counts", dev.gatun.ir.DType.I64, 2), 12);
        g.output("y", r.values());
        var nccl = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(2).withSymmetricMemory(false)));
        assertThatThrownBy(() -> new CudaBackend().load(nccl, CompileOptions.world(2))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("plan 'dispatch'").hasMessageContaining("all_to_all.nccl with row counts read at run time")
                .hasMessageContaining("capacity=12").hasMessageContaining("no CUDA path through NCCL");
        var symmetric = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(2)));
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(symmetric)).doesNotThrowAnyException();

        var e = Gatun.graph("even").world(2);
        e.output("y", e.input("x", F32, 8, 4).allToAll("world"));
        var even = Planner.plan(Lowering.lower(e.build(), LoweringOptions.world(2)));
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(even)).doesNotThrowAnyException();
        assertThatCode(() -> CudaBackend.refuseAllToAllOnSharedGpus(even, 1)).doesNotThrowAnyException();
        assertThatCode(() -> CudaBackend.refuseAllToAllOnSharedGpus(even, 2)).as("symmetric memory serves ranks that share a GPU").doesNotThrowAnyException();
    }

    @Test
    void argmaxHasAKernel() {
        var g = Gatun.graph("greedy");
        g.output("next", g.input("x", F32, 4, 8).argmax(-1));
        var plan = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)));
        assertThat(plan.toString()).contains("argmax(");
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(plan)).doesNotThrowAnyException();
    }

    @Test
    void indexSelectAndSampleHaveKernelsAndOnlyTheLookupCanStopACall() {
        var g = Gatun.graph("lookup");
        g.output("rows", g.input("table", F32, 10, 4).indexSelect(0, g.input("ids", dev.gatun.ir.DType.I32, 3)));
        var lookup = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)));
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(lookup)).doesNotThrowAnyException();
        assertThat(DeviceFault.needed(lookup)).as("an index outside the table traps through DeviceFault").isTrue();

        var d = Gatun.graph("draw");
        d.output("next", d.input("logits", F32, 2, 8).sample(d.input("params", F32, 2, 5), d.input("seeds", dev.gatun.ir.DType.I64, 2),
                d.input("steps", dev.gatun.ir.DType.I64, 1), d.input("context", dev.gatun.ir.DType.I64, 2, 3)));
        var draw = Planner.plan(Lowering.lower(d.build(), LoweringOptions.world(1)));
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(draw)).doesNotThrowAnyException();
        assertThat(DeviceFault.needed(draw)).as("every value sample takes is valid").isFalse();
    }

    /** flash_attention loads in f64 too (the rows kernel in double), as in f32. */
    @Test
    void float64FlashAttentionLoads() {
        for (var t : java.util.List.of(dev.gatun.ir.DType.F64, dev.gatun.ir.DType.F32)) {
            var g = dev.gatun.dsl.Gatun.graph("fa64");
            g.output("o", g.input("q", t, 1, 2, 4, 8).flashAttention(g.input("k", t, 1, 1, 4, 8), g.input("v", t, 1, 1, 4, 8), 0.3, true, 0, 0));
            var p = plan(g.build());
            assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(p)).doesNotThrowAnyException();
        }
    }

    /**
     * expert_matmul loads in f32, f16 and bf16 (its bad id can stop a call); f64, rows that are not whole 16-byte
     * vectors, and more pairs than a grid's y are refused at load naming the op and what to do.
     */
    @Test
    void expertMatmulHasAKernelAndItsLimitsAreRefusedAtLoad() {
        for (var t : java.util.List.of(dev.gatun.ir.DType.F32, dev.gatun.ir.DType.F16, dev.gatun.ir.DType.BF16, dev.gatun.ir.DType.F64)) {
            var p = plan(routed(t, 2, 2, 16));
            if (t == dev.gatun.ir.DType.F64)
                assertThatThrownBy(() -> CudaBackend.refuseOpsWithoutKernels(p)).isInstanceOf(CompilationException.class)
                        .hasMessageContaining("expert_matmul").hasMessageContaining("takes f32, f16 or bf16");
            else {
                assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(p)).doesNotThrowAnyException();
                assertThat(DeviceFault.needed(p)).isTrue();
            }
        }
        assertThatThrownBy(() -> CudaBackend.refuseOpsWithoutKernels(plan(routed(dev.gatun.ir.DType.BF16, 2, 2, 12)))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("rows of 12 bf16 elements are not a whole number of 16-byte vectors").hasMessageContaining("multiple of 8");
        assertThatThrownBy(() -> CudaBackend.refuseOpsWithoutKernels(plan(routed(F32, 40_000, 2, 16)))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("80000 (token, choice) pairs").hasMessageContaining("densely");
    }

    private static dev.gatun.ir.graph.Graph routed(dev.gatun.ir.DType t, int tokens, int k, int in) {
        var g = Gatun.graph("routed");
        g.output("y", g.input("x", t, tokens, in).expertMatmul(g.input("w", t, 4, 8, in), g.input("ids", dev.gatun.ir.DType.I64, tokens, k)));
        return g.build();
    }
}
