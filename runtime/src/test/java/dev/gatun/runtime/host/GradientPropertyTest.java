package dev.gatun.runtime.host;

import dev.gatun.dsl.Tensor;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * Random chains of differentiable ops on random shapes (rank 1 to 3, sizes 1 to 4): smooth pointwise functions,
 * binary ops with new inputs of broadcast shapes, sums, means and maxes over a dimension, permutes, reshapes, slices
 * with steps, cats, expands, matrix products and softmaxes, three to seven of them; the gradient of every input against
 * central finite differences of the forward pass in float64 ({@link GradCheck}). Only smooth functions are drawn (no
 * relu, abs, maximum), so no input sits on a kink; a max's ties come only from copies of one element (an expand, a cat
 * of a tensor with itself), where splitting the gradient and summing it back is exact.
 */
class GradientPropertyTest {
    /** Tensors larger than this are not grown further (each element costs two runs of the graph). */
    static final long LIMIT = 48;

    @Property(tries = 100)
    void randomChainsMatchFiniteDifferences(@ForAll @IntRange(min = 0, max = 1_000_000) int seed) {
        var shape = new ArrayList<Long>();
        var rnd = new Random(seed);
        int rank = 1 + rnd.nextInt(3);
        for (int d = 0; d < rank; d++) shape.add(1L + rnd.nextInt(4));
        var check = new GradCheck("chain" + seed, seed).tolerance(1e-5)
                .f64("x", shape.stream().mapToLong(Long::longValue).toArray());
        check.grow(in -> {
            Tensor t = in.declared()[0];
            int ops = 3 + in.random().nextInt(5);
            for (int k = 0; k < ops; k++) {
                t = step(in, t, in.random());
                if (numel(t) > LIMIT) t = t.sum(0);
                if (t.rank() == 0) t = t.reshape(1L);
            }
            return t;
        });
    }

    static long numel(Tensor t) { return t.shape().numel(); }

    static Tensor step(GradCheck.Inputs in, Tensor t, Random rnd) {
        int r = t.rank();
        return switch (rnd.nextInt(11)) {
            case 0, 1 -> smooth(t, rnd.nextInt(11));
            case 2 -> binary(in, t, rnd);
            case 3 -> {
                int d = rnd.nextInt(r);
                boolean keep = r == 1 || rnd.nextBoolean();
                yield switch (rnd.nextInt(3)) {
                    case 0 -> t.sum(keep, d);
                    case 1 -> t.mean(keep, d);
                    default -> t.max(keep, d);
                };
            }
            case 4 -> {
                var perm = new ArrayList<Integer>();
                for (int d = 0; d < r; d++) perm.add(d);
                java.util.Collections.shuffle(perm, rnd);
                yield t.permute(perm.stream().mapToInt(Integer::intValue).toArray());
            }
            case 5 -> r == 1 ? t.reshape(1L, numel(t)) : t.reshape(numel(t));
            case 6 -> {
                int d = rnd.nextInt(r);
                long size = t.shape().dim(d).size();
                if (size < 2) yield t.sin();
                long start = rnd.nextInt((int) size - 1), end = start + 1 + rnd.nextInt((int) (size - start));
                yield t.slice(d, start, end, 1 + rnd.nextInt(3));
            }
            case 7 -> numel(t) * 2 > LIMIT ? t.cos() : t.cat(rnd.nextInt(r), rnd.nextBoolean() ? t : t.tanh());
            case 8 -> r >= 3 || numel(t) * 2 > LIMIT ? t.sigmoid() : t.expand(expanded(t));
            case 9 -> {
                Tensor a = r == 1 ? t.reshape(1L, numel(t)) : t;
                long k = a.shape().dim(a.rank() - 1).size();
                yield a.matmul(in.f64(k, 1L + rnd.nextInt(3)));
            }
            default -> t.softmax(rnd.nextInt(r));
        };
    }

    /** A smooth function, defined everywhere. */
    static Tensor smooth(Tensor t, int which) {
        return switch (which) {
            case 0 -> t.sin();
            case 1 -> t.tanh();
            case 2 -> t.sigmoid();
            case 3 -> t.silu();
            case 4 -> t.gelu();
            case 5 -> t.cos();
            case 6 -> t.mul(0.5).exp();
            case 7 -> t.mul(t);
            case 8 -> t.mul(t).add(1).log();
            case 9 -> t.mul(t).add(1).sqrt();
            default -> t.mul(t).add(1).rsqrt();
        };
    }

    /** t combined with a new input whose shape broadcasts to t's: some dims 1, maybe the leading one dropped. */
    static Tensor binary(GradCheck.Inputs in, Tensor t, Random rnd) {
        List<Long> dims = new ArrayList<>();
        for (int d = 0; d < t.rank(); d++) dims.add(rnd.nextInt(3) == 0 ? 1L : t.shape().dim(d).size());
        if (dims.size() > 1 && rnd.nextBoolean()) dims.removeFirst();
        Tensor w = in.f64(dims.stream().mapToLong(Long::longValue).toArray());
        return switch (rnd.nextInt(4)) {
            case 0 -> t.add(w);
            case 1 -> w.sub(t);
            case 2 -> t.mul(w);
            default -> t.div(w.mul(w).add(1));
        };
    }

    static Object[] expanded(Tensor t) {
        var dims = new ArrayList<Object>();
        dims.add(2L);
        for (int d = 0; d < t.rank(); d++) dims.add(t.shape().dim(d).size());
        return dims.toArray();
    }
}
