package dev.gatun.runtime;

import dev.gatun.ir.Algorithm;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.PlanOptions;

import java.time.Duration;

/**
 * How a graph is compiled and run, grouped by concern: the {@link World} it runs on, {@link LoweringOptions}
 * (collective thresholds, symmetric memory, path 2), {@link PlanOptions} (reordering, in-place reuse, the collective
 * passes) and {@link ExecutionOptions} (backend, timeout, CUDA graphs, host delays). The fluent methods below
 * change one of them.
 */
public record CompileOptions(World world, LoweringOptions lowering, PlanOptions planning, ExecutionOptions execution) {

    public CompileOptions {
        if (world == null || lowering == null || planning == null || execution == null)
            throw new GatunRuntimeException("compile options need a world, lowering, planning and execution options");
        // the world is the one source of the world size; NCCL cannot serve ranks that share a GPU
        lowering = lowering.withWorldSize(world.size()).withNcclUnavailable(world.ranksPerGpu() > 1 && world.size() > 1
                ? world.ranksPerGpu() + " ranks share each GPU (ranksPerGpu), and NCCL refuses two ranks on one device" : null);
    }

    /** Defaults for {@code world}, with what this process's environment sets. */
    public static CompileOptions of(World world) {
        var env = System.getenv();
        return new CompileOptions(world, LoweringOptions.world(world.size()).withMeasuredBarrierFree(), PlanOptions.DEFAULT.withProgrammaticLaunch(programmaticLaunch(env)),
                ExecutionOptions.fromEnvironment(env));
    }

    /**
     * GATUN_PROGRAMMATIC_LAUNCH: 1 always, 0 never, unset where it pays ({@link PlanOptions#programmaticLaunch}; the plan
     * prints the decision); anything else is refused by name.
     */
    static PlanOptions.ProgrammaticLaunch programmaticLaunch(java.util.Map<String, String> env) {
        String p = env.getOrDefault("GATUN_PROGRAMMATIC_LAUNCH", "").trim();
        return switch (p) {
            case "" -> PlanOptions.ProgrammaticLaunch.AUTO;
            case "1" -> PlanOptions.ProgrammaticLaunch.ON;
            case "0" -> PlanOptions.ProgrammaticLaunch.OFF;
            default -> throw new GatunRuntimeException("GATUN_PROGRAMMATIC_LAUNCH='" + p
                    + "': use 1 (always), 0 (never), or leave it unset (where it pays: a decode step at batch 1 to 8)");
        };
    }

    /** When the plan's own kernels are programmatic dependent launches ({@link PlanOptions#programmaticLaunch}). */
    public CompileOptions programmaticLaunch(PlanOptions.ProgrammaticLaunch p) { return planning(planning.withProgrammaticLaunch(p)); }

    /**
     * Defaults for a world of {@code n} ranks ({@link World#of(int)}: this process's rank of it where a launcher
     * started this process as one, else {@code n} simulated ranks) on the automatically chosen backend.
     */
    public static CompileOptions world(int n) { return of(World.of(n)); }

    public int worldSize() { return world.size(); }
    public String backend() { return execution.backend(); }
    public Duration timeout() { return execution.timeout(); }
    public boolean cudaGraphs() { return execution.cudaGraphs(); }
    public long delaySeed() { return execution.delaySeed(); }
    public int ranksPerGpu() { return world.ranksPerGpu(); }

    /** The rendezvous of a {@link World.Local} world (threads of this process), else null. */
    public dev.gatun.runtime.distributed.Rendezvous rendezvous() { return world instanceof World.Local l ? l.rendezvous() : null; }

    public CompileOptions world(World w) { return new CompileOptions(w, lowering, planning, execution); }
    public CompileOptions lowering(LoweringOptions l) { return new CompileOptions(world, l, planning, execution); }
    public CompileOptions planning(PlanOptions p) { return new CompileOptions(world, lowering, p, execution); }
    public CompileOptions execution(ExecutionOptions e) { return new CompileOptions(world, lowering, planning, e); }

    /**
     * Round every f16/bf16 op's result to its type inside fused kernels, as the reference interpreter and eager PyTorch
     * do (bit for bit the reference's arithmetic); by default a fused kernel holds f16/bf16 intermediates in float32
     * and rounds only what it stores, as {@code torch.compile} and XLA do ({@link PlanOptions#roundEachOp}).
     */
    public CompileOptions roundEachOp() { return planning(planning.withRoundEachOp(true)); }

