package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Optimizer;
import dev.gatun.dsl.Optimizers;
import dev.gatun.dsl.Parameters;
import dev.gatun.dsl.Tensor;
import dev.gatun.dsl.TrainStep;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The optimizer step in the graph on the GPU: a linear model {@code mean((x W + b - y)^2)} trained several steps with
 * AdamW (gradient clipping on) and with SGD with momentum, in float32 and float64, its parameters kept on the device
 * between steps (the {@code snapshot} kernel copies each before its in-place update), and every step's loss, gradient
 * norm and weights against the host backend's run of the same graph (the reference: plain loops per op).
 */
@RequiresGpu
class OptimizerGpuTest {
    static final int N = 64, IN = 96, OUT = 40, STEPS = 5;

    static Graph model(Optimizer opt, DType t) {
        var g = Gatun.graph("linear-" + t);
        var params = Parameters.of(g);
        Tensor w = params.parameter("W", t, IN, OUT), b = params.parameter("b", t, OUT);
        Tensor x = g.input("x", t, N, IN), y = g.input("y", t, N, OUT);
        Tensor r = x.matmul(w).add(b).sub(y);
        Tensor loss = r.mul(r).mean();
        TrainStep step = opt.step(loss, params);
        g.output("loss", loss);
        g.output("W", step.updated().get("W"));
        g.output("b", step.updated().get("b"));
        if (step.gradNorm() != null) g.output("norm", step.gradNorm());
        return g.build();
    }

    static List<Map<String, NDArray>> train(Graph g, DType t, String backend) {
        var in = Map.of("x", NDArray.randn(t, 11, N, IN), "y", NDArray.randn(t, 12, N, OUT));
        var steps = new ArrayList<Map<String, NDArray>>();
        try (var s = Session.compile(g, CompileOptions.world(1).backend(backend))) {
            s.bind("W", scaled(NDArray.randn(t, 13, IN, OUT), 0.1)).bind("b", NDArray.randn(t, 14, OUT));
            for (int k = 0; k < STEPS; k++) steps.add(s.runToHost(in));
        }
        return steps;
    }

    static NDArray scaled(NDArray a, double by) {
        for (long i = 0; i < a.numel(); i++) a.set(i, a.get(i) * by);
        return a;
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"adamw-f32", "sgd-f32", "adamw-f64"})
    void stepsOnTheGpuFollowTheHostBackend(String which) {
        DType t = which.endsWith("f64") ? DType.F64 : DType.F32;
        Optimizer opt = which.startsWith("adamw") ? Optimizers.adamW(0.02, 0.9, 0.999, 1e-8, 0.01).clipGradNorm(0.5)
                : Optimizers.sgd(0.05, 0.9, 0, 0.01, false);
        Graph g = model(opt, t);
        var gpu = train(g, t, "cuda");
        var host = train(g, t, "host");
        double tol = t == DType.F64 ? 1e-10 : 2e-4;
        for (int k = 0; k < STEPS; k++)
            for (String name : host.get(k).keySet()) {
                double[] want = host.get(k).get(name).toDoubleArray(), got = gpu.get(k).get(name).toDoubleArray();
                double scale = 0;
                for (double v : want) scale = Math.max(scale, Math.abs(v));
                assertThat(got).as("%s: %s after step %d", which, name, k).hasSize(want.length);
                for (int i = 0; i < want.length; i++)
                    assertThat(Math.abs(got[i] - want[i])).as("%s: %s[%d] after step %d (host %s, gpu %s)", which, name, i, k, want[i], got[i])
                            .isLessThanOrEqualTo(tol * Math.max(1, scale));
            }
        // the weights moved: a step that did nothing would also "match"
        assertThat(gpu.get(STEPS - 1).get("loss").get(0)).isLessThan(gpu.get(0).get("loss").get(0));
    }
}
