package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.json.Json;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.SafeTensorsIndex;
import dev.gatun.runtime.TensorFiles;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.SplittableRandom;
import java.util.regex.Pattern;

/**
 * The tensors of a Llama-architecture checkpoint in the Hugging Face naming most open checkpoints use, their shapes
 * for a {@link LlamaConfig}, a check that the checkpoint's files hold exactly them, and a writer of checkpoints with
 * random weights (tests and benchmarks make theirs; a real checkpoint in this layout loads the same way).
 * {@link #open} reads a checkpoint directory: its {@code config.json} and its weights, one {@code model.safetensors}
 * or the shards a {@code model.safetensors.index.json} lists, in f32, f16 or bf16.
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
 * With biases ({@link LlamaConfig#biases}: Qwen2's query, key and value projections, Llama's {@code attention_bias}
 * or {@code mlp_bias}) each such projection has its {@code .bias} beside its {@code .weight}, one value an output; with
 * Qwen3's QK-norm each layer has {@code self_attn.q_norm.weight} and {@code self_attn.k_norm.weight}, {@code [head_dim]};
 * with Gemma 2's norms around the MLP, {@code pre_feedforward_layernorm.weight} and {@code post_feedforward_layernorm.weight},
 * {@code [hidden]} (Gemma's checkpoints have the tied embedding only: no {@code lm_head.weight}).
 * Phi-3's layout ({@link LlamaConfig#fused}) has each layer's query, key and value weights as one tensor,
 * {@code self_attn.qkv_proj.weight [(heads + 2 * kv_heads) * head_dim, hidden]} (the rows of q, then k, then v), and its gate
 * and up weights as one, {@code mlp.gate_up_proj.weight [2 * intermediate, hidden]} (gate, then up), in place of the five.
 * A mixture-of-experts layer ({@link LlamaConfig#moe}) has its router and experts instead of the three MLP projections
 * ({@link MixtureOfExperts#shapes}: Mixtral's {@code block_sparse_moe.gate.weight} [experts, hidden] and
 * {@code block_sparse_moe.experts.E.w1|w3|w2.weight}; Qwen's {@code mlp.gate.weight}, {@code mlp.experts.E.*_proj.weight}
 * and Qwen2-MoE's {@code mlp.shared_expert.*} and {@code mlp.shared_expert_gate.weight} [1, hidden]).
 *
 * Projection weights are stored as PyTorch's {@code nn.Linear} keeps them, {@code [out, in]}: {@code y = x @ W^T}.
 */
public final class LlamaCheckpoint {
    private LlamaCheckpoint() {}

