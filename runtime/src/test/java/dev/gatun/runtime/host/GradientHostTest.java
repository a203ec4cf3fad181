package dev.gatun.runtime.host;

import static org.assertj.core.api.Assertions.assertThat;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.function.Function;

import static dev.gatun.ir.DType.F64;
import static dev.gatun.ir.DType.I32;
import static dev.gatun.ir.DType.I64;

/**
 * {@code GraphBuilder.grad} for every differentiable op, each against central finite differences of the forward pass
 * in float64 on the host backend ({@link GradCheck}); inputs are drawn away from kinks (relu's and abs's 0, ties of
 * max) and outside the domains' edges (log's and sqrt's 0). Ties and kinks themselves are in {@link GradientRulesTest},
 * with values worked out by hand.
 */
class GradientHostTest {

    static void unary(String name, double lo, double hi, boolean signed, Function<Tensor, Tensor> f) {
        GradCheck.of(name).f64("x", lo, hi, signed, 3, 4).check(x -> f.apply(x[0]));
    }

    @Test void neg() { unary("neg", 0, 2, true, Tensor::neg); }
    @Test void abs() { unary("abs", 0.1, 2, true, Tensor::abs); }
    @Test void exp() { unary("exp", 0, 2, true, Tensor::exp); }
    @Test void log() { unary("log", 0.2, 3, false, Tensor::log); }
    @Test void sqrt() { unary("sqrt", 0.2, 3, false, Tensor::sqrt); }
    @Test void rsqrt() { unary("rsqrt", 0.2, 3, false, Tensor::rsqrt); }
    @Test void sin() { unary("sin", 0, 3, true, Tensor::sin); }
    @Test void cos() { unary("cos", 0, 3, true, Tensor::cos); }
    @Test void tanh() { unary("tanh", 0, 2, true, Tensor::tanh); }
    @Test void sigmoid() { unary("sigmoid", 0, 4, true, Tensor::sigmoid); }
    @Test void relu() { unary("relu", 0.1, 2, true, Tensor::relu); }
    @Test void silu() { unary("silu", 0, 4, true, Tensor::silu); }
    @Test void copy() { unary("copy", 0, 2, true, Tensor::copy); }

    /** GELU at random points and at 0 itself, where its derivative takes Phi(0) = 0.5 from its own branch. */
    @Test void gelu() {
        unary("gelu", 0, 4, true, Tensor::gelu);
        GradCheck.of("gelu0").f64("x", new double[]{0, 1e-9, -3, 5, -7, 0.25}, 6).check(x -> x[0].gelu());
    }

    @Test void addSubMulDivWithBroadcasting() {
        GradCheck.of("add").f64("a", 3, 4).f64("b", 4).check(x -> x[0].add(x[1]));
        GradCheck.of("sub").f64("a", 3, 1).f64("b", 2, 3, 4).check(x -> x[0].sub(x[1]));
        GradCheck.of("mul").f64("a", 2, 1, 4).f64("b", 3, 1).check(x -> x[0].mul(x[1]));
        GradCheck.of("div").f64("a", 3, 4).f64("b", 0.5, 2, true, 3, 1).check(x -> x[0].div(x[1]));
        GradCheck.of("scalars").f64("a", 3).f64("s", new double[]{1.5}).check(x -> x[0].mul(x[1]).add(2).div(3).sub(x[1]));
    }

    @Test void pow() {
        GradCheck.of("pow").f64("a", 0.3, 2, false, 3, 4).f64("b", 4).check(x -> x[0].pow(x[1]));
        GradCheck.of("powScalar").f64("a", 0.3, 2, true, 3, 4).check(x -> x[0].pow(3));
        GradCheck.of("powHalf").f64("a", 0.3, 2, false, 5).check(x -> x[0].pow(0.5));
    }

    /** Distinct values (no ties): each element's gradient goes to the larger (smaller) operand. */
    @Test void maximumMinimum() {
        GradCheck.of("maximum").f64("a", 3, 4).f64("b", 4).check(x -> x[0].maximum(x[1]));
        GradCheck.of("minimum").f64("a", 3, 4).f64("b", 3, 1).check(x -> x[0].minimum(x[1]));
        GradCheck.of("clamp").f64("a", 0.1, 2, true, 8).check(x -> x[0].maximum(-0.05).minimum(0.05).add(x[0].mul(x[0])));
    }

    @Test void whereWithAComparison() {
        GradCheck.of("where").f64("a", 3, 4).f64("b", 4).f64("c", 3, 1)
                .check(x -> x[2].gt(0).where(x[0].mul(x[1]), x[1].sin()));
    }

    @Test void casts() {
        GradCheck.of("cast").f64("a", 3, 4).check(x -> x[0].cast(F64).mul(x[0]).cast(DType.F64));
    }

