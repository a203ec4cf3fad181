package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.CompilationException;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Planner;
import dev.gatun.runtime.CompileOptions;
import org.junit.jupiter.api.Test;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.assertThatCode;

/**
 * Registered ops without a CUDA kernel, and an all_to_all with run-time counts, are refused when a plan is loaded,
 * before any GPU work: no GPU needed.
 */
class RegisteredOpsTest {
    @Test
    void topkIsRefusedNamingTheOp() {
        var g = Gatun.graph("top");
        var top = g.input("x", F32, 4, 8).topk(3);
        g.output("values", top.values());
        g.output("indices", top.indices());
        var plan = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)));
        assertThatThrownBy(() -> new CudaBackend().load(plan, CompileOptions.world(1))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("topk has no CUDA kernel yet").hasMessageContaining("plan 'top'");
    }

    @Test
    void gatherAndScatterAddAreRefusedNamingTheOp() {
        var g = Gatun.graph("dispatch");
        var ids = g.input("ids", dev.gatun.ir.DType.I64, 4, 2);
        g.output("picked", g.input("x", F32, 4, 8).gather(1, ids));
        var gather = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)));
        assertThatThrownBy(() -> new CudaBackend().load(gather, CompileOptions.world(1))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("gather has no CUDA kernel yet").hasMessageContaining("plan 'dispatch'");

        var c = Gatun.graph("combine");
        c.output("sums", c.input("x", F32, 4, 8).scatterAdd(0, c.input("ids", dev.gatun.ir.DType.I64, 2, 8), c.input("src", F32, 2, 8)));
        var scatter = Planner.plan(Lowering.lower(c.build(), LoweringOptions.world(1)));
        assertThatThrownBy(() -> new CudaBackend().load(scatter, CompileOptions.world(1))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("scatter_add has no CUDA kernel yet").hasMessageContaining("plan 'combine'");
    }

    /** NCCL's send and receive take their counts from the host: an all_to_all with run-time counts has no CUDA path yet. */
    @Test
    void anUnevenAllToAllIsRefusedAtLoadNamingTheOpAndTheEvenOneIsNot() {
        var g = Gatun.graph("dispatch").world(2);
        var r = g.input("x", F32, 8, 4).allToAll("world", g.input("counts", dev.gatun.ir.DType.I64, 2), 12);
        g.output("y", r.values());
        var uneven = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(2)));
        assertThatThrownBy(() -> new CudaBackend().load(uneven, CompileOptions.world(2))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("plan 'dispatch'").hasMessageContaining("all_to_all.symm_mem with row counts read at run time")
                .hasMessageContaining("capacity=12").hasMessageContaining("has no CUDA path yet");

        var e = Gatun.graph("even").world(2);
        e.output("y", e.input("x", F32, 8, 4).allToAll("world"));
        var even = Planner.plan(Lowering.lower(e.build(), LoweringOptions.world(2)));
        assertThatCode(() -> CudaBackend.refuseOpsWithoutKernels(even)).doesNotThrowAnyException();
        assertThatCode(() -> CudaBackend.refuseAllToAllOnSharedGpus(even, 1)).doesNotThrowAnyException();
        assertThatThrownBy(() -> new CudaBackend().load(even, CompileOptions.world(2).ranksPerGpu(2))).isInstanceOf(CompilationException.class)
                .hasMessageContaining("all_to_all.symm_mem(x, \"world\")").hasMessageContaining("NCCL refuses 2 ranks on one device");
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
}
