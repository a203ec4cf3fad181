package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.LossScale;
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
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.List;
import java.util.Map;

import static dev.gatun.runtime.host.OptimizerHostTest.IN;
import static dev.gatun.runtime.host.OptimizerHostTest.N;
import static dev.gatun.runtime.host.OptimizerHostTest.OUT;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Dynamic loss scaling in the graph ({@link LossScale}) against plain float64 loops implementing
 * {@code torch.amp.GradScaler}'s formulas: scale the loss, unscale the gradients by {@code float32(1 / scale)}, skip the
 * step and back off the scale when a gradient is not finite, grow it after {@code growthInterval} good steps. The
 * linear model of {@link OptimizerHostTest}, seven steps, the fourth fed an inf: that step leaves every weight, moment
 * and the step count as they were, and the scale's sequence is GradScaler's. At world 2 with FSDP, an inf in only one
 * rank's shard of a gradient makes both ranks skip.
 */
class LossScaleHostTest {
    static final int STEPS = 7, BAD = 3;
    static final LossScale SCALE = new LossScale(1024, 2, 0.5, 2);

    static Graph model(Optimizer opt) {
        var g = Gatun.graph("scaled");
        TrainStep step = OptimizerHostTest.linear(g, opt).step();
        g.output("W", step.updated().get("W")).output("b", step.updated().get("b"));
        g.output("scale", step.states().get(LossScale.SCALE)).output("tracker", step.states().get(LossScale.TRACKER));
        return g.build();
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"sgd", "adamW"})
    void gradScalersFormulasWithASkippedStep(String which) {
        Optimizer opt = (which.equals("sgd") ? Optimizers.sgd(0.1, 0.9, 0, 0.01, false) : Optimizers.adamW(0.05)).clipGradNorm(0.5).scaleLoss(SCALE);
        double[] x = NDArray.randn(DType.F64, 11, N, IN).toDoubleArray(), y = NDArray.randn(DType.F64, 12, N, OUT).toDoubleArray();
        double[] w0 = NDArray.randn(DType.F64, 13, IN, OUT).toDoubleArray(), b0 = NDArray.randn(DType.F64, 14, OUT).toDoubleArray();
        double[] bad = x.clone();
        bad[1] = Double.POSITIVE_INFINITY;
        var ref = new OptimizerHostTest.Ref(w0, b0);
        float scale = (float) SCALE.initScale();
        int tracker = 0, skipped = 0;
        try (var s = Session.compile(model(opt), CompileOptions.world(1).backend("host"))) {
            s.bind("W", NDArray.of(w0, IN, OUT)).bind("b", NDArray.of(b0, OUT));
            for (int step = 0; step < STEPS; step++) {
                double[] xs = step == BAD ? bad : x;
                var out = s.runToHost(Map.of("x", NDArray.of(xs, N, IN), "y", NDArray.of(y, N, OUT)));
                // GradScaler: backward of loss * scale, found_inf on the scaled gradients, unscale by float32(1 / scale)
                double[][] grads = new double[2][];
                ref.lossAndGrads(xs, y, grads);
                boolean found = false;
                float inv = (float) (1.0 / (double) scale);
                for (double[] gr : grads)
                    for (int i = 0; i < gr.length; i++) {
                        double scaled = gr[i] * scale;
                        found |= !Double.isFinite(scaled);
                        gr[i] = scaled * inv;
                    }
                if (found) {
                    skipped++;
                    scale *= 0.5f;
                    tracker = 0;
                } else {
                    OptimizerHostTest.Ref.clip(grads, 0.5);
                    if (which.equals("sgd")) ref.sgd(grads, 0.1, 0.9, 0, 0.01, false);
                    else ref.adamW(grads, 0.05, 0.9, 0.999, 1e-8, 1e-2);
                    if (++tracker == SCALE.growthInterval()) {
                        scale *= 2f;
                        tracker = 0;
                    }
                }
                OptimizerHostTest.assertClose(out.get("W").toDoubleArray(), ref.p[0], "W after step " + step);
                OptimizerHostTest.assertClose(out.get("b").toDoubleArray(), ref.p[1], "b after step " + step);
                assertThat(out.get("scale").get(0)).as("scale after step %d", step).isEqualTo(scale);
                assertThat(out.get("tracker").get(0)).as("growth tracker after step %d", step).isEqualTo(tracker);
            }
        }
        assertThat(skipped).as("the step fed an inf is the one skipped").isEqualTo(1);
    }

    /** The step count and the moments stay where a step is skipped: the step after it is the same as if it never ran. */
    @Test
    void aSkippedStepChangesNoWeightMomentOrCount() {
        var g = Gatun.graph("skip");
        var params = Parameters.of(g);
        Tensor w = params.parameter("w", DType.F64, 4);
        Tensor x = g.input("x", DType.F64, 4);
        TrainStep step = Optimizers.adamW(0.1).scaleLoss(LossScale.dynamic()).step(w.mul(x).sum().add(w.mul(w).sum()), params);
        step.states().forEach(g::output);
        Graph built = g.build();
        double[] w0 = {0.5, -1, 2, 0.25};
        try (var s = Session.compile(built, CompileOptions.world(1).backend("host"))) {
            s.bind("w", NDArray.of(w0, 4));
            var first = s.runToHost(Map.of("x", NDArray.of(new double[]{1, 2, 3, 4}, 4)));
            var skipped = s.runToHost(Map.of("x", NDArray.of(new double[]{1, Double.NaN, 3, 4}, 4)));
            for (String state : built.states()) {
                if (state.startsWith("optimizer.loss_scale") || state.startsWith("optimizer.growth")) continue;
                assertThat(skipped.get(state).toDoubleArray()).as(state).isEqualTo(first.get(state).toDoubleArray());
            }
            assertThat(first.get(LossScale.SCALE).get(0)).isEqualTo(65536);
            assertThat(skipped.get(LossScale.SCALE).get(0)).isEqualTo(32768);
            assertThat(first.get("optimizer.step").get(0)).isEqualTo(1);
        }
    }

    /** FSDP over 2 ranks: an inf only in rank 1's rows of w's gradient; both ranks skip and back off. */
    @Test
    void anInfInOneRanksShardSkipsTheStepOnEveryRank() {
        var g = Gatun.graph("fsdp").world(2);
        var params = Parameters.of(g).fullyShardedOver("world");
        Tensor w = params.parameter("w", DType.F64, 4, 2);
        Tensor x = g.input("x", DType.F64, 4, 2);
        // d loss / d w = x + w: an inf in x's row 3 is an inf in rank 1's shard (rows 2 and 3) only
        TrainStep step = Optimizers.sgd(0.1).averageGradients("world").scaleLoss(SCALE).step(w.mul(x).sum().add(w.mul(w).sum().mul(0.5)), params);
        g.output("w", step.updated().get("w")).output("scale", step.states().get(LossScale.SCALE));
        double[] good = {1, 2, 3, 4, 5, 6, 7, 8}, bad = good.clone();
        bad[7] = Double.POSITIVE_INFINITY;
        double[] w0 = {1, 1, 1, 1, 1, 1, 1, 1};
        try (var s = Session.compile(g.build(), CompileOptions.world(2).backend("host"))) {
            for (int r = 0; r < 2; r++) s.bind(r, Map.of("w", NDArray.of(java.util.Arrays.copyOfRange(w0, 4 * r, 4 * r + 4), 2, 2)));
            var out = s.runToHost(List.of(Map.of("x", NDArray.of(good, 4, 2)), Map.of("x", NDArray.of(bad, 4, 2))));
            for (int r = 0; r < 2; r++) {
                assertThat(out.get(r).get("w").toDoubleArray()).as("rank %d's shard unchanged", r).containsOnly(1.0);
                assertThat(out.get(r).get("scale").get(0)).as("rank %d backs off", r).isEqualTo(512);
            }
            out = s.runToHost(List.of(Map.of("x", NDArray.of(good, 4, 2)), Map.of("x", NDArray.of(good, 4, 2))));
            // a good step: w -= 0.1 * (x + w), x the same on both ranks (the average of the ranks' gradients)
            for (int r = 0; r < 2; r++)
                for (int i = 0; i < 4; i++)
                    assertThat(out.get(r).get("w").get(i)).as("rank %d w[%d]", r, i).isCloseTo(1 - 0.1 * (good[4 * r + i] + 1), org.assertj.core.data.Offset.offset(1e-12));
        }
    }

    /**
     * What the scale is for: f32 master weights computed in f16, a loss of {@code 1e-8 * sum(x * w)}. Unscaled, the
     * f16 gradient {@code 1e-8 * x} is below f16's smallest subnormal (6e-8) and the step changes nothing; scaled by
     * 2^16 it is an f16 normal number, unscaled in f32, and the weights move as a plain loop computes it.
     */
    @Test
    void anF16GradientThatUnderflowsIsKeptByTheScale() {
        float[] xs = {0.5f, 1, 1.5f, 2};
        for (boolean scaled : new boolean[]{false, true}) {
            var g = Gatun.graph("f16");
            var params = Parameters.of(g);
            Tensor w = params.parameter("w", DType.F32, DType.F16, 4);
            Tensor x = g.input("x", DType.F16, 4);
            Optimizer opt = Optimizers.sgd(1.0);
            TrainStep step = (scaled ? opt.scaleLoss(LossScale.dynamic()) : opt).step(x.mul(w).cast(DType.F32).sum().mul(1e-8), params);
            g.output("w", step.updated().get("w"));
            try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
                s.bind("w", NDArray.of(DType.F32, new double[]{0, 0, 0, 0}, 4));   // from 0, so a step of 1e-8 shows in f32
                double[] got = s.runToHost(Map.of("x", NDArray.of(DType.F16, new double[]{xs[0], xs[1], xs[2], xs[3]}, 4))).get("w").toDoubleArray();
                for (int i = 0; i < 4; i++) {
                    if (!scaled) {
                        assertThat(got[i]).as("unscaled: the f16 gradient of w[%d] underflows to 0", i).isEqualTo(0.0);
                        continue;
                    }
                    // the seed 2^16 times 1e-8 in f32, to f16, times x in f16, to f32, times float32(2^-16); w -= 1.0 * that
                    float seed = Float.float16ToFloat(Float.floatToFloat16(65536f * (float) 1e-8));
                    float grad = Float.float16ToFloat(Float.floatToFloat16(seed * xs[i])) * (float) (1.0 / 65536);
                    assertThat(got[i]).as("scaled: w[%d]", i).isCloseTo(-grad, org.assertj.core.data.Offset.offset(1e-3 * grad)).isLessThan(-4e-9);
                }
            }
        }
    }

    @Test
    void badSettingsAreRefusedByName() {
        assertThatThrownBy(() -> new LossScale(0, 2, 0.5, 10)).isInstanceOf(GraphException.class).hasMessageContaining("initScale");
        assertThatThrownBy(() -> new LossScale(1e39, 2, 0.5, 10)).isInstanceOf(GraphException.class).hasMessageContaining("initScale");
        assertThatThrownBy(() -> new LossScale(1, 1, 0.5, 10)).isInstanceOf(GraphException.class).hasMessageContaining("growthFactor");
        assertThatThrownBy(() -> new LossScale(1, 2, 1, 10)).isInstanceOf(GraphException.class).hasMessageContaining("backoffFactor");
        assertThatThrownBy(() -> new LossScale(1, 2, 0.5, 0)).isInstanceOf(GraphException.class).hasMessageContaining("growthInterval");
        assertThatThrownBy(() -> Optimizers.sgd(0.1).scaleLoss(null)).isInstanceOf(GraphException.class).hasMessageContaining("scaleLoss");
        assertThat(LossScale.dynamic()).isEqualTo(new LossScale(65536, 2, 0.5, 2000));
    }
}