    @Test void reductions() {
        GradCheck.of("sumAll").f64("x", 2, 3, 4).check(x -> x[0].mul(x[0]).sum());
        GradCheck.of("sumDims").f64("x", 2, 3, 4).check(x -> x[0].sin().sum(0, 2));
        GradCheck.of("sumKeep").f64("x", 2, 3, 4).check(x -> x[0].sum(true, -1).mul(x[0]));
        GradCheck.of("meanAll").f64("x", 2, 3, 4).check(x -> x[0].mul(x[0]).mean());
        GradCheck.of("meanDim").f64("x", 2, 3, 4).check(x -> x[0].exp().mean(1));
        GradCheck.of("meanKeep").f64("x", 2, 3, 4).check(x -> x[0].sub(x[0].mean(true, 0, 2)));
        GradCheck.of("max").f64("x", 2, 3, 4).check(x -> x[0].max(1));
        GradCheck.of("maxKeep").f64("x", 2, 3, 4).check(x -> x[0].max(true, -1).mul(x[0]));
        GradCheck.of("maxAll").f64("x", 3, 4).check(x -> x[0].max());
        GradCheck.of("min").f64("x", 2, 3, 4).check(x -> x[0].min(0, 2));
    }

    @ParameterizedTest
    @ValueSource(strings = {"2x3@3x4", "2x2x3@2x3x4", "2x2x3@3x4", "1x2x3@3x2x3x4", "3x2x3@1x3x4"})
    void matmul(String shapes) {
        String[] ab = shapes.split("@");
        GradCheck.of("matmul " + shapes).f64("a", sizes(ab[0])).f64("b", sizes(ab[1])).check(x -> x[0].matmul(x[1]));
    }

    static long[] sizes(String s) {
        String[] p = s.split("x");
        long[] out = new long[p.length];
        for (int i = 0; i < p.length; i++) out[i] = Long.parseLong(p[i]);
        return out;
    }

    @Test void views() {
        GradCheck.of("reshape").f64("x", 2, 6).check(x -> x[0].reshape(3, 4).sin().reshape(4, 3));
        GradCheck.of("permute").f64("x", 2, 3, 4).check(x -> x[0].permute(2, 0, 1).mul(x[0].permute(2, 0, 1).cos()));
        GradCheck.of("transpose").f64("x", 3, 4).check(x -> x[0].t().matmul(x[0]));
        GradCheck.of("expand").f64("x", 3, 1).check(x -> x[0].expand(2, 3, 4).sin());
        GradCheck.of("expandScalar").f64("x", new double[]{0.7}).check(x -> x[0].expand(3, 2).mul(x[0].expand(3, 2)));
    }

    @ParameterizedTest
    @ValueSource(strings = {"0:5:1", "1:4:1", "0:7:2", "1:7:2", "2:6:3", "1:2:5", "0:7:7", "6:7:1"})
    void sliceWithStep(String range) {
        String[] p = range.split(":");
        long start = Long.parseLong(p[0]), end = Long.parseLong(p[1]), step = Long.parseLong(p[2]);
        GradCheck.of("slice " + range).f64("x", 2, 7, 3).check(x -> x[0].slice(1, start, end, step).sin());
        GradCheck.of("slice0 " + range).f64("x", 7).check(x -> x[0].slice(0, start, end, step).exp());
    }

    @Test void cat() {
        GradCheck.of("cat").f64("a", 2, 3).f64("b", 2, 1).f64("c", 2, 2).check(x -> x[0].cat(1, x[1], x[2]).sin());
        GradCheck.of("catNeg").f64("a", 2, 3).f64("b", 1, 3).check(x -> x[0].cat(-2, x[1], x[0]).mul(x[0].cat(0, x[1], x[0])));
        GradCheck.of("split").f64("a", 5, 2).check(x -> { var parts = x[0].split(0, 2, 3); return parts.get(0).sum().mul(parts.get(1).exp().sum()); });
    }

    @Test void softmaxAndLogSoftmax() {
        GradCheck.of("softmax").f64("x", 3, 5).check(x -> x[0].softmax(-1));
        GradCheck.of("softmax0").f64("x", 3, 5).check(x -> x[0].softmax(0));
        GradCheck.of("logSoftmax").f64("x", 2, 3, 5).check(x -> x[0].logSoftmax(-1));
    }

    @Test void crossEntropyWithIntegerTargets() {
        GradCheck.of("ce").f64("logits", 4, 5).ints("t", I64, new long[]{0, 4, 2, 2}, 4).check(x -> x[0].crossEntropy(x[1]));
        GradCheck.of("ce32").f64("logits", 2, 3, 5).ints("t", I32, new long[]{1, 0, 4, 3, 3, 1}, 2, 3).check(x -> x[0].crossEntropy(x[1]));
    }

