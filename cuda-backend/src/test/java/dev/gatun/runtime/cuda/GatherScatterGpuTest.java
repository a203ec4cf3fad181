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
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * gather and scatter_add on the GPU against plain loops and against the host backend, bit for bit: random ranks (1 to
 * 4), shapes, dimensions (negative too), i32 and i64 indices, every dtype each takes; the index smaller than x outside
 * dim; scatter_add with many repeated indices and values whose sum depends on its order (so an order other than the
 * index's row-major one fails); the mixture-of-experts shapes (a router's top-k gathered, tokens combined).
 */
@RequiresGpu
class GatherScatterGpuTest {
    static Object[] dims(long[] shape) { return Arrays.stream(shape).boxed().toArray(); }

    static long numel(long[] shape) { return Arrays.stream(shape).reduce(1, (a, b) -> a * b); }

    /** The row-major coordinates of element k of a tensor of {@code shape}. */
    static long[] unravel(long k, long[] shape) {
        long[] at = new long[shape.length];
        for (int d = shape.length - 1; d >= 0; d--) {
            at[d] = k % shape[d];
            k /= shape[d];
        }
        return at;
    }

    static long ravel(long[] at, long[] shape) {
        long k = 0;
        for (int d = 0; d < shape.length; d++) k = k * shape[d] + at[d];
        return k;
    }

    /** Values whose sums depend on their order: large and small magnitudes of both signs, integers near their limits. */
    static NDArray values(DType t, long[] shape, SplittableRandom rnd) {
        var x = NDArray.zeros(t, shape);
        for (long i = 0; i < x.numel(); i++) {
            switch (t) {
                case BOOL -> x.setLong(i, rnd.nextInt(2));
                case INT8 -> x.setLong(i, rnd.nextInt(256) - 128);
                case INT32 -> x.setLong(i, rnd.nextInt());
                case INT64 -> x.setLong(i, rnd.nextLong());
                // f16 keeps below its largest value (65504) however the sums go
                default -> x.set(i, rnd.nextGaussian() * (rnd.nextInt(4) == 0 ? (t == DType.F16 ? 300 : 1e4) : 1) * (rnd.nextInt(8) == 0 ? 1e-3 : 1));
            }
        }
        return x;
    }

    static NDArray index(DType t, long[] shape, long bound, SplittableRandom rnd) {
        var ids = NDArray.zeros(t, shape);
        for (long i = 0; i < ids.numel(); i++) ids.setLong(i, rnd.nextLong(bound));
        return ids;
    }

    /** A shape of rank {@code rank}, sizes 1 to 6 (one of them up to 40). */
    static long[] shape(int rank, SplittableRandom rnd) {
        long[] s = new long[rank];
        for (int d = 0; d < rank; d++) s[d] = 1 + rnd.nextInt(d == rank - 1 && rnd.nextBoolean() ? 40 : 6);
        return s;
    }

    /** No larger than {@code of} in every dimension (but {@code free}, where it is 1 to 7), often equal. */
    static long[] within(long[] of, int free, SplittableRandom rnd) {
        long[] s = of.clone();
        for (int d = 0; d < s.length; d++) s[d] = d == free ? 1 + rnd.nextInt(7) : rnd.nextBoolean() ? of[d] : 1 + rnd.nextLong(of[d]);
        return s;
    }

    static Map<String, NDArray> run(Graph g, Map<String, NDArray> in, String backend) {
        try (var s = Session.compile(g, CompileOptions.world(1).backend(backend))) {
            if (backend.equals("cuda")) s.runToHost(in);   // the second call replays
            return s.runToHost(in);
        }
    }

    static void assertBitsEqual(NDArray got, NDArray want, String what) {
        assertThat(got.dtype()).isEqualTo(want.dtype());
        assertThat(got.shape()).as(what).isEqualTo(want.shape());
        for (long i = 0; i < want.numel(); i++)
            if (want.dtype().isFloating() && Double.isNaN(want.get(i)))
                assertThat(got.get(i)).as("%s: element %d", what, i).isNaN();   // a NaN's payload is the hardware's
            else if (want.dtype().isFloating())
                assertThat(Double.doubleToRawLongBits(got.get(i))).as("%s: element %d (%s, want %s)", what, i, got.get(i), want.get(i))
                        .isEqualTo(Double.doubleToRawLongBits(want.get(i)));
            else assertThat(got.getLong(i)).as("%s: element %d", what, i).isEqualTo(want.getLong(i));
    }

    /** Calls a graph: its expected outputs by name, and a description of each for a failure's message. */
    record Calls(dev.gatun.dsl.GraphBuilder graph, Map<String, NDArray> inputs, Map<String, NDArray> expected, Map<String, String> what) {
        Calls(String name) { this(Gatun.graph(name), new java.util.LinkedHashMap<>(), new java.util.LinkedHashMap<>(), new java.util.LinkedHashMap<>()); }

        /** The GPU's outputs against the expected values and the host backend's, bit for bit. */
        void check() {
            Graph g = graph.build();
            var gpu = run(g, inputs, "cuda");
            var host = run(g, inputs, "host");
            for (var e : expected.entrySet()) {
                assertBitsEqual(gpu.get(e.getKey()), e.getValue(), what.get(e.getKey()));
                assertBitsEqual(gpu.get(e.getKey()), host.get(e.getKey()), what.get(e.getKey()) + " (host backend)");
            }
        }
    }

