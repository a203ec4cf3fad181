package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Optimizer;
import dev.gatun.dsl.Optimizers;
import dev.gatun.dsl.Parameters;
import dev.gatun.dsl.Tensor;
import dev.gatun.dsl.TrainStep;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The optimizer step in the graph ({@link Optimizers}): a linear model {@code mean((x W + b - y)^2)} trained for
 * several steps in float64 on the host, its weights, gradient norm and loss each step against plain float64 loops that
 * implement the gradients by hand and torch.optim's AdamW and SGD formulas (clipping on and off, weight decay on and
 * off), never the code under test.
 */
class OptimizerHostTest {
    static final int N = 4, IN = 3, OUT = 2, STEPS = 6;

    /** The model's parameters and optimizer states in plain arrays: W [IN*OUT], b [OUT]. */
    static final class Ref {
        final double[][] p, m, v, buf;
        int t;
        Ref(double[] w, double[] b) {
            p = new double[][]{w.clone(), b.clone()};
            m = new double[][]{new double[w.length], new double[b.length]};
            v = new double[][]{new double[w.length], new double[b.length]};
            buf = new double[][]{new double[w.length], new double[b.length]};
        }

        /** The loss at the current weights and its gradients by hand: d/dpred = 2 (pred - y) / (N OUT). */
        double lossAndGrads(double[] x, double[] y, double[][] grads) {
            double loss = 0;
            grads[0] = new double[IN * OUT];
            grads[1] = new double[OUT];
            for (int n = 0; n < N; n++)
                for (int o = 0; o < OUT; o++) {
                    double pred = p[1][o];
                    for (int i = 0; i < IN; i++) pred += x[n * IN + i] * p[0][i * OUT + o];
                    double r = pred - y[n * OUT + o];
                    loss += r * r / (N * OUT);
                    double d = 2 * r / (N * OUT);
                    for (int i = 0; i < IN; i++) grads[0][i * OUT + o] += x[n * IN + i] * d;
                    grads[1][o] += d;
                }
            return loss;
        }

        /** torch.nn.utils.clip_grad_norm_: the total norm, grads scaled by min(max / (norm + 1e-6), 1). */
        static double clip(double[][] grads, double max) {
            double s = 0;
            for (double[] g : grads) for (double e : g) s += e * e;
            double norm = Math.sqrt(s), coef = Math.min(max / (norm + 1e-6), 1.0);
            for (double[] g : grads) for (int i = 0; i < g.length; i++) g[i] *= coef;
            return norm;
        }

        /** torch.optim.AdamW._single_tensor_adamw, amsgrad off. */
        void adamW(double[][] grads, double lr, double b1, double b2, double eps, double wd) {
            t++;
            double bc1 = 1 - Math.pow(b1, t), bc2 = 1 - Math.pow(b2, t), stepSize = lr / bc1, bc2Sqrt = Math.sqrt(bc2);
            for (int k = 0; k < p.length; k++)
                for (int i = 0; i < p[k].length; i++) {
                    double g = grads[k][i];
                    p[k][i] *= 1 - lr * wd;
                    m[k][i] += (g - m[k][i]) * (1 - b1);
                    v[k][i] = v[k][i] * b2 + (1 - b2) * g * g;
                    double denom = Math.sqrt(v[k][i]) / bc2Sqrt + eps;
                    p[k][i] -= stepSize * m[k][i] / denom;
                }
        }

        /** torch.optim.SGD._single_tensor_sgd. */
        void sgd(double[][] grads, double lr, double mom, double damp, double wd, boolean nesterov) {
            for (int k = 0; k < p.length; k++)
                for (int i = 0; i < p[k].length; i++) {
                    double d = grads[k][i] + wd * p[k][i];
                    if (mom != 0) {
                        buf[k][i] = t == 0 ? d : mom * buf[k][i] + (1 - damp) * d;
                        d = nesterov ? d + mom * buf[k][i] : buf[k][i];
                    }
                    p[k][i] -= lr * d;
                }
            t++;
        }
    }

    /** The linear model's mean squared error and its step by an optimizer. */
    record Linear(Tensor loss, TrainStep step) {}

    /** {@code mean((x W + b - y)^2)} in {@code g}: W [IN, OUT] and b [OUT] its parameters, x and y its inputs; one step of {@code opt}. */
    static Linear linear(GraphBuilder g, Optimizer opt) {
        var params = Parameters.of(g);
        Tensor w = params.parameter("W", DType.F64, IN, OUT), b = params.parameter("b", DType.F64, OUT);
        Tensor x = g.input("x", DType.F64, N, IN), y = g.input("y", DType.F64, N, OUT);
        Tensor r = x.matmul(w).add(b).sub(y);
        Tensor loss = r.mul(r).mean();
        return new Linear(loss, opt.step(loss, params));
    }

