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
import dev.gatun.runtime.testing.Attentions;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code attention} of one query position over a cache, on the host backend and in the reference interpreter, against
 * plain float64 loops ({@link Attentions}); its refusals at graph-building time and at run time.
 */
public class AttentionHostTest {

    /** The graph: q [b, r, d], kT [b, d, len], v [b, len, d], an i32 position; q scaled by 2 first so it is computed. */
    public static Graph graph(DType t, DType pos, int b, int r, int d, int len, double scale) {
        var g = Gatun.graph("attend");
        var q = g.input("q", t, b, r, d).mul(2);
        g.output("y", q.attention(g.input("kT", t, b, d, len), g.input("v", t, b, len, d), g.input("pos", pos, 1), scale));
        return g.build();
    }

    public static Map<String, NDArray> inputs(DType t, DType pos, int b, int r, int d, int len, int position, long seed) {
        return Map.of("q", NDArray.random(t, seed, b, r, d), "kT", NDArray.random(t, seed + 1, b, d, len),
                "v", NDArray.random(t, seed + 2, b, len, d), "pos", NDArray.of(pos, new double[]{position}, 1));
    }

    public static double[] expected(Map<String, NDArray> in, int b, int r, int d, int len, int position, double scale) {
        double[] q = in.get("q").toDoubleArray();
        for (int i = 0; i < q.length; i++) q[i] *= 2;
        return Attentions.expected(q, in.get("kT").toDoubleArray(), in.get("v").toDoubleArray(), b, r, d, len, position, scale);
    }

