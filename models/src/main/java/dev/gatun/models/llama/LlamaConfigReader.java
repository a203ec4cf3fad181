package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.json.Json;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;

/**
 * Reads a {@code config.json} into a {@link LlamaConfig} the way transformers reads it for {@code llama},
 * {@code mistral}, {@code qwen2}, {@code qwen3}, {@code phi3}, {@code gemma}, {@code gemma2}, {@code mixtral},
 * {@code qwen2_moe} and {@code qwen3_moe} (Gemma's own fields: {@link GemmaConfigReader}, Phi-3's: {@link Phi3Fields},
 * the experts': {@link MoeConfig}), refusing by name what this decoder does not compute
 * ({@link ConfigPolicy} says which field is read, refused or ignored, and why).
 *
 * <p>Both spellings of the rotary embedding are read: transformers 4's {@code rope_theta} and {@code rope_scaling},
 * and transformers 5's {@code rope_parameters} ({@code rope_theta}, {@code rope_type} and the type's own fields);
 * where a file has both, they must agree. The rope types implemented are {@code default}, {@code linear},
 * {@code llama3}, {@code yarn} and {@code dynamic}; {@code longrope} (and Phi-3's older name for it, {@code su}) and
 * any other are refused by name, as is a field of the rope object that its type does not use.
 *
 * <p>The defaults are the model type's, as transformers' config classes have them: {@code num_key_value_heads} is
 * {@code num_attention_heads} for llama but 8 for mistral; {@code sliding_window} is none for llama (which has none)
 * but 4096 for a mistral file that leaves it out ({@code null}: none), and none for phi3; {@code head_dim} is
 * {@code hidden_size / num_attention_heads} (Qwen3's 128, Gemma's 256); {@code tie_word_embeddings} false (Gemma's
 * true); {@code rms_norm_eps} 1e-6; {@code rope_theta} 10000. Phi-3's {@code partial_rotary_factor} is read
 * ({@link Phi3Fields}); every other type's must be 1. The mixtures of experts must give {@code num_key_value_heads}
 * and their expert sizes (their config classes' defaults are one model's each); Mixtral's window is none where left
 * out, and Qwen3-MoE's heads are {@code hidden_size / num_attention_heads} wide where {@code head_dim} is left out.
 *
 * <p>The file is read only when it is at most {@value #MAX_CONFIG_BYTES} bytes (a real one is a few kilobytes), and
 * every size in it is bounded ({@link LlamaConfig#MAX_LAYERS}, {@link LlamaConfig#MAX_WIDTH}) before anything is made
 * of it.
 */
final class LlamaConfigReader {
    private LlamaConfigReader() {}

    /** The largest {@code config.json} read. */
    static final long MAX_CONFIG_BYTES = 16L << 20;

    static LlamaConfig read(Path file, Set<String> alsoHarmless) throws IOException {
        Json root = readJson(file);
        if (!(root instanceof Json.Obj obj)) throw new GraphException(file + ": a JSON " + root.kind() + ", not an object");
        String type = ConfigPolicy.modelType(file, obj);
        boolean mistral = type.equals("mistral"), qwen3 = type.equals("qwen3"), phi3 = type.equals("phi3");
        boolean gemma = GemmaConfigReader.isGemma(type), gemma2 = type.equals("gemma2");
        boolean mixtral = type.equals("mixtral"), moe = ConfigPolicy.MOE_FIELDS.containsKey(type);
        ConfigPolicy.refuseFeatures(file, obj, type);
        ConfigPolicy.refuseUnknown(file, obj, type, alsoHarmless);
        var f = new Fields(file, obj, "");
        refuseUnsupported(f, mistral || phi3 || mixtral, type.startsWith("qwen") || gemma2, gemma);
        if (phi3) Phi3Fields.refuseBiases(f);
        try {
            int hidden = f.integer("hidden_size", null), heads = f.integer("num_attention_heads", null);
            int layers = f.integer("num_hidden_layers", null), intermediate = f.integer("intermediate_size", null);
            if (!gemma2) layerTypes(f, layers);   // Gemma 2's sliding layers: GemmaConfigReader's
            // Qwen3's heads are 128 wide where head_dim is left out, Gemma's 256, whatever hidden_size / heads is (Qwen3-MoE's are not)
            int headDim = f.has("head_dim") ? f.integer("head_dim", null) : qwen3 ? 128 : gemma ? 256 : LlamaConfig.defaultHeadDim(hidden, heads);
            var rope = Rope.read(file, obj, phi3);
            int rotaryDim = phi3 ? Phi3Fields.rotaryDim(f, headDim, rope.partial()) : headDim;
            // Gemma's and the mixtures' configs have no default of num_key_value_heads that follows the query heads (their
            // config classes' are one model's each): required
            return new LlamaConfig(hidden, layers, heads, f.integer("num_key_value_heads", gemma || moe ? null : mistral ? 8 : heads),
                    intermediate, f.integer("vocab_size", null), rope.theta(), f.number("rms_norm_eps", 1e-6),
                    f.bool("tie_word_embeddings", gemma), rope.scaling(), headDim, slidingWindow(f, mistral, phi3 || mixtral),
                    phi3 ? LlamaConfig.Biases.NONE : biases(f, type), qwen3 || type.equals("qwen3_moe"), rotaryDim, phi3,
                    gemma ? GemmaConfigReader.read(f, type, layers, headDim) : null, MoeConfig.read(f, type, intermediate));
        } catch (GraphException e) {
            if (e.getMessage().startsWith(file.toString())) throw e;
            throw new GraphException(file + ": " + e.getMessage(), e);
        }
    }