    /** The file a checkpoint directory keeps its weights in. */
    public static final String WEIGHTS = "model.safetensors";
    /** The file a checkpoint directory whose weights are sharded lists its shards in. */
    public static final String WEIGHTS_INDEX = "model.safetensors.index.json";
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
            Json root = LlamaConfigReader.readJson(file);
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
                    throw new GraphException(file + ": field 'eos_token_id' holds " + (id instanceof Json.Num n ? n.text() : "a JSON " + id.kind())
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
            var b = c.biases();
            if (c.fused()) out.put(p + "self_attn.qkv_proj.weight", new long[]{q + 2 * kv, h});   // Phi-3's: q | k | v rows
            else {
                out.put(p + "self_attn.q_proj.weight", new long[]{q, h});
                if (b.qkv()) out.put(p + "self_attn.q_proj.bias", new long[]{q});
                out.put(p + "self_attn.k_proj.weight", new long[]{kv, h});
                if (b.qkv()) out.put(p + "self_attn.k_proj.bias", new long[]{kv});
                out.put(p + "self_attn.v_proj.weight", new long[]{kv, h});
                if (b.qkv()) out.put(p + "self_attn.v_proj.bias", new long[]{kv});
            }
            out.put(p + "self_attn.o_proj.weight", new long[]{h, q});
            if (b.output()) out.put(p + "self_attn.o_proj.bias", new long[]{h});
            if (c.qkNorm()) {
                out.put(p + "self_attn.q_norm.weight", new long[]{c.headDim()});
                out.put(p + "self_attn.k_norm.weight", new long[]{c.headDim()});
            }
            out.put(p + "post_attention_layernorm.weight", new long[]{h});
            for (String n : GemmaOps.extraNorms(c)) out.put(p + n, new long[]{h});
            if (MixtureOfExperts.sparse(c, l)) {
                out.putAll(MixtureOfExperts.shapes(c, p));
                continue;
            }
            if (c.fused()) out.put(p + "mlp.gate_up_proj.weight", new long[]{2 * f, h});            // Phi-3's: gate | up rows
            else {
                out.put(p + "mlp.gate_proj.weight", new long[]{f, h});
                if (b.mlp()) out.put(p + "mlp.gate_proj.bias", new long[]{f});
                out.put(p + "mlp.up_proj.weight", new long[]{f, h});
                if (b.mlp()) out.put(p + "mlp.up_proj.bias", new long[]{f});
            }
            out.put(p + "mlp.down_proj.weight", new long[]{h, f});
            if (b.mlp()) out.put(p + "mlp.down_proj.bias", new long[]{h});
        }
        out.put("model.norm.weight", new long[]{h});
        if (!c.tieWordEmbeddings()) out.put("lm_head.weight", new long[]{v, h});
        return out;
    }

    /**
     * A checkpoint directory, read and checked: its configuration and its weights, open until closed. The weights are
     * memory-mapped, not read: their bytes come off the disk as a rank's shard is made ({@link #shard}).
     */
    public record Loaded(LlamaConfig config, TensorFiles weights) implements AutoCloseable {
        /**
         * Rank {@code rank}'s shard of the weights in {@code dtype} ({@link LlamaDecoder#weights}), telling
         * {@code progress} (null: nobody) how far reading has got, for a progress line:
         * {@code ckpt.shard(tp, rank, dtype, p -> System.err.print("\r" + p.line()))}.
         */
        public java.util.Map<String, NDArray> shard(int tp, int rank, DType dtype, java.util.function.Consumer<dev.gatun.runtime.LoadProgress> progress) {
            return LlamaDecoder.weights(config, weights, tp, rank, dtype, progress);
        }

        /** {@link #shard(int, int, DType, java.util.function.Consumer)} for rank {@code rank} of {@code parallel}'s mesh (expert parallelism). */
        public java.util.Map<String, NDArray> shard(Parallelism parallel, int rank, DType dtype, java.util.function.Consumer<dev.gatun.runtime.LoadProgress> progress) {
            return LlamaDecoder.weights(config, weights, parallel, rank, dtype, progress);
        }

        @Override public void close() { weights.close(); }
    }

    /**
     * Reads the checkpoint in {@code dir}: {@link LlamaConfig#read} of its {@code config.json}, {@link #openWeights}, and
     * {@link #check} of the one against the other. Nothing stays open when it fails.
     */
    public static Loaded open(Path dir) throws IOException { return open(dir, Set.of()); }

    /** As {@link #open(Path)}, with fields of {@code config.json} the caller knows to be harmless (see {@link LlamaConfig#read(Path, Set)}). */
    public static Loaded open(Path dir, Set<String> alsoHarmless) throws IOException {
        LlamaConfig c = LlamaConfig.read(dir.resolve(CONFIG), alsoHarmless);
        TensorFiles weights = openWeights(dir);
        try {
            check(c, weights, dir);
            return new Loaded(c, weights);
        } catch (RuntimeException e) {
            weights.close();
            throw e;
        }
    }

    /**
     * The weights of the checkpoint in {@code dir}: {@value #WEIGHTS}, or where there is none the shards that
     * {@value #WEIGHTS_INDEX} lists (transformers looks in the same order).
     */
    public static TensorFiles openWeights(Path dir) throws IOException {
        if (Files.exists(dir.resolve(WEIGHTS))) return SafeTensors.open(dir.resolve(WEIGHTS));
        if (Files.exists(dir.resolve(WEIGHTS_INDEX))) return SafeTensorsIndex.open(dir.resolve(WEIGHTS_INDEX));
        throw new GraphException(dir + ": neither " + WEIGHTS + " nor " + WEIGHTS_INDEX + " is there: a checkpoint keeps its weights in one of them");
    }

    /**
     * Refuses weights that are not exactly this configuration's, naming the file and the tensor: first, from the
     * numbers alone, a configuration whose weights would take more bytes than the files hold (before the tensors are
     * listed: a {@code config.json} declaring billions of layers costs nothing); then a tensor missing, of another
     * shape, or of a dtype other than f32, f16 or bf16; then tensors the model would not use, which are refused too
     * (a checkpoint of another architecture, or with biases, norms or experts this decoder lacks, would otherwise load
     * with those weights ignored). Two are not refused: the rotary frequency caches old checkpoints carry
     * ({@code model.layers.N.self_attn.rotary_emb.inv_freq}, which transformers recomputes too), and with tied
     * embeddings an {@code lm_head.weight} equal to the embedding, byte for byte. {@code where} is the checkpoint's
     * directory.
     */
    public static void check(LlamaConfig c, TensorFiles files, Path where) {
        checkBytes(c, files, where);
        var shapes = shapes(c);
        for (var e : shapes.entrySet()) {
            if (!files.contains(e.getKey()))
                throw new GraphException(files.source() + ": tensor '" + e.getKey() + "' is missing (a Llama checkpoint of " + c.layers() + " layers"
                        + (c.tieWordEmbeddings() ? ", tied embeddings" : "") + " needs it)");
            var entry = files.entry(e.getKey());
            if (!Arrays.equals(entry.shape(), e.getValue()))
                throw new GraphException(files.file(e.getKey()) + ": tensor '" + e.getKey() + "' has shape " + Arrays.toString(entry.shape())
                        + ", but the configuration (" + where.resolve(CONFIG) + ") needs " + Arrays.toString(e.getValue()));
            if (entry.dtype() != DType.FLOAT32 && !entry.dtype().isHalf())
                throw new GraphException(files.file(e.getKey()) + ": tensor '" + e.getKey() + "' is " + entry.dtype() + "; weights are f32, f16 or bf16");
        }
        refuseUnused(c, files, shapes.keySet());
    }

    /** Old checkpoints' rotary frequency caches: not weights; transformers recomputes them from the configuration too. */
    private static final Pattern ROTARY_CACHE = Pattern.compile("model\\.layers\\.\\d+\\.self_attn\\.rotary_emb\\.inv_freq");

    /** Refuses the tensors of {@code files} outside {@code used} (but for the two the comment of {@link #check} names). */
    private static void refuseUnused(LlamaConfig c, TensorFiles files, Set<String> used) {
        var unused = new java.util.ArrayList<String>();
        for (String name : files.names()) {
            if (used.contains(name) || ROTARY_CACHE.matcher(name).matches()) continue;
            if (c.tieWordEmbeddings() && name.equals("lm_head.weight") && sameBytes(files, name, "model.embed_tokens.weight")) continue;
            unused.add(name);
        }
        if (unused.isEmpty()) return;
        var shown = unused.stream().limit(4).map(n -> "'" + n + "'").toList();
        boolean tiedHead = c.tieWordEmbeddings() && unused.contains("lm_head.weight");
        throw new CompilationException(files.file(unused.getFirst()) + (files.source().equals(files.file(unused.getFirst())) ? "" : " (of " + files.source() + ")")
                + ": " + unused.size() + " tensor" + (unused.size() == 1 ? "" : "s") + " the model does not use: " + String.join(", ", shown)
                + (unused.size() > 4 ? " and " + (unused.size() - 4) + " more" : "")
                + (tiedHead ? " (lm_head.weight differs from model.embed_tokens.weight, but tie_word_embeddings is true)" : "")
                + ": a llama checkpoint of this configuration has no such tensors, and loading it would ignore their weights "
                + "(another architecture, or biases, norms or experts this decoder does not implement?)");
    }

    /** Whether two tensors are of one dtype and shape and equal byte for byte. */
    private static boolean sameBytes(TensorFiles files, String a, String b) {
        var ea = files.entry(a);
        var eb = files.entry(b);
        if (ea.dtype() != eb.dtype() || !Arrays.equals(ea.shape(), eb.shape())) return false;
        return files.get(a).segment().mismatch(files.get(b).segment()) == -1;
    }

    /**
     * Refuses, from the numbers alone, a configuration whose weights take more bytes (at 2 a parameter, the fewest of
     * the dtypes read) than the files hold.
     */
    static void checkBytes(LlamaConfig c, TensorFiles files, Path where) {
        long h = c.hiddenSize(), q = (long) c.heads() * c.headDim(), kv = (long) c.kvHeads() * c.headDim(), f = c.intermediateSize();
        long attention = sum(2 * h, times(h, q), times(2 * h, kv), times(q, h)), dense = times(3 * h, f);
        long layers = times(c.layers(), sum(attention, dense));
        if (c.moe() != null) {   // each layer a mixture of experts or a dense MLP
            long moe = MixtureOfExperts.parameters(c);
            layers = 0;
            for (int l = 0; l < c.layers(); l++) layers = sum(layers, attention, c.moe().sparse(l) ? moe : dense);
        }
        long params = sum(times(c.vocabSize(), h), c.tieWordEmbeddings() ? 0 : times(c.vocabSize(), h), h, layers);
        long need = times(2, params);
        if (need > files.dataBytes())
            throw new GraphException(where.resolve(CONFIG) + ": num_hidden_layers " + c.layers() + " of hidden_size " + c.hiddenSize() + ", intermediate_size "
                    + c.intermediateSize() + ", num_attention_heads " + c.heads() + " x head_dim " + c.headDim() + ", num_key_value_heads " + c.kvHeads()
                    + ", with vocab_size " + c.vocabSize() + ", need at least " + (need == Long.MAX_VALUE ? "more than 2^63" : Long.toString(need))
                    + " bytes of weights (2 a parameter), but " + files.source() + " holds " + files.dataBytes()
                    + " bytes of tensors: the configuration does not describe these weights");
    }

    /** a * b, or Long.MAX_VALUE where it overflows (the sizes are not negative). */
    private static long times(long a, long b) {
        try {
            return Math.multiplyExact(a, b);
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE;
        }
    }

    /** The sum, or Long.MAX_VALUE where it overflows (the sizes are not negative). */
    private static long sum(long... v) {
        long s = 0;
        for (long x : v) s = x > Long.MAX_VALUE - s ? Long.MAX_VALUE : s + x;
        return s;
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
