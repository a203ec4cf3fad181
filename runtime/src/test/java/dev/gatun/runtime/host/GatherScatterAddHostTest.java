package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code gather} and {@code scatter_add}, added through the op registry: on the host backend and in the reference
 * interpreter against plain triple loops (every shape padded to rank 3 with leading ones), on random shapes of rank 1
 * to 3, every dim (negative ones too), f64, f32, i32 and i64 beyond 2^53, repeated indices for scatter_add; their
 * refusals at build time and at run time; their JSON round trip.
 */
public class GatherScatterAddHostTest {
    private static final List<DType> TYPES = List.of(DType.F64, DType.F32, DType.I64, DType.I32);

    /** One random case: x's shape, the index's, src's (at least the index's), the dim (0 to rank - 1). */
    record Case(long[] x, long[] index, long[] src, int dim) {
        static Case random(Random rnd, int rank, int dim) {
            long[] x = new long[rank], index = new long[rank], src = new long[rank];
            for (int d = 0; d < rank; d++) {
                x[d] = 1 + rnd.nextInt(4);
                index[d] = d == dim ? 1 + rnd.nextInt(5) : 1 + rnd.nextInt((int) x[d]);   // along dim: larger than x's at times
                src[d] = index[d] + rnd.nextInt(2);
            }
            return new Case(x, index, src, dim);
        }
    }

    static int numel(long[] shape) { return (int) Arrays.stream(shape).reduce(1, (a, b) -> a * b); }

    /** The shape with leading ones to rank 3. */
    static long[] pad(long[] s) {
        long[] p = {1, 1, 1};
        System.arraycopy(s, 0, p, 3 - s.length, s.length);
        return p;
    }

    static int at(long[] s3, long i, long j, long k) { return (int) ((i * s3[1] + j) * s3[2] + k); }

    /** Random values of the type: doubles of many magnitudes (so the order of sums shows), or integers past 2^53 for i64. */
    static NDArray values(DType t, long[] shape, Random rnd, double[] asDouble, long[] asLong) {
        for (int i = 0; i < asLong.length; i++) {
            asLong[i] = t == DType.I64 ? (1L << 60) + rnd.nextInt(1000) - 500 : rnd.nextInt(2000) - 1000;
            asDouble[i] = t == DType.F32 ? (float) (rnd.nextGaussian() * Math.pow(10, rnd.nextInt(9) - 4)) : rnd.nextGaussian() * Math.pow(10, rnd.nextInt(17) - 8);
        }
        return switch (t) {
            case INT64 -> NDArray.of(asLong, shape);
            case INT32 -> NDArray.of(Arrays.stream(asLong).mapToInt(v -> (int) v).toArray(), shape);
            default -> NDArray.of(t, asDouble, shape);
        };
    }

    static NDArray indices(DType t, long[] shape, long bound, Random rnd, long[] ids) {
        for (int i = 0; i < ids.length; i++) ids[i] = rnd.nextInt((int) bound);
        return t == DType.INT64 ? NDArray.of(ids, shape) : NDArray.of(Arrays.stream(ids).mapToInt(v -> (int) v).toArray(), shape);
    }

    static Graph gatherGraph(DType t, DType it, Case c, long dimArg) {
        var g = Gatun.graph("gather");
        g.output("y", g.input("x", t, boxed(c.x())).gather((int) dimArg, g.input("index", it, boxed(c.index()))));
        return g.build();
    }

    static Graph scatterGraph(DType t, DType it, Case c, long dimArg) {
        var g = Gatun.graph("scatter");
        g.output("y", g.input("x", t, boxed(c.x())).scatterAdd((int) dimArg, g.input("index", it, boxed(c.index())), g.input("src", t, boxed(c.src()))));
        return g.build();
    }

    static Object[] boxed(long[] s) { return Arrays.stream(s).boxed().toArray(); }

