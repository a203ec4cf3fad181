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

import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code expert_matmul}, the routed product of a mixture-of-experts layer: on the host backend and in the reference
 * interpreter against plain float64 loops over random shapes (1 to 4 choices a token, x one row a token, [N, 1, In] or
 * one a choice, ids repeated across tokens and within a token), f64 and f32 exactly (one rounding of a float64 sum),
 * bf16 within its rounding; its refusals at build time and at run time (an id outside the experts, negative too), its
 * JSON round trip and its gradient refused by name.
 */
public class ExpertMatmulHostTest {

    /** x's form: [N, In] (0), [N, 1, In] (1), [N, k, In] (2). */
    static Graph graph(DType t, int form, long tokens, long k, long experts, long out, long in) {
        var g = Gatun.graph("routed");
        var x = switch (form) {
            case 0 -> g.input("x", t, tokens, in);
            case 1 -> g.input("x", t, tokens, 1, in);
            default -> g.input("x", t, tokens, k, in);
        };
        g.output("y", x.expertMatmul(g.input("w", t, experts, out, in), g.input("ids", DType.INT64, tokens, k)));
        return g.build();
    }

    @Property(tries = 60)
    void matchesPlainLoops(@ForAll @IntRange(min = 1, max = 4) int k, @ForAll @IntRange(min = 0, max = 2) int form,
                           @ForAll @IntRange(min = 0, max = 2) int type, @ForAll @IntRange(min = 0, max = 10_000) int seed) {
        DType t = List.of(DType.F64, DType.F32, DType.BF16).get(type);
        var rnd = new Random(seed);
        int tokens = 1 + rnd.nextInt(5), experts = 1 + rnd.nextInt(6), out = 1 + rnd.nextInt(9), in = 1 + rnd.nextInt(17);
        int xRows = form == 2 ? k : 1;
        double[] x = new double[tokens * xRows * in], w = new double[experts * out * in];
        for (int i = 0; i < x.length; i++) x[i] = round(t, rnd.nextGaussian());
        for (int i = 0; i < w.length; i++) w[i] = round(t, rnd.nextGaussian() * Math.pow(10, rnd.nextInt(5) - 2));
        long[] ids = new long[tokens * k];
        // ids from a range of at most 3: repeats across tokens, and within a token at times (the router never repeats, the op may)
        for (int i = 0; i < ids.length; i++) ids[i] = rnd.nextInt(Math.min(3, experts));

        double[] want = new double[tokens * k * out];
        for (int n = 0; n < tokens; n++)
            for (int j = 0; j < k; j++)
                for (int o = 0; o < out; o++) {
                    double dot = 0;
                    for (int i = 0; i < in; i++) dot += x[(n * xRows + (form == 2 ? j : 0)) * in + i] * w[((int) ids[n * k + j] * out + o) * in + i];
                    want[(n * k + j) * out + o] = dot;
                }
        long[] xShape = form == 0 ? new long[]{tokens, in} : new long[]{tokens, xRows, in};
        var inputs = Map.of("x", NDArray.of(t, x, xShape), "w", NDArray.of(t, w, experts, out, in), "ids", NDArray.of(ids, tokens, k));
        Graph graph = graph(t, form, tokens, k, experts, out, in);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().toString()).contains("= expert_matmul(");
            check(s.runToHost(inputs).get("y"), t, new long[]{tokens, k, out}, want, "host");
        }
        check(ReferenceInterpreter.evaluate(graph, List.of(inputs)).getFirst().get("y"), t, new long[]{tokens, k, out}, want, "reference");
    }

    /** A value of dtype t: exact in f64, rounded to float for f32, to 8 significant bits for bf16. */
    static double round(DType t, double v) {
        return switch (t) {
            case FLOAT32 -> (float) v;
            case BFLOAT16 -> NDArray.of(DType.BF16, new double[]{v}, 1).get(0);
            default -> v;
        };
    }

    private static void check(NDArray y, DType t, long[] shape, double[] want, String where) {
        assertThat(y.dtype()).isEqualTo(t);
        assertThat(y.shape()).containsExactly(shape);
        for (int i = 0; i < want.length; i++) {
            if (t == DType.BF16) assertThat(y.get(i)).as("%s element %d", where, i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(Math.abs(want[i]) / 256 + 1e-300));
            else assertThat(y.get(i)).as("%s element %d", where, i).isEqualTo(round(t, want[i]));
        }
    }

    @Test
    void anIdOutsideTheExpertsFailsTheCallNamingItsPositionAndTheExperts() {
        Graph graph = graph(DType.F32, 0, 2, 2, 3, 4, 5);
        var x = NDArray.zeros(DType.F32, 2, 5);
        var w = NDArray.zeros(DType.F32, 3, 4, 5);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            assertThatThrownBy(() -> s.runToHost(Map.of("x", x, "w", w, "ids", NDArray.of(new long[]{0, 2, 1, 3}, 2, 2))))
                    .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("expert_matmul(")
                    .hasMessageContaining("expert id 3 at position 3 [1, 1] of the ids is outside the 3 experts of w (valid: 0 to 2)");
            assertThatThrownBy(() -> s.runToHost(Map.of("x", x, "w", w, "ids", NDArray.of(new long[]{0, -1, 1, 0}, 2, 2))))
                    .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("expert id -1 at position 1 [0, 1]");
            // and the same session still runs good ids
            assertThat(s.runToHost(Map.of("x", x, "w", w, "ids", NDArray.of(new long[]{0, 2, 1, 2}, 2, 2))).get("y").shape()).containsExactly(2, 2, 4);
        }
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(graph, List.of(Map.of("x", x, "w", w, "ids", NDArray.of(new long[]{0, 9, 1, 0}, 2, 2)))))
                .isInstanceOf(GraphException.class).hasMessageContaining("expert_matmul(").hasMessageContaining("expert id 9 at position 1");
    }

    @Test
    void theGraphSaysWhatIsWrongWithTheOperands() {
        var g = Gatun.graph("bad");
        var x = g.input("x", DType.F32, 4, 8);
        var w = g.input("w", DType.F32, 3, 6, 8);
        var ids = g.input("ids", DType.INT64, 4, 2);
        assertThat(x.expertMatmul(w, ids).shape().sizes()).containsExactly(4, 2, 6);
        assertThat(g.input("x3", DType.F32, 4, 2, 8).expertMatmul(w, ids).shape().sizes()).containsExactly(4, 2, 6);
        assertThatThrownBy(() -> x.expertMatmul(g.input("wh", DType.F16, 3, 6, 8), ids)).isInstanceOf(GraphException.class)
                .hasMessageContaining("expert_matmul('x' f32[4,8], 'wh' f16[3,6,8], 'ids' i64[4,2])").hasMessageContaining("the weights 'wh' are f16 and 'x' f32");
        assertThatThrownBy(() -> x.expertMatmul(g.input("w2", DType.F32, 6, 8), ids)).hasMessageContaining("must be [experts, out, in]");
        assertThatThrownBy(() -> x.expertMatmul(g.input("w7", DType.F32, 3, 6, 7), ids)).hasMessageContaining("rows of 'x' have 8 elements and the experts' rows 7");
        assertThatThrownBy(() -> x.expertMatmul(w, g.input("i32", DType.INT32, 4, 2))).hasMessageContaining("the ids 'i32' are i32; they must be i64");
        assertThatThrownBy(() -> x.expertMatmul(w, g.input("i5", DType.INT64, 5, 2))).hasMessageContaining("'x' has 4 tokens and the ids 'i5' 5");
        assertThatThrownBy(() -> x.expertMatmul(w, g.input("i1", DType.INT64, 8))).hasMessageContaining("must be [tokens, k]");
        assertThatThrownBy(() -> g.input("x33", DType.F32, 4, 3, 8).expertMatmul(w, ids)).hasMessageContaining("has 3 rows a token; 1 (one for all k choices) or k=2");
        assertThatThrownBy(() -> g.input("xi", DType.INT32, 4, 8).expertMatmul(g.input("wi", DType.INT32, 3, 6, 8), ids)).hasMessageContaining("is i32; expert_matmul takes f32");
        assertThatThrownBy(() -> x.expertMatmul(g.input("w0", DType.F32, 0, 6, 8), ids)).hasMessageContaining("has no experts");
    }

    @Test
    void symbolicTokensAndTheJsonRoundTrip() {
        var g = Gatun.graph("routed");
        g.output("y", g.input("x", DType.F32, "n", 8).expertMatmul(g.input("w", DType.F32, 3, 6, 8), g.input("ids", DType.INT64, "n", 2)));
        Graph graph = g.build();
        String json = GraphJson.toJson(graph);
        assertThat(json).contains("\"op\": \"expert_matmul\"");
        Graph back = GraphJson.fromJson(json);
        assertThat(back.toString()).isEqualTo(graph.toString());
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            var x = NDArray.of(DType.F32, new double[]{1, 2, 3, 4, 5, 6, 7, 8}, 1, 8);
            double[] wv = new double[3 * 6 * 8];
            for (int i = 0; i < wv.length; i++) wv[i] = i % 7 - 3;
            var y = s.runToHost(Map.of("x", x, "w", NDArray.of(DType.F32, wv, 3, 6, 8), "ids", NDArray.of(new long[]{2, 0}, 1, 2))).get("y");
            // y[0, 0, o] = sum_i x[i] * w[2, o, i]: plain loops
            for (int j = 0; j < 2; j++)
                for (int o = 0; o < 6; o++) {
                    double dot = 0;
                    for (int i = 0; i < 8; i++) dot += (i + 1) * wv[((j == 0 ? 2 : 0) * 6 + o) * 8 + i];
                    assertThat(y.get(j * 6 + o)).isEqualTo(dot);
                }
        }
    }

    @Test
    void itsGradientIsRefusedByName() {
        var g = Gatun.graph("grad");
        var x = g.input("x", DType.F64, 2, 4);
        var y = x.expertMatmul(g.input("w", DType.F64, 3, 5, 4), g.input("ids", DType.INT64, 2, 1));
        assertThatThrownBy(() -> g.grad(y.sum(), x)).isInstanceOf(GraphException.class).hasMessageContaining("expert_matmul has no gradient rule yet");
    }
}
