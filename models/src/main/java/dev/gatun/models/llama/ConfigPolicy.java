package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.json.Json;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Predicate;

/**
 * What {@link LlamaConfigReader} does with each field of a {@code config.json}, so that a checkpoint is either computed
 * as transformers computes it or refused naming what is missing, never computed differently in silence:
 * <ul>
 *   <li>the model types: {@code llama}, {@code mistral}, {@code qwen2}, {@code qwen3}, {@code phi3}, {@code gemma},
 *   {@code gemma2} and the mixtures of experts {@code mixtral}, {@code qwen2_moe} and {@code qwen3_moe} (transformers'
 *   {@code LlamaForCausalLM}, {@code MistralForCausalLM}, ...) are implemented (Gemma's own fields read by
 *   {@link GemmaConfigReader}, Phi-3's by {@link Phi3Fields}, the experts' by {@link MoeConfig}); the neighbours most often mistaken for them are refused naming the
 *   feature this decoder lacks ({@link #REFUSED_TYPES}), any other type as not supported;</li>
 *   <li>the fields that shape the computation are read ({@link #READ});</li>
 *   <li>fields that switch on a feature this decoder lacks are refused by name where they are switched on, and
 *   accepted where they are off ({@link #FEATURES}: null, false, 1.0 for a factor, only full-attention layers);</li>
 *   <li>fields known not to change the forward pass are ignored ({@link #HARMLESS}: dropout, initialisation, token
 *   ids, the dtype the weights were saved in, generation defaults, bookkeeping; the full list below, gathered from
 *   the Llama 2, Llama 3.x, Mistral 7B v0.1 to v0.3, Mistral Nemo and Mistral Small configs and the fields every
 *   transformers config writes);</li>
 *   <li>any other field is refused. An unknown field is one whose meaning this loader cannot tell: a newer
 *   transformers may read it (a flag such as {@code use_qk_norm} changes the logits), and a warning is not enough for
 *   never computing something else in silence. A caller that knows a field of its checkpoint's own to be harmless
 *   names it to {@link LlamaConfig#read(Path, Set)}.</li>
 * </ul>
 */
final class ConfigPolicy {
    private ConfigPolicy() {}

    /** The model types implemented, with each one's causal-LM architecture. */
    static final Map<String, String> SUPPORTED = Map.ofEntries(Map.entry("llama", "LlamaForCausalLM"), Map.entry("mistral", "MistralForCausalLM"),
            Map.entry("qwen2", "Qwen2ForCausalLM"), Map.entry("qwen3", "Qwen3ForCausalLM"), Map.entry("gemma", "GemmaForCausalLM"),
            Map.entry("gemma2", "Gemma2ForCausalLM"), Map.entry("phi3", "Phi3ForCausalLM"), Map.entry("mixtral", "MixtralForCausalLM"),
            Map.entry("qwen2_moe", "Qwen2MoeForCausalLM"), Map.entry("qwen3_moe", "Qwen3MoeForCausalLM"));