    /** A JSON file of at most {@value #MAX_CONFIG_BYTES} bytes, parsed; one too large or not JSON is refused naming it. */
    static Json readJson(Path file) throws IOException {
        long size = Files.size(file);
        if (size > MAX_CONFIG_BYTES)
            throw new GraphException(file + ": " + size + " bytes is over the " + MAX_CONFIG_BYTES + "-byte limit of a configuration file (not a config.json?)");
        try {
            return Json.parse(Files.readString(file, StandardCharsets.UTF_8).strip());
        } catch (GraphException e) {
            throw new GraphException(file + ": not JSON: " + e.getMessage(), e);
        }
    }

    /**
     * The biases: Qwen2's query, key and value projections always (transformers' Qwen2 has them whatever the flags say,
     * and none elsewhere); Llama's, Mistral's and Qwen3's where {@code attention_bias} (the four attention projections)
     * or {@code mlp_bias} (the three MLP projections; never set by Qwen3's own configs) say so.
     */
    private static LlamaConfig.Biases biases(Fields f, String type) {
        if (type.equals("qwen2")) return new LlamaConfig.Biases(true, false, false);
        if (ConfigPolicy.MOE_FIELDS.containsKey(type)) return moeBiases(f, type);
        boolean attention = f.bool("attention_bias", false);
        return new LlamaConfig.Biases(attention, attention, f.bool("mlp_bias", false));
    }

    /**
     * The mixtures' biases: Qwen2-MoE's query, key and value projections where {@code qkv_bias} (true when left out);
     * Qwen3-MoE's four attention projections where {@code attention_bias}; none for Mixtral. Their experts have no
     * biases, and transformers ignores the flags these classes do not read, so a file that switches one on is refused
     * as unclear.
     */
    private static LlamaConfig.Biases moeBiases(Fields f, String type) {
        for (String flag : type.equals("qwen3_moe") ? new String[]{"mlp_bias"} : new String[]{"attention_bias", "mlp_bias"})
            if (f.bool(flag, false))
                throw new CompilationException(f.file() + ": field '" + flag + "' is true, but transformers' " + type + " has no such biases (it ignores "
                        + "the field), so what the checkpoint means is unclear");
        if (type.equals("qwen2_moe")) return new LlamaConfig.Biases(f.bool("qkv_bias", true), false, false);
        boolean attention = type.equals("qwen3_moe") && f.bool("attention_bias", false);
        return new LlamaConfig.Biases(attention, attention, false);
    }

