package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.json.Json;

import java.util.HashSet;
import java.util.Set;

/**
 * Reads the fields of a {@code gemma} or {@code gemma2} {@code config.json} that {@link LlamaConfigReader} does not
 * (into {@link GemmaFeatures}), with the defaults of transformers' {@code GemmaConfig} and {@code Gemma2Config}, and
 * refuses what would compute something else:
 * <ul>
 *   <li>the activation: {@code hidden_activation} and {@code hidden_act} must each be {@code gelu_pytorch_tanh} or left
 *   out (transformers' default); another value in either is refused, since transformers' versions differ on which of
 *   the two Gemma's MLP reads;</li>
 *   <li>{@code mlp_bias} on: Gemma's MLP has no biases (transformers ignores the flag), so what it means is unclear;</li>
 *   <li>Gemma 2's {@code attn_logit_softcapping} (50 where left out, none where null), {@code final_logit_softcapping}
 *   (30; none where null), {@code query_pre_attn_scalar} (256), {@code sliding_window} (4096) and {@code layer_types}
 *   (where left out, every even layer slides, as Gemma2Config makes them); a layer type other than
 *   {@code sliding_attention} or {@code full_attention} is refused naming the layer.</li>
 * </ul>
 * The other defaults that differ from Llama's ({@code head_dim} 256, {@code tie_word_embeddings} true, and no default
 * for {@code num_key_value_heads}) are {@link LlamaConfigReader}'s to apply, where it reads those fields.
 */
final class GemmaConfigReader {
    private GemmaConfigReader() {}

    /** The model types this reader serves. */
    static boolean isGemma(String type) { return type.equals("gemma") || type.equals("gemma2"); }

    /** The activation Gemma's MLP is implemented with. */
    static final String ACTIVATION = "gelu_pytorch_tanh";

    /** Fields read here for {@code type} (besides those {@link ConfigPolicy#READ} names for every type). */
    static Set<String> reads(String type) {
        return switch (type) {
            case "gemma" -> Set.of("hidden_activation");
            case "gemma2" -> Set.of("hidden_activation", "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar");
            default -> Set.of();
        };
    }

    /** Gemma 2's own fields that change nothing here: {@code cache_implementation} is how generate() caches ("hybrid"). */
    static Set<String> harmless(String type) { return type.equals("gemma2") ? Set.of("cache_implementation") : Set.of(); }

    /** The features of a {@code gemma} or {@code gemma2} file of {@code layers} layers whose heads are {@code headDim} wide. */
    static GemmaFeatures read(LlamaConfigReader.Fields f, String type, int layers, int headDim) {
        activation(f, "hidden_activation");
        activation(f, "hidden_act");
        if (f.bool("mlp_bias", false))
            throw new CompilationException(f.file() + ": field 'mlp_bias' is true, but transformers' " + type
                    + " MLP has no biases (it ignores the field), so what the checkpoint means is unclear");
        if (type.equals("gemma")) return GemmaFeatures.gemma(headDim);
        if (f.obj().get("query_pre_attn_scalar") instanceof Json.Null)
            throw new GraphException(f.file() + ": field 'query_pre_attn_scalar' is null: Gemma 2 scales the scores by it (256 where left out)");
        Set<Integer> sliding = slidingLayers(f, layers);
        int window = f.obj().fields().containsKey("sliding_window") ? f.integer("sliding_window", 0) : 4096;
        if (!sliding.isEmpty() && window < 1)
            throw new GraphException(f.file() + ": field 'sliding_window' is " + ConfigPolicy.shortText(f.obj().get("sliding_window"))
                    + ", but layer_types makes layers " + new java.util.TreeSet<>(sliding) + " sliding: a window is at least 1 position");
        return new GemmaFeatures(true, cap(f, "attn_logit_softcapping", 50), cap(f, "final_logit_softcapping", 30),
                f.number("query_pre_attn_scalar", 256), sliding.isEmpty() ? 0 : window, sliding);
    }

    private static void activation(LlamaConfigReader.Fields f, String field) {
        Json v = f.obj().get(field);
        if (v == null || v instanceof Json.Null || v instanceof Json.Str s && s.value().equals(ACTIVATION)) return;
        throw new CompilationException(f.file() + ": field '" + field + "' is " + ConfigPolicy.shortText(v) + ": only \"" + ACTIVATION
                + "\" (GeGLU with tanh-approximated GELU) is implemented for Gemma, and transformers' versions differ on which of "
                + "hidden_act and hidden_activation they read; where the checkpoint means the tanh GELU, say \"" + ACTIVATION + "\" in both");
    }

    /** A soft-cap: {@code orElse} where the field is left out, none (0) where it is null. */
    private static double cap(LlamaConfigReader.Fields f, String field, double orElse) {
        Json v = f.obj().get(field);
        if (v == null) return orElse;
        return v instanceof Json.Null ? 0 : f.number(field, 0);
    }

    /** The layers {@code layer_types} makes "sliding_attention"; where it is left out, the even ones (Gemma2Config's). */
    private static Set<Integer> slidingLayers(LlamaConfigReader.Fields f, int layers) {
        var out = new HashSet<Integer>();
        Json v = f.obj().get("layer_types");
        if (v == null || v instanceof Json.Null) {
            for (int l = 0; l < layers; l += 2) out.add(l);
            return out;
        }
        if (!(v instanceof Json.Arr a)) throw new GraphException(f.file() + ": field 'layer_types' is a JSON " + v.kind() + ", not a list");
        if (a.size() != layers) throw new GraphException(f.file() + ": field 'layer_types' has " + a.size() + " entries for " + layers + " layers");
        for (int l = 0; l < layers; l++) {
            Json t = a.get(l);
            if (t instanceof Json.Str s && s.value().equals("sliding_attention")) out.add(l);
            else if (!(t instanceof Json.Str s && s.value().equals("full_attention")))
                throw new CompilationException(f.file() + ": field 'layer_types' makes layer " + l + " " + ConfigPolicy.shortText(t)
                        + ": only \"full_attention\" and \"sliding_attention\" layers are implemented for gemma2");
        }
        return out;
    }
}
