package dev.gatun.runtime.testing;

/** The expected values of an update_slice, by plain loops: what the host and GPU tests check the backends against. */
public final class UpdateSlices {
    private UpdateSlices() {}

    /** {@code x} of {@code shape} with {@code u} ({@code len} long along {@code dim}) written from {@code at}. */
    public static double[] expected(double[] x, long[] shape, double[] u, int dim, long len, long at) {
        double[] out = x.clone();
        long inner = 1, outer = 1;
        for (int d = dim + 1; d < shape.length; d++) inner *= shape[d];
        for (int d = 0; d < dim; d++) outer *= shape[d];
        for (long o = 0; o < outer; o++)
            for (long j = 0; j < len; j++)
                for (long i = 0; i < inner; i++) out[(int) ((o * shape[dim] + at + j) * inner + i)] = u[(int) ((o * len + j) * inner + i)];
        return out;
    }

    /**
     * The second half of the heads of a product [b, 1, 2 heads, d] (as a value head lies in a fused q|k|v product),
     * packed [b, heads, 1, d], by index arithmetic: what an update read at two strides must copy.
     */
    public static double[] secondHalfHeads(double[] product, int b, int heads, int d) {
        double[] out = new double[b * heads * d];
        for (int bi = 0; bi < b; bi++)
            for (int h = 0; h < heads; h++)
                for (int k = 0; k < d; k++) out[(bi * heads + h) * d + k] = product[(bi * 2 * heads + heads + h) * d + k];
        return out;
    }
}