    @Property(tries = 40)
    void theHostAndTheReferenceMatchPlainLoops(@ForAll @IntRange(min = 1, max = 3) int b, @ForAll @IntRange(min = 1, max = 6) int r,
                                               @ForAll @IntRange(min = 1, max = 9) int d, @ForAll @IntRange(min = 1, max = 40) int len,
                                               @ForAll @IntRange(min = 0, max = 39) int at, @ForAll @IntRange(min = 0, max = 2) int type) {
        int position = at % len;
        DType t = List.of(DType.F32, DType.BF16, DType.F64).get(type);
        double scale = 1 / Math.sqrt(d);
        Graph graph = graph(t, DType.I32, b, r, d, len, scale);
        var in = inputs(t, DType.I32, b, r, d, len, position, 7L * len + position);
        double[] want = expected(in, b, r, d, len, position, scale);
        double tol = t == DType.BF16 ? 2e-2 : 1e-5;
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().toString()).contains("= attention(", "up to pos");
            NDArray y = s.runToHost(in).get("y");
            assertThat(y.shape()).containsExactly(b, r, d);
            assertThat(y.dtype()).isEqualTo(t);
            assertThat(NDArray.of(DType.F64, want, b, r, d).mismatch(y, tol, tol)).isNull();
        }
        NDArray ref = ReferenceInterpreter.evaluate(graph, List.of(in)).getFirst().get("y");
        assertThat(NDArray.of(DType.F64, want, b, r, d).mismatch(ref, tol, tol)).isNull();
    }

    /**
     * Operands that are views: the keys given as [B, S, d] and transposed, the values a slice of a wider tensor, q a
     * reshape of a computed tensor. The step takes packed operands, so the plan copies the views first (and says so);
     * the result is still the plain loops'.
     */
    @Test
    void viewsAsOperandsArePackedFirst() {
        int b = 2, r = 3, d = 4, len = 6, position = 4;
        var g = Gatun.graph("views");
        var q = g.input("q", DType.F32, b, r * d).mul(2).reshape(b, r, d);
        var kT = g.input("k", DType.F32, b, len, d).transpose(1, 2);
        var v = g.input("vv", DType.F32, b, len, 2 * d).slice(2, d, 2 * d);
        g.output("y", q.attention(kT, v, g.input("pos", DType.I32, 1), 0.5));
        NDArray qIn = NDArray.random(DType.F32, 1, b, r * d), k = NDArray.random(DType.F32, 2, b, len, d), vv = NDArray.random(DType.F32, 3, b, len, 2 * d);
        double[] qd = qIn.toDoubleArray(), kd = k.toDoubleArray(), vd = vv.toDoubleArray();
        double[] q2 = new double[qd.length], kTd = new double[b * d * len], vs = new double[b * len * d];
        for (int i = 0; i < qd.length; i++) q2[i] = 2 * qd[i];
        for (int x = 0; x < b; x++)
            for (int s = 0; s < len; s++)
                for (int e = 0; e < d; e++) {
                    kTd[(x * d + e) * len + s] = kd[(x * len + s) * d + e];
                    vs[(x * len + s) * d + e] = vd[(x * len + s) * 2 * d + d + e];
                }
        double[] want = Attentions.expected(q2, kTd, vs, b, r, d, len, position, 0.5);
        try (var sess = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(sess.plan().toString()).contains("= attention(");
            NDArray y = sess.runToHost(Map.of("q", qIn, "k", k, "vv", vv, "pos", NDArray.of(DType.I32, new double[]{position}, 1))).get("y");
            assertThat(NDArray.of(DType.F64, want, b, r, d).mismatch(y, 1e-5, 1e-5)).isNull();
        }
    }

    /** Only the positions up to the given one count: changing a later key or value changes nothing. */
    @Test
    void positionsAfterTheOneGivenAreMasked() {
        var in = new java.util.HashMap<>(inputs(DType.F32, DType.I64, 2, 4, 8, 16, 5, 3));
        Graph graph = graph(DType.F32, DType.I64, 2, 4, 8, 16, 0.5);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            NDArray before = s.runToHost(in).get("y");
            NDArray kT = in.get("kT").copy(), v = in.get("v").copy();
            for (int b = 0; b < 2; b++)
                for (int p = 6; p < 16; p++)
                    for (int e = 0; e < 8; e++) {
                        kT.set((b * 8L + e) * 16 + p, 1e4);
                        v.set((b * 16L + p) * 8 + e, -1e4);
                    }
            in.put("kT", kT);
            in.put("v", v);
            assertThat(before.mismatch(s.runToHost(in).get("y"), 0, 0)).isNull();
        }
    }

    @Test
    void aPositionOutsideTheCacheFailsTheCallNamingIt() {
        Graph graph = graph(DType.F32, DType.I32, 1, 2, 4, 8, 0.5);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            for (int bad : new int[]{8, -1})
                assertThatThrownBy(() -> s.runToHost(inputs(DType.F32, DType.I32, 1, 2, 4, 8, bad, 1)))
                        .isInstanceOf(GatunRuntimeException.class)
                        .hasMessageContaining("attention(").hasMessageContaining("position " + bad).hasMessageContaining("0 to 7");
        }
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(graph, List.of(inputs(DType.F32, DType.I32, 1, 2, 4, 8, 8, 1))))
                .isInstanceOf(GraphException.class).hasMessageContaining("attention(").hasMessageContaining("position 8");
    }

    @Test
    void badOperandsAreRefusedWhenTheGraphIsBuilt() {
        var g = Gatun.graph("bad");
        var q = g.input("q", DType.F32, 2, 4, 8);
        var kT = g.input("kT", DType.F32, 2, 8, 16);
        var v = g.input("v", DType.F32, 2, 16, 8);
        var pos = g.input("pos", DType.I32, 1);
        assertThatThrownBy(() -> q.attention(g.input("k", DType.F32, 2, 16, 8), v, pos, 1))
                .isInstanceOf(GraphException.class).hasMessageContaining("attention(").hasMessageContaining("head size");
        assertThatThrownBy(() -> q.attention(kT, g.input("v2", DType.BF16, 2, 16, 8), pos, 1))
                .isInstanceOf(GraphException.class).hasMessageContaining("is bf16 but q is f32");
        assertThatThrownBy(() -> q.attention(kT, v, g.input("fpos", DType.F32, 1), 1))
                .isInstanceOf(GraphException.class).hasMessageContaining("must be i32 or i64");
        assertThatThrownBy(() -> q.attention(kT, g.input("v3", DType.F32, 2, 12, 8), pos, 1))
                .isInstanceOf(GraphException.class).hasMessageContaining("v has 12 positions but kT 16");
        assertThatThrownBy(() -> g.input("q4", DType.F32, 8).attention(kT, v, pos, 1))
                .isInstanceOf(GraphException.class).hasMessageContaining("1 dimensions");
        assertThatThrownBy(() -> q.attention(kT, v, pos, Double.NaN))
                .isInstanceOf(GraphException.class).hasMessageContaining("scale must be finite");
    }

    @Test
    void theScaleSurvivesJson() {
        Graph graph = graph(DType.BF16, DType.I64, 1, 2, 8, 4, 0.125);
        Graph back = GraphJson.fromJson(GraphJson.toJson(graph));
        assertThat(back.toString()).isEqualTo(graph.toString()).contains("scale=0.125");
    }
}
