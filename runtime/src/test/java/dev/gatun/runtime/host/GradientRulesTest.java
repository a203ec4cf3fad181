package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.GraphException;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.DType.F64;
import static dev.gatun.ir.DType.I64;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.data.Offset.offset;

/**
 * {@code GraphBuilder.grad} where finite differences cannot judge: at kinks and ties, whose values PyTorch fixes by
 * convention (worked out by hand here), tensors the loss does not reach, seeds, casts, second derivatives, and every
 * refusal with its message.
 */
class GradientRulesTest {

    static Map<String, NDArray> run(GraphBuilder g, Map<String, NDArray> inputs) {
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            return s.runToHost(inputs);
        }
    }

    static NDArray f64(double... v) { return NDArray.of(v, v.length); }

    /** As torch.amax / amin: tied largest (smallest) elements share the gradient evenly. */
    @Test void maxAndMinSplitTiesEvenly() {
        var g = Gatun.graph("ties");
        var x = g.input("x", F64, 2, 3);
        g.output("dmax", g.grad(x.max(1).sum(), x)[0]);
        g.output("dmin", g.grad(x.min().mul(2), x)[0]);
        g.output("dall", g.grad(x.max(), x)[0]);
        var out = run(g, Map.of("x", NDArray.of(new double[]{1, 3, 3, 2, 2, 0}, 2, 3)));
        assertThat(out.get("dmax").toDoubleArray()).containsExactly(0, 0.5, 0.5, 0.5, 0.5, 0);
        assertThat(out.get("dmin").toDoubleArray()).containsExactly(0, 0, 0, 0, 0, 2);
        assertThat(out.get("dall").toDoubleArray()).containsExactly(0, 0.5, 0.5, 0, 0, 0);
    }

    /** maximum / minimum split equal operands' gradient in half (torch.maximum); relu and abs have derivative 0 at 0. */
    @Test void kinksFollowPyTorch() {
        var g = Gatun.graph("kinks");
        var a = g.input("a", F64, 3);
        var b = g.input("b", F64, 3);
        var gm = g.grad(a.maximum(b).sum(), a, b);
        g.output("da", gm[0]).output("db", gm[1]);
        var gn = g.grad(a.minimum(b).sum(), a, b);
        g.output("na", gn[0]).output("nb", gn[1]);
        g.output("relu", g.grad(b.sub(2).relu().sum(), b)[0]);
        g.output("abs", g.grad(b.sub(2).abs().sum(), b)[0]);
        var out = run(g, Map.of("a", f64(1, 2, 3), "b", f64(1, 3, 2)));
        assertThat(out.get("da").toDoubleArray()).containsExactly(0.5, 0, 1);
        assertThat(out.get("db").toDoubleArray()).containsExactly(0.5, 1, 0);
        assertThat(out.get("na").toDoubleArray()).containsExactly(0.5, 1, 0);
        assertThat(out.get("nb").toDoubleArray()).containsExactly(0.5, 0, 1);
        assertThat(out.get("relu").toDoubleArray()).containsExactly(0, 1, 0);   // b - 2 = -1, 1, 0
        assertThat(out.get("abs").toDoubleArray()).containsExactly(-1, 1, 0);
    }

    /** pow(a, b): d/da is 0 where b is 0 (no 0 * inf), d/db is 0 where a is 0 and b >= 0 (no 0 * log 0). */
    @Test void powAtZero() {
        var g = Gatun.graph("pow0");
        var a = g.input("a", F64, 3);
        var b = g.input("b", F64, 3);
        var d = g.grad(a.pow(b).sum(), a, b);
        g.output("da", d[0]).output("db", d[1]);
        var out = run(g, Map.of("a", f64(0, 2, 0), "b", f64(0, 3, 2)));
        assertThat(out.get("da").toDoubleArray()).containsExactly(0, 12, 0);
        assertThat(out.get("db").toDoubleArray()[0]).isZero();
        assertThat(out.get("db").toDoubleArray()[1]).isCloseTo(8 * Math.log(2), offset(1e-12));
        assertThat(out.get("db").toDoubleArray()[2]).isZero();
    }

    /** A tensor the loss does not reach, or reaches only through an integer, gets zeros of its type. */
    @Test void unreachedTensorsGetZeros() {
        var g = Gatun.graph("zeros");
        var x = g.input("x", F64, 2, 3);
        var w = g.input("w", F32, 4);
        var later = x.exp();
        var loss = x.sum().add(x.argmax(-1).cast(F64).sum());
        var d = g.grad(loss, x, w, later);
        g.output("dx", d[0]).output("dw", d[1]).output("dlater", d[2]);
        assertThat(d[1].type()).isEqualTo(w.type());
        var out = run(g, Map.of("x", NDArray.of(new double[]{1, 2, 3, 4, 5, 6}, 2, 3), "w", NDArray.of(new float[]{1, 2, 3, 4}, 4)));
        assertThat(out.get("dx").toDoubleArray()).containsOnly(1);
        assertThat(out.get("dw").toFloatArray()).containsOnly(0f).hasSize(4);
        assertThat(out.get("dlater").toDoubleArray()).containsOnly(0).hasSize(6);
    }

    /** Gradients with respect to an intermediate tensor and the input it comes from: each is the total derivative. */
    @Test void intermediateTensors() {
        var g = Gatun.graph("mid");
        var x = g.input("x", F64, 3);
        var h = x.mul(x);                       // h = x^2, loss = sum(h * x) = sum(x^3)
        var d = g.grad(h.mul(x).sum(), x, h);
        g.output("dx", d[0]).output("dh", d[1]);
        var out = run(g, Map.of("x", f64(1, -2, 3)));
        assertThat(out.get("dx").toDoubleArray()).containsExactly(3, 12, 27);
        assertThat(out.get("dh").toDoubleArray()).containsExactly(1, -2, 3);
    }

    /** vjp with a seed, and a second derivative by differentiating a gradient: d2/dx2 sum(x^3) = 6x. */
    @Test void seedsAndSecondDerivatives() {
        var g = Gatun.graph("vjp");
        var x = g.input("x", F64, 3);
        var seed = g.input("seed", F64, 3);
        g.output("vjp", g.vjp(x.mul(x), seed, x)[0]);
        var first = g.grad(x.pow(3).sum(), x)[0];
        g.output("second", g.grad(first.sum(), x)[0]);
        var out = run(g, Map.of("x", f64(1, -2, 0.5), "seed", f64(10, 100, 1000)));
        assertThat(out.get("vjp").toDoubleArray()).containsExactly(20, -400, 1000);
        assertThat(out.get("second").toDoubleArray()).containsExactly(6, -12, 3);
    }

    /** A cast's gradient is cast back: an f32 weight in an f64 loss gets an f32 gradient, 2 w x here. */
    @Test void castsCastTheGradientBack() {
        var g = Gatun.graph("cast");
        var x = g.input("x", F32, 3);
        var w = g.input("w", F64, 3);
        var x64 = x.cast(F64);
        var d = g.grad(x64.mul(x64).mul(w).sum(), x)[0];
        assertThat(d.type()).isEqualTo(x.type());
        g.output("d", d);
        var out = run(g, Map.of("x", NDArray.of(new float[]{1, -2, 0.5f}, 3), "w", f64(3, 5, 7)));
        assertThat(out.get("d").toFloatArray()).containsExactly(6f, -20f, 7f);
    }

    /** Cross-entropy by hand: softmax(logits) - onehot(target), over the batch size. */
    @Test void crossEntropyGradientIsSoftmaxMinusOneHot() {
        var g = Gatun.graph("ce");
        var z = g.input("z", F64, 2, 3);
        var t = g.input("t", I64, 2);
        var loss = z.crossEntropy(t);
        g.output("loss", loss).output("dz", g.grad(loss, z)[0]);
        double[] zs = {1, 2, 3, -1, 0, 4};
        var out = run(g, Map.of("z", NDArray.of(zs, 2, 3), "t", NDArray.of(new long[]{2, 0}, 2)));
        double[] want = new double[6];
        double lossWant = 0;
        for (int r = 0; r < 2; r++) {
            double sum = 0;
            for (int c = 0; c < 3; c++) sum += Math.exp(zs[r * 3 + c]);
            int target = r == 0 ? 2 : 0;
            lossWant += (Math.log(sum) - zs[r * 3 + target]) / 2;
            for (int c = 0; c < 3; c++) want[r * 3 + c] = (Math.exp(zs[r * 3 + c]) / sum - (c == target ? 1 : 0)) / 2;
        }
        assertThat(out.get("loss").get(0)).isCloseTo(lossWant, offset(1e-12));
        double[] dz = out.get("dz").toDoubleArray();
        for (int i = 0; i < 6; i++) assertThat(dz[i]).isCloseTo(want[i], offset(1e-12));
    }

    @Test void refusesWhatItCannotDifferentiate() {
        var g = Gatun.graph("refuse").world(2);
        var x = g.input("x", F64, 4);
        var pos = g.input("pos", I64, 1);
        assertThatThrownBy(() -> g.grad(x.updateSlice(0, x.slice(0, 0, 2), pos).sum(), x))
                .isInstanceOf(GraphException.class).hasMessageContaining("update_slice").hasMessageContaining("cat");
        var anyWorld = Gatun.graph("anyWorld");
        var y = anyWorld.input("y", F64, 4);
        assertThatThrownBy(() -> anyWorld.grad(y.broadcast(1).sum(), y))
                .isInstanceOf(GraphException.class).hasMessageContaining("broadcast %").hasMessageContaining("declare the world size");
        var pair = Gatun.graph("pair").world(4).group("pair", 0, 1);
        var z = pair.input("z", F64, 4);
        assertThatThrownBy(() -> pair.grad(z.broadcast(0, "pair").sum(), z))
                .isInstanceOf(GraphException.class).hasMessageContaining("group 'pair' leaves out ranks");
        assertThatThrownBy(() -> g.grad(x, x)).isInstanceOf(GraphException.class).hasMessageContaining("not a scalar").hasMessageContaining("vjp");
        assertThatThrownBy(() -> g.grad(x.sum(), pos)).isInstanceOf(GraphException.class).hasMessageContaining("only floating tensors");
        assertThatThrownBy(() -> g.grad(x.sum())).isInstanceOf(GraphException.class).hasMessageContaining("no tensors");
        assertThatThrownBy(() -> g.vjp(x, x.sum(), x)).isInstanceOf(GraphException.class).hasMessageContaining("seed");
        var other = Gatun.graph("other").input("y", F64, 4);
        assertThatThrownBy(() -> g.grad(x.sum(), other)).isInstanceOf(GraphException.class).hasMessageContaining("belongs to graph 'other'");
        assertThatThrownBy(() -> x.reshape(2, 2).crossEntropy(pos)).isInstanceOf(GraphException.class).hasMessageContaining("have shape [1]").hasMessageContaining("class) dimension, [2]");
        assertThatThrownBy(() -> x.reshape(2, 2).crossEntropy(x.slice(0, 0, 2))).isInstanceOf(GraphException.class).hasMessageContaining("i64");
    }

    /** A scalar loss of rank 1 (one element) is a scalar too, as in PyTorch. */
    @Test void oneElementLoss() {
        var g = Gatun.graph("one");
        var x = g.input("x", F64, 3);
        Tensor loss = x.mul(x).sum(true, 0);
        g.output("d", g.grad(loss, x)[0]);
        assertThat(run(g, Map.of("x", f64(1, 2, 3))).get("d").toDoubleArray()).containsExactly(2, 4, 6);
    }

    /** A symbolic batch: the gradient graph keeps the symbol, and a call binds it. d/dw sum(tanh(x w) * x0) by hand. */
    @Test void symbolicBatch() {
        var g = Gatun.graph("sym");
        var x = g.input("x", F64, "B", 2);
        var w = g.input("w", F64, 2, 2);
        var y = x.matmul(w).tanh();
        var d = g.grad(y.mul(x.slice(1, 0, 1)).sum(), w, x);
        g.output("dw", d[0]).output("dx", d[1]);
        double[] xs = {0.5, -1, 2, 0.25, -0.75, 1.5}, ws = {0.3, -0.2, 0.7, 0.1};
        var out = run(g, Map.of("x", NDArray.of(xs, 3, 2), "w", NDArray.of(ws, 2, 2)));
        double[] dw = new double[4], dx = new double[6];
        for (int b = 0; b < 3; b++)
            for (int j = 0; j < 2; j++) {
                double h = Math.tanh(xs[b * 2] * ws[j] + xs[b * 2 + 1] * ws[2 + j]), up = xs[b * 2] * (1 - h * h);
                for (int k = 0; k < 2; k++) {
                    dw[k * 2 + j] += xs[b * 2 + k] * up;
                    dx[b * 2 + k] += up * ws[k * 2 + j];
                }
                dx[b * 2] += h;   // through the slice x[:, 0:1]
            }
        for (int i = 0; i < 4; i++) assertThat(out.get("dw").toDoubleArray()[i]).isCloseTo(dw[i], offset(1e-12));
        for (int i = 0; i < 6; i++) assertThat(out.get("dx").toDoubleArray()[i]).isCloseTo(dx[i], offset(1e-12));
    }

    /** The backward nodes are ordinary nodes: the graph goes to JSON and back and computes the same gradients. */
    @Test void gradientGraphsGoToJsonAndBack() {
        var g = Gatun.graph("json");
        var x = g.input("x", F64, 2, 3);
        var t = g.input("t", I64, 2);
        var loss = x.slice(1, 0, 3, 2).cat(1, x).crossEntropy(t);
        g.output("d", g.grad(loss, x)[0]);
        var graph = g.build();
        var back = dev.gatun.ir.graph.GraphJson.fromJson(dev.gatun.ir.graph.GraphJson.toJson(graph));
        assertThat(back.toString()).isEqualTo(graph.toString());
        var in = Map.of("x", NDArray.of(new double[]{0.1, -0.2, 0.3, 0.4, 0.5, -0.6}, 2, 3), "t", NDArray.of(new long[]{4, 0}, 2));
        try (var a = Session.compile(graph, CompileOptions.world(1).backend("host"));
             var b = Session.compile(back, CompileOptions.world(1).backend("host"))) {
            assertThat(b.runToHost(in).get("d").toDoubleArray()).containsExactly(a.runToHost(in).get("d").toDoubleArray());
        }
    }
}
