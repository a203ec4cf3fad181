package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.runtime.NDArray;

import java.util.Locale;
import java.util.stream.IntStream;

/**
 * {@link MoeBench}'s checks: each rank's output against plain float64 loops over the formulas of {@link MoeInputs}
 * (never the graph's code), failing the run with the worst element where it is off. The tolerance is the dtype's:
 * bfloat16 rounds each product, activation and sum to 8 significant bits, so 1% of each element's magnitude
 * (dispatch+combine) and 3% of the largest output (the layer, whose SwiGLU rounds twice in bf16 before its long
 * sums); float32, a thousandth of those. A wrong route, weight or token is off by far more.
 */
final class MoeCheck {
    private MoeCheck() {}

    /**
     * Rank r's dispatch+combine: {@code y[n] = sum_j w[n, j] (1 + ids[n, j] mod local) x[n]}, every element within
     * the tolerance of {@code sum_j |w (1 + id mod local) x|}.
     */
    static String dispatch(MoeBench.Settings s, int r, int tokens, MoeInputs.Routing routing, NDArray y) {
        int local = s.experts() / s.world(), h = s.hidden();
        double rel = s.dtype() == DType.BF16 ? 1e-2 : 1e-5, worst = 0;
        for (int n = 0; n < tokens; n++) {
            double scale = 0, mag = 0;
            for (int j = 0; j < MoeBench.K; j++) {
                double f = routing.weights()[MoeBench.K * n + j] * (1 + routing.ids()[MoeBench.K * n + j] % local);
                scale += f;
                mag += Math.abs(f);
            }
            for (int c = 0; c < h; c++) {
                double x = MoeInputs.token(r, n, c, h), want = scale * x, got = y.get((long) n * h + c), tol = rel * mag * Math.abs(x) + 1e-30;
                if (!(Math.abs(got - want) <= tol))
                    throw new IllegalStateException(String.format(Locale.ROOT, "dispatch+combine rank %d token %d element %d: %s, expected %s (within %s)",
                            r, n, c, got, want, tol));
                worst = Math.max(worst, Math.abs(got - want) / (mag * Math.abs(x) + 1e-30));
            }
        }
        return String.format(Locale.ROOT, "rank %d: %d tokens ok (largest error %.2g of the magnitude, tolerance %.0g)", r, tokens, worst, rel);
    }

    /** Rank r's layer: its first {@code --check-tokens} tokens whose router's choice is unambiguous. */
    static String layer(MoeBench.Settings s, int r, NDArray y) {
        int tokens = (int) y.shape()[0], h = s.hidden(), checked = 0, skipped = 0;
        double rel = layerTolerance(s.dtype()), worst = 0, largest = 0;
        for (int n = 0; n < Math.min(tokens, s.checkTokens()); n++) {
            double[] want = token(s, r, n);
            if (want == null) {
                skipped++;
                continue;
            }
            checked++;
            double max = 0, err = 0;
            int at = 0;
            for (int c = 0; c < h; c++) {
                max = Math.max(max, Math.abs(want[c]));
                double e = Math.abs(y.get((long) n * h + c) - want[c]);
                if (e > err) { err = e; at = c; }
            }
            if (!(err <= rel * max))
                throw new IllegalStateException(String.format(Locale.ROOT, "layer rank %d token %d element %d: %s, expected %s (within %s: %s of the largest, %s)",
                        r, n, at, y.get((long) n * h + at), want[at], rel * max, rel, max));
            worst = Math.max(worst, err / max);
            largest = Math.max(largest, max);
        }
        if (checked == 0) return "rank " + r + ": no token checked (" + skipped + " with an ambiguous router choice)";
        return String.format(Locale.ROOT, "rank %d: %d tokens ok (largest error %.2g of the largest output %.3g, tolerance %.0g)%s", r, checked, worst,
                largest, rel, skipped > 0 ? ", " + skipped + " skipped (ambiguous router choice)" : "");
    }

