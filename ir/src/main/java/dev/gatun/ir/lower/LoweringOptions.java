package dev.gatun.ir.lower;

import dev.gatun.ir.GraphException;

/**
 * Options of lowering: the world size and the thresholds that pick a collective's algorithm. By default an
 * all-reduce of up to 256 KiB per rank runs one-shot (up to 16 MiB with two ranks), up to 16 MiB two-shot, and
 * NCCL above.
 *
 * @param forceAllReduce when set, every all-reduce with a static shape uses this algorithm (benchmarks)
 * @param symmetricInputs when false, a graph input never takes path 2 (a persistent symmetric buffer filled by a
 *                        copy each call) and reaches a collective by path 3 (an identity kernel into the pool)
 */
public record LoweringOptions(int worldSize, long oneShotMaxBytes, long twoShotMaxBytes, boolean symmetricMemory,
                              Algorithm forceAllReduce, boolean symmetricInputs) {
    public static final long DEFAULT_ONE_SHOT_MAX = 256 * 1024, DEFAULT_TWO_SHOT_MAX = 16 * 1024 * 1024;

    public LoweringOptions {
        if (worldSize < 1) throw new GraphException("world size must be at least 1, got " + worldSize);
        if (oneShotMaxBytes < 0 || twoShotMaxBytes < oneShotMaxBytes)
            throw new GraphException("collective thresholds must satisfy 0 <= one-shot (" + oneShotMaxBytes + ") <= two-shot (" + twoShotMaxBytes + ")");
        if (forceAllReduce == Algorithm.SYMM_MEM) throw new GraphException("all-reduce cannot be forced to " + forceAllReduce + "; use ONE_SHOT, TWO_SHOT or NCCL");
    }

    /**
     * Defaults for a world of {@code worldSize} ranks. With two ranks, two-shot moves as many bytes over NVLink
     * as one-shot and adds a phase and a barrier: on 2 x H200 one-shot was as fast or faster at every size up
     * to 16 MiB (docs/BENCHMARKS.md), so two ranks use one-shot up to the two-shot threshold.
     */
    public static LoweringOptions world(int worldSize) {
        long oneShot = worldSize <= 2 ? DEFAULT_TWO_SHOT_MAX : DEFAULT_ONE_SHOT_MAX;
        return new LoweringOptions(worldSize, oneShot, DEFAULT_TWO_SHOT_MAX, true, null, true);
    }

    public LoweringOptions withThresholds(long oneShotMax, long twoShotMax) {
        return new LoweringOptions(worldSize, oneShotMax, twoShotMax, symmetricMemory, forceAllReduce, symmetricInputs);
    }

    /** With symmetric memory off, every collective lowers to NCCL. */
    public LoweringOptions withSymmetricMemory(boolean on) {
        return new LoweringOptions(worldSize, oneShotMaxBytes, twoShotMaxBytes, on, forceAllReduce, symmetricInputs);
    }

    public LoweringOptions withForcedAllReduce(Algorithm a) {
        return new LoweringOptions(worldSize, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, a, symmetricInputs);
    }

    /** Path 2 on or off for graph inputs (off: inputs reach collectives through an identity kernel, path 3). */
    public LoweringOptions withSymmetricInputs(boolean on) {
        return new LoweringOptions(worldSize, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, forceAllReduce, on);
    }
}
