package dev.gatun.runtime.cuda;

import dev.gatun.ir.SymInt;

import java.util.List;
import java.util.Map;

/**
 * Generated CUDA C for one planner kernel (see {@link CudaCodegen} for the ABI).
 *
 * @param name            the kernel's entry point ({@code extern "C"}), the planner kernel's name
 * @param source          the whole translation unit, ready for NVRTC
 * @param symbols         the shape symbols passed as trailing {@code long long} arguments, in this (sorted) order
 * @param reduction       whether it is a reduction kernel (one block per output element)
 * @param vectorWidth     elements per 16-byte vector access on the vector path; 1 where there is none
 * @param ranges          the output iteration space (row-major), for {@link #geometry}
 * @param reductionRanges the reduced dimensions (empty for a pointwise kernel), for {@link #geometry}
 * @param block           a row kernel's fixed block size (one that keeps its row in registers, or a transposing one),
 *                        or 0: chosen by {@link #geometry}
 * @param rowsPerBlock    rows a row kernel's block takes together (1, the tile's rows of a transposing row kernel, or
 *                        the warps of a block of a row kernel that is a warp a row)
 * @param counter         the kernel takes one more argument after its symbols: a zeroed {@code unsigned int} its
 *                        blocks count themselves done on (the folds' last block, which sets it back to 0)
 * @param persistent      a row kernel whose blocks loop over the rows (each loading its next row while it works on one,
 *                        or a warp a row):
 *                        its grid is the blocks resident at once ({@link #geometry(Map, int, int)}), not a block a row
 */
record KernelSource(String name, String source, List<String> symbols, boolean reduction, int vectorWidth,
                    List<SymInt> ranges, List<SymInt> reductionRanges, int block, int rowsPerBlock, boolean counter, boolean persistent) {

    /** Threads per block of a pointwise kernel. */
    static final int POINTWISE_BLOCK = 256;
    /** Most threads per block of a reduction kernel (its {@code __launch_bounds__}). */
    static final int MAX_REDUCTION_BLOCK = 256;
    /** Blocks per multiprocessor a pointwise grid is capped at (the kernel loops over the rest). */
    static final int BLOCKS_PER_SM = 32;

    KernelSource {
        symbols = List.copyOf(symbols);
        ranges = List.copyOf(ranges);
        reductionRanges = List.copyOf(reductionRanges);
    }

    /**
     * Launch geometry. {@code elements} is the number of output elements; when it is 0 the launch may be
     * skipped (a launch with the returned geometry is still correct: the kernel does nothing).
     */
    record Geometry(long grid, int block, int sharedBytes, long elements) {}

    /** grid, block, dynamic shared memory for the given symbol values and multiprocessor count. */
    Geometry geometry(Map<String, Long> env, int multiprocessors) { return geometry(env, multiprocessors, 0); }

    /**
     * The same, for a kernel of which {@code resident} blocks fit a multiprocessor at once (0: not known): a
     * {@link #persistent} kernel's grid is at most that many blocks a multiprocessor, so no block waits for a slot
     * while another loads ahead.
     */
    Geometry geometry(Map<String, Long> env, int multiprocessors, int resident) {
        long elements = product(ranges, env);
        int sms = Math.max(1, multiprocessors);
        if (!reduction) {
            long work = vectorWidth > 1 ? ceilDiv(elements, vectorWidth) : elements;
            long grid = Math.clamp(ceilDiv(work, POINTWISE_BLOCK), 1L, (long) sms * BLOCKS_PER_SM);
            return new Geometry(grid, POINTWISE_BLOCK, 0, elements);
        }
        long count = product(reductionRanges, env);
        if (block > 0) {
            long grid = Math.clamp(ceilDiv(elements, rowsPerBlock), 1L, Integer.MAX_VALUE);
            if (persistent && resident > 0) grid = Math.min(grid, (long) sms * resident);
            return new Geometry(grid, block, 0, elements);
        }
        // a whole number of warps (the tree reduction shuffles full warps), at most MAX_REDUCTION_BLOCK
        int block = 32;
        while (block < MAX_REDUCTION_BLOCK && block < count) block *= 2;
        long grid = Math.clamp(elements, 1L, Integer.MAX_VALUE);
        return new Geometry(grid, block, 0, elements);
    }

    private static long product(List<SymInt> xs, Map<String, Long> env) {
        long p = 1;
        for (SymInt x : xs) p = Math.multiplyExact(p, x.eval(env));
        return p;
    }

    private static long ceilDiv(long a, long b) { return a <= 0 ? 0 : (a + b - 1) / b; }
}
