package dev.gatun.runtime;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.lower.LoweringOptions;
import dev.gatun.planner.PlanOptions;

import java.time.Duration;

/**
 * How a graph is compiled and run: world size, collective thresholds, planning switches, which backend,
 * and the host backend's fault-finding knobs (random rank delays, collective timeout).
 */
public record CompileOptions(LoweringOptions lowering, PlanOptions planning, String backend, long delaySeed,
                             Duration timeout, boolean cudaGraphs, dev.gatun.runtime.distributed.Rendezvous rendezvous, int ranksPerGpu) {

    public CompileOptions {
        if (timeout == null || timeout.isNegative() || timeout.isZero()) throw new IllegalArgumentException("timeout must be positive");
        if (ranksPerGpu < 1) throw new IllegalArgumentException("ranksPerGpu must be at least 1, not " + ranksPerGpu);
    }

    /** Defaults for a world of {@code n} ranks on the automatically chosen backend. */
    public static CompileOptions world(int n) {
        return new CompileOptions(LoweringOptions.world(n), PlanOptions.DEFAULT, "auto", 0, Duration.ofSeconds(60), true, null, 1);
    }

    public int worldSize() { return lowering.worldSize(); }

    /** "auto" (CUDA where a GPU is present, else host), "host" or "cuda". */
    public CompileOptions backend(String name) { return new CompileOptions(lowering, planning, name, delaySeed, timeout, cudaGraphs, rendezvous, ranksPerGpu); }

    /** Host backend: ranks sleep for random short times at random points (seeded), to expose cross-rank races. */
    public CompileOptions randomDelays(long seed) { return new CompileOptions(lowering, planning, backend, seed, timeout, cudaGraphs, rendezvous, ranksPerGpu); }

    public CompileOptions timeout(Duration t) { return new CompileOptions(lowering, planning, backend, delaySeed, t, cudaGraphs, rendezvous, ranksPerGpu); }

    public CompileOptions thresholds(long oneShotMax, long twoShotMax) {
        return new CompileOptions(lowering.withThresholds(oneShotMax, twoShotMax), planning, backend, delaySeed, timeout, cudaGraphs, rendezvous, ranksPerGpu);
    }

    public CompileOptions forceAllReduce(Algorithm a) {
        return new CompileOptions(lowering.withForcedAllReduce(a), planning, backend, delaySeed, timeout, cudaGraphs, rendezvous, ranksPerGpu);
    }

    public CompileOptions symmetricMemory(boolean on) {
        return new CompileOptions(lowering.withSymmetricMemory(on), planning, backend, delaySeed, timeout, cudaGraphs, rendezvous, ranksPerGpu);
    }

    /** Path 2 on or off: whether graph inputs feeding collectives get persistent symmetric buffers (default on). */
    public CompileOptions symmetricInputs(boolean on) {
        return new CompileOptions(lowering.withSymmetricInputs(on), planning, backend, delaySeed, timeout, cudaGraphs, rendezvous, ranksPerGpu);
    }

    public CompileOptions planning(PlanOptions p) { return new CompileOptions(lowering, p, backend, delaySeed, timeout, cudaGraphs, rendezvous, ranksPerGpu); }

    /** CUDA backend: capture partitions as CUDA graphs and replay them (default on). */
    public CompileOptions cudaGraphs(boolean on) { return new CompileOptions(lowering, planning, backend, delaySeed, timeout, on, rendezvous, ranksPerGpu); }

    /**
     * This session is one rank of a world whose ranks meet through {@code r}: one thread per GPU in one process
     * (with {@link dev.gatun.runtime.distributed.LocalWorld}), instead of one process per GPU started by gatun-run.
     */
    public CompileOptions rank(dev.gatun.runtime.distributed.Rendezvous r) {
        return new CompileOptions(lowering, planning, backend, delaySeed, timeout, cudaGraphs, r, ranksPerGpu);
    }

    /**
     * Several ranks share each GPU (opt-in; default 1): the rank of local rank {@code L} runs on GPU {@code L / k}, so
     * {@code ranksPerGpu(4)} puts a world of 4 on one GPU (threads of one process, or processes under MPS). The
     * symmetric collectives run unchanged in protocol, each rank's grid sized so every co-located rank's blocks are
     * resident at once. NCCL refuses two ranks on one device, so collectives that would take NCCL run a symmetric
     * algorithm instead, or are refused at compile time where none fits ({@code explain()} says which).
     */
    public CompileOptions ranksPerGpu(int k) {
        if (k < 1) throw new IllegalArgumentException("ranksPerGpu must be at least 1, not " + k);
        var l = lowering.withNcclUnavailable(k > 1 && worldSize() > 1
                ? k + " ranks share each GPU (ranksPerGpu), and NCCL refuses two ranks on one device" : null);
        return new CompileOptions(l, planning, backend, delaySeed, timeout, cudaGraphs, rendezvous, k);
    }
}
