package dev.gatun.runtime.cuda;

/**
 * How a body laid its kernel out on the GPU, for what {@link CudaCodegen} writes around the body: the header's
 * description, the launch bounds, and the launch {@link KernelSource} reports.
 *
 * @param reduction   a row kernel ({@link RowBody} or {@link TiledRowBody}), not a {@link PointwiseBody pointwise} one
 * @param vectorWidth a pointwise kernel's elements per 16-byte vector; 1 where it has no vector path
 * @param rowBlock    threads per block of a row kernel holding its row in registers; 0 where it loops over the row
 * @param rowChunks   vectors per thread of such a row, per input
 * @param rowVector   elements per vector of such a row; 1 where there are none
 * @param keptValues  element values such a row kernel keeps in registers for later phases
 * @param tileRows    rows per block of a transposing row kernel
 * @param tileColumns columns of its tiles; 0 where the row kernel is not transposing
 * @param prefetch    each block loops over rows, loading the next while it works on one: a grid of the blocks resident
 *                    at once ({@link KernelSource#persistent})
 * @param warps       a row kernel's warps a block, each a row at a time ({@code rows[warp]}); 0 where a block takes a row
 */
record KernelLayout(boolean reduction, int vectorWidth, int rowBlock, int rowChunks, int rowVector, int keptValues, int tileRows, int tileColumns,
                    boolean prefetch, int warps) {
    static KernelLayout pointwise(int vectorWidth) { return new KernelLayout(false, vectorWidth, 0, 0, 1, 0, 0, 0, false, 0); }

    static KernelLayout rows(int block, int chunks, int vector, int keptValues, boolean prefetch, int warps) {
        return new KernelLayout(true, 1, block, chunks, vector, keptValues, 0, 0, prefetch, warps);
    }

    static KernelLayout transposing(int rows, int columns) { return new KernelLayout(true, 1, 0, 0, 1, 0, rows, columns, false, 0); }

    /** Whether the grid is the blocks resident at once, each going over rows: rows loaded ahead, or a warp a row. */
    boolean persistent() { return prefetch || warps > 0; }

    /** Whether the code uses {@code gt_vec}. */
    boolean vectors() { return vectorWidth > 1 || rowVector > 1; }

    /** How a row kernel goes over its rows, for the source's header. */
    String describe() {
        if (warps > 0)
            return "; a warp a row, " + warps + " warps a block, " + (rowBlock > 0 ? "rows held in registers, 32 lanes x " + rowChunks + " x " + rowVector : "rows looped")
                    + (prefetch ? ", the next row loaded while one is worked on" : "");
        return tileColumns > 0 ? "; transposing: " + tileRows + " rows per block, tiles of " + tileRows + " x " + tileColumns
                : rowBlock > 0 ? "; rows held in registers, " + rowBlock + " threads x " + rowChunks + " x " + rowVector
                        + (prefetch ? ", the next row loaded while one is worked on" : "") : "; rows looped";
    }

    /** The block size of the kernel's {@code __launch_bounds__}. */
    int launchBlock() {
        return !reduction ? KernelSource.POINTWISE_BLOCK : warps > 0 ? 32 * warps : tileColumns > 0 ? TiledRowBody.TILE_THREADS : rowBlock > 0 ? rowBlock : KernelSource.MAX_REDUCTION_BLOCK;
    }

    /**
     * The launch bounds' least blocks per multiprocessor ({@code ", <n>"}), or nothing. A half row held in registers
     * with one float value kept beside it, by blocks of 256 threads or more: at least as many blocks a multiprocessor
     * as 48 registers a thread allow (5 of 256), so enough rows are in flight; measured on an H100, a bf16 softmax over
     * 4096 columns went from 61 registers and 4 blocks to 48 and 5: 32.0 to 29.5 µs (a copy of its bytes: 25.6). Rows
     * without kept values need fewer registers as they are; with more kept values the bound makes the compiler spill
     * (two: 74 bytes a thread).
     */
    String minBlocks() {
        return tileColumns == 0 && warps == 0 && rowBlock >= 256 && keptValues == 1 && rowVector == 8 ? ", " + 65536 / (48 * rowBlock) : "";
    }

    /** {@link KernelSource#block}: a row kernel's fixed block size, or 0. */
    int fixedBlock() { return warps > 0 ? 32 * warps : tileColumns > 0 ? TiledRowBody.TILE_THREADS : Math.max(rowBlock, 0); }

    /** {@link KernelSource#rowsPerBlock}. */
    int rowsPerBlock() { return warps > 0 ? warps : tileColumns > 0 ? tileRows : 1; }
}