    /** Norms as a model writes them: RMSNorm and LayerNorm with learned scales. */
    @Test void norms() {
        GradCheck.of("rmsnorm").f64("x", 3, 6).f64("w", 6)
                .check(x -> x[0].mul(x[0].mul(x[0]).mean(true, -1).add(1e-5).rsqrt()).mul(x[1]));
        GradCheck.of("layernorm").f64("x", 3, 6).f64("w", 6).f64("b", 6).check(x -> {
            Tensor c = x[0].sub(x[0].mean(true, -1));
            return c.mul(c.mul(c).mean(true, -1).add(1e-5).rsqrt()).mul(x[1]).add(x[2]);
        });
    }

    @Test void indexSelectAndGather() {
        GradCheck.of("indexSelect").f64("table", 5, 3).ints("ids", I64, new long[]{4, 0, 4, 2, 4, 1}, 2, 3)
                .check(x -> x[0].indexSelect(0, x[1]).sin());
        GradCheck.of("indexSelect1d").f64("table", 4).ints("ids", I32, new long[]{3, 3, 0}, 3).check(x -> x[0].indexSelect(0, x[1]).exp());
        GradCheck.of("gather1").f64("x", 3, 4).ints("i", I64, new long[]{0, 3, 3, 1, 1, 1, 2, 0, 3}, 3, 3).check(x -> x[0].gather(1, x[1]));
        GradCheck.of("gather0").f64("x", 3, 4).ints("i", I32, new long[]{2, 2, 0, 1, 0, 2}, 2, 3).check(x -> x[0].gather(0, x[1]).sin());
        // one element picked along dim (cross-entropy's target): the gradient is a selection, not a scatter
        GradCheck.of("gatherOne").f64("x", 3, 5).ints("i", I64, new long[]{4, 0, 2}, 3, 1).check(x -> x[0].gather(1, x[1]).sin());
        GradCheck.of("gatherOne0").f64("x", 3, 4).ints("i", I32, new long[]{2, 0, 1, 2}, 1, 4).check(x -> x[0].gather(0, x[1]).exp());
    }

    /**
     * Cross-entropy's pick of each target's log-probability: its gradient is {@code where(arange == target, g, 0)}, a
     * pointwise loop that fuses with the softmax's gradient, where a scatter into zeros wrote two [tokens, vocab] buffers.
     */
    @Test void aGatherOfOneElementAlongDimHasNoScatterInItsGradient() {
        var g = dev.gatun.dsl.Gatun.graph("ce");
        Tensor x = g.input("x", dev.gatun.ir.DType.F32, 8, 50);
        Tensor logp = x.sub(x.exp().sum(true, -1).log());
        Tensor loss = logp.gather(1, g.input("t", I64, 8, 1)).sum().neg();
        g.output("d_x", g.grad(loss, x)[0]);
        var graph = g.build();
        assertThat(graph.nodes()).noneMatch(n -> n.op() instanceof dev.gatun.ir.graph.Op.Registered r && r.opName().equals("scatter_add"));
        try (var s = dev.gatun.runtime.Session.compile(graph, dev.gatun.runtime.CompileOptions.world(1).backend("host"))) {
            // the gradient is softmax(x) - onehot(t): checked against plain loops in float64
            var xs = dev.gatun.runtime.NDArray.randn(dev.gatun.ir.DType.F32, 3, 8, 50);
            long[] t = {0, 49, 7, 7, 13, 0, 25, 3};
            double[] d = s.runToHost(java.util.Map.of("x", xs, "t", dev.gatun.runtime.NDArray.of(t, 8, 1))).get("d_x").toDoubleArray(), v = xs.toDoubleArray();
            for (int r = 0; r < 8; r++) {
                double sum = 0;
                for (int c = 0; c < 50; c++) sum += Math.exp(v[r * 50 + c]);
                for (int c = 0; c < 50; c++)
                    assertThat(d[r * 50 + c]).as("row %d column %d", r, c).isCloseTo(Math.exp(v[r * 50 + c]) / sum - (c == t[r] ? 1 : 0),
                            org.assertj.core.api.Assertions.within(1e-5));
            }
        }
    }

    @Test void scatterAddAndTopk() {
        GradCheck.of("scatterAdd").f64("x", 3, 4).ints("i", I64, new long[]{2, 2, 0, 1, 0, 2}, 2, 3).f64("src", 2, 4)
                .check(x -> x[0].scatterAdd(0, x[1], x[2]).sin());
        GradCheck.of("topk").f64("x", 3, 6).check(x -> x[0].topk(3).values().sin());
    }

