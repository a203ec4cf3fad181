package dev.gatun.lowering;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.GraphException;

/**
 * Options of lowering: the world size and the thresholds that pick a collective's algorithm. By default an
 * all-reduce of up to 256 KiB per rank runs one-shot, up to 4 MiB two-shot, and NCCL above; with two ranks,
 * one-shot up to 16 MiB and NCCL above; barrier-free only where forced or below {@code barrierFreeMaxBytes} (0 here;
 * {@code CompileOptions} takes {@link #withMeasuredBarrierFree}). Reduce-scatter and all-gather use symmetric memory up to the two-shot
 * threshold.
 *
 * @param barrierFreeMaxBytes an all-reduce of at most this many bytes per rank runs barrier-free (0: never by itself)
 * @param forceAllReduce when set, every all-reduce with a static shape uses this algorithm (benchmarks)
 * @param symmetricInputs when false, a graph input never takes path 2 (a persistent symmetric buffer filled by a
 *                        copy each call) and reaches a collective by path 3 (an identity kernel into the pool)
 * @param ncclUnavailable null where NCCL may run the collectives symmetric memory does not; otherwise why it cannot
 *                        (several ranks share a GPU, which NCCL refuses): collectives that would take NCCL are then
 *                        served by a symmetric algorithm where one exists, and refused at compile time where none does
 */
public record LoweringOptions(int worldSize, long barrierFreeMaxBytes, long oneShotMaxBytes, long twoShotMaxBytes, boolean symmetricMemory,
                              Algorithm forceAllReduce, boolean symmetricInputs, String ncclUnavailable) {
    private static final long KIB = 1024, MIB = 1024 * 1024;

    public LoweringOptions {
        if (worldSize < 1) throw new GraphException("world size must be at least 1, got " + worldSize);
        if (barrierFreeMaxBytes < 0) throw new GraphException("the barrier-free threshold must be at least 0, got " + barrierFreeMaxBytes);
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
     *
     * <p>Barrier-free is chosen by itself only where {@link #withMeasuredBarrierFree} (or a threshold) says so.
     */
    public static LoweringOptions world(int worldSize) {
        if (worldSize <= 2) return new LoweringOptions(worldSize, 0, 16 * MIB, 16 * MIB, true, null, true, null);
        return new LoweringOptions(worldSize, 0, MIB / 4, 4 * MIB, true, null, true, null);
    }

    /**
     * The barrier-free threshold the H200 measurements support, for {@code CompileOptions}' defaults (these options'
     * own default stays 0, so the lowering's tests see the one-shot's realization paths on tiny tensors). Two ranks:
     * 512 KiB. Measured 2026-11-29 on two H200s, pipelined replay, 2,000 calls a cell, once the barrier-free grid was
     * capped at 32 blocks (which removed the multi-millisecond stalls above 256 KiB): barrier-free 5.6-6.1 µs against
     * the one-shot's 8.4-8.8 up to 16 KiB, 7.6 against 10.2 at 256 KiB f32, 8.9 against 11.3 at 512 KiB bf16, and the
     * fused all-reduce + RMSNorm 8.1-11.9 against 10.7-12.9 from 1 to 64 rows of 4096 (512 KiB); at 1 MiB the two were
     * within a microsecond either way, from 2 MiB the one-shot won (16.3 against 19.5 bf16); no cell's median over 1.2x
     * its p10. More ranks: 1 KiB, from the 2026-11-26 four-GPU runs (barrier-free won at 128-256 B, 5.4-5.6 against
     * 9.0-9.1 µs, and lost from 8 KiB), not measured again since the cap. One rank: 0.
     */
    public static long measuredBarrierFreeMax(int worldSize) {
        return worldSize <= 1 ? 0 : worldSize == 2 ? 512 * KIB : KIB;
    }

    /** These options with {@link #measuredBarrierFreeMax}'s threshold for their world size. */
    public LoweringOptions withMeasuredBarrierFree() { return withBarrierFreeMax(measuredBarrierFreeMax(worldSize)); }

    /** The same options for a world of {@code n} ranks (the thresholds stay as they are). */
    public LoweringOptions withWorldSize(int n) {
        return n == worldSize ? this : new LoweringOptions(n, barrierFreeMaxBytes, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, forceAllReduce, symmetricInputs, ncclUnavailable);
    }

    /** All-reduces of at most {@code bytes} per rank run barrier-free (0: never unless forced). */
    public LoweringOptions withBarrierFreeMax(long bytes) {
        return new LoweringOptions(worldSize, bytes, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, forceAllReduce, symmetricInputs, ncclUnavailable);
    }

    public LoweringOptions withThresholds(long oneShotMax, long twoShotMax) {
        return new LoweringOptions(worldSize, barrierFreeMaxBytes, oneShotMax, twoShotMax, symmetricMemory, forceAllReduce, symmetricInputs, ncclUnavailable);
    }

    /** With symmetric memory off, every collective lowers to NCCL. */
    public LoweringOptions withSymmetricMemory(boolean on) {
        return new LoweringOptions(worldSize, barrierFreeMaxBytes, oneShotMaxBytes, twoShotMaxBytes, on, forceAllReduce, symmetricInputs, ncclUnavailable);
    }

    public LoweringOptions withForcedAllReduce(Algorithm a) {
        return new LoweringOptions(worldSize, barrierFreeMaxBytes, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, a, symmetricInputs, ncclUnavailable);
    }

    /** Path 2 on or off for graph inputs (off: inputs reach collectives through an identity kernel, path 3). */
    public LoweringOptions withSymmetricInputs(boolean on) {
        return new LoweringOptions(worldSize, barrierFreeMaxBytes, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, forceAllReduce, on, ncclUnavailable);
    }

    /**
     * NCCL cannot run in this world, for the reason given (null: it can): every collective is then served by
     * symmetric memory or refused with that reason.
     */
    public LoweringOptions withNcclUnavailable(String why) {
        if (java.util.Objects.equals(why, ncclUnavailable)) return this;
        return new LoweringOptions(worldSize, barrierFreeMaxBytes, oneShotMaxBytes, twoShotMaxBytes, symmetricMemory, forceAllReduce, symmetricInputs, why);
    }
}
