package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Optimizer;
import dev.gatun.dsl.Optimizers;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaTraining;
import dev.gatun.models.llama.LlamaTraining.DataParallel;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.runtime.CompileOptions;

/**
 * The tiny Llama training step of the CUDA backend's training tests: its configuration, the step's graph at world 1
 * or fully sharded over {@code dp} ranks, and the plan a CUDA session makes of it on an H200 without a device (the
 * session's lowering and planning: {@link CompileOptions#lowering()}, the planning options for the H200's target and
 * the backend's communication granularity), so that a host test sees what a GPU session would load.
 */
final class TrainingPlans {
    private TrainingPlans() {}

    /**
     * Hidden 64, 2 layers, 4 query heads of 16 (2 key-value heads: grouped queries), MLP 128, vocabulary 256: every
     * weight's rows divide by 2 for FSDP, and the head size is one the GPU's attention kernels take.
     */
    static final LlamaConfig TINY = new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false);
    static final int SEQUENCES = 4, TOKENS = 16;

    /**
     * AdamW (lr 1e-2, weight decay 1e-2) clipped by global norm at 1.0, as the host acceptance tests, with eps 1e-6: an
     * element whose gradient is at float32's rounding level moves by at most lr * 1e-2, not by lr ({@link LlamaTrainingGpuTest}).
     */
    static Optimizer optimizer() { return Optimizers.adamW(1e-2, 0.9, 0.999, 1e-6, 1e-2).clipGradNorm(1.0); }

    /** The step of {@link #SEQUENCES} sequences over {@code dp} ranks ({@code mode} along "world"), weights in {@code master}, computed in {@code compute}. */
    static Graph graph(int dp, DataParallel mode, DType master, DType compute, boolean outputStates) {
        return LlamaTraining.graph(TINY, SEQUENCES / dp, TOKENS, dp, 1, mode, master, compute, optimizer(), outputStates);
    }

    /** The options of a session of {@code world} ranks sharing one GPU (threads of one process), as the GPU tests compile it. */
    static CompileOptions options(int world) {
        var o = CompileOptions.world(world);
        return world > 1 ? o.ranksPerGpu(world) : o;
    }

    /** The plan a CUDA session of {@code options} makes of {@code g} on an H200 (as {@code Session.compile} after {@code CudaBackend.adapt}). */
    static Plan cudaPlan(Graph g, CompileOptions options) {
        var lowered = Lowering.lower(g, options.lowering());
        return Planner.plan(lowered, options.planning().withTarget(PlanOptions.Target.H200).withCommGranularity(CudaBackend.GRANULARITY));
    }
}
