package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The prefill's logits on the host backend, one rank and tensor-parallel over 2 and 4 simulated ranks, against a
 * float64 forward pass written here in plain loops from the checkpoint's full weights (no DSL, no sharding).
 */
class LlamaPrefillTest {
    static final int[] PROMPT = {1, 17, 255, 3, 42, 42, 0, 128};

    @Test
    void logitsMatchAFloat64ForwardPassAtTensorParallelOneTwoAndFour(@TempDir Path dir) throws IOException {
        LlamaConfig c = LlamaCheckpointTest.TINY;
        LlamaCheckpoint.writeRandom(c, DType.F32, 11, dir);
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            double[][] want = Reference.logits(c, weights, PROMPT);
            double scale = 0;
            for (double[] row : want) for (double v : row) scale = Math.max(scale, Math.abs(v));
            assertThat(scale).as("logits are not all zero").isGreaterThan(1e-3);
            for (int tp : new int[]{1, 2, 4}) {
                var inputs = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) inputs.add(LlamaPrefill.inputs(c, weights, PROMPT, tp, r, DType.F32));
                try (var s = Session.compile(LlamaPrefill.graph(c, PROMPT.length, tp, DType.F32), CompileOptions.world(tp).backend("host"))) {
                    var out = s.runToHost(inputs);
                    for (int r = 0; r < tp; r++) {
                        NDArray logits = out.get(r).get("logits");
                        assertThat(logits.shape()).containsExactly(PROMPT.length, c.vocabSize());
                        double worst = 0;
                        for (int t = 0; t < PROMPT.length; t++)
                            for (int v = 0; v < c.vocabSize(); v++)
                                worst = Math.max(worst, Math.abs(logits.get((long) t * c.vocabSize() + v) - want[t][v]));
                        assertThat(worst / scale).as("tp %d rank %d: largest difference relative to the largest logit", tp, r).isLessThan(1e-4);
                    }
                }
            }
        }
    }

    @Test
    void llama3ScaledRotaryFrequenciesMatchTheFloat64Pass(@TempDir Path dir) throws IOException {
        // head_dim 16, theta 10: wavelengths 6.3, 8.4, 11, 15, 20, 27, 35, 47 against 32 / 4 = 8 and 32 / 1 = 32, so the
        // pairs fall in all three bands (kept, smoothed, divided by the factor), each turning far over 16 positions
        var tiny = LlamaCheckpointTest.TINY;
        LlamaConfig c = new LlamaConfig(tiny.hiddenSize(), tiny.layers(), tiny.heads(), tiny.kvHeads(), tiny.intermediateSize(), tiny.vocabSize(),
                10, tiny.rmsNormEps(), false, new LlamaConfig.RopeScaling.Llama3(8, 1, 4, 32));
        LlamaCheckpoint.writeRandom(c, DType.F32, 21, dir);
        int[] prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            double[][] want = Reference.logits(c, weights, prompt);
            double[][] unscaled = Reference.logits(c.withRopeScaling(null), weights, prompt);
            double scale = 0, apart = 0;
            for (int t = 0; t < prompt.length; t++)
                for (int v = 0; v < c.vocabSize(); v++) {
                    scale = Math.max(scale, Math.abs(want[t][v]));
                    apart = Math.max(apart, Math.abs(want[t][v] - unscaled[t][v]));
                }
            assertThat(apart / scale).as("the scaling changes the logits").isGreaterThan(1e-2);
            try (var s = Session.compile(LlamaPrefill.graph(c, prompt.length, 1, DType.F32), CompileOptions.world(1).backend("host"))) {
                NDArray logits = s.runToHost(LlamaPrefill.inputs(c, weights, prompt, 1, 0, DType.F32)).get("logits");
                double worst = 0;
                for (int t = 0; t < prompt.length; t++)
                    for (int v = 0; v < c.vocabSize(); v++) worst = Math.max(worst, Math.abs(logits.get((long) t * c.vocabSize() + v) - want[t][v]));
                assertThat(worst / scale).isLessThan(1e-4);
            }
            // decoding builds the angles in the graph from the position: six greedy tokens, as the float64 pass picks them
            int[] tokens = greedy(prompt, 6, ids -> {
                double[][] l = Reference.logits(c, weights, ids);
                return l[l.length - 1];
            });
            try (var gen = new LlamaGenerator(c, java.util.List.of(LlamaDecoder.weights(c, weights, 1, 0, DType.F32)), prompt.length, 24, 1, DType.F32,
                    CompileOptions.world(1).backend("host"))) {
                assertThat(gen.generate(prompt, 6).tokens()).containsExactly(tokens);
            }
        }
    }

    /**
     * Heads wider than hidden_size / num_attention_heads (head_dim 24: queries 96 wide, keys and values 48, against a
     * residual stream of 64): the prefill's logits and six greedy tokens of a generation (prefill, then decode with
     * the KV cache) are the float64 pass's at TP 1, 2 and 4 (a key-value head replica at 4).
     */
    @Test
    void aHeadDimOtherThanHiddenOverHeadsMatchesTheFloat64PassAtTensorParallelOneTwoAndFour(@TempDir Path dir) throws IOException {
        LlamaConfig c = LlamaCheckpointTest.TINY.withHeadDim(24);
        LlamaCheckpoint.writeRandom(c, DType.F32, 31, dir);
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            LlamaCheckpoint.check(c, weights, dir);
            double[][] want = Reference.logits(c, weights, PROMPT);
            double scale = 0;
            for (double[] row : want) for (double v : row) scale = Math.max(scale, Math.abs(v));
            int[] tokens = greedy(PROMPT, 6, ids -> {
                double[][] l = Reference.logits(c, weights, ids);
                return l[l.length - 1];
            });
            for (int tp : new int[]{1, 2, 4}) {
                var inputs = new ArrayList<Map<String, NDArray>>();
                var shards = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) {
                    inputs.add(LlamaPrefill.inputs(c, weights, PROMPT, tp, r, DType.F32));
                    shards.add(LlamaDecoder.weights(c, weights, tp, r, DType.F32));
                }
                try (var s = Session.compile(LlamaPrefill.graph(c, PROMPT.length, tp, DType.F32), CompileOptions.world(tp).backend("host"))) {
                    NDArray logits = s.runToHost(inputs).get(0).get("logits");
                    double worst = 0;
                    for (int t = 0; t < PROMPT.length; t++)
                        for (int v = 0; v < c.vocabSize(); v++) worst = Math.max(worst, Math.abs(logits.get((long) t * c.vocabSize() + v) - want[t][v]));
                    assertThat(worst / scale).as("tp %d", tp).isLessThan(1e-4);
                }
                try (var gen = new LlamaGenerator(c, shards, PROMPT.length, 16, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
                    assertThat(gen.generate(PROMPT, 6, false).tokens()).as("tp %d", tp).containsExactly(tokens);
                }
            }
        }
    }

    /**
     * Eight greedy tokens, each the argmax of the last position's logits, the prompt growing by it: the DSL's pass at
     * TP 1, 2 and 4 picks the float64 pass's tokens. (The prefix is computed again for every token until the KV
     * cache exists; the tokens are what decoding with a cache must reproduce.)
     */
    @Test
    void eightGreedyTokensAreTheFloat64PassesAtTensorParallelOneTwoAndFour(@TempDir Path dir) throws IOException {
        LlamaConfig c = LlamaCheckpointTest.TINY;
        LlamaCheckpoint.writeRandom(c, DType.F32, 12, dir);
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            double[] margin = {Double.POSITIVE_INFINITY};
            int[] want = greedy(PROMPT, 8, ids -> {
                double[][] l = Reference.logits(c, weights, ids);
                double[] last = l[l.length - 1], sorted = last.clone();
                java.util.Arrays.sort(sorted);
                margin[0] = Math.min(margin[0], (sorted[sorted.length - 1] - sorted[sorted.length - 2]) / Math.abs(sorted[sorted.length - 1]));
                return last;
            });
            // every choice is clear by far more than float32's error, so the comparison below tests the model, not rounding
            assertThat(margin[0]).as("the smallest gap between the best and second-best logit, relative").isGreaterThan(1e-3);
            assertThat(java.util.Arrays.stream(want).distinct().count()).as("not one token over and over").isGreaterThan(1);
            for (int tp : new int[]{1, 2, 4}) {
                int ranks = tp;
                int[] got = greedy(PROMPT, 8, ids -> {
                    var inputs = new ArrayList<Map<String, NDArray>>();
                    for (int r = 0; r < ranks; r++) inputs.add(LlamaPrefill.inputs(c, weights, ids, ranks, r, DType.F32));
                    try (var s = Session.compile(LlamaPrefill.graph(c, ids.length, ranks, DType.F32), CompileOptions.world(ranks).backend("host"))) {
                        var out = s.runToHost(inputs);
                        NDArray logits = out.get(ranks - 1).get("logits");
                        double[] last = new double[c.vocabSize()];
                        for (int v = 0; v < last.length; v++) last[v] = logits.get((long) (ids.length - 1) * c.vocabSize() + v);
                        return last;
                    }
                });
                assertThat(got).as("tp %d", tp).containsExactly(want);
            }
        }
    }

    /** {@code n} tokens, each the argmax of {@code lastLogits} for the sequence so far, appended to it. */
    static int[] greedy(int[] prompt, int n, java.util.function.Function<int[], double[]> lastLogits) {
        int[] ids = prompt.clone(), out = new int[n];
        for (int k = 0; k < n; k++) {
            double[] l = lastLogits.apply(ids);
            int best = 0;
            for (int v = 1; v < l.length; v++) if (l[v] > l[best]) best = v;
            out[k] = best;
            ids = java.util.Arrays.copyOf(ids, ids.length + 1);
            ids[ids.length - 1] = best;
        }
        return out;
    }

    /**
     * The same forward pass in float64 loops, from the full (unsharded) weights: Phi-3's fused tensors split by rows
     * here, its partial rotary embedding rotating each head's first {@code rotaryDim} dimensions.
     */
    static final class Reference {
        static double[][] logits(LlamaConfig c, SafeTensors w, int[] ids) { return logits(c, w, ids, i -> ids.length); }

        /**
         * The logits where position i's query and key are rotated with the frequencies of a sequence of
         * {@code lengthOf(i)} positions (dynamic NTK's: in a generation with a cache, each key keeps the rotation of the
         * step that made it); one forward pass over all of {@code ids} is every position at {@code ids.length}.
         */
        static double[][] logits(LlamaConfig c, SafeTensors w, int[] ids, java.util.function.IntUnaryOperator lengthOf) {
            int t = ids.length, h = c.hiddenSize(), d = c.headDim(), nh = c.heads(), nkv = c.kvHeads(), f = c.intermediateSize();
            double[][] embed = matrix(w.get("model.embed_tokens.weight"));
            double[][] x = new double[t][];
            for (int i = 0; i < t; i++) x[i] = embed[ids[i]].clone();
            for (int l = 0; l < c.layers(); l++) {
                String p = "model.layers." + l + ".";
                double[][] xn = norm(x, vector(w.get(p + "input_layernorm.weight")), c.rmsNormEps());
                double[][] q, k, v;
                if (c.fused()) {   // Phi-3: the rows of q, then k, then v
                    double[][] qkv = matrix(w.get(p + "self_attn.qkv_proj.weight"));
                    q = linear(xn, java.util.Arrays.copyOfRange(qkv, 0, nh * d));
                    k = linear(xn, java.util.Arrays.copyOfRange(qkv, nh * d, (nh + nkv) * d));
                    v = linear(xn, java.util.Arrays.copyOfRange(qkv, (nh + nkv) * d, (nh + 2 * nkv) * d));
                } else {
                    q = linear(xn, matrix(w.get(p + "self_attn.q_proj.weight")));
                    k = linear(xn, matrix(w.get(p + "self_attn.k_proj.weight")));
                    v = linear(xn, matrix(w.get(p + "self_attn.v_proj.weight")));
                }
                rope(q, nh, c, lengthOf);
                rope(k, nkv, c, lengthOf);
                double[][] attn = new double[t][nh * d];
                for (int head = 0; head < nh; head++) {
                    int kvh = head / (nh / nkv);
                    for (int i = 0; i < t; i++) {
                        double[] s = new double[i + 1];   // causal: positions 0..i
                        double most = Double.NEGATIVE_INFINITY;
                        for (int j = 0; j <= i; j++) {
                            double dot = 0;
                            for (int e = 0; e < d; e++) dot += q[i][head * d + e] * k[j][kvh * d + e];
                            s[j] = dot / Math.sqrt(d);
                            most = Math.max(most, s[j]);
                        }
                        double sum = 0;
                        for (int j = 0; j <= i; j++) sum += s[j] = Math.exp(s[j] - most);
                        for (int j = 0; j <= i; j++) for (int e = 0; e < d; e++) attn[i][head * d + e] += s[j] / sum * v[j][kvh * d + e];
                    }
                }
                add(x, linear(attn, matrix(w.get(p + "self_attn.o_proj.weight"))));
                xn = norm(x, vector(w.get(p + "post_attention_layernorm.weight")), c.rmsNormEps());
                double[][] gate, up;
                if (c.fused()) {   // Phi-3: the gate rows, then the up rows
                    double[][] gu = matrix(w.get(p + "mlp.gate_up_proj.weight"));
                    gate = linear(xn, java.util.Arrays.copyOfRange(gu, 0, f));
                    up = linear(xn, java.util.Arrays.copyOfRange(gu, f, 2 * f));
                } else {
                    gate = linear(xn, matrix(w.get(p + "mlp.gate_proj.weight")));
                    up = linear(xn, matrix(w.get(p + "mlp.up_proj.weight")));
                }
                double[][] act = new double[t][f];
                for (int i = 0; i < t; i++) for (int j = 0; j < f; j++) act[i][j] = gate[i][j] / (1 + Math.exp(-gate[i][j])) * up[i][j];
                add(x, linear(act, matrix(w.get(p + "mlp.down_proj.weight"))));
            }
            double[][] hn = norm(x, vector(w.get("model.norm.weight")), c.rmsNormEps());
            return linear(hn, c.tieWordEmbeddings() ? embed : matrix(w.get("lm_head.weight")));
        }

        /** x @ W^T with W stored [out, in]. */
        static double[][] linear(double[][] x, double[][] weight) {
            double[][] y = new double[x.length][weight.length];
            for (int i = 0; i < x.length; i++)
                for (int o = 0; o < weight.length; o++) {
                    double acc = 0;
                    for (int k = 0; k < x[i].length; k++) acc += x[i][k] * weight[o][k];
                    y[i][o] = acc;
                }
            return y;
        }

        static double[][] norm(double[][] x, double[] weight, double eps) {
            double[][] y = new double[x.length][];
            for (int i = 0; i < x.length; i++) {
                double ss = 0;
                for (double v : x[i]) ss += v * v;
                double r = 1 / Math.sqrt(ss / x[i].length + eps);
                y[i] = new double[x[i].length];
                for (int j = 0; j < x[i].length; j++) y[i][j] = x[i][j] * r * weight[j];
            }
            return y;
        }

        /**
         * Rotates each head's pairs (e, e + r/2) of token i by i times pair e's {@link #frequency} at length
         * {@code lengthOf(i)}, in place; r is the rotary dimensions (Phi-3's partial rotary: fewer than the head's, the
         * rest left as they are).
         */
        static void rope(double[][] x, int heads, LlamaConfig c, java.util.function.IntUnaryOperator lengthOf) {
            int d = c.headDim(), r = c.rotaryDim();
            for (int i = 0; i < x.length; i++)
                for (int head = 0; head < heads; head++)
                    for (int e = 0; e < r / 2; e++) {
                        double angle = i * frequency(c, e, lengthOf.applyAsInt(i)), cs = Math.cos(angle), sn = Math.sin(angle);
                        double a = x[i][head * d + e], b = x[i][head * d + e + r / 2];
                        x[i][head * d + e] = a * cs - b * sn;
                        x[i][head * d + e + r / 2] = b * cs + a * sn;
                    }
        }

        /**
         * Pair e's frequency, theta^(-2e/d), with the checkpoint's scaling written as transformers computes it: Llama 3's
         * (_compute_llama3_parameters: the low-frequency band divided by the factor, then the medium band smoothed) or
         * linear (_compute_linear_scaling_rope_parameters: every frequency divided by the factor).
         */
        static double frequency(LlamaConfig c, int e, int length) {
            int r = c.rotaryDim();
            double inv = 1.0 / Math.pow(c.ropeTheta(), 2.0 * e / r);
            return switch (c.ropeScaling()) {
                case null -> inv;
                case LlamaConfig.RopeScaling.Linear s -> inv / s.factor();
                case LlamaConfig.RopeScaling.Yarn s -> throw new UnsupportedOperationException("YaRN: checked against transformers (TransformersReferenceTest), not here");
                // _compute_dynamic_ntk_parameters: past max_position_embeddings the base grows with the length
                case LlamaConfig.RopeScaling.Dynamic s -> length <= s.maxPositions() ? inv
                        : 1.0 / Math.pow(c.ropeTheta() * Math.pow(s.factor() * length / s.maxPositions() - (s.factor() - 1), r / (r - 2.0)), 2.0 * e / r);
                case LlamaConfig.RopeScaling.Llama3 s -> {
                    double lowWave = s.originalMaxPositions() / s.lowFreqFactor(), highWave = s.originalMaxPositions() / s.highFreqFactor();
                    double wave = 2 * Math.PI / inv;
                    double llama = wave > lowWave ? inv / s.factor() : inv;
                    double smooth = (s.originalMaxPositions() / wave - s.lowFreqFactor()) / (s.highFreqFactor() - s.lowFreqFactor());
                    double smoothed = (1 - smooth) * llama / s.factor() + smooth * llama;
                    boolean medium = !(wave < highWave) && !(wave > lowWave);
                    yield medium ? smoothed : llama;
                }
            };
        }

        static void add(double[][] x, double[][] y) {
            for (int i = 0; i < x.length; i++) for (int j = 0; j < x[i].length; j++) x[i][j] += y[i][j];
        }

        static double[][] matrix(NDArray a) {
            int rows = (int) a.shape()[0], cols = (int) a.shape()[1];
            double[][] m = new double[rows][cols];
            for (int r = 0; r < rows; r++) for (int j = 0; j < cols; j++) m[r][j] = a.get((long) r * cols + j);
            return m;
        }

        static double[] vector(NDArray a) {
            double[] v = new double[(int) a.numel()];
            for (int i = 0; i < v.length; i++) v[i] = a.get(i);
            return v;
        }
    }
}
