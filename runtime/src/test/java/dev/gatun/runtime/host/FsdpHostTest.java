package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Optimizers;
import dev.gatun.dsl.Parameters;
import dev.gatun.dsl.Tensor;
import dev.gatun.dsl.TrainStep;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Fully sharded parameters ({@link Parameters#fullyShardedOver}) on the host: a linear model {@code mean((x W - y)^2)}
 * whose W [4, 2] two ranks store half each, trained by SGD with momentum and clipping, each rank on half the batch,
 * against a plain float64 loop over the whole batch and the whole W (the gradient by hand, torch.optim's SGD); and the
 * refusals, each naming the call and what to do.
 */
class FsdpHostTest {
    static final int ROWS = 4, IN = 4, OUT = 2, STEPS = 5;
    static final double LR = 0.1, MOMENTUM = 0.9, MAX_NORM = 0.5;

    @Test
    void twoRanksEachHoldingHalfOfWTrainAsAPlainLoopOverTheWholeBatch() {
        var g = Gatun.graph("fsdp_linear").world(2);
        var params = Parameters.of(g);
        Tensor w = params.fullyShardedOver("world").parameter("w", DType.F64, IN, OUT);
        Tensor x = g.input("x", DType.F64, ROWS / 2, IN), y = g.input("y", DType.F64, ROWS / 2, OUT);
        Tensor err = x.matmul(w).sub(y);
        Tensor loss = err.mul(err).mean();
        var rnd = new java.util.Random(3);
        double[] w0 = new double[IN * OUT], xs = new double[ROWS * IN], ys = new double[ROWS * OUT];
        for (double[] a : new double[][]{w0, xs, ys}) for (int i = 0; i < a.length; i++) a[i] = rnd.nextGaussian();
        TrainStep step = Optimizers.sgd(LR, MOMENTUM).clipGradNorm(MAX_NORM).averageGradients("world").step(loss, params);
        g.output("w_next", step.updated().get("w"));
        var graph = g.build();
        assertThat(graph.inputs().get("w").type().shape().sizes()).as("each rank's state: half of w's rows").containsExactly(IN / 2, OUT);
        try (var s = Session.compile(graph, CompileOptions.world(2).backend("host"))) {
            var inputs = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < 2; r++) {
                s.bind(r, "w", NDArray.of(DType.F64, java.util.Arrays.copyOfRange(w0, r * IN / 2 * OUT, (r + 1) * IN / 2 * OUT), IN / 2, OUT));
                inputs.add(Map.of("x", NDArray.of(DType.F64, java.util.Arrays.copyOfRange(xs, r * ROWS / 2 * IN, (r + 1) * ROWS / 2 * IN), ROWS / 2, IN),
                        "y", NDArray.of(DType.F64, java.util.Arrays.copyOfRange(ys, r * ROWS / 2 * OUT, (r + 1) * ROWS / 2 * OUT), ROWS / 2, OUT)));
            }
            double[] ref = w0.clone(), buf = new double[ref.length];
            for (int t = 0; t < STEPS; t++) {
                var out = s.runToHost(inputs);
                referenceStep(ref, buf, xs, ys, t);
                double[] got = NDArray.concat(0, List.of(out.get(0).get("w_next"), out.get(1).get("w_next"))).toDoubleArray();
                for (int i = 0; i < ref.length; i++) assertThat(got[i]).as("step %d, w[%d]", t, i).isCloseTo(ref[i], org.assertj.core.data.Offset.offset(1e-12));
            }
        }
    }

    /** One SGD step (momentum, clipping) on the whole batch's mean loss, in plain float64. */
    static void referenceStep(double[] w, double[] buf, double[] xs, double[] ys, int t) {
        double[] grad = new double[w.length];
        for (int n = 0; n < ROWS; n++)
            for (int o = 0; o < OUT; o++) {
                double pred = 0;
                for (int i = 0; i < IN; i++) pred += xs[n * IN + i] * w[i * OUT + o];
                double d = 2 * (pred - ys[n * OUT + o]) / (ROWS * OUT);
                for (int i = 0; i < IN; i++) grad[i * OUT + o] += xs[n * IN + i] * d;
            }
        double sq = 0;
        for (double v : grad) sq += v * v;
        double coef = Math.min(MAX_NORM / (Math.sqrt(sq) + 1e-6), 1);
        for (int i = 0; i < w.length; i++) {
            double d = grad[i] * coef;
            buf[i] = t == 0 ? d : MOMENTUM * buf[i] + d;
            w[i] -= LR * buf[i];
        }
    }

    @Test
    void refusalsNameTheCallTheParameterAndTheFix() {
        assertThatThrownBy(() -> Parameters.of(Gatun.graph("no_world")).fullyShardedOver("dp"))
                .isInstanceOf(GraphException.class).hasMessageContaining("fullyShardedOver").hasMessageContaining("world size is not declared");
        assertThatThrownBy(() -> Parameters.of(Gatun.graph("same").mesh("dp", 2, "tp", 2)).shardedOver("tp").fullyShardedOver("tp"))
                .isInstanceOf(GraphException.class).hasMessageContaining("'tp' is already the group");
        assertThatThrownBy(() -> Parameters.of(Gatun.graph("tied").mesh("dp", 2, "tp", 2)).tiedOver("tp").shardedOver("tp"))
                .isInstanceOf(GraphException.class).hasMessageContaining("shardedOver").hasMessageContaining("tied over 'tp'");
        assertThatThrownBy(() -> Parameters.of(Gatun.graph("tied2").mesh("dp", 2, "tp", 2)).fullyShardedOver("dp").tiedOver("dp"))
                .isInstanceOf(GraphException.class).hasMessageContaining("tiedOver").hasMessageContaining("already sharded over 'dp'");
        var g = Gatun.graph("odd").world(2);
        assertThatThrownBy(() -> Parameters.of(g).fullyShardedOver("world").parameter("w", DType.F32, 3, 2))
                .isInstanceOf(GraphException.class).hasMessageContaining("parameter 'w'").hasMessageContaining("(3) does not divide by the 2 ranks");
        var m = Gatun.graph("mismatch").mesh("dp", 2, "tp", 2);
        var params = Parameters.of(m);
        Tensor w = params.fullyShardedOver("dp").parameter("w", DType.F32, 4, 2);
        Tensor loss = m.input("x", DType.F32, 3, 4).matmul(w).sum();
        assertThatThrownBy(() -> Optimizers.adamW().averageGradients("world").step(loss, params))
                .isInstanceOf(GraphException.class).hasMessageContaining("parameter 'w' is fully sharded over 'dp'").hasMessageContaining("averageGradients(\"dp\")");
    }
}
