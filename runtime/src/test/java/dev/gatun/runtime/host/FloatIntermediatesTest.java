package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Fused kernels hold f16/bf16 intermediates in float32 and round what they store (the default, as torch.compile and
 * XLA); {@code roundEachOp()} rounds every op's result as the reference interpreter does. Expected values come from
 * plain float and double arithmetic here.
 */
public class FloatIntermediatesTest {
    /** Round to nearest even bf16, written out here (finite values). */
    public static float bf16(double v) {
        int b = Float.floatToRawIntBits((float) v);
        b += 0x7FFF + ((b >> 16) & 1);
        return Float.intBitsToFloat(b & 0xFFFF0000);
    }

    @Test
    void aSumHeldInFloatKeepsWhatRoundingEachOpLoses() {
        var g = Gatun.graph("held");
        g.output("y", g.input("x", DType.BF16, 4).add(256).sub(256));
        Graph graph = g.build();
        float[] xs = {1.5f, -0.75f, 3.25f, 0.125f};
        var in = Map.of("x", NDArray.of(DType.BF16, new double[]{1.5, -0.75, 3.25, 0.125}, 4));
        float[] held = new float[4], eachOp = new float[4];
        for (int i = 0; i < 4; i++) {
            held[i] = bf16((xs[i] + 256f) - 256f);
            eachOp[i] = bf16(bf16(xs[i] + 256f) - 256f);
        }
        assertThat(held).as("the case tells the two apart").isNotEqualTo(eachOp);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().kernels()).hasSize(1).allMatch(k -> k.floatIntermediates());
            assertThat(s.plan().kernelSources()).contains("f16/bf16 results held in f32 between ops, rounded where stored");
            assertThat(s.runToHost(in).get("y").toFloatArray()).containsExactly(held);
        }
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host").roundEachOp())) {
            assertThat(s.plan().kernelSources()).doesNotContain("held in f32");
            float[] got = s.runToHost(in).get("y").toFloatArray();
            assertThat(got).containsExactly(eachOp);
            assertThat(got).containsExactly(ReferenceInterpreter.evaluate(graph, List.of(in)).getFirst().get("y").toFloatArray());
        }
    }

    @Test
    void float32KernelsAreTheSameEitherWay() {
        var g = Gatun.graph("f32");
        var x = g.input("x", DType.F32, 8, 16);
        g.output("y", x.sub(x.max(true, -1)).exp().add(1));
        Graph graph = g.build();
        try (var a = Session.compile(graph, CompileOptions.world(1).backend("host"));
             var b = Session.compile(graph, CompileOptions.world(1).backend("host").roundEachOp())) {
            assertThat(a.plan().kernels()).noneMatch(k -> k.floatIntermediates());
            assertThat(a.plan().fingerprint()).isEqualTo(b.plan().fingerprint());
        }
    }

    /** Held in float, a bf16 norm is its float64 value rounded once: within one bf16 step of it, for every element. */
    @Test
    void bf16NormsHeldInFloatAreWithinOneStepOfFloat64() {
        bf16NormsWithinOneStep(CompileOptions.world(1).backend("host"), 8, 96);
    }

    /** Softmax, RMSNorm and LayerNorm over [rows, cols] bf16 in one kernel each, every element within one bf16 step of float64. */
    public static void bf16NormsWithinOneStep(CompileOptions co, int rows, int cols) {
        NDArray x = NDArray.randn(DType.BF16, 31, rows, cols), w = NDArray.random(DType.BF16, 32, cols);
        double[] xd = x.toDoubleArray(), wd = w.toDoubleArray();
        Map<String, Function<Tensor[], Tensor>> norms = Map.of(
                "softmax", t -> { Tensor e = t[0].sub(t[0].max(true, -1)).exp(); return e.div(e.sum(true, -1)); },
                "rmsnorm", t -> t[0].mul(t[0].mul(t[0]).mean(true, -1).add(1e-6).rsqrt()).mul(t[1]),
                "layernorm", t -> { Tensor d = t[0].sub(t[0].mean(true, -1)); return d.mul(d.mul(d).mean(true, -1).add(1e-5).rsqrt()).mul(t[1]); });
        for (var e : norms.entrySet()) {
            var g = Gatun.graph(e.getKey());
            g.output("y", e.getValue().apply(new Tensor[]{g.input("x", DType.BF16, rows, cols), g.input("w", DType.BF16, cols)}));
            double[] want = float64(e.getKey(), xd, wd, rows, cols);
            try (var s = Session.compile(g.build(), co)) {
                assertThat(s.plan().kernels()).as(e.getKey()).hasSize(1).allMatch(k -> k.floatIntermediates());
                float[] got = s.runToHost(Map.of("x", x, "w", w)).get("y").toFloatArray();
                for (int i = 0; i < got.length; i++)
                    assertThat(Math.abs(got[i] - want[i])).as("%s element %d: %s vs %s", e.getKey(), i, got[i], want[i]).isLessThanOrEqualTo(bf16Step(want[i]));
            }
        }
    }

    /** The distance between consecutive bf16 values around v. */
    public static double bf16Step(double v) {
        return Math.ulp((float) v) * 65536.0;
    }

    static double[] float64(String op, double[] x, double[] w, int rows, int cols) {
        double[] y = new double[x.length];
        for (int r = 0; r < rows; r++) {
            int o = r * cols;
            switch (op) {
                case "softmax" -> {
                    double m = Double.NEGATIVE_INFINITY, s = 0;
                    for (int c = 0; c < cols; c++) m = Math.max(m, x[o + c]);
                    for (int c = 0; c < cols; c++) s += Math.exp(x[o + c] - m);
                    for (int c = 0; c < cols; c++) y[o + c] = Math.exp(x[o + c] - m) / s;
                }
                case "rmsnorm" -> {
                    double ms = 0;
                    for (int c = 0; c < cols; c++) ms += x[o + c] * x[o + c];
                    // the graph's epsilon is a bf16 constant, as the reference holds it
                    double inv = 1 / Math.sqrt(ms / cols + bf16(1e-6));
                    for (int c = 0; c < cols; c++) y[o + c] = x[o + c] * inv * w[c];
                }
                default -> {
                    double mean = 0, var = 0;
                    for (int c = 0; c < cols; c++) mean += x[o + c];
                    mean /= cols;
                    for (int c = 0; c < cols; c++) var += (x[o + c] - mean) * (x[o + c] - mean);
                    double inv = 1 / Math.sqrt(var / cols + bf16(1e-5));
                    for (int c = 0; c < cols; c++) y[o + c] = (x[o + c] - mean) * inv * w[c];
                }
            }
        }
        return y;
    }
}