    /**
     * The fields whose every value but one is a feature this decoder lacks: the activation (Gemma's: {@link GemmaConfigReader}),
     * partial rotary embeddings (but for Phi-3's, which {@link Phi3Fields} reads); {@code sliding_window} where the type
     * neither has a window ({@code windowed}: mistral, phi3) nor reads the field ({@code windowRead}: Qwen's, whose switch
     * is refused where on, and Gemma 2's).
     */
    private static void refuseUnsupported(Fields f, boolean windowed, boolean windowRead, boolean gemma) {
        Json act = f.obj().get("hidden_act");
        if (!gemma && act != null && !(act instanceof Json.Null) && !(act instanceof Json.Str a && a.value().equals("silu")))
            throw new CompilationException(f.file() + ": field 'hidden_act' is " + ConfigPolicy.shortText(act)
                    + ": only \"silu\" (the SwiGLU MLP) is implemented");
        Json partial = f.obj().get("partial_rotary_factor");
        boolean phi3 = f.obj().get("model_type") instanceof Json.Str t && t.value().equals("phi3");
        if (!phi3 && partial != null && !(partial instanceof Json.Null) && f.number("partial_rotary_factor", 1) != 1)
            throw new CompilationException(f.file() + ": field 'partial_rotary_factor' is " + ConfigPolicy.shortText(partial)
                    + ": partial rotary embeddings (rotating a fraction of each head) are not implemented");
        if (f.has("pretraining_tp") && f.integer("pretraining_tp", null) < 1)
            throw new GraphException(f.file() + ": field 'pretraining_tp' must be at least 1");
        if (!windowed && !windowRead && f.has("sliding_window"))
            throw new CompilationException(f.file() + ": field 'sliding_window' is " + ConfigPolicy.shortText(f.obj().get("sliding_window"))
                    + ", but transformers' llama has no sliding window (it ignores the field), so what the checkpoint means is unclear; "
                    + "a Mistral checkpoint says model_type 'mistral'");
    }

    /** {@code layer_types}: one a layer, each "full_attention" (sliding-window layers are not implemented). */
    private static void layerTypes(Fields f, int layers) {
        Json v = f.obj().get("layer_types");
        if (v == null || v instanceof Json.Null) return;
        if (!(v instanceof Json.Arr a)) throw new GraphException(f.file() + ": field 'layer_types' is a JSON " + v.kind() + ", not a list");
        if (a.size() != layers) throw new GraphException(f.file() + ": field 'layer_types' has " + a.size() + " entries for " + layers + " layers");
        for (int i = 0; i < a.size(); i++)
            if (!(a.get(i) instanceof Json.Str s && s.value().equals("full_attention")))
                throw new CompilationException(f.file() + ": field 'layer_types' makes layer " + i + " " + ConfigPolicy.shortText(a.get(i))
                        + ": only \"full_attention\" layers are implemented (sliding-window layers are not)");
    }

    /**
     * Mistral's, Phi-3's and Mixtral's {@code sliding_window}: where left out, 4096 for mistral and none for phi3 and
     * mixtral ({@code noDefault}; their config classes' defaults); none where null; 0 (none) for the others.
     */
    private static int slidingWindow(Fields f, boolean mistral, boolean noDefault) {
        if (!mistral && !noDefault) return 0;
        Json v = f.obj().get("sliding_window");
        if (v == null) return mistral ? 4096 : 0;
        if (v instanceof Json.Null) return 0;
        int w = f.integer("sliding_window", null);
        if (w < 1) throw new GraphException(f.file() + ": field 'sliding_window' is " + w + ": a window is at least 1 position (null: none)");
        return w;
    }

    /** The rotary embedding's base and scaling, from either spelling (see the class comment). */
    record Rope(double theta, LlamaConfig.RopeScaling scaling, Double partial) {
        /**
         * The rotary embedding of {@code obj}; with {@code partial} (Phi-3) the rope object's {@code partial_rotary_factor}
         * is read ({@link #partial}: null where it has none), else one other than 1 is refused.
         */
        static Rope read(Path file, Json.Obj obj, boolean partial) {
            var top = new Fields(file, obj, "");
            Double legacyTheta = top.has("rope_theta") ? top.number("rope_theta", Double.NaN) : null;
            Integer maxPositions = top.has("max_position_embeddings") ? top.integer("max_position_embeddings", null) : null;
            Fields legacyObject = top.has("rope_scaling") ? top.object("rope_scaling") : null;
            Rope legacy = new Rope(legacyTheta == null ? 10000 : legacyTheta, legacyObject == null ? null : scaling(legacyObject, maxPositions, partial),
                    legacyObject == null ? null : partial(legacyObject));
            if (!top.has("rope_parameters")) return legacy;
            Fields p = top.object("rope_parameters");
            double theta = p.has("rope_theta") ? p.number("rope_theta", Double.NaN) : legacy.theta();
            var params = new Rope(theta, scaling(p, maxPositions, partial), partial(p));
            if (legacy.partial() != null && params.partial() != null && !legacy.partial().equals(params.partial()))
                throw new CompilationException(file + ": fields 'rope_scaling.partial_rotary_factor' (" + legacy.partial()
                        + ") and 'rope_parameters.partial_rotary_factor' (" + params.partial() + ") disagree: which one the checkpoint means is unclear");
            if (legacyTheta != null && legacyTheta != theta)
                throw new CompilationException(file + ": fields 'rope_theta' (" + legacyTheta + ") and 'rope_parameters.rope_theta' (" + theta
                        + ") disagree: which one the checkpoint means is unclear");
            if (top.has("rope_scaling") && !java.util.Objects.equals(legacy.scaling(), params.scaling()))
                throw new CompilationException(file + ": fields 'rope_scaling' (" + legacy.scaling() + ") and 'rope_parameters' ("
                        + params.scaling() + ") disagree: which one the checkpoint means is unclear");
            return params;
        }

