package dev.gatun.runtime.spi;

/** Index arithmetic every backend's batched matrix product shares. */
public final class Broadcast {
    private Broadcast() {}

    /**
     * The element offset of batch index {@code outIdx} (the output's batch dims) in a row-major operand of
     * {@code shape} (batch dims, then a matrix of {@code matrix} elements) whose batch dims are right-aligned with
     * the output's and broadcast where they are 1 or missing.
     */
    public static long batchOffset(long[] outIdx, long[] shape, long matrix) {
        int batchRank = shape.length - 2, shift = outIdx.length - batchRank;
        long off = 0, stride = matrix;
        for (int d = batchRank - 1; d >= 0; d--) {
            off += (shape[d] == 1 ? 0 : outIdx[d + shift]) * stride;
            stride *= shape[d];
        }
        return off;
    }
}
