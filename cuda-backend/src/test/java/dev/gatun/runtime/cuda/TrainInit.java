package dev.gatun.runtime.cuda;

import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.runtime.NDArray;

import java.nio.charset.StandardCharsets;

/**
 * The training benchmark's initial weights and data, defined by formulas that {@code bench/llama_train_torch.py}
 * computes the same way (no file to hand over, any shape, each rank making only its own block):
 * <ul>
 *   <li>weight element i (row-major over the whole weight) of weight {@code name}: {@code std * sqrt(3) * (2u - 1)}, a
 *   uniform draw of standard deviation {@code std}, with u the top 53 bits of {@code splitmix64(base + (i + 1) *
 *   0x9E3779B97F4A7C15)} over 2^53 and {@code base = fnv1a64(name) ^ seed}; every norm weight is all ones;</li>
 *   <li>token i (0 to tokens) of sequence s of the whole batch: {@code ((i + 31 s) * 7919 + 13) mod vocab}
 *   ({@link LlamaBench#prompt}), the targets each sequence's tokens 1 to tokens.</li>
 * </ul>
 */
final class TrainInit {
    private TrainInit() {}

    static final long GOLDEN = 0x9E3779B97F4A7C15L;

    static long fnv1a64(String s) {
        long h = 0xcbf29ce484222325L;
        for (byte b : s.getBytes(StandardCharsets.UTF_8)) {
            h ^= b & 0xff;
            h *= 0x100000001b3L;
        }
        return h;
    }

    static long splitmix64(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** Elements {@code first} to {@code first + n - 1} of weight {@code name}, as float32. */
    static float[] elements(String name, long seed, double std, long first, int n) {
        float[] out = new float[n];
        if (name.endsWith("norm.weight")) {
            java.util.Arrays.fill(out, 1f);
            return out;
        }
        long base = fnv1a64(name) ^ seed;
        double scale = std * Math.sqrt(3);
        for (int i = 0; i < n; i++) {
            double u = (splitmix64(base + (first + i + 1) * GOLDEN) >>> 11) * 0x1.0p-53;
            out[i] = (float) (scale * (2 * u - 1));
        }
        return out;
    }

    /** Block {@code block} of dimension 0 of weight {@code name} of local shape {@code shape} (block 0 of one: all of it). */
    static NDArray block(String name, long[] shape, int block, long seed, double std) {
        long n = 1;
        for (long d : shape) n *= d;
        return NDArray.of(elements(name, seed, std, block * n, Math.toIntExact(n)), shape);
    }

    /** Token i of sequence s of the whole batch. */
    static int token(LlamaConfig c, int s, int i) { return (int) (((i + 31L * s) * 7919L + 13) % c.vocabSize()); }

    /** Sequences {@code first} to {@code first + count - 1}: their tokens (i32) and next tokens (i64), [count * tokens] each. */
    static java.util.Map<String, NDArray> batch(LlamaConfig c, int first, int count, int tokens) {
        int[] ids = new int[count * tokens];
        long[] next = new long[count * tokens];
        for (int s = 0; s < count; s++)
            for (int i = 0; i < tokens; i++) {
                ids[s * tokens + i] = token(c, first + s, i);
                next[s * tokens + i] = token(c, first + s, i + 1);
            }
        return java.util.Map.of("tokens", NDArray.of(ids, ids.length), "targets", NDArray.of(next, next.length));
    }
}
