package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.runtime.NDArray;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.stream.IntStream;

/**
 * The inputs of {@link MoeBench}, from integer formulas that {@code bench/moe_torch.py} computes alike on its side
 * (vectorised over torch int64 tensors, the same operations), so both systems run on the same tokens, routings and
 * weights without a file between them. Every value is exact in bfloat16 and float32: a byte of a hash, centred and
 * scaled by a power of two.
 *
 * <p>{@code mix} is a 32-bit integer hash whose every product stays below 2^63 (its argument below 2^31), so Java's
 * longs and torch's int64 give the same bits; {@code hash(salt, i) = mix((mix(i) + salt) mod 2^31)}.
 * <ul>
 *   <li>{@link #value}: {@code ((hash >> 8) & 255) - 128} times {@code 2^-shift};</li>
 *   <li>tokens of rank r: salt {@code 1000 + r}, element {@code n * hidden + c}, shift 7 ([-1, 1));</li>
 *   <li>the router [experts, hidden]: salt 2000, shift 12; expert e's gate | up [2 * width, hidden] (gate rows first):
 *       salt {@code 3000 + e}, shift 13; its down [hidden, width]: salt {@code 4000 + e}, shift 13;</li>
 *   <li>the dispatch workload's routing of rank r, token n: {@code u = hash(5000 + r, n)}; the first expert
 *       {@code u mod E} (skewed: expert 0 unless {@code (u >> 20) mod 4 == 0}), the second
 *       {@code (first + 1 + (u >> 8) mod (E - 1)) mod E}; weights {@code (8 + (u >> 4) mod 8) / 16} and one minus it.</li>
 * </ul>
 */
final class MoeInputs {
    private MoeInputs() {}

    static final long M31 = 0x7FFF_FFFFL, M32 = 0xFFFF_FFFFL;
    static final int TOKEN_SALT = 1000, ROUTER_SALT = 2000, GATE_UP_SALT = 3000, DOWN_SALT = 4000, ROUTING_SALT = 5000;
    static final int TOKEN_SHIFT = 7, ROUTER_SHIFT = 12, EXPERT_SHIFT = 13;

    /** A 32-bit hash of {@code v} (0 to 2^31 - 1). */
    static long mix(long v) {
        long h = (v * 2654435761L) & M32;
        h ^= h >>> 15;
        h = (h * 73244475L) & M32;
        return h ^ (h >>> 16);
    }

    static long hash(long salt, long i) { return mix((mix(i & M31) + salt) & M31); }

    /** Element i of the tensor with {@code salt}: a byte of its hash, centred, times 2^-shift. */
    static double value(long salt, long i, int shift) { return Math.scalb((double) (((hash(salt, i) >>> 8) & 255) - 128), -shift); }

    /** A tensor of {@code dtype} (bf16 or f32) whose element i is {@link #value}{@code (salt, i, shift)}; filled in parallel. */
    static NDArray tensor(DType dtype, long salt, int shift, long... shape) {
        var a = NDArray.zeros(dtype, shape);
        fill(a.segment(), dtype, 0, a.numel(), salt, 0, shift);
        return a;
    }

    /** {@code count} elements from element {@code at} of {@code seg} with values {@code first..first+count} of the salt. */
    static void fill(MemorySegment seg, DType dtype, long at, long count, long salt, long first, int shift) {
        if (dtype != DType.BF16 && dtype != DType.F32) throw new IllegalArgumentException("MoeInputs: bf16 or f32, not " + dtype);
        long chunk = 1 << 20, chunks = (count + chunk - 1) / chunk;
        IntStream.range(0, (int) chunks).parallel().forEach(c -> {
            long from = c * chunk, to = Math.min(count, from + chunk);
            for (long i = from; i < to; i++) {
                float v = (float) value(salt, first + i, shift);
                if (dtype == DType.BF16) seg.set(ValueLayout.JAVA_SHORT_UNALIGNED, (at + i) * 2, (short) (Float.floatToRawIntBits(v) >>> 16));
                else seg.set(ValueLayout.JAVA_FLOAT_UNALIGNED, (at + i) * 4, v);
            }
        });
    }

    /** Rank r's tokens [tokens, hidden]. */
    static NDArray tokens(DType dtype, int rank, int tokens, int hidden) { return tensor(dtype, TOKEN_SALT + rank, TOKEN_SHIFT, tokens, hidden); }

    static double token(int rank, int n, int c, int hidden) { return value(TOKEN_SALT + rank, (long) n * hidden + c, TOKEN_SHIFT); }

    /**
     * The stacked experts {@code [first, first + count)}: gate | up [count, 2 * width, hidden] (which) 0, down
     * [count, hidden, width] (which) 1.
     */
    static NDArray experts(DType dtype, int which, int first, int count, int hidden, int width) {
        long per = 2L * width * hidden / (which == 0 ? 1 : 2);
        var a = which == 0 ? NDArray.zeros(dtype, count, 2L * width, hidden) : NDArray.zeros(dtype, count, hidden, width);
        for (int e = 0; e < count; e++)
            fill(a.segment(), dtype, e * per, per, (which == 0 ? GATE_UP_SALT : DOWN_SALT) + first + e, 0, EXPERT_SHIFT);
        return a;
    }

    /** The dispatch workload's routing of rank r: the experts [tokens, 2] and their weights [tokens, 2]. */
    record Routing(long[] ids, double[] weights) {}

    static Routing routing(int rank, int tokens, int experts, boolean skewed) {
        long[] ids = new long[2 * tokens];
        double[] w = new double[2 * tokens];
        for (int n = 0; n < tokens; n++) {
            long u = hash(ROUTING_SALT + rank, n);
            long first = skewed && (u >>> 20) % 4 != 0 ? 0 : u % experts;
            ids[2 * n] = first;
            ids[2 * n + 1] = (first + 1 + (u >>> 8) % (experts - 1)) % experts;
            w[2 * n] = (8 + (u >>> 4) % 8) / 16.0;
            w[2 * n + 1] = 1 - w[2 * n];
        }
        return new Routing(ids, w);
    }
}
