package dev.gatun.ir.lower;

import dev.gatun.ir.GraphException;

/**
 * Options of lowering: the world size and the thresholds that pick a collective's algorithm. By default an
 * all-reduce of up to 256 KiB per rank runs one-shot, up to 16 MiB two-shot, and NCCL above.
 *
 * @param forceAllReduce when set, every all-reduce with a static shape uses this algorithm (benchmarks)
 */
public record LoweringOptions(int worldSize, long oneShotMaxBytes, long twoShotMaxBytes, boolean symmetricMemory,
                              Algorithm forceAllReduce) {
    public static final long DEFAULT_ONE_SHOT_MAX = 256 * 1024, DEFAULT_TWO_SHOT_MAX = 16 * 1024 * 1024;

    public LoweringOptions {
        if (worldSize < 1) throw new GraphException("world size must be at least 1, got " + worldSize);
        if (oneShotMaxBytes < 0 || twoShotMaxBytes < oneShotMaxBytes)
            throw new GraphException("collective thresholds must satisfy 0 <= one-shot (" + oneShotMaxBytes + ") <= two-shot (" + twoShotMaxBytes + ")");
        if (forceAllReduce == Algorithm.SYMM_MEM) throw new GraphException("all-reduce cannot be forced to " + forceAllReduce + "; use ONE_SHOT, TWO_SHOT or NCCL");
    }

    public static LoweringOptions world(int worldSize) {
        return new LoweringOptions(worldSize, DEFAULT_ONE_SHOT_MAX, DEFAULT_TWO_SHOT_MAX, true, null);
    }

    public LoweringOptions withThresholds(long oneShotMax, long twoShotMax) {
        return new LoweringOptions(worldSize, oneShotMax, twoShotMax, symmetricMemory, forceAllReduce);
    }

    /** With symmetric memory off, every collective lowers to NCCL. */
    public LoweringOptions withSymmetricMemory(boolean on) {
        return new LoweringOptions(worldSize, oneShotMaxBytes, twoShotMaxBytes, on, forceAllReduce);
    }

    public LoweringOptions withForcedAllReduce(Algorithm a) {
        return new LoweringOptions(worldSize, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, a);
    }
}
