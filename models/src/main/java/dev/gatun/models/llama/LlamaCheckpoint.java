package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.ir.json.Json;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * The tensors of a Llama-architecture checkpoint in the Hugging Face naming most open checkpoints use, their shapes
 * for a {@link LlamaConfig}, a check that a {@code .safetensors} file holds them all, and a writer of checkpoints with
 * random weights (tests and benchmarks make theirs; a real checkpoint in this layout loads the same way).
 *
 * <pre>
 * model.embed_tokens.weight                      [vocab, hidden]
 * model.layers.L.input_layernorm.weight          [hidden]
 * model.layers.L.self_attn.q_proj.weight         [heads * head_dim, hidden]
 * model.layers.L.self_attn.k_proj.weight         [kv_heads * head_dim, hidden]
 * model.layers.L.self_attn.v_proj.weight         [kv_heads * head_dim, hidden]
 * model.layers.L.self_attn.o_proj.weight         [hidden, heads * head_dim]
 * model.layers.L.post_attention_layernorm.weight [hidden]
 * model.layers.L.mlp.gate_proj.weight            [intermediate, hidden]
 * model.layers.L.mlp.up_proj.weight              [intermediate, hidden]
 * model.layers.L.mlp.down_proj.weight            [hidden, intermediate]
 * model.norm.weight                              [hidden]
 * lm_head.weight                                 [vocab, hidden]   (absent with tied embeddings)
 * </pre>
 *
 * Projection weights are stored as PyTorch's {@code nn.Linear} keeps them, {@code [out, in]}: {@code y = x @ W^T}.
 */
public final class LlamaCheckpoint {
    private LlamaCheckpoint() {}

    /** The file a checkpoint directory keeps its weights in. */
    public static final String WEIGHTS = "model.safetensors";
    /** The file a checkpoint directory keeps its configuration in. */
    public static final String CONFIG = "config.json";
    /** The file a checkpoint directory may keep its generation defaults in (its end tokens among them). */
    public static final String GENERATION_CONFIG = "generation_config.json";

    /**
     * The checkpoint's end-of-sequence tokens, for {@link Generation#stopAt(java.util.Set)}: {@code eos_token_id} (one id
     * or a list of them) of {@code generation_config.json} where that file names it (as transformers' {@code generate}
     * reads it), else of {@code config.json}; none where neither does. An id that is not a whole number of at least 0
     * is refused naming the file.
     */
    public static java.util.Set<Integer> eosTokens(Path dir) throws IOException {
        for (String name : new String[]{GENERATION_CONFIG, CONFIG}) {
            Path file = dir.resolve(name);
            if (!Files.exists(file)) continue;
            Json root = LlamaConfig.readJson(file);
            Json eos = root instanceof Json.Obj o ? o.get("eos_token_id") : null;
            if (eos == null || eos instanceof Json.Null) continue;
            var ids = new java.util.LinkedHashSet<Integer>();
            for (Json id : eos instanceof Json.Arr a ? a.items() : List.of(eos)) {
                Integer v = null;
                if (id instanceof Json.Num n) {
                    try {
                        v = Integer.parseInt(n.text());
                    } catch (NumberFormatException ignored) { }
                }
                if (v == null || v < 0)
                    throw new IOException(file + ": field 'eos_token_id' holds " + (id instanceof Json.Num n ? n.text() : "a JSON " + id.kind())
                            + ", not a token id (a whole number of at least 0)");
                ids.add(v);
            }
            return java.util.Collections.unmodifiableSet(ids);
        }
        return java.util.Set.of();
    }

    /** Every tensor the configuration needs, in file order, with its shape. */
    public static Map<String, long[]> shapes(LlamaConfig c) {
        long h = c.hiddenSize(), q = (long) c.heads() * c.headDim(), kv = (long) c.kvHeads() * c.headDim(), f = c.intermediateSize(), v = c.vocabSize();
        var out = new LinkedHashMap<String, long[]>();
        out.put("model.embed_tokens.weight", new long[]{v, h});
        for (int l = 0; l < c.layers(); l++) {
            String p = "model.layers." + l + ".";
            out.put(p + "input_layernorm.weight", new long[]{h});
            out.put(p + "self_attn.q_proj.weight", new long[]{q, h});
            out.put(p + "self_attn.k_proj.weight", new long[]{kv, h});
            out.put(p + "self_attn.v_proj.weight", new long[]{kv, h});
            out.put(p + "self_attn.o_proj.weight", new long[]{h, q});
            out.put(p + "post_attention_layernorm.weight", new long[]{h});
            out.put(p + "mlp.gate_proj.weight", new long[]{f, h});
            out.put(p + "mlp.up_proj.weight", new long[]{f, h});
            out.put(p + "mlp.down_proj.weight", new long[]{h, f});
        }
        out.put("model.norm.weight", new long[]{h});
        if (!c.tieWordEmbeddings()) out.put("lm_head.weight", new long[]{v, h});
        return out;
    }

    /**
     * Refuses a file that does not hold this configuration's weights: a tensor missing, of another shape, or of a
     * dtype other than f32, f16 or bf16, named with the file. Tensors the configuration does not use are allowed
     * (checkpoints carry rotary caches and the like).
     */
    public static void check(LlamaConfig c, SafeTensors file, Path where) throws IOException {
        for (var e : shapes(c).entrySet()) {
            if (!file.contains(e.getKey()))
                throw new IOException(where + ": tensor '" + e.getKey() + "' is missing (a Llama checkpoint of " + c.layers() + " layers"
                        + (c.tieWordEmbeddings() ? ", tied embeddings" : "") + " needs it)");
            var entry = file.entry(e.getKey());
            if (!Arrays.equals(entry.shape(), e.getValue()))
                throw new IOException(where + ": tensor '" + e.getKey() + "' has shape " + Arrays.toString(entry.shape()) + ", but the configuration needs "
                        + Arrays.toString(e.getValue()));
            if (entry.dtype() != DType.FLOAT32 && !entry.dtype().isHalf())
                throw new IOException(where + ": tensor '" + e.getKey() + "' is " + entry.dtype() + "; weights are f32, f16 or bf16");
        }
    }

    /**
     * Writes a checkpoint with random weights into {@code dir}: {@code config.json} and {@code model.safetensors} in
     * {@code dtype}. Projections and embeddings are normal with standard deviation 0.02 (the usual initialisation),
     * norm weights 1 plus a little noise, all seeded.
     */
    public static void writeRandom(LlamaConfig c, DType dtype, long seed, Path dir) throws IOException {
        Files.createDirectories(dir);
        var rnd = new SplittableRandom(seed);
        var tensors = new LinkedHashMap<String, NDArray>();
        for (var e : shapes(c).entrySet()) {
            long[] shape = e.getValue();
            boolean norm = e.getKey().endsWith("norm.weight");
            var a = NDArray.zeros(dtype, shape);
            for (long i = 0; i < a.numel(); i++) a.set(i, norm ? 1 + 0.1 * rnd.nextGaussian() : 0.02 * rnd.nextGaussian());
            tensors.put(e.getKey(), a);
        }
        c.write(dir.resolve(CONFIG));
        SafeTensors.write(dir.resolve(WEIGHTS), tensors, Map.of("format", "pt"));
    }
}
