package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code flash_attention} on the GPU, both kernels ({@link CudaFlashAttention#form}), against plain float64 loops that
 * write every score out: head sizes 64 and 128 in bf16 and f16 (the tensor-core form), float32 and other head sizes
 * (the rows form), grouped-query heads, lengths that are not multiples of a tile, continuations, windows, soft-caps
 * and batches. Float64 (the rows form in double) within 1e-12 of the largest output; float32 within 2e-5; 16-bit within 2% (the probabilities are rounded to the
 * dtype before the weighted sum, as flash attention does).
 */
@RequiresGpu
class FlashAttentionGpuTest {
    record Case(DType type, int b, int hq, int hkv, int t, int s, int d, boolean causal, int window, double cap) {}

    @Test
    void bothKernelsMatchFloat64Loops() {
        var cases = new Case[]{
                new Case(DType.BF16, 1, 8, 2, 512, 512, 64, true, 0, 0),
                new Case(DType.BF16, 2, 4, 2, 200, 200, 128, true, 0, 0),
                new Case(DType.F16, 1, 6, 3, 77, 130, 64, true, 0, 0),
                new Case(DType.BF16, 1, 4, 4, 150, 150, 64, true, 50, 20),
                new Case(DType.BF16, 1, 2, 1, 70, 90, 128, false, 0, 0),
                new Case(DType.F32, 1, 8, 2, 129, 129, 64, true, 0, 0),
                new Case(DType.F32, 2, 3, 1, 33, 40, 80, true, 9, 5),
                new Case(DType.BF16, 1, 4, 2, 65, 65, 256, true, 16, 50),
                new Case(DType.F32, 1, 2, 2, 17, 17, 32, false, 0, 0),
                new Case(DType.BF16, 1, 2, 1, 1, 300, 64, true, 0, 0),
                // f64: the rows kernel in double (fewer rows and keys a block past head size 64)
                new Case(DType.F64, 1, 4, 2, 70, 70, 16, true, 0, 0),
                new Case(DType.F64, 2, 3, 1, 33, 40, 128, true, 9, 5),
                new Case(DType.F64, 1, 2, 2, 20, 20, 256, false, 0, 0)};
        var rnd = new SplittableRandom(5);
        for (Case c : cases) {
            long[] qs = {c.b(), c.hq(), c.t(), c.d()}, ks = {c.b(), c.hkv(), c.s(), c.d()};
            double scale = 1 / Math.sqrt(c.d());
            var g = Gatun.graph("fa");
            g.output("o", g.input("q", c.type(), dims(qs)).flashAttention(g.input("k", c.type(), dims(ks)), g.input("v", c.type(), dims(ks)), scale, c.causal(),
                    c.window(), c.cap()));
            NDArray q = scaled(NDArray.random(c.type(), rnd.nextLong(), qs), 3), k = NDArray.random(c.type(), rnd.nextLong(), ks),
                    v = NDArray.random(c.type(), rnd.nextLong(), ks);
            NDArray o;
            try (var session = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
                o = session.runToHost(Map.of("q", q, "k", k, "v", v)).get("o");
            }
            double[] want = expected(q, k, v, qs, ks, scale, c.causal(), c.window(), c.cap());
            double largest = Arrays.stream(want).map(Math::abs).max().orElse(1), worst = 0;
            for (int x = 0; x < want.length; x++) worst = Math.max(worst, Math.abs(o.get(x) - want[x]));
            assertThat(worst / largest).as("%s (%s kernel)", c, CudaFlashAttention.form(c.type(), c.d())).isLessThan(c.type() == DType.F64 ? 1e-12 : c.type() == DType.F32 ? 2e-5 : 2e-2);
        }
    }

    static Object[] dims(long[] shape) { return Arrays.stream(shape).boxed().toArray(); }

    /** {@code x} times {@code f}, rounded to its dtype: scores spread enough that the softmax is not flat. */
    static NDArray scaled(NDArray x, double f) {
        for (long i = 0; i < x.numel(); i++) x.set(i, x.get(i) * f);
        return x;
    }

    /** softmax(mask(cap(scale q kT))) v per head, [b, t, hq, d]: every score written out, masked ones -inf. */
    static double[] expected(NDArray q, NDArray k, NDArray v, long[] qs, long[] ks, double scale, boolean causal, int window, double cap) {
        int b = (int) qs[0], hq = (int) qs[1], t = (int) qs[2], d = (int) qs[3], hkv = (int) ks[1], s = (int) ks[2];
        double[] out = new double[b * t * hq * d], score = new double[s];
        for (int bi = 0; bi < b; bi++)
            for (int h = 0; h < hq; h++)
                for (int i = 0; i < t; i++) {
                    int kvh = h / (hq / hkv), pos = s - t + i;
                    double max = Double.NEGATIVE_INFINITY;
                    for (int j = 0; j < s; j++) {
                        double dot = 0;
                        for (int e = 0; e < d; e++) dot += q.get((((long) bi * hq + h) * t + i) * d + e) * k.get((((long) bi * hkv + kvh) * s + j) * d + e);
                        double x = cap > 0 ? cap * Math.tanh(dot * scale / cap) : dot * scale;
                        score[j] = causal && (j > pos || (window > 0 && j <= pos - window)) ? Double.NEGATIVE_INFINITY : x;
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
}