    /**
     * flash_attention, recomputed as its ops for the gradient: grouped heads (4 query heads over 2 key-value heads),
     * causal with fewer queries than positions, a window and a soft-cap, and not causal; k passed as v too.
     */
    @Test void flashAttention() {
        GradCheck.of("flashCausal").f64("q", 1, 4, 3, 2).f64("k", 1, 2, 5, 2).f64("v", 1, 2, 5, 2)
                .check(x -> x[0].flashAttention(x[1], x[2], 0.6, true, 0, 0));
        GradCheck.of("flashWindow").f64("q", 2, 2, 4, 3).f64("k", 2, 1, 4, 3).f64("v", 2, 1, 4, 3)
                .check(x -> x[0].flashAttention(x[1], x[2], 0.5, true, 2, 1.5));
        GradCheck.of("flashFull").f64("q", 1, 2, 3, 2).f64("k", 1, 2, 4, 2)
                .check(x -> x[0].flashAttention(x[1], x[1], 0.8, false, 0, 0));
    }

    /**
     * The fused decode attention, recomputed as its ops for the gradient: q [2, 3, 4] over a cache of 5 positions, at
     * positions 4 (all seen) and 2 (the last two masked: their keys and values get no gradient); q as the values too.
     * The host backend computes the forward attention in float32, so the differences come from the reference
     * interpreter's float64.
     */
    @Test void attention() {
        for (long at : new long[]{4, 2}) {
            var grads = GradCheck.of("attention" + at).referenceForward().f64("q", 2, 3, 4).f64("kT", 2, 4, 5).f64("v", 2, 5, 4)
                    .ints("at", I64, new long[]{at}, 1).check(x -> x[0].attention(x[1], x[2], x[3], 0.5));
            if (at == 2)
                for (int b = 0; b < 2; b++)
                    for (int s = 3; s < 5; s++)
                        for (int e = 0; e < 4; e++) {
                            org.assertj.core.api.Assertions.assertThat(grads.get("kT")[(b * 4 + e) * 5 + s]).isZero();
                            org.assertj.core.api.Assertions.assertThat(grads.get("v")[(b * 5 + s) * 4 + e]).isZero();
                        }
        }
        GradCheck.of("attentionSelf").referenceForward().f64("q", 1, 3, 2).f64("kT", 1, 2, 3).ints("at", I32, new long[]{2}, 1)
                .check(x -> x[0].attention(x[1], x[0], x[2], 0.7));
    }

    /**
     * A tiny decoder block as a training step computes it: an embedding, RMSNorm, causal multi-head attention over the
     * whole sequence (two heads; the mask a where on two aranges), a SwiGLU MLP, residuals, the logits and the
     * cross-entropy with the next tokens; every weight's gradient against finite differences.
     */
    @Test void tinyDecoderBlock() {
        int vocab = 5, d = 4, seq = 3, heads = 2, hd = d / heads, hidden = 6;
        GradCheck.of("block").tolerance(1e-5)
                .f64("emb", vocab, d).f64("norm", 0.5, 1.5, false, d).f64("wq", d, d).f64("wk", d, d).f64("wv", d, d).f64("wo", d, d)
                .f64("w1", d, hidden).f64("w3", d, hidden).f64("w2", hidden, d).f64("out", d, vocab)
                .ints("tokens", I64, new long[]{3, 0, 4}, seq).ints("next", I64, new long[]{0, 4, 1}, seq)
                .check(x -> {
                    var g = x[0].graph();
                    Tensor h = x[0].indexSelect(0, x[10]);                                           // [seq, d]
                    Function<Tensor, Tensor> rms = t -> t.mul(t.mul(t).mean(true, -1).add(1e-5).rsqrt()).mul(x[1]);
                    Tensor n = rms.apply(h);
                    Tensor q = n.matmul(x[2]).reshape(seq, heads, hd).permute(1, 0, 2);              // [heads, seq, hd]
                    Tensor k = n.matmul(x[3]).reshape(seq, heads, hd).permute(1, 2, 0);              // [heads, hd, seq]
                    Tensor v = n.matmul(x[4]).reshape(seq, heads, hd).permute(1, 0, 2);
                    Tensor causal = g.arange(I64, seq).reshape(seq, 1).ge(g.arange(I64, seq).reshape(1, seq));
                    Tensor p = causal.where(q.matmul(k).mul(1 / Math.sqrt(hd)), g.scalar(Double.NEGATIVE_INFINITY, F64)).softmax(-1);
                    Tensor att = p.matmul(v).permute(1, 0, 2).reshape(seq, d).matmul(x[5]);
                    h = h.add(att);
                    Tensor m = rms.apply(h);
                    h = h.add(m.matmul(x[6]).silu().mul(m.matmul(x[7])).matmul(x[8]));
                    return h.matmul(x[9]).crossEntropy(x[11]);
                });
    }
}
