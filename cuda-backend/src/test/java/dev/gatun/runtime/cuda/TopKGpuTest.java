package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * topk on the GPU against plain loops (a stable sort of each row's positions by falling value, a NaN above every number,
 * -0 equal to +0) and against the host backend, bit for bit: every dtype topk takes, rows full of ties, NaNs and both
 * zeros, k from 1 to the whole row, rows of a router (8 to 128 experts) and of a vocabulary, more rows than one grid.
 */
@RequiresGpu
class TopKGpuTest {
    static Graph graph(DType t, long[] shape, int k) {
        var g = Gatun.graph("top");
        var top = g.input("x", t, (Object[]) Arrays.stream(shape).boxed().toArray()).topk(k);
        g.output("values", top.values());
        g.output("indices", top.indices());
        return g.build();
    }

    /** Values with many ties: a few small numbers, both zeros, NaN (floating dtypes), the extremes of int64. */
    static NDArray rows(DType t, long[] shape, SplittableRandom rnd) {
        var x = NDArray.zeros(t, shape);
        double[] special = {-2, -1, -0.0, 0.0, 0.5, 1, 3, Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY};
        for (long i = 0; i < x.numel(); i++) {
            int r = rnd.nextInt(10);
            if (t == DType.I64 && r == 0) x.setLong(i, rnd.nextBoolean() ? Long.MAX_VALUE - rnd.nextInt(3) : Long.MIN_VALUE + rnd.nextInt(3));
            else if (!t.isFloating()) x.setLong(i, rnd.nextInt(t == DType.I8 ? 256 : 2000) - (t == DType.I8 ? 128 : 1000));
            else if (r < 5) x.set(i, special[rnd.nextInt(special.length)]);
            else x.set(i, rnd.nextGaussian() * 4);
        }
        return x;
    }

    /** Each row's positions by falling value (NaN first, -0 as +0), equal ones in index order: the first k. */
    static long[] expectedIndices(NDArray x, long cols, int k) {
        long rows = x.numel() / cols;
        long[] out = new long[(int) (rows * k)];
        boolean exact = !x.dtype().isFloating();
        for (long r = 0; r < rows; r++) {
            long base = r * cols;
            Integer[] order = new Integer[(int) cols];
            for (int j = 0; j < cols; j++) order[j] = j;
            Comparator<Integer> byValue = exact ? Comparator.comparingLong((Integer j) -> x.getLong(base + j)) : (a, b) -> compare(x.get(base + a), x.get(base + b));
            Arrays.sort(order, byValue.reversed().thenComparing(Comparator.naturalOrder()));
            for (int i = 0; i < k; i++) out[(int) (r * k + i)] = order[i];
        }
        return out;
    }

    /** NaN above every number and equal to another NaN; -0 equal to +0. */
    static int compare(double a, double b) {
        if (Double.isNaN(a) || Double.isNaN(b)) return Double.isNaN(a) == Double.isNaN(b) ? 0 : Double.isNaN(a) ? 1 : -1;
        return a < b ? -1 : a > b ? 1 : 0;
    }

    @Test
    void theKBestOfEachRowAreTheHostsBitForBit() {
        var rnd = new SplittableRandom(17);
        long[][] shapes = {{1, 8}, {12, 60}, {5, 3, 128}, {3, 1000}, {2, 40_000}, {70_000, 4}, {7}};
        for (DType t : List.of(DType.F32, DType.F16, DType.BF16, DType.F64, DType.I8, DType.I32, DType.I64))
            for (long[] shape : shapes) {
                long cols = shape[shape.length - 1];
                for (int k : new int[]{1, (int) Math.min(cols, 2 + rnd.nextInt(7)), (int) Math.min(cols, 50), (int) cols}) {
                    if (k == cols && cols > 128) continue;   // the whole of a long row: covered by the short ones
                    NDArray x = rows(t, shape, rnd);
                    Graph g = graph(t, shape, k);
                    Map<String, NDArray> gpu, host;
                    try (var s = Session.compile(g, CompileOptions.world(1).backend("cuda"))) {
                        s.runToHost(Map.of("x", rows(t, shape, rnd)));   // a first call with other values: the second replays
                        gpu = s.runToHost(Map.of("x", x));
                    }
                    try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
                        host = s.runToHost(Map.of("x", x));
                    }
                    String what = t + " " + Arrays.toString(shape) + " k=" + k;
                    long[] want = expectedIndices(x, cols, k);
                    NDArray values = gpu.get("values"), indices = gpu.get("indices");
                    assertThat(indices.dtype()).isEqualTo(DType.I64);
                    for (int i = 0; i < want.length; i++) {
                        long row = i / k;
                        assertThat(indices.getLong(i)).as("%s: index %d", what, i).isEqualTo(want[i]);
                        long from = row * cols + want[i];
                        if (t.isFloating())
                            assertThat(Double.doubleToRawLongBits(values.get(i))).as("%s: value %d", what, i).isEqualTo(Double.doubleToRawLongBits(x.get(from)));
                        else
                            assertThat(values.getLong(i)).as("%s: value %d", what, i).isEqualTo(x.getLong(from));
                    }
                    assertThat(values.segment().mismatch(host.get("values").segment())).as("%s: the host's values, byte for byte", what).isEqualTo(-1);
                    assertThat(indices.segment().mismatch(host.get("indices").segment())).as("%s: the host's indices", what).isEqualTo(-1);
                }
            }
    }

    /** A router's softmax row: ties broken toward the lower expert, as transformers' topk on a CPU does. */
    @Test
    void aRoutersTiesGoToTheLowerExpert() {
        double[] probs = {0.125, 0.25, 0.125, 0.25, 0.0, 0.25, 0.0, 0.0};
        var x = NDArray.of(DType.F32, probs, 1, 8);
        try (var s = Session.compile(graph(DType.F32, new long[]{1, 8}, 4), CompileOptions.world(1).backend("cuda"))) {
            var out = s.runToHost(Map.of("x", x));
            assertThat(out.get("indices").toDoubleArray()).containsExactly(1, 3, 5, 0);
            assertThat(out.get("values").toDoubleArray()).containsExactly(0.25, 0.25, 0.25, 0.125);
        }
    }
}
