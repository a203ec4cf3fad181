package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.StringJoiner;
import java.util.TreeSet;

/**
 * Writes a {@link LlamaConfig} as the {@code config.json} of the transformers model type that computes it, in the
 * fields transformers' config classes have (the reference checkpoints' files, written by transformers, are the
 * pattern), so that a random checkpoint of any architecture this decoder implements can be made for tests and
 * benchmarks and loaded by transformers too. The type is chosen from what the configuration computes:
 * <ul>
 *   <li>a mixture of experts: Mixtral's naming is {@code mixtral}; Qwen's with QK-norm {@code qwen3_moe}, without it
 *   {@code qwen2_moe} (its shared expert, its q/k/v biases as {@code qkv_bias});</li>
 *   <li>Gemma's changes: {@code gemma2} with the sandwich norms, else {@code gemma};</li>
 *   <li>else {@code phi3} for the fused layout, {@code qwen3} with QK-norm, {@code qwen2} with biases on the query, key
 *   and value projections alone, {@code mistral} with a sliding window, {@code llama} otherwise.</li>
 * </ul>
 * Every file is read back with {@link LlamaConfig#read} and must give the very configuration written; where no file of
 * the chosen type says it (Gemma with a sliding window, a window with biases, ...) nothing is left and the write is
 * refused.
 */
final class LlamaConfigWriter {
    private LlamaConfigWriter() {}

    /** The model type {@code c} is written as (see the class comment). */
    static String modelType(LlamaConfig c) {
        if (c.moe() != null)
            return c.moe().naming() == MoeConfig.Naming.MIXTRAL ? "mixtral" : c.qkNorm() ? "qwen3_moe" : "qwen2_moe";
        if (c.gemma() != null) return c.gemma().sandwichNorms() ? "gemma2" : "gemma";
        var b = c.biases();
        if (c.fused()) return "phi3";
        if (c.qkNorm()) return "qwen3";
        if (b.qkv() && !b.output() && !b.mlp()) return "qwen2";
        return c.slidingWindow() > 0 ? "mistral" : "llama";
    }

    static void write(LlamaConfig c, Path file) throws IOException {
        String type = modelType(c);
        var m = new LinkedHashMap<String, String>();
        m.put("model_type", quoted(type));
        m.put("architectures", "[" + quoted(ConfigPolicy.SUPPORTED.get(type)) + "]");
        shape(c, m);
        switch (type) {
            case "gemma", "gemma2" -> gemma(c, type, m);
            case "mixtral", "qwen2_moe", "qwen3_moe" -> experts(c, type, m);
            default -> dense(c, type, m);
        }
        rope(c, m);
        var sb = new StringBuilder("{\n");
        int i = 0;
        for (var e : m.entrySet()) sb.append("  \"").append(e.getKey()).append("\": ").append(e.getValue()).append(++i < m.size() ? ",\n" : "\n");
        Files.writeString(file, sb.append("}\n").toString(), StandardCharsets.UTF_8);
        LlamaConfig back;
        try {
            back = LlamaConfig.read(file);
        } catch (RuntimeException e) {
            Files.deleteIfExists(file);
            throw new CompilationException("LlamaConfig.write: " + file + ": no " + type + " file says this configuration (" + e.getMessage() + "); nothing written", e);
        }
        if (!back.equals(c)) {
            Files.deleteIfExists(file);
            throw new CompilationException("LlamaConfig.write: " + file + ": no " + type + " file says this configuration exactly (it would read back as "
                    + back + ", not " + c + "); nothing written");
        }
    }

    /** The sizes every type has. */
    private static void shape(LlamaConfig c, Map<String, String> m) {
        m.put("hidden_size", Integer.toString(c.hiddenSize()));
        m.put("num_hidden_layers", Integer.toString(c.layers()));
        m.put("num_attention_heads", Integer.toString(c.heads()));
        m.put("num_key_value_heads", Integer.toString(c.kvHeads()));
        m.put("head_dim", Integer.toString(c.headDim()));
        m.put("intermediate_size", Integer.toString(c.intermediateSize()));
        m.put("vocab_size", Integer.toString(c.vocabSize()));
        m.put("rms_norm_eps", String.format(Locale.ROOT, "%.17g", c.rmsNormEps()));
        m.put("tie_word_embeddings", Boolean.toString(c.tieWordEmbeddings()));
    }

    /** llama, mistral, qwen2, qwen3 and phi3: SwiGLU, their biases, the window, Phi-3's partial rotary factor. */
    private static void dense(LlamaConfig c, String type, Map<String, String> m) {
        var b = c.biases();
        m.put("hidden_act", quoted("silu"));
        if (!type.equals("qwen2") && b.qkv()) m.put("attention_bias", "true");
        if (b.mlp()) m.put("mlp_bias", "true");
        if (c.slidingWindow() > 0) m.put("sliding_window", Integer.toString(c.slidingWindow()));
        if (c.rotaryDim() != c.headDim()) m.put("partial_rotary_factor", Double.toString((double) c.rotaryDim() / c.headDim()));
    }

