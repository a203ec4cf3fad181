package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
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
 * A pointwise op of a concatenation is computed part by part (lowering), and the kernels writing parts of one
 * concatenation join (fusion). Both re-index every load of the op: each part's slice of the other operands, broadcasts
 * along the joined dimension, a second concatenation with the same bounds or other bounds, transposed views of square
 * parts. Random shapes against the reference interpreter (the graph evaluated op by op, no lowering or fusion), and
 * one case against plain loops.
 */
class CatThroughPointwiseTest {

    @Test
    void catOfShiftedInputsPlusTenMatchesPlainLoops() {
        var g = Gatun.graph("cat_plus");
        var a = g.input("a", F64, 3, 4);
        var b = g.input("b", F64, 3, 4);
        var w = g.input("w", F64, 1, 4);
        g.output("y", g.cat(0, a.add(1), b.sin()).add(10).mul(w));
        double[] as = new double[12], bs = new double[12], ws = {1, -2, 3, 0.5};
        for (int i = 0; i < 12; i++) { as[i] = i * 0.25 - 1; bs[i] = Math.cos(i); }
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().kernels()).hasSize(1);
            double[] y = s.runToHost(Map.of("a", NDArray.of(as, 3, 4), "b", NDArray.of(bs, 3, 4), "w", NDArray.of(ws, 1, 4))).get("y").toDoubleArray();
            for (int i = 0; i < 6; i++)
                for (int j = 0; j < 4; j++) {
                    double part = i < 3 ? as[i * 4 + j] + 1 : Math.sin(bs[(i - 3) * 4 + j]);
                    assertThat(y[i * 4 + j]).as("y[%d][%d]", i, j).isCloseTo((part + 10) * ws[j], offset(1e-12));
                }
        }
    }

    @Property(tries = 120)
    void randomConcatenationsThroughPointwiseOpsMatchTheReference(
            @ForAll @IntRange(min = 1, max = 3) int rank, @ForAll @IntRange(min = 0, max = 2) int dimPick,
            @ForAll @IntRange(min = 2, max = 4) int partCount, @ForAll boolean square, @ForAll @IntRange(min = 0, max = 100_000) int seed) {
        var rnd = new Random(seed);
        int dim = dimPick % rank;
        long side = 1 + rnd.nextInt(4);
        long[] full = new long[rank];
        for (int d = 0; d < rank; d++) full[d] = square ? side : 1 + rnd.nextInt(4);
        var g = Gatun.graph("cat_random");
        var parts = new ArrayList<Tensor>();
        var sizes = new long[partCount];
        long total = 0;
        for (int k = 0; k < partCount; k++) {
            sizes[k] = square || rnd.nextBoolean() ? full[dim] : 1 + rnd.nextInt(3);
            long[] shape = full.clone();
            shape[dim] = sizes[k];
            total += sizes[k];
            parts.add(part(g.input("p" + k, F64, dims(shape)), rnd, shape));
        }
        long[] catShape = full.clone();
        catShape[dim] = total;
        Tensor y = g.cat(dim, parts);
        int ops = 1 + rnd.nextInt(3);
        for (int i = 0; i < ops; i++) y = pointwise(y, operand(g, "o" + i, rnd, catShape, dim, sizes, parts), rnd);
        g.output("y", y);
        if (rnd.nextInt(4) == 0) g.output("z", y.sum(0));   // a reader that is no pointwise op of the last result
        check(g.build(), seed);
    }

    /** A part's producer: the input itself, a pointwise op of it, or (square only) a transposed view's op. */
    private static Tensor part(Tensor x, Random rnd, long[] shape) {
        boolean squareLast = shape.length >= 2 && shape[shape.length - 1] == shape[shape.length - 2];
        return switch (rnd.nextInt(squareLast ? 5 : 4)) {
            case 0 -> x;
            case 1 -> x.sin();
            case 2 -> x.add(1.5).mul(x);
            case 3 -> x.exp().neg();
            default -> x.transpose(shape.length - 2, shape.length - 1).cos();
        };
    }

    /** The other operand of a pointwise op of the concatenation: a scalar, a full tensor, one broadcast along the joined dimension, another concatenation. */
    private static Object operand(dev.gatun.dsl.GraphBuilder g, String name, Random rnd, long[] catShape, int dim, long[] sizes, List<Tensor> parts) {
        switch (rnd.nextInt(6)) {
            case 5: {   // a reshape of a permuted result (not made where only pointwise ops read it)
                long[] rev = catShape.clone();
                for (int i = 0; i < rev.length / 2; i++) { long t = rev[i]; rev[i] = rev[rev.length - 1 - i]; rev[rev.length - 1 - i] = t; }
                int[] perm = new int[rev.length];
                for (int i = 0; i < perm.length; i++) perm[i] = perm.length - 1 - i;
                return g.input(name, F64, dims(rev)).sin().permute(perm).reshape(dims(catShape));
            }
            case 0: return 0.5 + rnd.nextInt(3);
            case 1: return g.input(name, F64, dims(catShape));
            case 2: {
                long[] b = catShape.clone();
                b[dim] = 1;
                return g.input(name, F64, dims(b));
            }
            case 3: {   // a concatenation with the same bounds
                var others = new ArrayList<Tensor>();
                for (int k = 0; k < sizes.length; k++) {
                    long[] s = catShape.clone();
                    s[dim] = sizes[k];
                    others.add(g.input(name + "_" + k, F64, dims(s)).cos());
                }
                return g.cat(dim, others);
            }
            default: {   // a concatenation with other bounds (made, then read by slices), or the parts again in reverse
                var rev = new ArrayList<>(parts);
                java.util.Collections.reverse(rev);
                return g.cat(dim, rev);
            }
        }
    }
}