    /**
     * The mixture-of-experts types' own fields, read ({@link MoeConfig#read}) or harmless: the router's auxiliary loss
     * ({@code router_aux_loss_coef}, {@code output_router_logits}) and Mixtral's {@code router_jitter_noise} act only in
     * training. Elsewhere the expert fields ({@link #EXPERT_FIELDS}) are {@link #FEATURES}, refused where on.
     */
    static final Map<String, Set<String>> MOE_FIELDS = Map.of(
            "mixtral", Set.of("num_local_experts", "num_experts_per_tok", "router_aux_loss_coef", "output_router_logits", "router_jitter_noise"),
            "qwen2_moe", Set.of("num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size", "norm_topk_prob",
                    "decoder_sparse_step", "mlp_only_layers", "qkv_bias", "router_aux_loss_coef", "output_router_logits"),
            "qwen3_moe", Set.of("num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                    "decoder_sparse_step", "mlp_only_layers", "router_aux_loss_coef", "output_router_logits"));

    /** The expert fields, refused where on for a type that is not a mixture of experts. */
    static final List<String> EXPERT_FIELDS = List.of("num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
            "shared_expert_intermediate_size");

    /** Model types refused with what this decoder lacks for them. */
    static final Map<String, String> REFUSED_TYPES = Map.ofEntries(
            Map.entry("gemma3_text", "Gemma 2's GeGLU-tanh, embedding scale, (1 + w) and pre/post norms, QK-norm and "
                    + "sliding-window layers are not implemented"));

    /** The fields read into a {@link LlamaConfig} (sliding_window for mistral only: {@link #FEATURES} has llama's). */
    static final Set<String> READ = Set.of("model_type", "architectures", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps", "tie_word_embeddings",
            "rope_theta", "rope_scaling", "rope_parameters", "hidden_act", "attention_bias", "mlp_bias", "partial_rotary_factor",
            "layer_types", "pretraining_tp");

    /** A field that switches on something not implemented, where {@code on} says it is switched on. */
    record Feature(String missing, Predicate<Json> on) {}

    private static final Predicate<Json> SET = v -> !(v instanceof Json.Null || v instanceof Json.Bool b && !b.value());
    private static final Predicate<Json> NON_EMPTY = v -> SET.test(v) && !(v instanceof Json.Obj o && o.fields().isEmpty())
            && !(v instanceof Json.Arr a && a.items().isEmpty());

    /** Fields refused by name where they are switched on. */
    static final Map<String, Feature> FEATURES = features();

    private static Map<String, Feature> features() {
        var m = new LinkedHashMap<String, Feature>();
        m.put("hidden_activation", new Feature("Gemma's activation field, read for gemma and gemma2 only: elsewhere only hidden_act \"silu\" (SwiGLU) is implemented", SET));
        m.put("attn_logit_softcapping", new Feature("soft-capping the attention scores (tanh) is implemented for gemma2 only", SET));
        m.put("final_logit_softcapping", new Feature("soft-capping the final logits (tanh) is implemented for gemma2 only", SET));
        m.put("query_pre_attn_scalar", new Feature("scaling the queries by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2 is implemented for gemma2 only", SET));
        m.put("use_bidirectional_attention", new Feature("bidirectional attention (every position seeing every other: an encoder) is not implemented", SET));
        for (String qk : List.of("use_qk_norm", "qk_norm", "qk_layernorm"))
            m.put(qk, new Feature("QK-norm (a norm of each query and key head) is not implemented", SET));
        for (String moe : EXPERT_FIELDS)
            m.put(moe, new Feature("mixture of experts (a router and expert MLPs) is implemented for model_type mixtral, qwen2_moe "
                    + "and qwen3_moe only, not for this one", SET));
        m.put("use_sliding_window", new Feature("Qwen's sliding-window switch: sliding-window attention is not implemented", SET));
        m.put("quantization_config", new Feature("quantized weights are not implemented: load the checkpoint's unquantized weights", SET));
        m.put("auto_map", new Feature("custom modeling code (auto_map) is not run: only transformers' own modeling of the supported types is implemented", SET));
        m.put("pruned_heads", new Feature("pruned attention heads are not implemented", NON_EMPTY));
        return java.util.Collections.unmodifiableMap(m);   // in this order: the first switched on is the one named
    }

    /**
     * Qwen2's and Qwen3's own fields that change nothing here: {@code max_window_layers} says which layers a sliding window would
     * apply to, and the window is off ({@code use_sliding_window} switched on is refused); transformers' Qwen2 takes its
     * biases from the architecture (query, key and value: always; output and MLP: never), not from these flags.
     */
    static final Set<String> QWEN2_HARMLESS = Set.of("max_window_layers");

    /**
     * Phi-3's own fields that change nothing here: its dropouts ({@code embd_pdrop}, {@code resid_pdrop}; off at
     * inference) and {@code original_max_position_embeddings}, which only its LongRoPE scaling reads (refused).
     */
    static final Set<String> PHI3_HARMLESS = Set.of("embd_pdrop", "resid_pdrop", "original_max_position_embeddings");

    /**
     * Fields ignored: none changes the forward pass (the logits of a sequence). Dropout is off at inference; the token
     * ids, the generation defaults ({@code temperature}, {@code top_p}, ...) and the dtype the file was saved in are
     * the caller's to use; {@code max_position_embeddings} changes nothing but where dynamic NTK rotary scaling reads it
     * (then it is read); {@code pretraining_tp} splits the same products into slices (read: a whole number).
     */
    static final Set<String> HARMLESS = Set.of(
            // the model's own
            "max_position_embeddings", "initializer_range", "use_cache", "attention_dropout", "bos_token_id", "eos_token_id",
            "pad_token_id", "sep_token_id", "decoder_start_token_id",
            // what every transformers config writes, or wrote
            "torch_dtype", "dtype", "transformers_version", "_name_or_path", "_commit_hash", "_attn_implementation",
            "attn_implementation", "_attn_implementation_autoset", "output_attentions", "output_hidden_states", "return_dict",
            "use_return_dict", "torchscript", "use_bfloat16", "tf_legacy_loss", "chunk_size_feed_forward", "is_encoder_decoder",
            "is_decoder", "cross_attention_hidden_size", "add_cross_attention", "tie_encoder_decoder", "finetuning_task",
            "id2label", "label2id", "tokenizer_class", "prefix", "task_specific_params", "problem_type",
            // generation defaults (older configs carry them): they choose among logits, they do not make them
            "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
            "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty", "no_repeat_ngram_size",
            "encoder_no_repeat_ngram_size", "bad_words_ids", "num_return_sequences", "output_scores", "return_dict_in_generate",
            "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
            "suppress_tokens", "begin_suppress_tokens");

    /**
     * The model type: {@code model_type} is required, must be one implemented, and every name in {@code architectures}
     * must be its causal LM; else refused naming the type, its architecture and what is missing.
     */
    static String modelType(Path file, Json.Obj obj) {
        Json type = obj.get("model_type");
        if (type == null || type instanceof Json.Null)
            throw new GraphException(file + ": field 'model_type' is missing: it says which architecture the checkpoint is ("
                    + String.join(" or ", supported()) + " are supported)");
        if (!(type instanceof Json.Str t)) throw new GraphException(file + ": field 'model_type' is a JSON " + type.kind() + ", not a string");
        List<String> architectures = architectures(file, obj);
        String named = architectures.isEmpty() ? "" : " (" + String.join(", ", architectures) + ")";
        if (!SUPPORTED.containsKey(t.value())) {
            String missing = REFUSED_TYPES.getOrDefault(t.value(), "its architecture is not implemented");
            throw new CompilationException(file + ": model_type '" + t.value() + "'" + named + " is not supported: " + missing
                    + "; supported: " + String.join(", ", supported()));
        }
        String causal = SUPPORTED.get(t.value());
        for (String a : architectures)
            if (!a.equals(causal))
                throw new CompilationException(file + ": field 'architectures' names " + a + ", but model_type '" + t.value()
                        + "' is implemented as " + causal + " only (the causal language model: embeddings, decoder layers, lm_head)");
        return t.value();
    }

    private static List<String> supported() { return SUPPORTED.keySet().stream().sorted().toList(); }

    private static List<String> architectures(Path file, Json.Obj obj) {
        Json a = obj.get("architectures");
        if (a == null || a instanceof Json.Null) return List.of();
        if (!(a instanceof Json.Arr arr)) throw new GraphException(file + ": field 'architectures' is a JSON " + a.kind() + ", not a list of names");
        var out = new ArrayList<String>();
        for (Json v : arr.items()) {
            if (!(v instanceof Json.Str s)) throw new GraphException(file + ": field 'architectures' holds a JSON " + v.kind() + ", not a name");
            out.add(s.value());
        }
        return out;
    }

    /**
     * Refuses the first field of {@link #FEATURES} switched on, naming it, its value and what is missing; but for those
     * the model type's own reader reads ({@link GemmaConfigReader#reads}).
     */
    static void refuseFeatures(Path file, Json.Obj obj, String modelType) {
        for (var e : FEATURES.entrySet()) {
            if (GemmaConfigReader.reads(modelType).contains(e.getKey())) continue;
            // the mixtures read their own expert fields; another's (Qwen2-MoE's shared expert in Qwen3-MoE) is not known to them
            if (MOE_FIELDS.containsKey(modelType) && EXPERT_FIELDS.contains(e.getKey())) continue;
            Json v = obj.get(e.getKey());
            if (v != null && e.getValue().on().test(v))
                throw new CompilationException(file + ": field '" + e.getKey() + "' is " + shortText(v) + ": " + e.getValue().missing());
        }
    }

    /**
     * Refuses the fields neither read, nor refused where on, nor known harmless, nor named by the caller; all of them
     * at once (up to 8 named).
     */
    static void refuseUnknown(Path file, Json.Obj obj, String modelType, Set<String> alsoHarmless) {
        var unknown = new TreeSet<String>();
        for (String k : obj.fields().keySet()) {
            boolean feature = FEATURES.containsKey(k) && !(MOE_FIELDS.containsKey(modelType) && EXPERT_FIELDS.contains(k));
            boolean known = READ.contains(k) || feature || HARMLESS.contains(k) || alsoHarmless.contains(k)
                    || k.equals("sliding_window") || modelType.startsWith("qwen") && QWEN2_HARMLESS.contains(k)
                    || GemmaConfigReader.harmless(modelType).contains(k)
                    || modelType.equals("phi3") && PHI3_HARMLESS.contains(k)
                    || MOE_FIELDS.getOrDefault(modelType, Set.of()).contains(k);
            if (!known) unknown.add(k);
        }
        if (unknown.isEmpty()) return;
        var shown = unknown.stream().limit(8).map(k -> "'" + k + "'").toList();
        throw new CompilationException(file + ": " + (unknown.size() == 1 ? "field " : unknown.size() + " fields: ") + String.join(", ", shown)
                + (unknown.size() > 8 ? " and " + (unknown.size() - 8) + " more" : "") + (unknown.size() == 1 ? " is" : " are")
                + " not known to this loader for model_type '" + modelType + "': a field it does not know may change the computation, "
                + "so it is refused rather than ignored; if it does not change the forward pass, name it in LlamaConfig.read(file, Set.of(...))");
    }

    /** A JSON value as a message shows it: short. */
    static String shortText(Json v) {
        String s = switch (v) {
            case Json.Str str -> "\"" + str.value() + "\"";
            case Json.Num n -> n.text();
            case Json.Bool b -> Boolean.toString(b.value());
            case Json.Null n -> "null";
            case Json.Obj o -> "an object of " + o.fields().size() + (o.fields().size() == 1 ? " field" : " fields");
            case Json.Arr a -> "a list of " + a.size();
        };
        return s.length() > 60 ? s.substring(0, 57) + "..." : s;
    }
}