    /** Gemma's activation (under both names for Gemma 1, as transformers writes it); Gemma 2's caps, scalar and layers. */
    private static void gemma(LlamaConfig c, String type, Map<String, String> m) {
        var g = c.gemma();
        if (type.equals("gemma")) m.put("hidden_act", quoted(GemmaConfigReader.ACTIVATION));
        m.put("hidden_activation", quoted(GemmaConfigReader.ACTIVATION));
        if (type.equals("gemma")) return;
        m.put("attn_logit_softcapping", g.attnSoftcap() == 0 ? "null" : Double.toString(g.attnSoftcap()));
        m.put("final_logit_softcapping", g.finalSoftcap() == 0 ? "null" : Double.toString(g.finalSoftcap()));
        m.put("query_pre_attn_scalar", number(g.queryPreAttnScalar()));   // transformers 5 takes a whole one as an int only
        m.put("sliding_window", g.slidingWindow() == 0 ? "null" : Integer.toString(g.slidingWindow()));
        var types = new StringJoiner(", ", "[", "]");
        for (int l = 0; l < c.layers(); l++) types.add(quoted(g.slides(l) ? "sliding_attention" : "full_attention"));
        m.put("layer_types", types.toString());
    }

    /** The mixtures' fields, under each type's names (Qwen3-MoE's experts as transformers 5 writes them). */
    private static void experts(LlamaConfig c, String type, Map<String, String> m) {
        var e = c.moe();
        m.put("hidden_act", quoted("silu"));
        m.put(type.equals("qwen2_moe") ? "num_experts" : "num_local_experts", Integer.toString(e.experts()));
        m.put("num_experts_per_tok", Integer.toString(e.topK()));
        if (type.equals("mixtral")) {
            m.put("sliding_window", c.slidingWindow() == 0 ? "null" : Integer.toString(c.slidingWindow()));
            return;
        }
        m.put("moe_intermediate_size", Integer.toString(e.expertSize()));
        if (type.equals("qwen2_moe")) {
            m.put("shared_expert_intermediate_size", Integer.toString(e.sharedSize()));
            m.put("qkv_bias", Boolean.toString(c.biases().qkv()));
        } else if (c.biases().qkv()) m.put("attention_bias", "true");
        m.put("norm_topk_prob", Boolean.toString(e.normTopK()));
        m.put("decoder_sparse_step", Integer.toString(e.sparseStep()));
        var only = new StringJoiner(", ", "[", "]");
        for (int l : new TreeSet<>(e.mlpOnlyLayers())) only.add(Integer.toString(l));
        m.put("mlp_only_layers", only.toString());
        m.put("use_sliding_window", "false");
    }

    /** {@code rope_theta} and, where the frequencies are scaled, {@code rope_scaling}. */
    private static void rope(LlamaConfig c, Map<String, String> m) {
        m.put("rope_theta", Double.toString(c.ropeTheta()));
        switch (c.ropeScaling()) {
            case null -> { }
            case LlamaConfig.RopeScaling.Llama3 s -> m.put("rope_scaling", String.format(Locale.ROOT, "{\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": %s, "
                    + "\"high_freq_factor\": %s, \"original_max_position_embeddings\": %d}", Double.toString(s.factor()),
                    Double.toString(s.lowFreqFactor()), Double.toString(s.highFreqFactor()), s.originalMaxPositions()));
            case LlamaConfig.RopeScaling.Linear s -> m.put("rope_scaling", "{\"rope_type\": \"linear\", \"factor\": " + s.factor() + "}");
            case LlamaConfig.RopeScaling.Dynamic s -> {
                m.put("rope_scaling", "{\"rope_type\": \"dynamic\", \"factor\": " + s.factor() + "}");
                m.put("max_position_embeddings", Integer.toString(s.maxPositions()));
            }
            case LlamaConfig.RopeScaling.Yarn s -> m.put("rope_scaling", String.format(Locale.ROOT, "{\"rope_type\": \"yarn\", \"factor\": %s, "
                    + "\"original_max_position_embeddings\": %d, \"beta_fast\": %s, \"beta_slow\": %s, \"attention_factor\": %s, \"truncate\": %s}",
                    Double.toString(s.factor()), s.originalMaxPositions(), Double.toString(s.betaFast()), Double.toString(s.betaSlow()),
                    Double.toString(s.attentionFactor()), s.truncate()));
        }
    }

    private static String quoted(String s) { return "\"" + s + "\""; }

    /** {@code v} as a JSON number: a whole one without a fraction (transformers' typed config fields refuse 256.0 for an int). */
    private static String number(double v) {
        return v == Math.rint(v) && Math.abs(v) < 1L << 53 ? Long.toString((long) v) : Double.toString(v);
    }
}
