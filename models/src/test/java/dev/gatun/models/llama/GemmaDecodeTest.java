package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Gemma's and Gemma 2's decode steps past the prompt, where {@link TransformersReferenceTest}'s greedy tokens alone would
 * not tell a wrong step from a right one (the references repeat one token): each step's logits against a float64 pass
 * written here from the architecture's definition ({@link Float64}), at tensor parallelism 1 and 2. The float64 pass is
 * itself checked against transformers' logits of the prompt first. Gemma 2's 16 steps run from position 12 to 27, far
 * past its window of 8, so its sliding layers' masks (and the soft-capping, which keeps them off the fused attention
 * step) are checked where they change the result.
 */
class GemmaDecodeTest {
    static final int STEPS = 16;

    /**
     * The reference checkpoints' Gemma parameters, as their {@code config.json} states them (Gemma 1: none of Gemma 2's;
     * its scores scaled by head_dim^-1/2).
     */
    record Params(boolean sandwich, double attnCap, double finalCap, double queryScalar, int window, Set<Integer> sliding) {}

    static final Params GEMMA = new Params(false, 0, 0, 32, 0, Set.of());
    static final Params GEMMA2 = new Params(true, 5, 3, 24, 8, Set.of(0, 2));

    @Test
    void theFloat64PassIsTransformersOnThePrompt() throws IOException {
        for (var named : List.of(Map.entry("gemma", GEMMA), Map.entry("gemma2", GEMMA2))) {
            var ref = TransformersReference.load(named.getKey());
            try (var ckpt = LlamaCheckpoint.open(ref.dir()); var w = SafeTensors.open(ref.dir().resolve(LlamaCheckpoint.WEIGHTS))) {
                double[][] got = Float64.logits(ckpt.config(), named.getValue(), w, ref.prompt());
                for (int t = 0; t < got.length; t++) {
                    double[] want = new double[got[t].length];
                    for (int v = 0; v < want.length; v++) want[v] = ref.logits()[t][v];
                    assertThat(relative(got[t], want)).as("%s position %d", named.getKey(), t).isLessThan(1e-5);
                }
            }
        }
    }

