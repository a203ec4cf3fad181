package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.json.Json;
import dev.gatun.ir.json.JsonSyntaxException;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Locale;

/**
 * The shape of a Llama-architecture decoder, as a checkpoint's {@code config.json} states it (the field names of the
 * Hugging Face layout most open checkpoints use).
 *
 * @param hiddenSize        {@code hidden_size}: the width of the residual stream
 * @param layers            {@code num_hidden_layers}
 * @param heads             {@code num_attention_heads}: query heads
 * @param kvHeads           {@code num_key_value_heads}: key and value heads (grouped-query attention; {@code heads} when
 *                          the file leaves it out)
 * @param intermediateSize  {@code intermediate_size}: the width of the gated MLP
 * @param vocabSize         {@code vocab_size}
 * @param ropeTheta         {@code rope_theta} (10000 when left out)
 * @param rmsNormEps        {@code rms_norm_eps} (1e-6 when left out)
 * @param tieWordEmbeddings {@code tie_word_embeddings}: the output projection is the embedding (false when left out)
 * @param ropeScaling       {@code rope_scaling} of {@code rope_type} "llama3" (Llama 3.1 and later), or null: unscaled
 */
public record LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize,
                          double ropeTheta, double rmsNormEps, boolean tieWordEmbeddings, RopeScaling ropeScaling) {

    /**
     * Llama 3's rotary frequency scaling ({@code rope_type} "llama3"): frequencies whose wavelength exceeds
     * {@code originalMaxPositions / lowFreqFactor} are divided by {@code factor}, those shorter than
     * {@code originalMaxPositions / highFreqFactor} are kept, and those between are interpolated between the two.
     */
    public record RopeScaling(double factor, double lowFreqFactor, double highFreqFactor, int originalMaxPositions) {
        public RopeScaling {
            if (!(factor >= 1) || Double.isInfinite(factor)) throw new IllegalArgumentException("rope_scaling.factor must be at least 1, not " + factor);
            if (!(lowFreqFactor > 0) || !(highFreqFactor > lowFreqFactor) || Double.isInfinite(highFreqFactor))
                throw new IllegalArgumentException("rope_scaling needs 0 < low_freq_factor < high_freq_factor, not " + lowFreqFactor + " and " + highFreqFactor);
            if (originalMaxPositions < 1) throw new IllegalArgumentException("rope_scaling.original_max_position_embeddings must be at least 1, not " + originalMaxPositions);
        }

        /** A frequency (radians per position) as Llama 3 scales it. */
        double scale(double frequency) {
            double wavelength = 2 * Math.PI / frequency;
            if (wavelength < originalMaxPositions / highFreqFactor) return frequency;
            if (wavelength > originalMaxPositions / lowFreqFactor) return frequency / factor;
            double smooth = (originalMaxPositions / wavelength - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
            return (1 - smooth) * frequency / factor + smooth * frequency;
        }
    }

    /** A shape with unscaled rotary frequencies. */
    public LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize,
                       double ropeTheta, double rmsNormEps, boolean tieWordEmbeddings) {
        this(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, null);
    }

    /** This shape with Llama 3's rotary frequency scaling. */
    public LlamaConfig withRopeScaling(RopeScaling scaling) {
        return new LlamaConfig(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, scaling);
    }

    /**
     * The rotary frequency of each of the {@code head_dim / 2} pairs, radians per position: {@code rope_theta^(-2i/d)},
     * scaled where {@code rope_scaling} says so.
     */
    public double[] ropeFrequencies() {
        int d = headDim();
        double[] f = new double[d / 2];
        for (int i = 0; i < f.length; i++) {
            f[i] = 1 / Math.pow(ropeTheta, 2.0 * i / d);
            if (ropeScaling != null) f[i] = ropeScaling.scale(f[i]);
        }
        return f;
    }

    public LlamaConfig {
        positive("hidden_size", hiddenSize);
        positive("num_hidden_layers", layers);
        positive("num_attention_heads", heads);
        positive("num_key_value_heads", kvHeads);
        positive("intermediate_size", intermediateSize);
        positive("vocab_size", vocabSize);
        if (hiddenSize % heads != 0)
            throw new IllegalArgumentException("hidden_size " + hiddenSize + " is not a multiple of num_attention_heads " + heads);
        if (heads % kvHeads != 0)
            throw new IllegalArgumentException("num_attention_heads " + heads + " is not a multiple of num_key_value_heads " + kvHeads);
        if (hiddenSize / heads % 2 != 0) throw new IllegalArgumentException("the head dimension " + hiddenSize / heads + " is odd: rotary embeddings rotate pairs");
        if (!(ropeTheta > 0) || Double.isInfinite(ropeTheta)) throw new IllegalArgumentException("rope_theta must be positive and finite, not " + ropeTheta);
        if (!(rmsNormEps > 0) || Double.isInfinite(rmsNormEps)) throw new IllegalArgumentException("rms_norm_eps must be positive and finite, not " + rmsNormEps);
    }

    private static void positive(String field, int v) {
        if (v < 1) throw new IllegalArgumentException(field + " must be at least 1, not " + v);
    }

    /** The width of one attention head: {@code hidden_size / num_attention_heads}. */
    public int headDim() { return hiddenSize / heads; }

    /** Query heads that share one key and value head. */
    public int groupSize() { return heads / kvHeads; }

    /**
     * Refuses a tensor-parallel degree this shape cannot be split over: Megatron-style parallelism gives each rank
     * whole query heads and an equal share of the MLP's width, and whole key-value heads, or, where there are fewer
     * key-value heads than ranks, a replica of the one its query heads share.
     */
    public void checkTensorParallel(int tp) {
        if (tp < 1) throw new CompilationException("tensor-parallel degree must be at least 1, not " + tp);
        if (intermediateSize % tp != 0) throw indivisible(tp, "intermediate_size", intermediateSize);
        if (heads % tp != 0) throw indivisible(tp, "num_attention_heads", heads);
        if (kvHeads % tp != 0 && tp % kvHeads != 0)
            throw new CompilationException("a tensor-parallel degree of " + tp + " neither divides num_key_value_heads = " + kvHeads
                    + " nor is a multiple of it: each rank takes whole key-value heads or a replica of one");
    }

    private static CompilationException indivisible(int tp, String field, int value) {
        return new CompilationException("a tensor-parallel degree of " + tp + " does not divide " + field + " = " + value
                + ": each rank takes whole heads and an equal share of the MLP; use a degree that divides "
                + "num_attention_heads and intermediate_size");
    }

    /** Reads {@code config.json}: a missing or ill-typed field is refused naming the file and the field. */
    public static LlamaConfig read(Path file) throws IOException {
        Json root = readJson(file);
        if (!(root instanceof Json.Obj obj)) throw new IOException(file + ": a JSON " + root.kind() + ", not an object");
        var fields = new Fields(file, obj);
        int heads = fields.integer("num_attention_heads", null);
        refuseUnsupported(file, obj, fields, heads);
        try {
            return new LlamaConfig(fields.integer("hidden_size", null), fields.integer("num_hidden_layers", null), heads,
                    fields.integer("num_key_value_heads", heads), fields.integer("intermediate_size", null), fields.integer("vocab_size", null),
                    fields.number("rope_theta", 10000.0), fields.number("rms_norm_eps", 1e-6), fields.bool("tie_word_embeddings", false),
                    ropeScaling(file, obj));
        } catch (IllegalArgumentException e) {
            throw new IOException(file + ": " + e.getMessage(), e);
        }
    }

    /** A checkpoint's JSON file, parsed; text that is not JSON is refused naming the file. */
    static Json readJson(Path file) throws IOException {
        try {
            return Json.parse(Files.readString(file, StandardCharsets.UTF_8).strip());
        } catch (JsonSyntaxException e) {
            throw new IOException(file + ": not JSON: " + e.getMessage(), e);
        }
    }

    /** {@code rope_scaling}: null, rope_type "default" (none) or "llama3"; any other kind is refused. */
    private static RopeScaling ropeScaling(Path file, Json.Obj obj) throws IOException {
        Json scaling = obj.get("rope_scaling");
        if (scaling == null || scaling instanceof Json.Null) return null;
        if (!(scaling instanceof Json.Obj o)) throw new IOException(file + ": field 'rope_scaling' is a JSON " + scaling.kind() + ", not an object");
        Json type = o.get("rope_type") != null ? o.get("rope_type") : o.get("type");
        String kind = type instanceof Json.Str t ? t.value() : null;
        if ("default".equals(kind)) return null;
        if (!"llama3".equals(kind))
            throw new IOException(file + ": field 'rope_scaling' has rope_type " + (kind == null ? "missing" : "\"" + kind + "\"")
                    + ": only \"llama3\" scaling (and unscaled RoPE) is implemented");
        var f = new Fields(file, o, "rope_scaling.");
        for (String name : new String[]{"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
            if (o.get(name) == null || o.get(name) instanceof Json.Null) throw new IOException(file + ": field 'rope_scaling." + name + "' is missing");
        return new RopeScaling(f.number("factor", Double.NaN), f.number("low_freq_factor", Double.NaN), f.number("high_freq_factor", Double.NaN),
                f.integer("original_max_position_embeddings", null));
    }

    /**
     * Refuses what this decoder does not compute, rather than give different logits from the checkpoint's own model:
     * a head size other than {@code hidden_size / num_attention_heads}, an activation other than SiLU, and bias terms
     * ({@code rope_scaling} other than Llama 3's is refused where it is read).
     */
    private static void refuseUnsupported(Path file, Json.Obj obj, Fields fields, int heads) throws IOException {
        if (obj.get("head_dim") != null && !(obj.get("head_dim") instanceof Json.Null)) {
            int headDim = fields.integer("head_dim", null), hidden = fields.integer("hidden_size", null);
            if ((long) headDim * heads != hidden)
                throw new IOException(file + ": field 'head_dim' is " + headDim + ", but hidden_size / num_attention_heads is "
                        + hidden + " / " + heads + ": a separate head size is not implemented");
        }
        Json act = obj.get("hidden_act");
        if (act != null && !(act instanceof Json.Str a && a.value().equals("silu")))
            throw new IOException(file + ": field 'hidden_act' is " + (act instanceof Json.Str a ? "\"" + a.value() + "\"" : "a JSON " + act.kind())
                    + ": only \"silu\" is implemented");
        for (String bias : new String[]{"attention_bias", "mlp_bias"})
            if (fields.bool(bias, false))
                throw new IOException(file + ": field '" + bias + "' is true: bias terms are not implemented");
    }

    /** Writes {@code config.json} in the same layout, with {@code "model_type": "llama"}. */
    public void write(Path file) throws IOException {
        var m = new LinkedHashMap<String, String>();
        m.put("model_type", "\"llama\"");
        m.put("architectures", "[\"LlamaForCausalLM\"]");
        m.put("hidden_size", Integer.toString(hiddenSize));
        m.put("num_hidden_layers", Integer.toString(layers));
        m.put("num_attention_heads", Integer.toString(heads));
        m.put("num_key_value_heads", Integer.toString(kvHeads));
        m.put("intermediate_size", Integer.toString(intermediateSize));
        m.put("vocab_size", Integer.toString(vocabSize));
        m.put("rope_theta", Double.toString(ropeTheta));
        m.put("rms_norm_eps", String.format(Locale.ROOT, "%.17g", rmsNormEps));
        m.put("tie_word_embeddings", Boolean.toString(tieWordEmbeddings));
        m.put("hidden_act", "\"silu\"");
        if (ropeScaling != null)
            m.put("rope_scaling", String.format(Locale.ROOT, "{\"rope_type\": \"llama3\", \"factor\": %s, \"low_freq_factor\": %s, "
                    + "\"high_freq_factor\": %s, \"original_max_position_embeddings\": %d}", Double.toString(ropeScaling.factor()),
                    Double.toString(ropeScaling.lowFreqFactor()), Double.toString(ropeScaling.highFreqFactor()), ropeScaling.originalMaxPositions()));
        var sb = new StringBuilder("{\n");
        int i = 0;
        for (var e : m.entrySet()) sb.append("  \"").append(e.getKey()).append("\": ").append(e.getValue()).append(++i < m.size() ? ",\n" : "\n");
        Files.writeString(file, sb.append("}\n").toString(), StandardCharsets.UTF_8);
    }

    /** Typed reads of the fields of one file, each refusal naming the file and the field. */
    private record Fields(Path file, Json.Obj obj, String prefix) {
        Fields(Path file, Json.Obj obj) { this(file, obj, ""); }

        int integer(String name, Integer orElse) throws IOException {
            Json v = obj.get(name);
            if (v == null || v instanceof Json.Null) {
                if (orElse != null) return orElse;
                throw new IOException(file + ": field '" + prefix + name + "' is missing");
            }
            if (!(v instanceof Json.Num n)) throw new IOException(file + ": field '" + prefix + name + "' is a JSON " + v.kind() + ", not a number");
            try {
                return Integer.parseInt(n.text());
            } catch (NumberFormatException e) {
                throw new IOException(file + ": field '" + prefix + name + "' is " + n.text() + ", not a whole number that fits an int");
            }
        }

        double number(String name, double orElse) throws IOException {
            Json v = obj.get(name);
            if (v == null || v instanceof Json.Null) return orElse;
            if (!(v instanceof Json.Num n)) throw new IOException(file + ": field '" + prefix + name + "' is a JSON " + v.kind() + ", not a number");
            return Double.parseDouble(n.text());
        }

        boolean bool(String name, boolean orElse) throws IOException {
            Json v = obj.get(name);
            if (v == null || v instanceof Json.Null) return orElse;
            if (!(v instanceof Json.Bool b)) throw new IOException(file + ": field '" + prefix + name + "' is a JSON " + v.kind() + ", not true or false");
            return b.value();
        }
    }
}
