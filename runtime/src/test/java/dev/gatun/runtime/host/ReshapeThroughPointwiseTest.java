package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static dev.gatun.ir.DType.F64;
import static dev.gatun.runtime.host.RandomPointwiseGraphs.check;
import static dev.gatun.runtime.host.RandomPointwiseGraphs.dims;
import static dev.gatun.runtime.host.RandomPointwiseGraphs.pointwise;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.data.Offset.offset;

/**
 * A pointwise op of a reshape is computed over the reshape's source shape, reading the source as it lies (a permuted,
 * transposed or sliced view, or a contiguous result), every other operand at the same row-major position, and its result
 * reshaped back. Random shapes, permutations (square ones, where a transposed read fits the loop either way) and
 * reshapes against the reference interpreter, and one attention-layout case against plain loops.
 */
class ReshapeThroughPointwiseTest {

    /** {@code exp(2 x.permute(0, 2, 1, 3).reshape(B*H, S, D)) + y}: heads out of a [B, S, H, D] projection. */
    @Test
    void attentionLayoutMatchesPlainLoops() {
        int bs = 2, s = 3, h = 4, d = 5;
        var g = Gatun.graph("heads");
        var x = g.input("x", F64, bs, s, h, d);
        var y = g.input("y", F64, bs * h, s, d);
        g.output("o", x.mul(2).permute(0, 2, 1, 3).reshape(bs * h, s, d).exp().add(y));
        double[] xs = new double[bs * s * h * d], ys = new double[xs.length];
        for (int i = 0; i < xs.length; i++) { xs[i] = Math.sin(i) * 0.5; ys[i] = i * 0.01; }
        try (var session = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(session.plan().kernels()).as(session.plan().toString()).hasSize(1);
            double[] o = session.runToHost(Map.of("x", NDArray.of(xs, bs, s, h, d), "y", NDArray.of(ys, bs * h, s, d))).get("o").toDoubleArray();
            for (int b = 0; b < bs; b++)
                for (int hh = 0; hh < h; hh++)
                    for (int t = 0; t < s; t++)
                        for (int e = 0; e < d; e++) {
                            int at = ((b * h + hh) * s + t) * d + e, from = ((b * s + t) * h + hh) * d + e;
                            assertThat(o[at]).isCloseTo(Math.exp(2 * xs[from]) + ys[at], offset(1e-12));
                        }
        }
    }

    @Property(tries = 150)
    void randomReshapesThroughPointwiseOpsMatchTheReference(
            @ForAll @IntRange(min = 1, max = 4) int rank, @ForAll boolean square, @ForAll @IntRange(min = 0, max = 100_000) int seed) {
        var rnd = new Random(seed);
        long side = 2 + rnd.nextInt(3);
        long[] shape = new long[rank];
        for (int d = 0; d < rank; d++) shape[d] = square ? side : 1 + rnd.nextInt(4);
        var g = Gatun.graph("reshape_random");
        Tensor x = g.input("x", F64, dims(shape));
        Tensor src = switch (rnd.nextInt(4)) {
            case 0 -> x.sin();
            case 1 -> x;
            default -> x.mul(1.5).permute(permutation(rank, rnd));
        };
        long[] target = factor(numel(shape), 1 + rnd.nextInt(4), rnd);
        Tensor y = src.reshape(dims(target));
        int ops = 1 + rnd.nextInt(3);
        for (int i = 0; i < ops; i++) y = pointwise(y, operand(g, "o" + i, rnd, target, src), rnd);
        g.output("y", y);
        if (rnd.nextInt(4) == 0) g.output("z", y.sum(0));   // a reader that is no pointwise op
        check(g.build(), seed);
    }

    private static int[] permutation(int rank, Random rnd) {
        var p = new ArrayList<Integer>();
        for (int i = 0; i < rank; i++) p.add(i);
        java.util.Collections.shuffle(p, rnd);
        return p.stream().mapToInt(Integer::intValue).toArray();
    }

    private static long numel(long[] s) {
        long n = 1;
        for (long x : s) n *= x;
        return n;
    }

    /** A random shape of {@code n} elements in {@code rank} dimensions (its prime factors dealt out at random). */
    private static long[] factor(long n, int rank, Random rnd) {
        long[] out = new long[rank];
        java.util.Arrays.fill(out, 1);
        for (long p = 2; n > 1; p++)
            while (n % p == 0) {
                out[rnd.nextInt(rank)] *= p;
                n /= p;
            }
        return out;
    }

    /** A scalar, a whole tensor of the reshape's shape, one broadcast into it, or another reshape of the same source shape. */
    private static Object operand(GraphBuilder g, String name, Random rnd, long[] target, Tensor src) {
        switch (rnd.nextInt(6)) {
            case 5: {   // a concatenation of the reshape's shape along its first dimension, where that splits
                if (target[0] < 2) return 0.5;
                long[] a = target.clone(), b = target.clone();
                a[0] = target[0] / 2;
                b[0] = target[0] - a[0];
                return g.cat(0, g.input(name + "_a", F64, dims(a)).exp(), g.input(name + "_b", F64, dims(b)));
            }
            case 0: return 0.5 + rnd.nextInt(3);
            case 1: return g.input(name, F64, dims(target));
            case 2: {
                long[] b = target.clone();
                b[rnd.nextInt(b.length)] = 1;
                return g.input(name, F64, dims(b));
            }
            case 3: {   // a transposed view of the reshape's shape (strided: the reshape is made after all)
                if (target.length < 2) return g.input(name, F64, dims(target));
                long[] swapped = target.clone();
                int r = target.length;
                swapped[r - 2] = target[r - 1];
                swapped[r - 1] = target[r - 2];
                return g.input(name, F64, dims(swapped)).transpose(r - 2, r - 1);
            }
            default: return src.cos().reshape(dims(target));
        }
    }
}