    /**
     * Token n of rank r through the layer by plain loops, or null where the router's choice is ambiguous: the logits
     * rounded to the dtype (the graph's matmul output) before the float32 softmax, the top-k renormalised and rounded to
     * the dtype (as {@code ExpertParallel} casts them), each chosen expert's {@code down(silu(gate x) * up x)}.
     */
    static double[] token(MoeBench.Settings s, int r, int n) {
        int h = s.hidden(), f = s.width(), e = s.experts();
        double[] x = new double[h], logits = logits(s, r, n);
        for (int c = 0; c < h; c++) x[c] = MoeInputs.token(r, n, c, h);
        Integer[] order = order(logits);
        if (ambiguous(s.dtype(), logits, order)) return null;
        double[] p = new double[e];
        double top = round(s.dtype(), logits[order[0]]), sum = 0;
        for (int i = 0; i < e; i++) sum += p[i] = Math.exp(round(s.dtype(), logits[i]) - top);
        double chosen = 0;
        for (int j = 0; j < MoeBench.K; j++) chosen += p[order[j]] / sum;
        double[] y = new double[h];
        for (int j = 0; j < MoeBench.K; j++) {
            int ex = order[j];
            double w = round(s.dtype(), p[ex] / sum / chosen);
            double[] act = new double[f];
            IntStream.range(0, f).parallel().forEach(q -> {
                double gate = 0, up = 0;
                for (int c = 0; c < h; c++) {
                    gate += MoeInputs.value(MoeInputs.GATE_UP_SALT + ex, (long) q * h + c, MoeInputs.EXPERT_SHIFT) * x[c];
                    up += MoeInputs.value(MoeInputs.GATE_UP_SALT + ex, (long) (f + q) * h + c, MoeInputs.EXPERT_SHIFT) * x[c];
                }
                act[q] = gate / (1 + Math.exp(-gate)) * up;
            });
            double[] out = new double[h];
            IntStream.range(0, h).parallel().forEach(i -> {
                double d = 0;
                for (int q = 0; q < f; q++) d += MoeInputs.value(MoeInputs.DOWN_SALT + ex, (long) i * f + q, MoeInputs.EXPERT_SHIFT) * act[q];
                out[i] = d;
            });
            for (int i = 0; i < h; i++) y[i] += w * out[i];
        }
        return y;
    }

    /** The layer's tolerance, relative to its largest output: 3% in bf16, 0.003% in f32. */
    static double layerTolerance(DType dtype) { return dtype == DType.BF16 ? 3e-2 : 3e-5; }

    /** Token n of rank r's router logits [experts], float64 from the formulas. */
    static double[] logits(MoeBench.Settings s, int r, int n) {
        int h = s.hidden();
        double[] logits = new double[s.experts()];
        for (int i = 0; i < logits.length; i++) {
            double d = 0;
            for (int c = 0; c < h; c++) d += MoeInputs.token(r, n, c, h) * MoeInputs.value(MoeInputs.ROUTER_SALT, (long) i * h + c, MoeInputs.ROUTER_SHIFT);
            logits[i] = d;
        }
        return logits;
    }

    /** The experts by logit, largest first. */
    static Integer[] order(double[] logits) {
        return IntStream.range(0, logits.length).boxed().sorted((a, b) -> Double.compare(logits[b], logits[a])).toArray(Integer[]::new);
    }

    /**
     * Whether the router's choice may depend on rounding: its k-th and next logits within two units in the last place
     * of bf16 (where the logits are rounded to it, equal ones tie) or 64 of float32 (sums in other orders).
     */
    static boolean ambiguous(DType dtype, double[] logits, Integer[] order) {
        double kth = logits[order[MoeBench.K - 1]], next = logits[order[MoeBench.K]];
        return kth - next <= Math.ulp((float) kth) * (dtype == DType.BF16 ? 2 * 65536 : 64);
    }

    /** {@link #ambiguous(DType, double[], Integer[])} for token n of rank r. */
    static boolean ambiguous(MoeBench.Settings s, int r, int n) {
        double[] l = logits(s, r, n);
        return ambiguous(s.dtype(), l, order(l));
    }

    /** {@code v} rounded to the dtype: bf16 to nearest even of 8 significant bits, f32 to float. */
    static double round(DType dtype, double v) {
        if (dtype != DType.BF16) return (float) v;
        int b = Float.floatToRawIntBits((float) v);
        b += 0x7FFF + ((b >>> 16) & 1);
        return Float.intBitsToFloat(b & 0xFFFF0000);
    }
}
