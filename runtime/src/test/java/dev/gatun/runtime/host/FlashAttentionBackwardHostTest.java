package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code flash_attention_backward}, the op flash_attention's gradient rule emits: (1) its gradients against central
 * finite differences of the forward pass in float64 on small random shapes (causal and not, a window, grouped-query
 * groups of 1, 2 and 4, fewer queries than positions, a soft cap, k passed as v); (2) against the gradients of the
 * attention written out as the ops it fuses (the rule flash_attention had before: scores, mask by {@code where},
 * softmax, the values' product) on the host in float64, to 1e-12; (3) its stats output (L, D) against plain loops;
 * (4) that the plan shows it as a step; (5) its refusals.
 */
public class FlashAttentionBackwardHostTest {
    /** One attention's shapes and attributes. */
    public record Case(int b, int hq, int hkv, int t, int s, int d, boolean causal, int window, double cap) {}

    static final Case[] CASES = {
            new Case(1, 2, 2, 4, 4, 3, true, 0, 0),      // group 1
            new Case(1, 4, 2, 3, 5, 2, true, 0, 0),      // group 2, T < S
            new Case(2, 4, 1, 3, 3, 2, false, 0, 0),     // group 4, not causal
            new Case(1, 2, 1, 5, 6, 3, true, 2, 0),      // a window, T < S
            new Case(1, 4, 1, 2, 5, 2, false, 0, 0),     // not causal, T < S
            new Case(1, 2, 1, 4, 4, 2, true, 0, 1.3)};   // a soft cap

    @Test void gradientsMatchFiniteDifferences() {
        for (Case c : CASES) {
            double scale = 0.7;
            GradCheck.of("fab" + c).f64("q", c.b(), c.hq(), c.t(), c.d()).f64("k", c.b(), c.hkv(), c.s(), c.d()).f64("v", c.b(), c.hkv(), c.s(), c.d())
                    .check(x -> x[0].flashAttention(x[1], x[2], scale, c.causal(), c.window(), c.cap()));
        }
        // k as the values too: both contributions added
        GradCheck.of("fabShared").f64("q", 1, 2, 3, 2).f64("k", 1, 1, 4, 2).check(x -> x[0].flashAttention(x[1], x[1], 0.8, false, 0, 0));
    }

    @Test void gradientsMatchTheDecomposedAttentionTo1e12() {
        var rnd = new SplittableRandom(11);
        for (Case c : CASES) {
            long[] qs = {c.b(), c.hq(), c.t(), c.d()}, ks = {c.b(), c.hkv(), c.s(), c.d()}, os = {c.b(), c.t(), c.hq(), c.d()};
            var in = Map.of("q", NDArray.random(DType.F64, rnd.nextLong(), qs), "k", NDArray.random(DType.F64, rnd.nextLong(), ks),
                    "v", NDArray.random(DType.F64, rnd.nextLong(), ks), "w", NDArray.random(DType.F64, rnd.nextLong(), os));
            var fused = gradients(c, DType.F64, false, in, "host");
            var decomposed = gradients(c, DType.F64, true, in, "host");
            for (String name : new String[]{"dq", "dk", "dv"}) {
                double[] a = fused.get(name).toDoubleArray(), b = decomposed.get(name).toDoubleArray();
                double largest = Arrays.stream(b).map(Math::abs).max().orElse(1);
                for (int x = 0; x < a.length; x++)
                    assertThat(Math.abs(a[x] - b[x])).as("%s %s[%d]", c, name, x).isLessThanOrEqualTo(1e-12 * Math.max(1, largest));
            }
        }
    }

    /**
     * dq, dk and dv of {@code sum(w * attention(q, k, v))} on {@code backend}: through flash_attention (its fused
     * backward) or, {@code decomposed}, through the attention written as the ops it fuses.
     */
    public static Map<String, NDArray> gradients(Case c, DType t, boolean decomposed, Map<String, NDArray> in, String backend) {
        var g = Gatun.graph("fab");
        Tensor q = g.input("q", t, c.b(), c.hq(), c.t(), c.d()), k = g.input("k", t, c.b(), c.hkv(), c.s(), c.d()),
                v = g.input("v", t, c.b(), c.hkv(), c.s(), c.d()), w = g.input("w", t, c.b(), c.t(), c.hq(), c.d());
        double scale = 0.7 * Math.sqrt(2.0 / c.d());
        Tensor y = decomposed ? decomposedAttention(g, q, k, v, scale, c.causal(), c.window(), c.cap())
                : q.flashAttention(k, v, scale, c.causal(), c.window(), c.cap());
        Tensor[] d = g.grad(y.mul(w).sum(), q, k, v);
        g.output("dq", d[0]);
        g.output("dk", d[1]);
        g.output("dv", d[2]);
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend(backend))) {
            return s.runToHost(in);
        }
    }

    /** The attention as the ops it fuses (grouped heads as [B, Hkv, G * T, d] rows), token-major as flash_attention. */
    public static Tensor decomposedAttention(GraphBuilder graph, Tensor q, Tensor k, Tensor v, double scale, boolean causal, long window, double cap) {
        long[] qs = q.shape().sizes(), ks = k.shape().sizes();
        long b = qs[0], hq = qs[1], t = qs[2], d = qs[3], hkv = ks[1], s = ks[2], group = hq / hkv;
        Tensor scores = q.reshape(b, hkv, group * t, d).matmul(k.transpose(2, 3)).mul(scale);
        if (cap > 0) scores = scores.div(cap).tanh().mul(cap);
        scores = scores.reshape(b, hkv, group, t, s);
        if (causal) {
            Tensor pos = graph.arange(DType.INT64, t).add(s - t).reshape(t, 1), key = graph.arange(DType.INT64, s).reshape(1, s);
            Tensor minus = graph.scalar(Double.NEGATIVE_INFINITY, scores.dtype());
            scores = key.le(pos).where(scores, minus);
            if (window > 0) scores = key.gt(pos.sub(window)).where(scores, minus);
        }
        return scores.softmax(-1).reshape(b, hkv, group * t, s).matmul(v).reshape(b, hq, t, d).transpose(1, 2);
    }

    /** L (the logsumexp of each row's seen scores) and D (sum of dout * o) from plain loops; and the plan's step. */
    @Test void statsAreTheRowsLogsumexpAndDoutDotO() {
        var g = Gatun.graph("stats");
        Tensor q = g.input("q", DType.F64, 1, 4, 3, 2), k = g.input("k", DType.F64, 1, 2, 5, 2), v = g.input("v", DType.F64, 1, 2, 5, 2),
                o = g.input("o", DType.F64, 1, 3, 4, 2), dout = g.input("dout", DType.F64, 1, 3, 4, 2);
        var out = g.apply("flash_attention_backward", Map.of("scale", 0.5, "causal", 1, "window", 2, "softcap", 0.0), q, k, v, o, dout);
        g.output("stats", out.get(3));
        var rnd = new SplittableRandom(3);
        var in = Map.of("q", NDArray.random(DType.F64, rnd.nextLong(), 1, 4, 3, 2), "k", NDArray.random(DType.F64, rnd.nextLong(), 1, 2, 5, 2),
                "v", NDArray.random(DType.F64, rnd.nextLong(), 1, 2, 5, 2), "o", NDArray.random(DType.F64, rnd.nextLong(), 1, 3, 4, 2),
                "dout", NDArray.random(DType.F64, rnd.nextLong(), 1, 3, 4, 2));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().toString()).contains("= flash_attention_backward(");
            NDArray stats = s.runToHost(in).get("stats");
            for (int h = 0; h < 4; h++)
                for (int i = 0; i < 3; i++) {
                    int pos = 5 - 3 + i;
                    double sum = 0, dsum = 0;
                    for (int j = pos - 1; j <= pos; j++) {
                        double dot = 0;
                        for (int e = 0; e < 2; e++) dot += in.get("q").get((h * 3 + i) * 2 + e) * in.get("k").get(((h / 2) * 5 + j) * 2 + e);
                        sum += Math.exp(0.5 * dot);
                    }
                    for (int e = 0; e < 2; e++) dsum += in.get("o").get((i * 4 + h) * 2 + e) * in.get("dout").get((i * 4 + h) * 2 + e);
                    assertThat(stats.get((h * 3 + i) * 2)).as("L of head %d row %d", h, i).isCloseTo(Math.log(sum), org.assertj.core.data.Offset.offset(1e-12));
                    assertThat(stats.get((h * 3 + i) * 2 + 1)).as("D of head %d row %d", h, i).isCloseTo(dsum, org.assertj.core.data.Offset.offset(1e-12));
                }
        }
    }

    /** The training graph's plan shows the fused backward as a step, and no [T, S] softmax. */
    @Test void theGradientIsOneStepInThePlan() {
        var g = Gatun.graph("plan");
        Tensor q = g.input("q", DType.BF16, 1, 4, 16, 8), k = g.input("k", DType.BF16, 1, 2, 16, 8), v = g.input("v", DType.BF16, 1, 2, 16, 8);
        Tensor[] d = g.grad(q.flashAttention(k, v, 0.3, true, 0, 0).cast(DType.F32).sum(), q, k, v);
        g.output("dq", d[0]);
        g.output("dk", d[1]);
        g.output("dv", d[2]);
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            String plan = s.plan().toString();
            assertThat(plan).contains("= flash_attention_backward(").doesNotContain("softmax");
        }
    }

    @Test void refusesOutputsOfTheWrongLayout() {
        var g = Gatun.graph("bad");
        Tensor q = g.input("q", DType.F32, 1, 4, 3, 2), k = g.input("k", DType.F32, 1, 2, 5, 2), v = g.input("v", DType.F32, 1, 2, 5, 2),
                headMajor = g.input("o", DType.F32, 1, 4, 3, 2), dout = g.input("dout", DType.F32, 1, 3, 4, 2);
        var attrs = Map.of("scale", 0.5, "causal", 0, "window", 0, "softcap", 0.0);
        assertThatThrownBy(() -> g.apply("flash_attention_backward", attrs, q, k, v, headMajor, dout))
                .isInstanceOf(GraphException.class).hasMessageContaining("flash_attention_backward").hasMessageContaining("'o'")
                .hasMessageContaining("token-major");
        assertThatThrownBy(() -> g.apply("flash_attention_backward", Map.of("scale", 0.5, "causal", 0, "window", 3, "softcap", 0.0), q, k, v, dout, dout))
                .isInstanceOf(GraphException.class).hasMessageContaining("flash_attention_backward").hasMessageContaining("window=3");
        assertThatThrownBy(() -> g.apply("flash_attention_backward", attrs, q, k, v))
                .isInstanceOf(GraphException.class).hasMessageContaining("takes q, k, v, o and dout");
    }
}