    /**
     * Whether a one-shot or barrier-free all-reduce takes in the kernel that writes its inputs and the one that reads its
     * results, as one launch (true, the default); false keeps each a launch of its own, to compare or to debug.
     */
    public CompileOptions fuseCollectives(boolean on) { return planning(planning.withFusedCollectives(on)); }

    /**
     * Whether a product of a few rows takes in the kernels after it that read its output, wherever each block of the
     * product can hold the columns those kernels read together, as one launch (true: a decode layer's SwiGLU, q/k/v
     * bias, rotary embedding, norm over each head: the default, measured faster on an H200, {@code
     * PlanOptions.productEpilogues}); false keeps them launches of their own, to compare or to debug. The plan prints
     * each such launch and its tiles.
     */
    public CompileOptions productEpilogues(boolean on) { return planning(planning.withProductEpilogues(on)); }

    /**
     * Whether the kernels that read an {@code index_select}'s result read the table through the indices themselves
     * ({@link PlanOptions#gatherFusion}): on by default; both backends run such plans, checking every index (a bad one
     * stops the call naming the step, the kernel and the op).
     */
    public CompileOptions gatherFusion(boolean on) { return planning(planning.withGatherFusion(on)); }

    /** "auto" (CUDA where a GPU is present, else host), "host" or "cuda". */
    public CompileOptions backend(String name) { return execution(execution.withBackend(name)); }

    /** Host backend: ranks sleep for random short times at random points (seeded), to expose cross-rank races. */
    public CompileOptions randomDelays(long seed) { return execution(execution.withDelaySeed(seed)); }

    /**
     * Host backend, a session that is one rank of a world ({@link #rank}, or a process gatun-run started): how its
     * collectives reach the other ranks (default {@code AUTO}: shared memory on one host, else TCP; also
     * GATUN_HOST_TRANSPORT=auto, shm or tcp).
     */
    public CompileOptions hostTransport(ExecutionOptions.HostTransport t) { return execution(execution.withHostTransport(t)); }

    public CompileOptions timeout(Duration t) { return execution(execution.withTimeout(t)); }

    /** CUDA backend: capture partitions as CUDA graphs and replay them (default on). */
    public CompileOptions cudaGraphs(boolean on) { return execution(execution.withCudaGraphs(on)); }

    public CompileOptions thresholds(long oneShotMax, long twoShotMax) { return lowering(lowering.withThresholds(oneShotMax, twoShotMax)); }

    /**
     * All-reduces of at most {@code bytes} per rank run barrier-free (0: only where forced); by default
     * {@link LoweringOptions#measuredBarrierFreeMax}, the threshold the H200 measurements support for the world size.
     */
    public CompileOptions barrierFreeMax(long bytes) { return lowering(lowering.withBarrierFreeMax(bytes)); }

    public CompileOptions forceAllReduce(Algorithm a) { return lowering(lowering.withForcedAllReduce(a)); }

    public CompileOptions symmetricMemory(boolean on) { return lowering(lowering.withSymmetricMemory(on)); }

    /** Path 2 on or off: whether graph inputs feeding collectives get persistent symmetric buffers (default on). */
    public CompileOptions symmetricInputs(boolean on) { return lowering(lowering.withSymmetricInputs(on)); }

    /**
     * This session is one rank of a world whose ranks meet through {@code r}: one thread per GPU in one process
     * (with {@link dev.gatun.runtime.distributed.LocalWorld}), instead of one process per GPU started by gatun-run; on
     * the host backend, one thread per rank whose collectives reach the other ranks' sessions for real
     * ({@link #hostTransport}).
     */
    public CompileOptions rank(dev.gatun.runtime.distributed.Rendezvous r) { return world(new World.Local(r, world.ranksPerGpu())); }

    /**
     * Several ranks share each GPU (opt-in; default 1): the rank of local rank {@code L} runs on GPU {@code L / k}, so
     * {@code ranksPerGpu(4)} puts a world of 4 on one GPU (threads of one process, or processes under MPS). The
     * symmetric collectives run unchanged in protocol, each rank's grid sized so every co-located rank's blocks are
     * resident at once. NCCL refuses two ranks on one device, so collectives that would take NCCL run a symmetric
     * algorithm instead, or are refused at compile time where none fits ({@code explain()} says which).
     */
    public CompileOptions ranksPerGpu(int k) { return world(world.withRanksPerGpu(k)); }
}
