package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code flash_attention} on the host backend against plain float64 loops that write every score, the mask as -inf
 * and the softmax out in full: grouped-query heads, causal prompts and continuations (fewer queries than positions),
 * windows, soft-capping, several batch entries, f32 and bf16. And the calls type inference refuses.
 */
class FlashAttentionHostTest {

    /** softmax(mask(cap(scale q kT))) v per head, as [b, t, hq, d]; every score written out, masked ones -inf. */
    static double[] expected(NDArray q, NDArray k, NDArray v, long[] qs, long[] ks, double scale, boolean causal, int window, double cap) {
        int b = (int) qs[0], hq = (int) qs[1], t = (int) qs[2], d = (int) qs[3], hkv = (int) ks[1], s = (int) ks[2];
        double[] out = new double[b * t * hq * d];
        for (int bi = 0; bi < b; bi++)
            for (int h = 0; h < hq; h++)
                for (int i = 0; i < t; i++) {
                    int kvh = h / (hq / hkv), pos = s - t + i;
                    double[] score = new double[s];
                    double max = Double.NEGATIVE_INFINITY;
                    for (int j = 0; j < s; j++) {
                        boolean masked = causal && (j > pos || (window > 0 && j <= pos - window));
                        double dot = 0;
                        for (int e = 0; e < d; e++) dot += q.get((((long) bi * hq + h) * t + i) * d + e) * k.get((((long) bi * hkv + kvh) * s + j) * d + e);
                        double x = dot * scale;
                        if (cap > 0) x = cap * Math.tanh(x / cap);
                        score[j] = masked ? Double.NEGATIVE_INFINITY : x;
                        max = Math.max(max, score[j]);
                    }
                    double sum = 0;
                    for (int j = 0; j < s; j++) sum += Math.exp(score[j] - max);
                    for (int e = 0; e < d; e++) {
                        double acc = 0;
                        for (int j = 0; j < s; j++) acc += Math.exp(score[j] - max) / sum * v.get((((long) bi * hkv + kvh) * s + j) * d + e);
                        out[((bi * t + i) * hq + h) * d + e] = acc;
                    }
                }
        return out;
    }

    static Object[] dims(long[] shape) { return java.util.Arrays.stream(shape).boxed().toArray(); }

    @Test
    void everyFormMatchesPlainLoops() {
        var rnd = new SplittableRandom(11);
        for (int round = 0; round < 60; round++) {
            DType type = round % 3 == 0 ? DType.BF16 : DType.F32;
            int b = 1 + rnd.nextInt(2), hkv = 1 + rnd.nextInt(2), hq = hkv * (1 + rnd.nextInt(3)), d = 1 + rnd.nextInt(9);
            boolean causal = rnd.nextBoolean();
            int t = 1 + rnd.nextInt(9), s = causal ? t + rnd.nextInt(4) : 1 + rnd.nextInt(12);
            int window = causal && rnd.nextBoolean() ? 1 + rnd.nextInt(5) : 0;
            double cap = rnd.nextBoolean() ? 0 : 0.5 + rnd.nextDouble() * 2, scale = 0.3 + rnd.nextDouble();
            long[] qs = {b, hq, t, d}, ks = {b, hkv, s, d};
            var g = Gatun.graph("fa");
            g.output("o", g.input("q", type, dims(qs)).flashAttention(g.input("k", type, dims(ks)), g.input("v", type, dims(ks)), scale, causal, window, cap));
            NDArray q = NDArray.random(type, rnd.nextLong(), qs), k = NDArray.random(type, rnd.nextLong(), ks), v = NDArray.random(type, rnd.nextLong(), ks);
            NDArray o;
            try (var session = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
                o = session.runToHost(Map.of("q", q, "k", k, "v", v)).get("o");
            }
            assertThat(o.shape()).containsExactly(b, t, hq, d);
            double[] want = expected(q, k, v, qs, ks, scale, causal, window, cap);
            double tolerance = type == DType.BF16 ? 1.0 / 128 : 1e-6;
            String what = String.format("round %d: %s b=%d hq=%d hkv=%d t=%d s=%d d=%d causal=%b window=%d cap=%.2f", round, type, b, hq, hkv, t, s, d, causal, window, cap);
            for (int x = 0; x < want.length; x++) assertThat(o.get(x)).as(what + " element " + x).isCloseTo(want[x], org.assertj.core.api.Assertions.within(tolerance * Math.max(1, Math.abs(want[x]))));
        }
    }

    @Test
    void callsThatCannotBeComputedAreRefusedNamingWhatIsWrong() {
        var g = Gatun.graph("bad");
        var q = g.input("q", DType.F32, 1, 4, 5, 8);
        assertThatThrownBy(() -> q.flashAttention(g.input("k", DType.F32, 1, 3, 5, 8), g.input("v", DType.F32, 1, 3, 5, 8), 1, true, 0, 0))
                .isInstanceOf(GraphException.class).hasMessageContaining("flash_attention").hasMessageContaining("4 query heads cannot share 3");
        assertThatThrownBy(() -> q.flashAttention(g.input("k2", DType.F32, 1, 2, 4, 8), g.input("v2", DType.F32, 1, 2, 4, 8), 1, true, 0, 0))
                .isInstanceOf(GraphException.class).hasMessageContaining("causal with 5 queries over 4 positions");
        assertThatThrownBy(() -> q.flashAttention(g.input("k3", DType.BF16, 1, 2, 5, 8), g.input("v3", DType.BF16, 1, 2, 5, 8), 1, true, 0, 0))
                .isInstanceOf(GraphException.class).hasMessageContaining("one dtype");
        assertThatThrownBy(() -> q.flashAttention(g.input("k4", DType.F32, 1, 2, 5, 8), g.input("v4", DType.F32, 1, 2, 5, 8), 1, false, 3, 0))
                .isInstanceOf(GraphException.class).hasMessageContaining("window=3");
        assertThatThrownBy(() -> q.flashAttention(g.input("k5", DType.F32, 1, 2, 5, 4), g.input("v5", DType.F32, 1, 2, 5, 4), 1, true, 0, 0))
                .isInstanceOf(GraphException.class).hasMessageContaining("head_dim is 8 and k's 4");
        assertThatThrownBy(() -> q.flashAttention(g.input("k6", DType.F32, 2, 5, 8), g.input("v6", DType.F32, 2, 5, 8), 1, true, 0, 0))
                .isInstanceOf(GraphException.class).hasMessageContaining("has rank 3");
    }
}
