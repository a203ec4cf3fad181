package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.ExternBuffer;
import dev.gatun.lowering.ExternCall;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.Random;

import static dev.gatun.ir.DType.F64;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.data.Offset.offset;

/**
 * Lowering's two rules around a tied embedding's gradient: a product read only transposed is computed transposed
 * ({@code (x^T dy)^T} as {@code dy^T x}, so its readers read it row by row), and {@code add(x, scatter_add(zeros, index,
 * src))} is one scatter_add into x. Values in float64 against plain loops and the reference interpreter (the graph op
 * by op, no lowering), the gradient of a tied embedding against finite differences, and the cases where either rule
 * would be wrong (the product read as it is too, the scatter's result read again, x broadcast, zeros that are not).
 */
class VocabularyGradientLoweringTest {
    static final String TRANSPOSED = "computed transposed", INTO = "computed as scatter_add(";

    static LoweredGraph lower(Graph g) { return Lowering.lower(g, LoweringOptions.world(1)); }

    static boolean decided(LoweredGraph l, String what) { return l.decisions().stream().anyMatch(d -> d.contains(what)); }

    static double[] random(Random rnd, int n) {
        double[] v = new double[n];
        for (int i = 0; i < n; i++) v[i] = rnd.nextGaussian();
        return v;
    }

