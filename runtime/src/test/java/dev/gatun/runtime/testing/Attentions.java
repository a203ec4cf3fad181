package dev.gatun.runtime.testing;

/**
 * The expected result of {@code attention} by plain float64 loops, written apart from the reference interpreter and
 * both backends: for each batch entry and query row, the scaled dot products with the keys of positions 0 to
 * {@code position}, their softmax, and the values weighted by it. Shared by the host and GPU tests.
 */
public final class Attentions {
    private Attentions() {}

    /** q [batch, rows, d], kT [batch, d, len], v [batch, len, d], all row-major; returns [batch, rows, d]. */
    public static double[] expected(double[] q, double[] kT, double[] v, int batch, int rows, int d, int len, int position, double scale) {
        double[] out = new double[batch * rows * d];
        for (int b = 0; b < batch; b++)
            for (int r = 0; r < rows; r++) {
                double[] w = new double[position + 1];
                double most = Double.NEGATIVE_INFINITY;
                for (int s = 0; s <= position; s++) {
                    for (int e = 0; e < d; e++) w[s] += q[(b * rows + r) * d + e] * kT[(b * d + e) * len + s];
                    w[s] *= scale;
                    most = Math.max(most, w[s]);
                }
                double total = 0;
                for (int s = 0; s <= position; s++) total += w[s] = Math.exp(w[s] - most);
                for (int s = 0; s <= position; s++)
                    for (int e = 0; e < d; e++) out[(b * rows + r) * d + e] += w[s] / total * v[(b * len + s) * d + e];
            }
        return out;
    }
}