        /** The rope object's {@code partial_rotary_factor}, or null where it has none. */
        private static Double partial(Fields o) { return o.has("partial_rotary_factor") ? o.number("partial_rotary_factor", 1) : null; }

        /** The scaling of one rope object ({@code rope_scaling} or {@code rope_parameters}); null: none. */
        private static LlamaConfig.RopeScaling scaling(Fields o, Integer maxPositions, boolean partial) {
            Json t = o.obj().get("rope_type") != null ? o.obj().get("rope_type") : o.obj().get("type");
            if (t != null && !(t instanceof Json.Str)) throw new GraphException(o.file() + ": field '" + o.prefix() + "rope_type' is a JSON " + t.kind() + ", not a string");
            String type = t == null ? null : ((Json.Str) t).value();
            if (!partial && o.has("partial_rotary_factor") && o.number("partial_rotary_factor", 1) != 1)
                throw new CompilationException(o.file() + ": field '" + o.prefix() + "partial_rotary_factor' is " + o.number("partial_rotary_factor", 1)
                        + ": partial rotary embeddings (rotating a fraction of each head) are not implemented");
            Set<String> uses = switch (type == null ? "default" : type) {
                case "default" -> Set.of();
                case "linear" -> Set.of("factor");
                case "llama3" -> Set.of("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings");
                case "yarn" -> Set.of("factor", "original_max_position_embeddings");
                case "dynamic" -> Set.of("factor");
                default -> throw new CompilationException(o.file() + ": field '" + o.prefix() + "rope_type' is \"" + type + "\": "
                        + REFUSED_ROPE.getOrDefault(type, "this scaling is not implemented") + "; implemented: default, linear, llama3, yarn, dynamic");
            };
            for (String k : o.obj().fields().keySet())
                if (!uses.contains(k) && !Set.of("rope_type", "type", "rope_theta", "partial_rotary_factor").contains(k)
                        && !("yarn".equals(type) && YARN_OPTIONAL.contains(k)))
                    throw new CompilationException(o.file() + ": field '" + o.prefix() + k + "' is not used by rope_type " + (type == null ? "default (none given)" : "\"" + type + "\"")
                            + ": a rope field this loader does not use may change the rotary embedding, so it is refused");
            for (String k : uses) if (!o.has(k)) throw new GraphException(o.file() + ": field '" + o.prefix() + k + "' is missing (rope_type \"" + type + "\" needs it)");
            return switch (type == null ? "default" : type) {
                case "linear" -> new LlamaConfig.RopeScaling.Linear(o.number("factor", Double.NaN));
                case "llama3" -> new LlamaConfig.RopeScaling.Llama3(o.number("factor", Double.NaN), o.number("low_freq_factor", Double.NaN),
                        o.number("high_freq_factor", Double.NaN), o.integer("original_max_position_embeddings", null));
                case "yarn" -> yarn(o, maxPositions);
                case "dynamic" -> dynamic(o, maxPositions);
                default -> null;
            };
        }
    }

    /** YaRN's fields with transformers' defaults (beta_fast 32, beta_slow 1, the attention factor from the factor, truncate). */
    private static final Set<String> YARN_OPTIONAL = Set.of("beta_fast", "beta_slow", "attention_factor", "truncate");

