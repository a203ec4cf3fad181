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
}
