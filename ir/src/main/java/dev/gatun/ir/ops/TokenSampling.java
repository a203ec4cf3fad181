package dev.gatun.ir.ops;

/**
 * The rule of {@link Sample sample}, one row at a time: the host backend and the reference interpreter
 * run it, and the CUDA backend's kernel restates it step for step, so a seed and a step draw the same token on every
 * backend.
 *
 * <p>Why it is built as it is. A draw must be reproducible and the same on the host and on a GPU, and a GPU draws a
 * row in one block without sorting the vocabulary:
 * <ul>
 *   <li>the randomness is a pure function of (seed, step, column): splitmix64's finalizer applied three times
 *   ({@link #bits}), integer arithmetic that every backend computes bit for bit. The row is not part of it, so a
 *   sequence draws the same tokens wherever it sits in a batch;</li>
 *   <li>the draw is Gumbel-max: the kept element with the largest {@code (value - largest) / T + g}, g Gumbel noise,
 *   is distributed as the softmax over the kept elements, with no cumulative sum to compute in an order;</li>
 *   <li>the kept set is a threshold on the values, found by bisection on the values' order as 32-bit integers
 *   ({@link #key}): top-k exactly (a count), top-p by the probability mass above a threshold. Each step of the
 *   bisection is one pass over the row, which a GPU block does with a reduction; 32 steps reach the exact
 *   threshold.</li>
 * </ul>
 * The parameters are floats, so a row's parameters lie in one f32 tensor: {@link #TEMPERATURE}, {@link #TOP_K},
 * {@link #TOP_P}, {@link #MIN_P}, {@link #REPETITION_PENALTY} in that order.
 */
public final class TokenSampling {
    private TokenSampling() {}

    /** The columns of a row's parameters. */
    public static final int TEMPERATURE = 0, TOP_K = 1, TOP_P = 2, MIN_P = 3, REPETITION_PENALTY = 4, PARAMETERS = 5;

    /** splitmix64's finalizer: a bijection of 64-bit words that spreads every bit over all of them. */
    public static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xbf58476d1ce4e5b9L;
        z = (z ^ (z >>> 27)) * 0x94d049bb133111ebL;
        return z ^ (z >>> 31);
    }

    /** The 64 random bits of {@code column} at {@code step} under {@code seed}. */
    public static long bits(long seed, long step, long column) {
        return mix(mix(mix(seed ^ 0x9e3779b97f4a7c15L) + step) + column);
    }

    /** A uniform number in the open interval (0, 1): the top 52 random bits, at the middle of their interval (exact). */
    public static double uniform(long seed, long step, long column) {
        return ((bits(seed, step, column) >>> 12) + 0.5) * 0x1p-52;
    }

    /** Gumbel noise, {@code -log(-log(u))}, for the uniform {@link #uniform} draws. */
    public static double gumbel(long seed, long step, long column) {
        return -Math.log(-Math.log(uniform(seed, step, column)));
    }

    /**
     * A float's order as an unsigned 32-bit integer (held in a long, 0 to 2^32 - 1): negatives below positives, -0 as
     * +0. NaN has none (a row with a NaN is argmax's before any key is taken).
     */
    public static long key(float v) {
        int u = Float.floatToRawIntBits(v);
        long o = v == 0 ? 0x80000000L : u < 0 ? ~u : u | 0x80000000;
        return o & 0xffffffffL;
    }

    /** The value the repetition penalty {@code r} leaves of a context token's value (float32 arithmetic, as transformers). */
    public static float penalized(float x, float r) { return x > 0 ? x / r : x * r; }

    /** The position of the first largest value, a NaN the largest (as argmax). */
    public static int argmax(float[] x) {
        int best = 0;
        for (int v = 1; v < x.length; v++)
            if (!Float.isNaN(x[best]) && (Float.isNaN(x[v]) || x[v] > x[best])) best = v;
        return best;
    }

    /**
     * The token drawn from one row: {@code x} its values (float32), {@code params} its five parameters, {@code seen}
     * whether the context holds each column (its length, the row's).
     */
    public static int sample(float[] x, float[] params, long seed, long step, boolean[] seen) {
        int n = x.length;
        float r = params[REPETITION_PENALTY], temperature = params[TEMPERATURE], topK = params[TOP_K], topP = params[TOP_P], minP = params[MIN_P];
        float[] l = x.clone();
        if (r > 0 && r != 1) for (int v = 0; v < n; v++) if (seen[v]) l[v] = penalized(l[v], r);
        int best = argmax(l);
        float top = l[best];
        if (!(temperature > 0) || !Float.isFinite(top)) return best;
        double t = temperature;
        long[] keys = new long[n];
        for (int v = 0; v < n; v++) keys[v] = key(l[v]);
        long floor = topK >= 1 && topK < (float) n ? kthLargest(keys, (long) topK, keys[best]) : 0;
        double[] e = new double[n];
        double z = 0;
        for (int v = 0; v < n; v++) {
            e[v] = Math.exp(((double) l[v] - top) / t);
            if (keys[v] >= floor) z += e[v];
        }
        long pFloor = topP < 1 ? massThreshold(keys, e, floor, keys[best], (double) topP * z) : floor;
        double m = minP > 0 ? Math.min(minP, 1.0) : 0;
        int chosen = -1;
        double most = 0;
        for (int v = 0; v < n; v++) {
            if (keys[v] < pFloor || e[v] < m) continue;
            double score = ((double) l[v] - top) / t + gumbel(seed, step, v);
            if (chosen < 0 || score > most) {
                chosen = v;
                most = score;
            }
        }
        return chosen;
    }

    /** The k-th largest key (1 &lt;= k &lt; n): the largest K with at least k keys at or above it. */
    static long kthLargest(long[] keys, long k, long top) {
        long lo = 0, hi = top;
        while (lo < hi) {
            long mid = lo + (hi - lo + 1) / 2, count = 0;
            for (long key : keys) if (key >= mid) count++;
            if (count >= k) lo = mid;
            else hi = mid - 1;
        }
        return lo;
    }

    /**
     * The smallest key K from {@code floor} to {@code top} where the weights {@code e} of the keys above K (and at or
     * above {@code floor}) sum to less than {@code limit}; {@code top} where none below it does.
     */
    static long massThreshold(long[] keys, double[] e, long floor, long top, double limit) {
        long lo = floor, hi = top;
        while (lo < hi) {
            long mid = lo + (hi - lo) / 2;
            double mass = 0;
            for (int v = 0; v < keys.length; v++) if (keys[v] > mid && keys[v] >= floor) mass += e[v];
            if (mass < limit) hi = mid;
            else lo = mid + 1;
        }
        return lo;
    }
}
