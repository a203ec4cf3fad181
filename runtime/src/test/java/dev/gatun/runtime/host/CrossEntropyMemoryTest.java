package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.lowering.ComputedBuffer;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Planner;
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
 * What keeps a cross-entropy's backward pass from holding copies of the logits: {@code detach} (no gradient through a
 * value), {@code logSumExp} and the cross-entropy written with it (the max detached, the target's logit picked before a
 * widening cast), and lowering's recomputed values (a widening cast, and short pointwise chains over one and a row's
 * values), which pointwise readers compute instead of reading a stored wide copy.
 * Values and gradients in float64 against plain loops and finite differences.
 */
class CrossEntropyMemoryTest {

    @Test
    void aDetachedValueCarriesNoGradient() {
        var g = Gatun.graph("detach");
        Tensor x = g.input("x", F64, 4);
        g.output("y", x.mul(x.detach()).sum());
        g.output("d", g.grad(x.mul(x.detach()).sum(), x)[0]);
        double[] xs = {0.5, -1.25, 2, 3};
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            var out = s.runToHost(Map.of("x", NDArray.of(xs, 4)));
            double sum = 0;
            for (double v : xs) sum += v * v;
            assertThat(out.get("y").get(0)).isCloseTo(sum, offset(1e-12));
            double[] d = out.get("d").toDoubleArray();
            for (int i = 0; i < 4; i++) assertThat(d[i]).as("d/dx of x * detach(x) is detach(x) alone: d[%d]", i).isCloseTo(xs[i], offset(1e-15));
        }
    }

    @Test
    void logSumExpMatchesPlainLoopsAndFiniteDifferences() {
        var g = Gatun.graph("lse");
        Tensor x = g.input("x", F64, 3, 5);
        g.output("y", x.logSumExp(-1));
        var rnd = new Random(8);
        double[] xs = new double[15];
        for (int i = 0; i < xs.length; i++) xs[i] = rnd.nextGaussian() * 30;   // large: the shift matters
        xs[6] = xs[7] = 500;                                                     // a tie at a large max
        double[] y = run(g.build(), Map.of("x", NDArray.of(xs, 3, 5))).get("y").toDoubleArray();
        for (int r = 0; r < 3; r++) {
            double m = Double.NEGATIVE_INFINITY, s = 0;
            for (int c = 0; c < 5; c++) m = Math.max(m, xs[r * 5 + c]);
            for (int c = 0; c < 5; c++) s += Math.exp(xs[r * 5 + c] - m);
            assertThat(y[r]).as("row %d", r).isCloseTo(m + Math.log(s), offset(1e-12 * (1 + Math.abs(m))));
        }
        GradCheck.of("logSumExp").f64("x", 2, 3, 5).check(in -> in[0].logSumExp(-1));
        GradCheck.of("logSumExpTie").f64("x", new double[]{1, 3, 3, -2, 0.5, 3}, 2, 3).check(in -> in[0].logSumExp(-1));
    }

    @Test
    void crossEntropyWithTiedLargestLogitsMatchesFiniteDifferences() {
        GradCheck.of("ceTie").f64("logits", new double[]{2, 2, -1, 0.5, 4, 4, 4, 1}, 2, 4).ints("t", DType.I64, new long[]{1, 3}, 2)
                .check(x -> x[0].crossEntropy(x[1]));
    }

    /** Classes: enough that a row's values (the max, the sum) are at most a sixteenth of the logits, as a vocabulary's are. */
    static final int C = 40;

    /** bf16 logits cast to f32, as a mixed-precision model's head gives them; the gradient with respect to the bf16 logits. */
    static Graph castCrossEntropy() {
        var g = Gatun.graph("ce_bf16");
        Tensor logits = g.input("logits", DType.BF16, 3, C).mul(1), t = g.input("t", DType.I64, 3);   // mul: computed, as a product's result is
        Tensor loss = logits.cast(DType.F32).crossEntropy(t);
        g.output("loss", loss);
        g.output("d", g.grad(loss, logits)[0].cast(DType.F32));
        return g.build();
    }

    @Test
    void crossEntropyOfCastLogitsPicksTheTargetBeforeTheCastAndKeepsNoWideCopy() {
        Graph graph = castCrossEntropy();
        Node gather = graph.nodes().stream().filter(n -> n.op() instanceof Op.Registered r && r.opName().equals("gather")).findFirst().orElseThrow();
        assertThat(gather.input(0).type().dtype()).as("the pick reads the bf16 logits").isEqualTo(DType.BF16);
        LoweredGraph l = Lowering.lower(graph, LoweringOptions.world(1));
        var plan = Planner.plan(l);
        assertThat(plan.buffers().stream().filter(b -> b.type().dtype() == DType.F32 && b.type().shape().numel() == 3 * C && plan.slots().stream()
                .anyMatch(s -> s.buffer() == b))).as("of [3, C] f32 buffers, the output alone (the backward pass computes the exponentials again): %s", plan)
                .hasSize(1);
        assertThat(l.decisions()).anyMatch(d -> d.contains("exp: not made for pointwise loops"));
        var rnd = new Random(9);
        double[] xs = new double[3 * C];
        for (int i = 0; i < xs.length; i++) xs[i] = (float) rnd.nextGaussian() * 4;
        var in = NDArray.of(DType.BF16, xs, 3, C);
        double[] x = in.toDoubleArray();   // the bf16 values
        long[] t = {5, 0, 39};
        var out = run(graph, Map.of("logits", in, "t", NDArray.of(t, 3)));
        double loss = 0;
        double[] d = new double[3 * C];
        for (int r = 0; r < 3; r++) {
            double m = Double.NEGATIVE_INFINITY, s = 0;
            for (int c = 0; c < C; c++) m = Math.max(m, x[r * C + c]);
            for (int c = 0; c < C; c++) s += Math.exp(x[r * C + c] - m);
            loss += (m + Math.log(s) - x[r * C + (int) t[r]]) / 3;
            for (int c = 0; c < C; c++) d[r * C + c] = (Math.exp(x[r * C + c] - m) / s - (c == t[r] ? 1 : 0)) / 3;
        }
        assertThat(out.get("loss").get(0)).isCloseTo(loss, offset(1e-5 * (1 + loss)));
        double[] got = out.get("d").toDoubleArray();
        for (int i = 0; i < 3 * C; i++) assertThat(got[i]).as("d[%d]", i).isCloseTo(d[i], offset(1e-2 * Math.abs(d[i]) + 1e-3));
    }

    @Test
    void aWideningCastIsRecomputedByPointwiseReadersAndMadeForAReduction() {
        for (boolean reduced : new boolean[]{false, true}) {
            var g = Gatun.graph("widen");
            Tensor a = g.input("a", DType.BF16, 4, 8), b = g.input("b", DType.BF16, 8, 5);
            Tensor wide = a.matmul(b).cast(F64);
            Tensor later = g.input("c", F64, 5, 5).matmul(g.input("e", F64, 5, 5));   // a product between the readers
            g.output("y", wide.exp().mul(later.sum()));
            g.output("z", reduced ? wide.sum(true, -1).add(wide) : wide.mul(2).add(later.sum()));
            Graph graph = g.build();
            LoweredGraph l = Lowering.lower(graph, LoweringOptions.world(1));
            assertThat(l.decisions()).anyMatch(d -> d.contains("cast: not made for pointwise loops"));
            boolean made = l.buffers().stream().anyMatch(buf -> buf instanceof ComputedBuffer c && c.label().equals("cast"));
            assertThat(made).as("a cast loop is made only where a reduction reads it too: %s", l.decisions()).isEqualTo(reduced);
            var rnd = new Random(reduced ? 10 : 11);
            double[] as = new double[32], bs = new double[40], cs = new double[25], es = new double[25];
            for (double[] v : List.of(as, bs, cs, es)) for (int i = 0; i < v.length; i++) v[i] = rnd.nextGaussian() * 0.3;
            Map<String, NDArray> in = Map.of("a", NDArray.of(DType.BF16, as, 4, 8), "b", NDArray.of(DType.BF16, bs, 8, 5),
                    "c", NDArray.of(cs, 5, 5), "e", NDArray.of(es, 5, 5));
            Map<String, NDArray> host = run(graph, in), ref = ReferenceInterpreter.evaluate(graph, List.of(in)).getFirst();
            for (String o : List.of("y", "z")) {
                double[] h = host.get(o).toDoubleArray(), r = ref.get(o).toDoubleArray();
                for (int i = 0; i < h.length; i++) assertThat(h[i]).as("%s[%d]", o, i).isCloseTo(r[i], offset(1e-12 * (1 + Math.abs(r[i]))));
            }
        }
    }

    static Map<String, NDArray> run(Graph g, Map<String, NDArray> in) {
        try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
            return s.runToHost(in);
        }
    }
}
