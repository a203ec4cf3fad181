package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.ir.DType;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.host.FlashAttentionBackwardHostTest;
import dev.gatun.runtime.host.FlashAttentionBackwardHostTest.Case;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code flash_attention_backward} on the GPU ({@link CudaFlashAttentionBackward}), through flash_attention's gradient
 * rule: dq, dk and dv of {@code sum(w * flash_attention(q, k, v))} for random inputs, every form (the tensor-core one at
 * bf16 and f16, head sizes 64 and 128; the tiled rows one at f32, f64 to head size 128 and other head sizes; the simple
 * one at f64 past head size 128), causal and not, grouped-query
 * heads, fewer queries than positions, a window, a soft cap: (1) against the host backend's float64 run of the same
 * graph on the same values (the op's float64 reference); (2) against the gradients of the attention written out as the
 * ops it fuses (the rule flash_attention had before), run on the GPU in the same dtype. And (3) the training step's
 * shape (B 1, 32 query heads over 8, T = S = 2048, d 64, causal): bf16 against the decomposed rule, loosely; f32 against
 * the decomposed rule in float64.
 * Tolerances, relative to each gradient's largest element: f64 1e-12; f32 1e-4; 16-bit 3e-2 (P and dS are rounded to
 * the dtype as the products' operands, dk and dv once at the end).
 */
@RequiresGpu
class FlashAttentionBackwardGpuTest {
    static final Map<DType, Double> TOLERANCE = Map.of(DType.F64, 1e-12, DType.F32, 1e-4, DType.BF16, 3e-2, DType.F16, 3e-2);

    record GpuCase(DType type, Case c) {}

    @Test
    void gradientsMatchFloat64AndTheDecomposedRule() {
        var cases = new GpuCase[]{
                new GpuCase(DType.BF16, new Case(1, 8, 2, 256, 256, 64, true, 0, 0)),
                new GpuCase(DType.BF16, new Case(1, 4, 4, 256, 256, 64, false, 0, 0)),
                new GpuCase(DType.BF16, new Case(2, 4, 1, 256, 256, 128, true, 0, 0)),
                new GpuCase(DType.BF16, new Case(1, 4, 2, 100, 230, 64, true, 0, 0)),      // T < S, lengths off the tiles
                new GpuCase(DType.BF16, new Case(1, 2, 1, 200, 200, 64, true, 48, 0)),     // a window
                new GpuCase(DType.BF16, new Case(1, 2, 2, 130, 130, 128, true, 0, 20)),    // a soft cap
                new GpuCase(DType.F16, new Case(1, 4, 2, 256, 256, 64, true, 0, 0)),
                new GpuCase(DType.F32, new Case(1, 8, 2, 256, 256, 64, true, 0, 0)),
                new GpuCase(DType.F32, new Case(1, 8, 2, 512, 512, 64, true, 0, 0)),      // the tiled rows form at the training head size
                new GpuCase(DType.F32, new Case(2, 4, 4, 200, 333, 64, false, 0, 0)),
                new GpuCase(DType.F32, new Case(1, 4, 2, 300, 300, 64, true, 70, 8)),
                new GpuCase(DType.F32, new Case(1, 4, 1, 90, 150, 128, false, 0, 0)),
                new GpuCase(DType.F32, new Case(1, 2, 1, 120, 120, 80, true, 30, 5)),
                new GpuCase(DType.F32, new Case(1, 2, 1, 70, 90, 256, true, 0, 0)),
                new GpuCase(DType.F32, new Case(1, 2, 2, 65, 65, 7, true, 0, 0)),
                new GpuCase(DType.BF16, new Case(1, 4, 2, 70, 70, 32, true, 0, 0)),       // 16-bit off the tensor cores
                new GpuCase(DType.F64, new Case(1, 4, 2, 64, 96, 64, true, 0, 0)),
                new GpuCase(DType.F64, new Case(1, 2, 1, 50, 70, 128, true, 20, 0)),
                new GpuCase(DType.F64, new Case(1, 2, 1, 40, 40, 256, true, 0, 0))};     // the simple form
        var rnd = new SplittableRandom(7);
        for (GpuCase gc : cases) {
            Case c = gc.c();
            var in = inputs(gc.type(), c, rnd);
            var fused = FlashAttentionBackwardHostTest.gradients(c, gc.type(), false, in, "cuda");
            var exact = FlashAttentionBackwardHostTest.gradients(c, DType.F64, false, widened(in), "host");
            var decomposed = FlashAttentionBackwardHostTest.gradients(c, gc.type(), true, in, "cuda");
            String form = CudaFlashAttentionBackward.form(gc.type(), c.d());
            for (String name : new String[]{"dq", "dk", "dv"}) {
                double tol = TOLERANCE.get(gc.type());
                assertThat(relative(fused.get(name), exact.get(name))).as("%s %s %s (%s kernels) against float64", gc.type(), c, name, form).isLessThan(tol);
                assertThat(relative(fused.get(name), decomposed.get(name))).as("%s %s %s (%s kernels) against the decomposed rule", gc.type(), c, name, form)
                        .isLessThan(gc.type() == DType.F64 ? 1e-12 : 2 * tol);
            }
        }
    }

    /** The training step's attention: the fused backward against the decomposed rule's on the GPU, loosely (bf16). */
    @Test
    void theTrainingShapeMatchesTheDecomposedRule() {
        var c = new Case(1, 32, 8, 2048, 2048, 64, true, 0, 0);
        var in = inputs(DType.BF16, c, new SplittableRandom(9));
        var fused = FlashAttentionBackwardHostTest.gradients(c, DType.BF16, false, in, "cuda");
        var decomposed = FlashAttentionBackwardHostTest.gradients(c, DType.BF16, true, in, "cuda");
        for (String name : new String[]{"dq", "dk", "dv"})
            assertThat(relative(fused.get(name), decomposed.get(name))).as("training shape %s", name).isLessThan(5e-2);
    }

    /**
     * The training step's attention in float32 (the tiled rows form), against the decomposed rule in float64 on the GPU
     * (the same values widened): within float32's tolerance.
     */
    @Test
    void theTrainingShapeInFloat32MatchesFloat64() {
        var c = new Case(1, 32, 8, 2048, 2048, 64, true, 0, 0);
        assertThat(CudaFlashAttentionBackward.form(DType.F32, c.d())).isEqualTo("rows");
        var in = inputs(DType.F32, c, new SplittableRandom(10));
        var fused = FlashAttentionBackwardHostTest.gradients(c, DType.F32, false, in, "cuda");
        var exact = FlashAttentionBackwardHostTest.gradients(c, DType.F64, true, widened(in), "cuda");
        for (String name : new String[]{"dq", "dk", "dv"})
            assertThat(relative(fused.get(name), exact.get(name))).as("f32 training shape %s", name).isLessThan(TOLERANCE.get(DType.F32));
    }

    /** q (spread by 3 so the softmax is not flat), k, v and the loss weights w (dout) of {@code c}, in dtype {@code t}. */
    static Map<String, NDArray> inputs(DType t, Case c, SplittableRandom rnd) {
        long[] qs = {c.b(), c.hq(), c.t(), c.d()}, ks = {c.b(), c.hkv(), c.s(), c.d()}, os = {c.b(), c.t(), c.hq(), c.d()};
        var in = new LinkedHashMap<String, NDArray>();
        in.put("q", FlashAttentionGpuTest.scaled(NDArray.random(t, rnd.nextLong(), qs), 3));
        in.put("k", NDArray.random(t, rnd.nextLong(), ks));
        in.put("v", NDArray.random(t, rnd.nextLong(), ks));
        in.put("w", NDArray.random(t, rnd.nextLong(), os));
        return in;
    }

    /** The same values as float64 arrays (exact). */
    static Map<String, NDArray> widened(Map<String, NDArray> in) {
        var out = new LinkedHashMap<String, NDArray>();
        in.forEach((name, x) -> out.put(name, NDArray.of(DType.F64, x.toDoubleArray(), x.shape())));
        return out;
    }

    /** The largest difference of {@code got} from {@code want}, over want's largest magnitude. */
    static double relative(NDArray got, NDArray want) {
        double[] a = got.toDoubleArray(), b = want.toDoubleArray();
        assertThat(a).hasSameSizeAs(b);
        double largest = Arrays.stream(b).map(Math::abs).max().orElse(1), worst = 0;
        for (int x = 0; x < a.length; x++) worst = Math.max(worst, Math.abs(a[x] - b[x]));
        assertThat(worst).as("a NaN in the gradients").isNotNaN();
        return worst / Math.max(largest, Double.MIN_NORMAL);
    }
}