    static Graph model(Optimizer opt) {
        var g = Gatun.graph("linear");
        var linear = linear(g, opt);
        Tensor loss = linear.loss();
        TrainStep step = linear.step();
        g.output("loss", loss);
        g.output("W", step.updated().get("W"));
        g.output("b", step.updated().get("b"));
        if (step.gradNorm() != null) g.output("norm", step.gradNorm());
        return g.build();
    }

    /** Runs STEPS steps of {@code opt} in the graph and of {@code ref} in plain loops; compares weights, loss and norm each step. */
    static void train(Optimizer opt, double maxNorm, java.util.function.BiConsumer<Ref, double[][]> update) {
        double[] x = NDArray.randn(DType.F64, 11, N, IN).toDoubleArray(), y = NDArray.randn(DType.F64, 12, N, OUT).toDoubleArray();
        double[] w0 = NDArray.randn(DType.F64, 13, IN, OUT).toDoubleArray(), b0 = NDArray.randn(DType.F64, 14, OUT).toDoubleArray();
        var ref = new Ref(w0, b0);
        try (var s = Session.compile(model(opt), CompileOptions.world(1).backend("host"))) {
            s.bind("W", NDArray.of(w0, IN, OUT)).bind("b", NDArray.of(b0, OUT));
            var in = Map.of("x", NDArray.of(x, N, IN), "y", NDArray.of(y, N, OUT));
            for (int step = 0; step < STEPS; step++) {
                var out = s.runToHost(in);
                double[][] grads = new double[2][];
                double loss = ref.lossAndGrads(x, y, grads);
                assertThat(out.get("loss").get(0)).as("loss at step %d", step).isCloseTo(loss, within(loss));
                if (maxNorm > 0) {
                    double norm = Ref.clip(grads, maxNorm);
                    assertThat(out.get("norm").get(0)).as("grad norm at step %d", step).isCloseTo(norm, within(norm));
                }
                update.accept(ref, grads);
                assertClose(out.get("W").toDoubleArray(), ref.p[0], "W after step " + step);
                assertClose(out.get("b").toDoubleArray(), ref.p[1], "b after step " + step);
            }
        }
    }

    static org.assertj.core.data.Offset<Double> within(double scale) { return org.assertj.core.data.Offset.offset(1e-12 * Math.max(1, Math.abs(scale))); }

    static void assertClose(double[] got, double[] want, String what) {
        assertThat(got).as(what).hasSize(want.length);
        for (int i = 0; i < want.length; i++) assertThat(got[i]).as(what + " [" + i + "]").isCloseTo(want[i], within(want[i]));
    }

    @ParameterizedTest(name = "AdamW weight decay {0}, clip {1}")
    @CsvSource({"0.0, 0.0", "0.01, 0.0", "0.0, 0.5", "0.1, 0.5"})
    void adamWMatchesPyTorchsFormulas(double wd, double clip) {
        Optimizer opt = Optimizers.adamW(0.05, 0.9, 0.999, 1e-8, wd);
        if (clip > 0) opt = opt.clipGradNorm(clip);
        train(opt, clip, (ref, grads) -> ref.adamW(grads, 0.05, 0.9, 0.999, 1e-8, wd));
    }

    @ParameterizedTest(name = "SGD momentum {0}, dampening {1}, weight decay {2}, nesterov {3}, clip {4}")
    @CsvSource({"0.0, 0.0, 0.0, false, 0.0", "0.9, 0.0, 0.0, false, 0.0", "0.9, 0.25, 0.01, false, 0.5", "0.8, 0.0, 0.05, true, 0.0", "0.9, 0.0, 0.0, true, 0.3"})
    void sgdMatchesPyTorchsFormulas(double mom, double damp, double wd, boolean nesterov, double clip) {
        Optimizer opt = Optimizers.sgd(0.1, mom, damp, wd, nesterov);
        if (clip > 0) opt = opt.clipGradNorm(clip);
        train(opt, clip, (ref, grads) -> ref.sgd(grads, 0.1, mom, damp, wd, nesterov));
    }

    @Test
    void theDefaultsAreTorchOptims() {
        assertThat(Optimizers.adamW()).isEqualTo(new Optimizer.AdamW(1e-3, 0.9, 0.999, 1e-8, 1e-2, 0, null));
        assertThat(Optimizers.sgd(1e-3)).isEqualTo(new Optimizer.Sgd(1e-3, 0, 0, 0, false, 0, null));
    }