    /**
     * YaRN's parameters. transformers takes the factor from {@code max_position_embeddings / original_max_position_embeddings}
     * where the rope object names the original (DeepSeek's convention) and from {@code factor} elsewhere, and its
     * versions differ on it: a file where the two disagree is refused rather than read one way.
     */
    private static LlamaConfig.RopeScaling yarn(Fields o, Integer maxPositions) {
        double factor = o.number("factor", Double.NaN);
        int original = o.integer("original_max_position_embeddings", null);
        if (maxPositions != null && Math.abs((double) maxPositions / original - factor) > 1e-9 * factor)
            throw new CompilationException(o.file() + ": YaRN's factor " + factor + " and max_position_embeddings / original_max_position_embeddings = "
                    + maxPositions + " / " + original + " disagree: transformers' versions read one or the other, so what the checkpoint means is unclear");
        Json truncate = o.obj().get("truncate");
        if (truncate != null && !(truncate instanceof Json.Bool || truncate instanceof Json.Null))
            throw new GraphException(o.file() + ": field '" + o.prefix() + "truncate' is a JSON " + truncate.kind() + ", not true or false");
        return new LlamaConfig.RopeScaling.Yarn(factor, original, o.number("beta_fast", 32), o.number("beta_slow", 1),
                o.has("attention_factor") ? o.number("attention_factor", Double.NaN) : LlamaConfig.RopeScaling.Yarn.defaultAttentionFactor(factor),
                !(truncate instanceof Json.Bool b) || b.value());
    }

    /**
     * Dynamic NTK scaling: its factor, and {@code max_position_embeddings} (where the file leaves it out the model type's
     * default would apply, which this loader does not guess: refused).
     */
    private static LlamaConfig.RopeScaling dynamic(Fields o, Integer maxPositions) {
        if (maxPositions == null)
            throw new GraphException(o.file() + ": field 'max_position_embeddings' is missing: rope_type \"dynamic\" scales the rotary "
                    + "frequencies past it, so it must be given");
        return new LlamaConfig.RopeScaling.Dynamic(o.number("factor", Double.NaN), maxPositions);
    }

    /** Rope types refused, with what they would compute. */
    private static final java.util.Map<String, String> REFUSED_ROPE = java.util.Map.of(
            "longrope", "LongRoPE scaling (per-frequency long and short factors, and an attention factor) is not implemented",
            "su", "LongRoPE (su) scaling is not implemented",
            "ntk", "NTK scaling is not implemented");

    /** Typed reads of the fields of one JSON object of a file, each refusal naming the file and the field. */
    record Fields(Path file, Json.Obj obj, String prefix) {
        boolean has(String name) {
            Json v = obj.get(name);
            return v != null && !(v instanceof Json.Null);
        }

        int integer(String name, Integer orElse) {
            Json v = obj.get(name);
            if (v == null || v instanceof Json.Null) {
                if (orElse != null) return orElse;
                throw new GraphException(file + ": field '" + prefix + name + "' is missing");
            }
            if (!(v instanceof Json.Num n)) throw new GraphException(file + ": field '" + prefix + name + "' is a JSON " + v.kind() + ", not a number");
            try {
                return Integer.parseInt(n.text());
            } catch (NumberFormatException e) {
                throw new GraphException(file + ": field '" + prefix + name + "' is " + ConfigPolicy.shortText(n) + ", not a whole number that fits an int");
            }
        }

        double number(String name, double orElse) {
            Json v = obj.get(name);
            if (v == null || v instanceof Json.Null) return orElse;
            if (!(v instanceof Json.Num n)) throw new GraphException(file + ": field '" + prefix + name + "' is a JSON " + v.kind() + ", not a number");
            return n.doubleValue();
        }

        boolean bool(String name, boolean orElse) {
            Json v = obj.get(name);
            if (v == null || v instanceof Json.Null) return orElse;
            if (!(v instanceof Json.Bool b)) throw new GraphException(file + ": field '" + prefix + name + "' is a JSON " + v.kind() + ", not true or false");
            return b.value();
        }

        /** The object field {@code name}, for reads of its own fields. */
        Fields object(String name) {
            Json v = obj.get(name);
            if (!(v instanceof Json.Obj o)) throw new GraphException(file + ": field '" + prefix + name + "' is a JSON " + v.kind() + ", not an object");
            return new Fields(file, o, prefix + name + ".");
        }
    }
}