    @Test
    void everyDecodeStepIsTheFloat64PassAtTensorParallelOneAndTwo() throws IOException {
        for (var named : List.of(Map.entry("gemma", GEMMA), Map.entry("gemma2", GEMMA2))) {
            var ref = TransformersReference.load(named.getKey());
            int[] prompt = ref.prompt();
            try (var ckpt = LlamaCheckpoint.open(ref.dir()); var w = SafeTensors.open(ref.dir().resolve(LlamaCheckpoint.WEIGHTS))) {
                LlamaConfig c = ckpt.config();
                for (int tp : new int[]{1, 2}) {
                    var shards = new ArrayList<Map<String, NDArray>>();
                    for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, ckpt.weights(), tp, r, DType.F32));
                    try (var gen = new LlamaGenerator(c, shards, prompt.length, prompt.length + STEPS, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
                        var result = gen.generate(prompt, STEPS);
                        assertThat(result.tokens()).as("%s tp %d", named.getKey(), tp).containsExactly(ref.tokens());
                        for (int k = 0; k < STEPS; k++) {
                            // step k's logits: those of the last position of the prompt and the k tokens before it
                            int[] seq = Arrays.copyOf(prompt, prompt.length + k);
                            System.arraycopy(ref.tokens(), 0, seq, prompt.length, k);
                            double[][] want = Float64.logits(c, named.getValue(), w, seq);
                            assertThat(relative(result.logits().get(k), want[want.length - 1])).as("%s tp %d step %d", named.getKey(), tp, k).isLessThan(1e-4);
                        }
                    }
                }
            }
        }
    }

    /** A batch of prompts of different lengths would need each one's window in its own slots: refused, not computed wrong. */
    @Test
    void aRaggedBatchWithSlidingLayersIsRefused() throws IOException {
        var ref = TransformersReference.load("gemma2");
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            var shards = List.of(LlamaDecoder.weights(c, ckpt.weights(), 1, 0, DType.F32));
            try (var gen = new LlamaGenerator(c, shards, 2, 12, 20, 1, DType.F32, CompileOptions.world(1).backend("host"))) {
                int[][] prompts = {ref.prompt(), Arrays.copyOf(ref.prompt(), 5)};
                assertThatThrownBy(() -> gen.generate(prompts, 2, false)).isInstanceOf(CompilationException.class)
                        .hasMessageContaining("a ragged batch (prompts of different lengths) with sliding-window layers");
                // prompts of one length are not ragged: generated as each alone
                var both = gen.generate(new int[][]{ref.prompt(), ref.prompt()}, 4, false).sequences();
                assertThat(both[0]).containsExactly(Arrays.copyOf(ref.tokens(), 4));
                assertThat(both[1]).containsExactly(Arrays.copyOf(ref.tokens(), 4));
            }
        }
    }

    /** The largest difference relative to the largest expected value. */
    static double relative(double[] got, double[] want) {
        double worst = 0, scale = 0;
        for (int v = 0; v < want.length; v++) {
            scale = Math.max(scale, Math.abs(want[v]));
            worst = Math.max(worst, Math.abs(got[v] - want[v]));
        }
        return worst / scale;
    }

    /**
     * Gemma's forward pass in float64 loops, written from transformers' modeling code: the embedding times
     * sqrt(hidden); RMSNorms by (1 + w); scores scaled by query_pre_attn_scalar^-1/2, soft-capped (cap * tanh(s / cap)),
     * causal and, in sliding layers, limited to the last {@code window} positions; Gemma 2's norms of the attention's
     * and the MLP's outputs and of the MLP's input; GeGLU with the tanh GELU; the tied head; the logits soft-capped.
     */
    static final class Float64 {
        static double[][] logits(LlamaConfig c, Params g, SafeTensors w, int[] ids) {
            int t = ids.length, h = c.hiddenSize(), d = c.headDim(), nh = c.heads(), nkv = c.kvHeads(), f = c.intermediateSize();
            double[][] embed = LlamaPrefillTest.Reference.matrix(w.get("model.embed_tokens.weight"));
            double[][] x = new double[t][h];
            for (int i = 0; i < t; i++) for (int j = 0; j < h; j++) x[i][j] = embed[ids[i]][j] * Math.sqrt(h);
            for (int l = 0; l < c.layers(); l++) {
                String p = "model.layers." + l + ".";
                double[][] xn = norm(x, w, p + "input_layernorm.weight", c);
                double[][] q = LlamaPrefillTest.Reference.linear(xn, LlamaPrefillTest.Reference.matrix(w.get(p + "self_attn.q_proj.weight")));
                double[][] k = LlamaPrefillTest.Reference.linear(xn, LlamaPrefillTest.Reference.matrix(w.get(p + "self_attn.k_proj.weight")));
                double[][] v = LlamaPrefillTest.Reference.linear(xn, LlamaPrefillTest.Reference.matrix(w.get(p + "self_attn.v_proj.weight")));
                LlamaPrefillTest.Reference.rope(q, nh, c, i -> i + 1);   // no dynamic scaling here: the length is unused
                LlamaPrefillTest.Reference.rope(k, nkv, c, i -> i + 1);
                int first = g.sliding().contains(l) ? g.window() : Integer.MAX_VALUE;
                double[][] attn = new double[t][nh * d];
                for (int head = 0; head < nh; head++) {
                    int kvh = head / (nh / nkv);
                    for (int i = 0; i < t; i++) {
                        int from = (int) Math.max(0, (long) i - first + 1);   // j > i - window
                        double[] s = new double[i + 1];
                        double most = Double.NEGATIVE_INFINITY;
                        for (int j = from; j <= i; j++) {
                            double dot = 0;
                            for (int e = 0; e < d; e++) dot += q[i][head * d + e] * k[j][kvh * d + e];
                            s[j] = cap(dot / Math.sqrt(g.queryScalar()), g.attnCap());
                            most = Math.max(most, s[j]);
                        }
                        double sum = 0;
                        for (int j = from; j <= i; j++) sum += s[j] = Math.exp(s[j] - most);
                        for (int j = from; j <= i; j++) for (int e = 0; e < d; e++) attn[i][head * d + e] += s[j] / sum * v[j][kvh * d + e];
                    }
                }
                double[][] a = LlamaPrefillTest.Reference.linear(attn, LlamaPrefillTest.Reference.matrix(w.get(p + "self_attn.o_proj.weight")));
                LlamaPrefillTest.Reference.add(x, g.sandwich() ? norm(a, w, p + "post_attention_layernorm.weight", c) : a);
                xn = norm(x, w, p + (g.sandwich() ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"), c);
                double[][] gate = LlamaPrefillTest.Reference.linear(xn, LlamaPrefillTest.Reference.matrix(w.get(p + "mlp.gate_proj.weight")));
                double[][] up = LlamaPrefillTest.Reference.linear(xn, LlamaPrefillTest.Reference.matrix(w.get(p + "mlp.up_proj.weight")));
                double[][] act = new double[t][f];
                for (int i = 0; i < t; i++)
                    for (int j = 0; j < f; j++) {
                        double z = gate[i][j];
                        act[i][j] = 0.5 * z * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (z + 0.044715 * z * z * z))) * up[i][j];
                    }
                double[][] m = LlamaPrefillTest.Reference.linear(act, LlamaPrefillTest.Reference.matrix(w.get(p + "mlp.down_proj.weight")));
                LlamaPrefillTest.Reference.add(x, g.sandwich() ? norm(m, w, p + "post_feedforward_layernorm.weight", c) : m);
            }
            double[][] logits = LlamaPrefillTest.Reference.linear(norm(x, w, "model.norm.weight", c), embed);
            for (double[] row : logits) for (int v = 0; v < row.length; v++) row[v] = cap(row[v], g.finalCap());
            return logits;
        }

        private static double cap(double s, double cap) { return cap == 0 ? s : cap * Math.tanh(s / cap); }

        /** RMSNorm by (1 + w). */
        private static double[][] norm(double[][] x, SafeTensors w, String name, LlamaConfig c) {
            double[] weight = LlamaPrefillTest.Reference.vector(w.get(name));
            for (int j = 0; j < weight.length; j++) weight[j] += 1;
            return LlamaPrefillTest.Reference.norm(x, weight, c.rmsNormEps());
        }
    }
}