    /** Random gathers, twelve a dtype, as the calls of one graph a dtype. */
    @Test
    void gatherCopiesTheIndexedElementsOfEveryDtype() {
        var rnd = new SplittableRandom(23);
        for (DType t : DType.values()) {
            var calls = new Calls("pick");
            for (int c = 0; c < 12; c++) {
                DType idType = c % 3 == 0 ? DType.I32 : DType.I64;
                int rank = 1 + rnd.nextInt(4), dim = rnd.nextInt(rank);
                long[] xs = shape(rank, rnd), is = within(xs, dim, rnd);
                NDArray x = values(t, xs, rnd), ids = index(idType, is, xs[dim], rnd);
                int written = rnd.nextBoolean() ? dim : dim - rank;   // negative: counted from the end
                var g = calls.graph();
                g.output("y" + c, g.input("x" + c, t, dims(xs)).gather(written, g.input("ids" + c, idType, dims(is))));
                calls.inputs().put("x" + c, x);
                calls.inputs().put("ids" + c, ids);
                NDArray want = NDArray.zeros(t, is);
                for (long k = 0; k < want.numel(); k++) {
                    long[] at = unravel(k, is);
                    at[dim] = ids.getLong(k);
                    if (t.isFloating()) want.set(k, x.get(ravel(at, xs)));
                    else want.setLong(k, x.getLong(ravel(at, xs)));
                }
                calls.expected().put("y" + c, want);
                calls.what().put("y" + c, "gather " + t + " x" + Arrays.toString(xs) + " dim " + written + " index " + idType + Arrays.toString(is));
            }
            calls.check();
        }
    }

    /** Random scatter_adds, fifteen a dtype, as the calls of one graph a dtype. */
    @Test
    void scatterAddSumsInTheIndexsRowMajorOrderBitForBit() {
        var rnd = new SplittableRandom(29);
        for (DType t : List.of(DType.F32, DType.F16, DType.BF16, DType.F64, DType.I8, DType.I32, DType.I64)) {
            var calls = new Calls("combine");
            for (int c = 0; c < 15; c++) {
                DType idType = c % 3 == 0 ? DType.I32 : DType.I64;
                int rank = 1 + rnd.nextInt(4), dim = rnd.nextInt(rank);
                long[] xs = shape(rank, rnd);
                long[] is = within(xs, dim, rnd);
                long[] ss = is.clone();   // the source: the index's shape, or larger in some dimensions
                for (int d = 0; d < rank; d++) if (rnd.nextInt(3) == 0) ss[d] += 1 + rnd.nextInt(3);
                long bound = Math.min(xs[dim], 1 + rnd.nextInt(3));   // few targets along dim: many repeats
                NDArray x = values(t, xs, rnd), ids = index(idType, is, bound, rnd), src = values(t, ss, rnd);
                var g = calls.graph();
                g.output("y" + c, g.input("x" + c, t, dims(xs)).scatterAdd(dim, g.input("ids" + c, idType, dims(is)), g.input("src" + c, t, dims(ss))));
                calls.inputs().putAll(Map.of("x" + c, x, "ids" + c, ids, "src" + c, src));
                NDArray want = NDArray.zeros(t, xs);
                for (long p = 0; p < x.numel(); p++) {
                    if (t.isFloating()) want.set(p, x.get(p));
                    else want.setLong(p, x.getLong(p));
                }
                for (long k = 0; k < ids.numel(); k++) {   // the index's row-major order, each sum rounded to the dtype
                    long[] at = unravel(k, is);
                    long from = ravel(at, ss);
                    at[dim] = ids.getLong(k);
                    long to = ravel(at, xs);
                    if (t.isFloating()) want.set(to, want.get(to) + src.get(from));
                    else want.setLong(to, want.getLong(to) + src.getLong(from));
                }
                calls.expected().put("y" + c, want);
                calls.what().put("y" + c, "scatter_add " + t + " x" + Arrays.toString(xs) + " dim " + dim + " index " + idType + Arrays.toString(is)
                        + " src" + Arrays.toString(ss));
            }
            calls.check();
        }
    }

    /**
     * A mixture of experts' shapes: the routing weights of each token's top-k experts gathered from [tokens, experts],
     * and the k weighted copies of each token summed back into [tokens, hidden] (index rows repeat the token's id).
     */
    @Test
    void dispatchAndCombineOfAMixtureOfExperts() {
        var rnd = new SplittableRandom(31);
        int tokens = 12, experts = 60, k = 4, hidden = 64;
        for (DType t : List.of(DType.F32, DType.BF16)) {
            var g = Gatun.graph("moe");
            var probs = g.input("probs", DType.F32, tokens, experts);
            var top = probs.topk(k);
            g.output("weights", probs.gather(1, top.indices()));
            g.output("combined", g.input("zeros", t, tokens, hidden).scatterAdd(0, g.input("rows", DType.I64, tokens * k, hidden),
                    g.input("copies", t, tokens * k, hidden)));
            NDArray p = values(DType.F32, new long[]{tokens, experts}, rnd), copies = values(t, new long[]{tokens * k, hidden}, rnd);
            NDArray rows = NDArray.zeros(DType.I64, tokens * k, hidden);
            for (long i = 0; i < rows.numel(); i++) rows.setLong(i, (i / hidden) / k);   // copy c is of token c / k
            var in = Map.of("probs", p, "zeros", NDArray.zeros(t, tokens, hidden), "rows", rows, "copies", copies);
            var gpu = run(g.build(), in, "cuda");
            var host = run(g.build(), in, "host");
            assertBitsEqual(gpu.get("weights"), host.get("weights"), t + " weights");
            NDArray want = NDArray.zeros(t, tokens, hidden);
            for (int c = 0; c < tokens * k; c++)
                for (int h = 0; h < hidden; h++) want.set((long) (c / k) * hidden + h, want.get((long) (c / k) * hidden + h) + copies.get((long) c * hidden + h));
            assertBitsEqual(gpu.get("combined"), want, t + " combined");
            assertBitsEqual(gpu.get("combined"), host.get("combined"), t + " combined (host backend)");
        }
    }
}