    @Property(tries = 80)
    void gatherMatchesPlainLoops(@ForAll @IntRange(min = 1, max = 3) int rank, @ForAll @IntRange(min = 0, max = 5) int dimPick,
                                 @ForAll @IntRange(min = 0, max = 3) int type, @ForAll boolean i64Index, @ForAll @IntRange(min = 0, max = 10_000) int seed) {
        int dim = dimPick % rank;
        long dimArg = dimPick >= 3 ? dim - rank : dim;   // negative dims too
        DType t = TYPES.get(type), it = i64Index ? DType.INT64 : DType.INT32;
        var rnd = new Random(seed);
        Case c = Case.random(rnd, rank, dim);
        double[] xd = new double[numel(c.x())];
        long[] xl = new long[xd.length], ids = new long[numel(c.index())];
        var inputs = Map.of("x", values(t, c.x(), rnd, xd, xl), "index", indices(it, c.index(), c.x()[dim], rnd, ids));

        // out[i][j][k] = x[..] with the coordinate along dim replaced by the index, over the shapes padded to rank 3
        long[] x3 = pad(c.x()), i3 = pad(c.index());
        int d3 = dim + 3 - rank;
        double[] wantD = new double[ids.length];
        long[] wantL = new long[ids.length];
        for (long i = 0; i < i3[0]; i++)
            for (long j = 0; j < i3[1]; j++)
                for (long k = 0; k < i3[2]; k++) {
                    int o = at(i3, i, j, k);
                    long v = ids[o];
                    int from = at(x3, d3 == 0 ? v : i, d3 == 1 ? v : j, d3 == 2 ? v : k);
                    wantD[o] = xd[from];
                    wantL[o] = xl[from];
                }
        Graph graph = gatherGraph(t, it, c, dimArg);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().toString()).contains("= gather(").contains("dim=" + dimArg);
            check(s.runToHost(inputs).get("y"), t, c.index(), wantD, wantL, "host");
        }
        check(ReferenceInterpreter.evaluate(graph, List.of(inputs)).getFirst().get("y"), t, c.index(), wantD, wantL, "reference");
    }

    @Property(tries = 80)
    void scatterAddMatchesPlainLoops(@ForAll @IntRange(min = 1, max = 3) int rank, @ForAll @IntRange(min = 0, max = 5) int dimPick,
                                     @ForAll @IntRange(min = 0, max = 3) int type, @ForAll boolean i64Index, @ForAll @IntRange(min = 0, max = 10_000) int seed) {
        int dim = dimPick % rank;
        long dimArg = dimPick >= 3 ? dim - rank : dim;
        DType t = TYPES.get(type), it = i64Index ? DType.INT64 : DType.INT32;
        var rnd = new Random(seed);
        Case c = Case.random(rnd, rank, dim);
        double[] xd = new double[numel(c.x())], sd = new double[numel(c.src())];
        long[] xl = new long[xd.length], sl = new long[sd.length], ids = new long[numel(c.index())];
        var inputs = new HashMap<String, NDArray>();
        inputs.put("x", values(t, c.x(), rnd, xd, xl));
        inputs.put("src", values(t, c.src(), rnd, sd, sl));
        // indices from a range of at most 2 along dim: repeats everywhere
        inputs.put("index", indices(it, c.index(), Math.min(2, c.x()[dim]), rnd, ids));

        // x copied, then for each index element in row-major order: out[.. index ..] += src[same coordinates]
        long[] x3 = pad(c.x()), i3 = pad(c.index()), s3 = pad(c.src());
        int d3 = dim + 3 - rank;
        double[] wantD = xd.clone();
        long[] wantL = xl.clone();
        for (long i = 0; i < i3[0]; i++)
            for (long j = 0; j < i3[1]; j++)
                for (long k = 0; k < i3[2]; k++) {
                    long v = ids[at(i3, i, j, k)];
                    int to = at(x3, d3 == 0 ? v : i, d3 == 1 ? v : j, d3 == 2 ? v : k), from = at(s3, i, j, k);
                    wantD[to] = t == DType.F32 ? (float) ((float) wantD[to] + (float) sd[from]) : wantD[to] + sd[from];
                    wantL[to] = t == DType.INT32 ? (int) (wantL[to] + sl[from]) : wantL[to] + sl[from];
                }
        Graph graph = scatterGraph(t, it, c, dimArg);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().toString()).contains("= scatter_add(").contains("dim=" + dimArg);
            check(s.runToHost(inputs).get("y"), t, c.x(), wantD, wantL, "host");
        }
        check(ReferenceInterpreter.evaluate(graph, List.of(inputs)).getFirst().get("y"), t, c.x(), wantD, wantL, "reference");
    }

    private static void check(NDArray y, DType t, long[] shape, double[] wantD, long[] wantL, String where) {
        assertThat(y.dtype()).isEqualTo(t);
        assertThat(y.shape()).containsExactly(shape);
        for (int i = 0; i < wantD.length; i++) {
            if (t.isFloating()) assertThat(y.get(i)).as("%s element %d", where, i).isEqualTo(wantD[i]);
            else assertThat(y.getLong(i)).as("%s element %d", where, i).isEqualTo(wantL[i]);
        }
    }

    /** The order the sums take decides the f64 result, and it is the index's row-major order: 1 is lost against 1e16 first. */
    @Test
    void repeatedIndicesAddInTheIndexOrder() {
        var c = new Case(new long[]{1}, new long[]{3}, new long[]{3}, 0);
        Graph graph = scatterGraph(DType.F64, DType.INT64, c, 0);
        var inputs = Map.of("x", NDArray.of(new double[]{0.0}, 1), "index", NDArray.of(new long[]{0, 0, 0}, 3),
                "src", NDArray.of(new double[]{1.0, 1e16, -1e16}, 3));
        double want = ((0.0 + 1.0) + 1e16) - 1e16;   // 0.0; the reverse order gives 1.0
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            assertThat(s.runToHost(inputs).get("y").get(0)).isEqualTo(want);
        }
        assertThat(ReferenceInterpreter.evaluate(graph, List.of(inputs)).getFirst().get("y").get(0)).isEqualTo(want);
    }

    @Test
    void anIndexOutOfRangeFailsTheCallNamingTheOpThePositionAndTheBound() {
        var c = new Case(new long[]{2, 3}, new long[]{2, 2}, new long[]{2, 2}, 1);
        Graph gather = gatherGraph(DType.F32, DType.INT64, c, 1), scatter = scatterGraph(DType.F32, DType.INT64, c, 1);
        var x = NDArray.zeros(DType.F32, 2, 3);
        var bad = NDArray.of(new long[]{0, 2, 1, 3}, 2, 2);
        var negative = NDArray.of(new long[]{0, -1, 1, 0}, 2, 2);
        try (var s = Session.compile(gather, CompileOptions.world(1).backend("host"))) {
            assertThatThrownBy(() -> s.runToHost(Map.of("x", x, "index", bad))).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("gather(").hasMessageContaining("index 3 at position 3 [1, 1] of the index")
                    .hasMessageContaining("outside the 3 elements of dimension 1 of x (valid: 0 to 2)");
            assertThatThrownBy(() -> s.runToHost(Map.of("x", x, "index", negative))).hasMessageContaining("index -1 at position 1 [0, 1]");
        }
        try (var s = Session.compile(scatter, CompileOptions.world(1).backend("host"))) {
            assertThatThrownBy(() -> s.runToHost(Map.of("x", x, "index", bad, "src", NDArray.zeros(DType.F32, 2, 2))))
                    .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("scatter_add(")
                    .hasMessageContaining("index 3 at position 3 [1, 1]").hasMessageContaining("(valid: 0 to 2)");
        }
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(gather, List.of(Map.of("x", x, "index", bad)))).isInstanceOf(GraphException.class)
                .hasMessageContaining("gather(").hasMessageContaining("index 3 at position 3");
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(scatter, List.of(Map.of("x", x, "index", negative, "src", NDArray.zeros(DType.F32, 2, 2)))))
                .isInstanceOf(GraphException.class).hasMessageContaining("scatter_add(").hasMessageContaining("index -1 at position 1");
    }

    @Test
    void theGraphSaysWhatIsWrongWithTheOperands() {
        var g = Gatun.graph("bad");
        var x = g.input("x", DType.F32, 4, 8);
        var ids = g.input("ids", DType.INT64, 4, 2);
        assertThatThrownBy(() -> x.gather(2, ids)).isInstanceOf(GraphException.class)
                .hasMessageContaining("gather('x' f32[4,8], dim=2, 'ids' i64[4,2])").hasMessageContaining("dim=2 is outside -2 to 1");
        assertThatThrownBy(() -> x.gather(1, g.input("f", DType.F32, 4, 2))).hasMessageContaining("the index 'f' is f32; it must be i64 (or i32)");
        assertThatThrownBy(() -> x.gather(1, g.input("r1", DType.INT64, 4))).hasMessageContaining("has rank 1 and 'x' rank 2");
        assertThatThrownBy(() -> x.gather(1, g.input("big", DType.INT64, 5, 2))).hasMessageContaining("dimension 0 of 'big' is 5, larger than 4 of 'x'");
        assertThatThrownBy(() -> x.gather(1, g.input("sym", DType.INT64, "n", 2))).hasMessageContaining("symbolic sizes must be the same symbol");
        assertThatThrownBy(() -> g.input("s", DType.F32).gather(0, g.input("s0", DType.INT64))).hasMessageContaining("is a scalar");

        var src = g.input("src", DType.F32, 4, 2);
        assertThatThrownBy(() -> x.scatterAdd(-3, ids, src)).isInstanceOf(GraphException.class)
                .hasMessageContaining("scatter_add('x' f32[4,8], dim=-3, 'ids' i64[4,2], 'src' f32[4,2])").hasMessageContaining("dim=-3 is outside -2 to 1");
        assertThatThrownBy(() -> x.scatterAdd(1, ids, g.input("h", DType.F16, 4, 2))).hasMessageContaining("the source 'h' is f16 and 'x' f32");
        assertThatThrownBy(() -> x.scatterAdd(1, ids, g.input("small", DType.F32, 4, 1))).hasMessageContaining("dimension 1 of 'ids' is 2, larger than 1 of 'small'");
        assertThatThrownBy(() -> x.scatterAdd(1, ids, g.input("r3", DType.F32, 4, 2, 1))).hasMessageContaining("the source 'r3' has rank 3");
        assertThatThrownBy(() -> g.input("b", DType.BOOL, 4, 8).scatterAdd(1, ids, g.input("bs", DType.BOOL, 4, 2))).hasMessageContaining("is bool");
    }

    /** Written and read back: the same graph; a file without dim, or with a dim out of range, is refused naming the node. */
    @Test
    void jsonRoundTripAndBadFiles() {
        var c = new Case(new long[]{3, 4}, new long[]{2, 4}, new long[]{2, 5}, 0);
        for (Graph graph : List.of(gatherGraph(DType.F32, DType.INT64, c, 0), scatterGraph(DType.F32, DType.INT32, c, -2))) {
            String json = GraphJson.toJson(graph);
            String op = graph.name().equals("gather") ? "gather" : "scatter_add", dim = op.equals("gather") ? "0" : "-2";
            assertThat(json).contains("\"op\": \"" + op + "\"").contains("\"dim\": " + dim);
            Graph back = GraphJson.fromJson(json);
            assertThat(back.toString()).isEqualTo(graph.toString());
            assertThat(GraphJson.toJson(back)).isEqualTo(json);
            assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"dim\": " + dim + ",", ""))).isInstanceOf(GraphException.class)
                    .hasMessageContaining("(" + op + ")").hasMessageContaining("missing field 'dim'");
            assertThatThrownBy(() -> GraphJson.fromJson(json.replace("\"dim\": " + dim, "\"dim\": 2"))).isInstanceOf(GraphException.class)
                    .hasMessageContaining("(" + op + ")").hasMessageContaining("dim=2 is outside -2 to 1");
        }
    }
}
