package dev.gatun.ir.lower;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.GraphException;

/**
 * Options of lowering: the world size and the thresholds that pick a collective's algorithm. By default an
 * all-reduce of up to 256 KiB per rank runs one-shot, up to 4 MiB two-shot, and NCCL above; with two ranks,
 * one-shot up to 16 MiB and NCCL above. Reduce-scatter and all-gather use symmetric memory up to the two-shot
 * threshold.
 *
 * @param forceAllReduce when set, every all-reduce with a static shape uses this algorithm (benchmarks)
 * @param symmetricInputs when false, a graph input never takes path 2 (a persistent symmetric buffer filled by a
 *                        copy each call) and reaches a collective by path 3 (an identity kernel into the pool)
 * @param ncclUnavailable null where NCCL may run the collectives symmetric memory does not; otherwise why it cannot
 *                        (several ranks share a GPU, which NCCL refuses): collectives that would take NCCL are then
 *                        served by a symmetric algorithm where one exists, and refused at compile time where none does
 */
public record LoweringOptions(int worldSize, long oneShotMaxBytes, long twoShotMaxBytes, boolean symmetricMemory,
                              Algorithm forceAllReduce, boolean symmetricInputs, String ncclUnavailable) {
    private static final long MIB = 1024 * 1024;

    public LoweringOptions {
        if (worldSize < 1) throw new GraphException("world size must be at least 1, got " + worldSize);
        if (oneShotMaxBytes < 0 || twoShotMaxBytes < oneShotMaxBytes)
            throw new GraphException("collective thresholds must satisfy 0 <= one-shot (" + oneShotMaxBytes + ") <= two-shot (" + twoShotMaxBytes + ")");
        if (forceAllReduce == Algorithm.SYMM_MEM) throw new GraphException("all-reduce cannot be forced to " + forceAllReduce + "; use ONE_SHOT, TWO_SHOT, BARRIER_FREE or NCCL");
    }

    /**
     * Defaults for a world of {@code worldSize} ranks, from the suite's measurements on H200s with NVLink
     * (docs/BENCHMARKS.md). Two ranks: two-shot moves as many bytes over NVLink as one-shot and adds a phase and
     * a barrier, and one-shot was as fast or faster at every size up to 64 MiB, so one-shot runs up to 16 MiB.
     * More ranks: one-shot up to 256 KiB, two-shot up to 4 MiB (on four GPUs two-shot was as fast from 256 KiB
     * on, and NCCL faster from 32 MiB).
     */
    public static LoweringOptions world(int worldSize) {
        if (worldSize <= 2) return new LoweringOptions(worldSize, 16 * MIB, 16 * MIB, true, null, true, null);
        return new LoweringOptions(worldSize, MIB / 4, 4 * MIB, true, null, true, null);
    }

    /** The same options for a world of {@code n} ranks (the thresholds stay as they are). */
    public LoweringOptions withWorldSize(int n) {
        return n == worldSize ? this : new LoweringOptions(n, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, forceAllReduce, symmetricInputs, ncclUnavailable);
    }

    public LoweringOptions withThresholds(long oneShotMax, long twoShotMax) {
        return new LoweringOptions(worldSize, oneShotMax, twoShotMax, symmetricMemory, forceAllReduce, symmetricInputs, ncclUnavailable);
    }

    /** With symmetric memory off, every collective lowers to NCCL. */
    public LoweringOptions withSymmetricMemory(boolean on) {
        return new LoweringOptions(worldSize, oneShotMaxBytes, twoShotMaxBytes, on, forceAllReduce, symmetricInputs, ncclUnavailable);
    }

    public LoweringOptions withForcedAllReduce(Algorithm a) {
        return new LoweringOptions(worldSize, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, a, symmetricInputs, ncclUnavailable);
    }

    /** Path 2 on or off for graph inputs (off: inputs reach collectives through an identity kernel, path 3). */
    public LoweringOptions withSymmetricInputs(boolean on) {
        return new LoweringOptions(worldSize, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, forceAllReduce, on, ncclUnavailable);
    }

    /**
     * NCCL cannot run in this world, for the reason given (null: it can): every collective is then served by
     * symmetric memory or refused with that reason.
     */
    public LoweringOptions withNcclUnavailable(String why) {
        if (java.util.Objects.equals(why, ncclUnavailable)) return this;
        return new LoweringOptions(worldSize, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, forceAllReduce, symmetricInputs, why);
    }
}
