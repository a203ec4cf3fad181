package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.LinkedHashMap;
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
    static Graph graph(DType t, long[] shape, int k) { return graph(t, List.of(shape), List.of(new int[]{k})); }

    /** One graph of many calls: input {@code xS} of shape {@code shapes[S]}, outputs {@code values_S_k} and {@code indices_S_k} for each k of {@code ks[S]}. */
    static Graph graph(DType t, List<long[]> shapes, List<int[]> ks) {
        var g = Gatun.graph("top");
        for (int s = 0; s < shapes.size(); s++) {
            var x = g.input("x" + s, t, (Object[]) Arrays.stream(shapes.get(s)).boxed().toArray());
            for (int k : ks.get(s)) {
                var top = x.topk(k);
                g.output("values_" + s + "_" + k, top.values());
                g.output("indices_" + s + "_" + k, top.indices());
            }
        }
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
        List<long[]> shapes = List.of(new long[]{1, 8}, new long[]{12, 60}, new long[]{5, 3, 128}, new long[]{3, 1000}, new long[]{2, 40_000},
                new long[]{70_000, 4}, new long[]{7});
        for (DType t : List.of(DType.F32, DType.F16, DType.BF16, DType.F64, DType.I8, DType.I32, DType.I64)) {
            // k: 1, a router's few, 50 (a sampler's), the whole row where it is short; one graph a dtype, every case a call of it
            var ks = new ArrayList<int[]>();
            var in = new LinkedHashMap<String, NDArray>();
            for (int s = 0; s < shapes.size(); s++) {
                long cols = shapes.get(s)[shapes.get(s).length - 1];
                ks.add(java.util.stream.IntStream.of(1, (int) Math.min(cols, 2 + rnd.nextInt(7)), (int) Math.min(cols, 50), cols <= 128 ? (int) cols : 1)
                        .distinct().toArray());
                in.put("x" + s, rows(t, shapes.get(s), rnd));
            }
            Graph g = graph(t, shapes, ks);
            Map<String, NDArray> gpu, host;
            try (var session = Session.compile(g, CompileOptions.world(1).backend("cuda"))) {
                var other = new LinkedHashMap<String, NDArray>();
                for (int s = 0; s < shapes.size(); s++) other.put("x" + s, rows(t, shapes.get(s), rnd));
                session.runToHost(other);   // a first call with other values: the second replays
                gpu = session.runToHost(in);
            }
            try (var session = Session.compile(g, CompileOptions.world(1).backend("host"))) {
                host = session.runToHost(in);
            }
            for (int s = 0; s < shapes.size(); s++)
                for (int k : ks.get(s)) check(t, shapes.get(s), k, in.get("x" + s), gpu, host, "_" + s + "_" + k);
        }
    }

    /** One call's values and indices against plain loops, and byte for byte against the host backend's. */
    static void check(DType t, long[] shape, int k, NDArray x, Map<String, NDArray> gpu, Map<String, NDArray> host, String suffix) {
        long cols = shape[shape.length - 1];
        String what = t + " " + Arrays.toString(shape) + " k=" + k;
        long[] want = expectedIndices(x, cols, k);
        NDArray values = gpu.get("values" + suffix), indices = gpu.get("indices" + suffix);
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
        assertThat(values.segment().mismatch(host.get("values" + suffix).segment())).as("%s: the host's values, byte for byte", what).isEqualTo(-1);
        assertThat(indices.segment().mismatch(host.get("indices" + suffix).segment())).as("%s: the host's indices", what).isEqualTo(-1);
    }

    /** A router's softmax row: ties broken toward the lower expert, as transformers' topk on a CPU does. */
    @Test
    void aRoutersTiesGoToTheLowerExpert() {
        double[] probs = {0.125, 0.25, 0.125, 0.25, 0.0, 0.25, 0.0, 0.0};
        var x = NDArray.of(DType.F32, probs, 1, 8);
        try (var s = Session.compile(graph(DType.F32, new long[]{1, 8}, 4), CompileOptions.world(1).backend("cuda"))) {
            var out = s.runToHost(Map.of("x0", x));
            assertThat(out.get("indices_0_4").toDoubleArray()).containsExactly(1, 3, 5, 0);
            assertThat(out.get("values_0_4").toDoubleArray()).containsExactly(0.25, 0.25, 0.25, 0.125);
        }
    }
}