    @Test
    void badSettingsAreRefusedNamingTheOptimizerAndTheField() {
        assertThatThrownBy(() -> Optimizers.adamW(0.1, 1.0, 0.999, 1e-8, 0)).isInstanceOf(GraphException.class).hasMessageContaining("AdamW: betas");
        assertThatThrownBy(() -> Optimizers.sgd(-1)).isInstanceOf(GraphException.class).hasMessageContaining("SGD: lr is -1.0");
        assertThatThrownBy(() -> Optimizers.sgd(0.1, 0, 0, 0, true)).isInstanceOf(GraphException.class).hasMessageContaining("Nesterov");
        assertThatThrownBy(() -> Optimizers.adamW().clipGradNorm(0)).isInstanceOf(GraphException.class).hasMessageContaining("clipGradNorm");
        var g = Gatun.graph("none");
        Tensor loss = g.input("x", DType.F32, 2).sum();
        assertThatThrownBy(() -> Optimizers.adamW().step(loss, Parameters.of(g))).isInstanceOf(GraphException.class).hasMessageContaining("no parameters");
        var params = Parameters.of(g);
        params.parameter("w", DType.F32, 2);
        assertThatThrownBy(() -> params.parameter("w", DType.F32, 2)).isInstanceOf(GraphException.class).hasMessageContaining("parameter 'w' is declared twice");
        assertThatThrownBy(() -> params.parameter("s", DType.F32)).isInstanceOf(GraphException.class).hasMessageContaining("declare it of shape [1]");
        assertThatThrownBy(() -> params.parameter("i", DType.I32, 2)).isInstanceOf(GraphException.class).hasMessageContaining("not floating");
    }

    /**
     * A step that reads a parameter's old value after its update's kernel (the old W times the mean of the new W) gets the
     * old value: the planner keeps W's snapshot (its plan says why) and writes b's and the moments' new values in place.
     * Fails if the state writes ignore that later reader.
     */
    @Test
    void aReaderOfTheOldWeightsAfterTheUpdateReadsTheOldWeights() {
        var g = Gatun.graph("linear_later");
        var params = Parameters.of(g);
        Tensor w = params.parameter("W", DType.F64, IN, OUT), b = params.parameter("b", DType.F64, OUT);
        Tensor x = g.input("x", DType.F64, N, IN), y = g.input("y", DType.F64, N, OUT);
        Tensor r = x.matmul(w).add(b).sub(y);
        Tensor loss = r.mul(r).mean();
        TrainStep step = Optimizers.adamW(0.05, 0.9, 0.999, 1e-8, 0.01).step(loss, params);
        g.output("loss", loss);
        g.output("W", step.updated().get("W"));
        g.output("scaled", w.mul(step.updated().get("W").mean()));   // the old W, read once the new one is summed
        double[] xs = NDArray.randn(DType.F64, 11, N, IN).toDoubleArray(), ys = NDArray.randn(DType.F64, 12, N, OUT).toDoubleArray();
        double[] w0 = NDArray.randn(DType.F64, 13, IN, OUT).toDoubleArray(), b0 = NDArray.randn(DType.F64, 14, OUT).toDoubleArray();
        var ref = new Ref(w0, b0);
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            s.bind("W", NDArray.of(w0, IN, OUT)).bind("b", NDArray.of(b0, OUT));
            var in = Map.of("x", NDArray.of(xs, N, IN), "y", NDArray.of(ys, N, OUT));
            for (int k = 0; k < STEPS; k++) {
                var out = s.runToHost(in);
                double[] old = ref.p[0].clone();
                double[][] grads = new double[2][];
                ref.lossAndGrads(xs, ys, grads);
                ref.adamW(grads, 0.05, 0.9, 0.999, 1e-8, 0.01);
                double mean = 0;
                for (double e : ref.p[0]) mean += e / ref.p[0].length;
                for (int i = 0; i < old.length; i++) old[i] *= mean;
                assertClose(out.get("W").toDoubleArray(), ref.p[0], "W after step " + k);
                assertClose(out.get("scaled").toDoubleArray(), old, "the old W times the new W's mean at step " + k);
            }
            assertThat(s.plan().notes()).as("the plan's notes").anySatisfy(n -> assertThat(n).startsWith("state W keeps its snapshot").contains("after kernel"))
                    .anySatisfy(n -> assertThat(n).startsWith("state writes: "));
        }
    }

    /** The parameter's state may still be read only through the snapshot: reading it beside the write is refused. */
    @Test
    void aParameterStateReadBesideTheStepIsRefused() {
        var g = Gatun.graph("twice");
        var params = Parameters.of(g);
        Tensor w = params.parameter("w", DType.F64, 2);
        var step = Optimizers.sgd(0.1).step(w.mul(w).sum(), params);
        g.output("w", step.updated().get("w"));
        g.build();   // fine: every read goes through the copy
        var h = Gatun.graph("beside");
        var hp = Parameters.of(h);
        Tensor v = hp.parameter("v", DType.F64, 2);
        Optimizers.sgd(0.1).step(v.mul(v).sum(), hp);
        h.output("raw", hp.list().getFirst().version().add(1));
        assertThatThrownBy(h::build).isInstanceOf(GraphException.class).hasMessageContaining("state 'v' is read by");
    }
}