    static Map<String, NDArray> run(Graph g, Map<String, NDArray> in) {
        try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
            return s.runToHost(in);
        }
    }

    /** Every output of the host backend equal, within 1e-12 relative, to the reference interpreter's. */
    static void matchesReference(Graph g, Map<String, NDArray> in) {
        Map<String, NDArray> host = run(g, in), ref = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst();
        for (String name : g.outputs().keySet()) {
            double[] h = host.get(name).toDoubleArray(), r = ref.get(name).toDoubleArray();
            assertThat(h).as("output %s", name).hasSameSizeAs(r);
            for (int i = 0; i < h.length; i++) assertThat(h[i]).as("%s[%d]", name, i).isCloseTo(r[i], offset(1e-12 * (1 + Math.abs(r[i]))));
        }
    }

    @Test
    void aProductReadOnlyTransposedIsComputedTransposedWithTheSameValues() {
        var g = Gatun.graph("weight_grad");
        Tensor x = g.input("x", F64, 5, 3), dy = g.input("dy", F64, 5, 4), c = g.input("c", F64, 4, 3);
        g.output("y", x.t().matmul(dy).t().mul(2).add(c));   // (x^T dy)^T: [4, 3]
        Graph graph = g.build();
        LoweredGraph l = lower(graph);
        assertThat(decided(l, TRANSPOSED)).as("decisions %s", l.decisions()).isTrue();
        ExternBuffer product = l.buffers().stream().filter(b -> b instanceof ExternBuffer e && e.call() instanceof ExternCall.Matmul)
                .map(ExternBuffer.class::cast).findFirst().orElseThrow();
        assertThat(product.type().shape().sizes()).as("the product is made in its readers' shape").containsExactly(4, 3);
        var rnd = new Random(1);
        double[] xs = random(rnd, 15), dys = random(rnd, 20), cs = random(rnd, 12);
        double[] y = run(graph, Map.of("x", NDArray.of(xs, 5, 3), "dy", NDArray.of(dys, 5, 4), "c", NDArray.of(cs, 4, 3))).get("y").toDoubleArray();
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 3; j++) {
                double acc = 0;
                for (int t = 0; t < 5; t++) acc += dys[t * 4 + i] * xs[t * 3 + j];
                assertThat(y[i * 3 + j]).as("y[%d][%d]", i, j).isCloseTo(2 * acc + cs[i * 3 + j], offset(1e-12));
            }
    }

    @Test
    void aPackedProductReadTransposedTakesBothTransposeFlags() {
        var g = Gatun.graph("both_flags");
        Tensor a = g.input("a", F64, 3, 6), b = g.input("b", F64, 6, 2);
        g.output("y", a.matmul(b).t().exp());
        Graph graph = g.build();
        LoweredGraph l = lower(graph);
        assertThat(l.buffers().stream().anyMatch(buf -> buf instanceof ExternBuffer e && e.call() instanceof ExternCall.Matmul(var ta, var tb) && ta && tb))
                .as("b^T a^T reads both operands transposed as they lie: %s", l.decisions()).isTrue();
        var rnd = new Random(2);
        matchesReference(graph, Map.of("a", NDArray.of(random(rnd, 18), 3, 6), "b", NDArray.of(random(rnd, 12), 6, 2)));
    }

    @Test
    void aProductAlsoReadAsItIsOrReturnedStaysAsItIs() {
        var g = Gatun.graph("read_both_ways");
        Tensor a = g.input("a", F64, 4, 5), b = g.input("b", F64, 5, 3);
        Tensor p = a.matmul(b);
        g.output("y", p.t().sin());
        g.output("z", p.cos());
        Graph graph = g.build();
        assertThat(decided(lower(graph), TRANSPOSED)).isFalse();
        var rnd = new Random(3);
        matchesReference(graph, Map.of("a", NDArray.of(random(rnd, 20), 4, 5), "b", NDArray.of(random(rnd, 15), 5, 3)));
        var h = Gatun.graph("returned");
        Tensor q = h.input("a", F64, 4, 5).matmul(h.input("b", F64, 5, 3));
        h.output("p", q);
        h.output("y", q.t().sin());
        assertThat(decided(lower(h.build()), TRANSPOSED)).isFalse();
    }

    /** x [6, 3] plus rows of src [4, 3] scattered by idx into zeros, x a product of the input (read again when {@code reread}). */
    static Graph scatterGraph(boolean reread, boolean zerosFirst) {
        var g = Gatun.graph("scatter_into");
        Tensor x = g.input("x", F64, 6, 3).mul(2), src = g.input("src", F64, 4, 3), idx = g.input("idx", DType.I64, 4, 3);
        Tensor scattered = g.scalar(0, F64).expand(6, 3).scatterAdd(0, idx, src);
        g.output("y", (zerosFirst ? scattered.add(x) : x.add(scattered)).exp());
        if (reread) g.output("x2", x.sin());
        return g.build();
    }

    static Map<String, NDArray> scatterInputs(Random rnd, long[] ids) {
        for (int i = 0; i < ids.length; i++) ids[i] = rnd.nextInt(6);
        return Map.of("x", NDArray.of(random(rnd, 18), 6, 3), "src", NDArray.of(random(rnd, 12), 4, 3), "idx", NDArray.of(ids, 4, 3));
    }

    @Test
    void aSumWithAScatterIntoZerosIsOneScatterIntoTheOtherAddend() {
        for (boolean zerosFirst : new boolean[]{false, true})
            for (boolean reread : new boolean[]{false, true}) {
                Graph graph = scatterGraph(reread, zerosFirst);
                LoweredGraph l = lower(graph);
                assertThat(decided(l, INTO)).as("zeros first %s, x read again %s: %s", zerosFirst, reread, l.decisions()).isTrue();
                assertThat(l.buffers().stream().filter(b -> b instanceof ExternBuffer e && e.call().opName().equals("scatter_add")))
                        .as("one scatter_add").hasSize(1);
                var rnd = new Random(zerosFirst ? 4 : 5);
                long[] ids = new long[12];
                Map<String, NDArray> in = scatterInputs(rnd, ids);
                Map<String, NDArray> out = run(graph, in);
                double[] x = in.get("x").toDoubleArray(), src = in.get("src").toDoubleArray(), y = out.get("y").toDoubleArray();
                double[] want = new double[18];
                for (int i = 0; i < 18; i++) want[i] = 2 * x[i];
                for (int i = 0; i < 4; i++)
                    for (int j = 0; j < 3; j++) want[(int) ids[i * 3 + j] * 3 + j] += src[i * 3 + j];
                for (int i = 0; i < 18; i++) assertThat(y[i]).as("y[%d]", i).isCloseTo(Math.exp(want[i]), offset(1e-12 * Math.exp(want[i])));
                if (reread) {
                    double[] x2 = out.get("x2").toDoubleArray();
                    for (int i = 0; i < 18; i++) assertThat(x2[i]).as("x read again, unchanged: x2[%d]", i).isCloseTo(Math.sin(2 * x[i]), offset(1e-15));
                }
            }
    }

    @Test
    void theRuleKeepsOffWhereItWouldBeWrong() {
        // the scatter's result read again
        var g1 = Gatun.graph("scatter_read_twice");
        Tensor s1 = g1.scalar(0, F64).expand(6, 3).scatterAdd(0, g1.input("idx", DType.I64, 4, 3), g1.input("src", F64, 4, 3));
        g1.output("y", g1.input("x", F64, 6, 3).add(s1));
        g1.output("s", s1.neg());
        // x broadcast along the rows
        var g2 = Gatun.graph("scatter_broadcast");
        Tensor s2 = g2.scalar(0, F64).expand(6, 3).scatterAdd(0, g2.input("idx", DType.I64, 4, 3), g2.input("src", F64, 4, 3));
        g2.output("y", g2.input("x", F64, 1, 3).add(s2));
        // a scatter into ones
        var g3 = Gatun.graph("scatter_into_ones");
        Tensor s3 = g3.scalar(1, F64).expand(6, 3).scatterAdd(0, g3.input("idx", DType.I64, 4, 3), g3.input("src", F64, 4, 3));
        g3.output("y", g3.input("x", F64, 6, 3).add(s3));
        var rnd = new Random(6);
        for (Graph graph : List.of(g1.build(), g2.build(), g3.build())) {
            assertThat(decided(lower(graph), INTO)).as(graph.name()).isFalse();
            long[] ids = new long[12];
            for (int i = 0; i < ids.length; i++) ids[i] = rnd.nextInt(6);
            long[] xShape = graph.name().equals("scatter_broadcast") ? new long[]{1, 3} : new long[]{6, 3};
            matchesReference(graph, Map.of("x", NDArray.of(random(rnd, GradCheck.numel(xShape)), xShape), "src", NDArray.of(random(rnd, 12), 4, 3),
                    "idx", NDArray.of(ids, 4, 3)));
        }
    }

    /** A tied embedding: rows looked up, a product with the table's transpose (a head): both rules fire on its gradient. */
    static Tensor tied(Tensor table, Tensor tokens) { return table.indexSelect(0, tokens).tanh().matmul(table.t()); }

    @Test
    void aTiedEmbeddingsGradientTakesBothRulesAndMatchesFiniteDifferences() {
        GraphBuilder g = Gatun.graph("tied_plan");
        Tensor table = g.input("table", F64, 7, 3), tokens = g.input("tokens", DType.I32, 5);
        Tensor loss = tied(table, tokens).mul(tied(table, tokens)).sum();
        g.output("d", g.grad(loss, table)[0]);
        LoweredGraph l = lower(g.build());
        assertThat(decided(l, TRANSPOSED)).as("the head's gradient: %s", l.decisions()).isTrue();
        assertThat(decided(l, INTO)).as("the lookup's gradient: %s", l.decisions()).isTrue();
        GradCheck.of("tied_embedding").f64("table", 7, 3).ints("tokens", DType.I32, new long[]{3, 0, 3, 6, 1}, 5)
                .check(in -> tied(in[0], in[1]));
    }
}
