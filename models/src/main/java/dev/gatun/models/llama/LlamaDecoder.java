package dev.gatun.models.llama;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.ops.Attention;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.LoadProgress;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.TensorFiles;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.Consumer;

/**
 * The Llama architecture's two phases in the DSL, one rank's share under tensor parallelism (see {@link LlamaPrefill}
 * for the layer and the sharding), with a KV cache of {@code maxLen} positions:
 * <ul>
 *   <li>{@link #prefill}: a prompt of {@code tokens} tokens; outputs the last position's logits and greedy token, and
 *   each layer's cache ({@code cache.L.k}: the rotated keys, transposed, [kv heads, head_dim, maxLen], as the product
 *   with the queries reads them; {@code cache.L.v}: the values, [kv heads, maxLen, head_dim]; the prompt's, zeros after
 *   it);</li>
 *   <li>{@link #decode}: one token a sequence (i64, the type of the greedy token) at the {@code position} the call gives
 *   (i32); from it the graph computes the rotary
 *   angles, and one {@code attention} step a layer (scores, mask, softmax and weighted values) reads the cache up to
 *   it.
 *   The caches are states of the session ({@code cache.L.k}, {@code cache.L.v}, the layouts above): each step writes
 *   its new key and value at the position in place ({@code update_slice}, the bytes of one position, not of the cache)
 *   and attends over the positions up to it. Its outputs are the logits, the greedy token ({@code next}, i64) and the
 *   state {@value #HISTORY} of every step's greedy tokens, written at the position;
 *   {@link LlamaGenerator} binds the prefill's caches to the states once per prompt.</li>
 * </ul>
 * Each phase is one compiled session reused for every step. Grouped-query attention needs no copy of the cache: the
 * query heads sharing a key-value head are one batch of rows of the product. The queries, keys and values are one
 * product, as are the gate and up projections ({@link LlamaPrefill#shard} lays their weights side by side). Every
 * position attends to all before it: a graph for more positions ({@code maxLen}) than a Mistral checkpoint's sliding
 * window is refused ({@link LlamaConfig#checkPositions}), since there the window would change the result. Gemma's
 * changes ({@link GemmaFeatures}) are {@link GemmaOps}' pieces; Gemma 2's soft-capped or sliding layers attend with
 * the products and softmax and the masks of {@link AttentionMasks}, a step's included (the fused {@code attention}
 * step has neither a cap nor a window).
 */
public final class LlamaDecoder {
    private LlamaDecoder() {}

    /**
     * What a generator's graphs add to the plain phases. {@code sampling}: each token is drawn on the device by
     * {@code sample} (see {@link Sampling}) instead of argmax, with the inputs {@value #SAMPLING} [batch, 5] f32 and
     * {@value #SEEDS} [batch] i64 and the tokens seen so far as the context: the prefill's input {@value #CONTEXT}
     * [batch, tokens] i64, the decode's state {@value #CONTEXT} [batch, maxLen] i64, each step writing its tokens into it
     * at the position (-1: none). {@code ragged}: sequences of their own lengths. The prefill's prompts are padded to
     * its length and it reads each one's last position where {@value #LAST_ROWS} [batch] i32 says (row b * tokens +
     * length - 1; {@value #LAST_POSITIONS}, length - 1, is the sampling's step); the causal mask keeps every real
     * position from the padding after it, so a padded prompt computes what it would alone. The decode writes the
     * batch's step at one cache slot ({@code position}) but rotates each sequence's key and query by its own position
     * ({@value #POSITIONS} [batch] i32) and masks each one's slots between its prompt and the first step's slot
     * ({@value #GAP} [batch, maxLen], 0 or -inf): its attention is the products and softmax of the prefill, over every
     * slot, instead of the one-step {@code attention}.
     */
    public record Form(boolean sampling, boolean ragged) {
        /** The plain phases: greedy tokens, every sequence at one position. */
        public static final Form GREEDY = new Form(false, false);
    }

    /** The inputs and state the forms add (see {@link Form}). */
    public static final String SAMPLING = "sampling", SEEDS = "seeds", CONTEXT = "context", LAST_ROWS = "last_rows", LAST_POSITIONS = "last_positions",
            POSITIONS = "positions", GAP = "gap";

    /** The prefill phase: the prompt, the caches filled up to its length. */
    public static Graph prefill(LlamaConfig c, int tokens, int maxLen, int tp, DType dtype) { return prefill(c, 1, tokens, maxLen, tp, dtype); }

    /** The prefill phase for {@code batch} prompts of {@code tokens} tokens each ({@code tokens}: [batch * tokens]). */
    public static Graph prefill(LlamaConfig c, int batch, int tokens, int maxLen, int tp, DType dtype) {
        return prefill(c, batch, tokens, maxLen, tp, dtype, Form.GREEDY);
    }

    /** The prefill phase of {@code form}: with {@code ragged}, prompts of up to {@code tokens} tokens, padded to it. */
    public static Graph prefill(LlamaConfig c, int batch, int tokens, int maxLen, int tp, DType dtype, Form form) {
        return prefill(c, batch, tokens, maxLen, Parallelism.tensor(tp), dtype, form);
    }

    /**
     * The prefill phase of {@code form} for one rank of {@code parallel}'s mesh: with expert parallelism the mixtures of
     * experts split over the "ep" axis ({@link MixtureOfExperts}), the rest as tensor parallelism over "tp".
     */
    public static Graph prefill(LlamaConfig c, int batch, int tokens, int maxLen, Parallelism parallel, DType dtype, Form form) {
        if (tokens < 1 || tokens > maxLen)
            throw new GraphException("LlamaDecoder.prefill: tokens " + tokens + ": a prompt takes 1 to maxLen (" + maxLen + ") positions of the cache");
        return graph(c, batch, tokens, maxLen, parallel, dtype, false, false, form);
    }

    /** The decode phase: one token, the caches read and updated. */
    public static Graph decode(LlamaConfig c, int maxLen, int tp, DType dtype) { return decode(c, 1, maxLen, tp, dtype); }

    /** The decode phase for {@code batch} sequences at the same position: one token each ({@code tokens}: [batch]). */
    public static Graph decode(LlamaConfig c, int batch, int maxLen, int tp, DType dtype) { return decode(c, batch, maxLen, tp, dtype, Form.GREEDY); }

    /** The decode phase of {@code form}: with {@code ragged}, each sequence at a position of its own. */
    public static Graph decode(LlamaConfig c, int batch, int maxLen, int tp, DType dtype, Form form) {
        return decode(c, batch, maxLen, Parallelism.tensor(tp), dtype, form);
    }

    /** The decode phase of {@code form} for one rank of {@code parallel}'s mesh (see {@link #prefill(LlamaConfig, int, int, int, Parallelism, DType, Form)}). */
    public static Graph decode(LlamaConfig c, int batch, int maxLen, Parallelism parallel, DType dtype, Form form) {
        return graph(c, batch, 1, maxLen, parallel, dtype, true, false, form);
    }

    /**
     * Either phase for {@code batch} sequences: a prompt of {@code tokens} each ({@code decode} false) or one token each;
     * {@code allPositions} gives the logits of every position instead of the last's.
     */
    static Graph graph(LlamaConfig c, int batch, int tokens, int maxLen, Parallelism parallel, DType dtype, boolean decode, boolean allPositions) {
        return graph(c, batch, tokens, maxLen, parallel, dtype, decode, allPositions, Form.GREEDY);
    }

    /** The builder of one rank's graph: a world of {@code tp} ranks, or the mesh ("ep", ep) x ("tp", tp). */
    private static GraphBuilder builder(String name, Parallelism parallel) {
        GraphBuilder g = Gatun.graph(name);
        if (parallel.ep() == 1) return g.world(parallel.tp());
        return parallel.tp() == 1 ? g.mesh(Parallelism.EXPERT_AXIS, parallel.ep())
                : g.mesh(Parallelism.EXPERT_AXIS, parallel.ep(), Parallelism.TENSOR_AXIS, parallel.tp());
    }

    private static Graph graph(LlamaConfig c, int batch, int tokens, int maxLen, Parallelism parallel, DType dtype, boolean decode, boolean allPositions,
                               Form form) {
        parallel.check(c);
        int tp = parallel.tp();
        c.checkPositions(maxLen);   // Mistral's sliding window: only where it covers every position
        if (!decode && form.ragged()) DynamicRope.checkPaddedPrompts(c, tokens);
        if (batch < 1) throw new GraphException("LlamaDecoder: batch " + batch + ": a batch holds at least 1 sequence");
        int d = c.headDim(), rd = c.rotaryDim(), kl = LlamaPrefill.localKvHeads(c, tp);
        int b = batch, t = tokens;
        boolean ragged = decode && form.ragged();
        GraphBuilder g = builder(decode ? "llama_decode" : "llama_prefill", parallel);
        // a decode step's tokens are i64, the type of the greedy token it outputs: a step may read the one before's
        Tensor ids = g.input("tokens", decode ? DType.I64 : DType.I32, b * t);
        Tensor cos, sin, mask, position = null, positions = null;
        if (decode) {
            position = g.input("position", DType.I32, 1);
            // a step computes its rotary angles from its position (each sequence's own where ragged)
            positions = ragged ? g.input(POSITIONS, DType.I32, b) : null;
            Tensor angle = ragged ? angles(g, c, position, positions.reshape(b, 1), b).reshape(b, 1, 1, rd) : angles(g, c, position, position.expand(rd), 1);
            double af = c.ropeAttentionFactor();   // YaRN's: the tables scaled (none else, the graph as it was)
            cos = (af == 1 ? angle.cos() : angle.cos().mul(af)).cast(dtype);
            sin = (af == 1 ? angle.sin() : angle.sin().mul(af)).cast(dtype);
            mask = ragged ? raggedMask(g, position, g.input(GAP, dtype, b, maxLen), maxLen, dtype) : null;   // else the attention step's own
        } else {
            // the prompt's tables (bound once by LlamaGenerator: a prompt starts at 0); its attention is causal by itself
            cos = g.input("cos", dtype, t, rd);
            sin = g.input("sin", dtype, t, rd);
            mask = null;
        }
        boolean padded = !decode && t < maxLen;
        Tensor padK = padded ? g.input("cache_padding", dtype, b, kl, d, maxLen - t) : null;
        Tensor padV = padded ? g.input("cache_padding_v", dtype, b, kl, maxLen - t, d) : null;
        Tensor embed = g.input("model.embed_tokens.weight", dtype, c.vocabSize(), c.hiddenSize());
        Tensor x = GemmaOps.embed(c, embed.indexSelect(0, ids), dtype);   // [batch * tokens, hidden] (Gemma's scaled)
        var masks = new AttentionMasks(g, c, decode, ragged, mask, position, t, maxLen, dtype);
        // under expert parallelism this rank's number along "ep", for every layer's share of the rows
        Tensor member = parallel.ep() > 1 ? MixtureOfExperts.member(g, parallel.ep()) : null;
        var layer = new Layer(g, c, b, t, maxLen, parallel, member, tp, dtype, decode, ragged, cos, sin, position, padK, padV, masks);
        for (int l = 0; l < c.layers(); l++) {
            String p = "model.layers." + l + ".";
            Tensor xn = GemmaOps.norm(g, c, x, p + "input_layernorm.weight", dtype);
            x = x.add(GemmaOps.afterAttention(g, c, layer.attention(l, p, xn), p, dtype));
            xn = GemmaOps.norm(g, c, x, p + GemmaOps.mlpInputNorm(c), dtype);
            x = x.add(GemmaOps.afterMlp(g, c, layer.mlp(l, p, xn), p, dtype));
        }
        // each sequence's last position (every position's with allPositions; where each prompt's ends, ragged)
        Tensor last = allPositions ? x
                : !decode && form.ragged() ? x.indexSelect(0, g.input(LAST_ROWS, DType.I32, b))
                : t == 1 ? x : x.reshape(b, t, c.hiddenSize()).slice(1, t - 1, t).reshape(b, c.hiddenSize());
        Tensor h = GemmaOps.norm(g, c, last, "model.norm.weight", dtype);
        // the output projection [vocab, hidden] (the embedding itself where they are tied); Gemma 2's soft-capped. Under
        // tensor parallelism each rank's share of the vocabulary (VocabParallel): the whole logits all-gathered, the
        // greedy token from the shards' argmaxes
        var head = tp > 1 ? VocabParallel.head(g, c, h, tp, parallel.tensorGroup(), dtype) : null;
        Tensor logits = head != null ? head.logits() : GemmaOps.softcap(linear(h, g.input("lm_head.weight", dtype, c.vocabSize(), c.hiddenSize())),
                c.gemma() == null ? 0 : c.gemma().finalSoftcap());
        g.output("logits", logits);
        Tensor next = form.sampling() && !allPositions ? drawn(g, logits, ids, b, t, maxLen, position, ragged ? positions : position, dtype)
                : head != null ? head.greedy(g, dtype) : logits.argmax(-1);
        g.output("next", next);
        // every step's tokens kept on the device ([batch, maxLen], the token after position p at p), so a caller that
        // feeds each step the one before's token reads them once, at the end
        if (decode) g.output(HISTORY, g.state(HISTORY, DType.I64, b, maxLen).updateSlice(1, next.reshape(b, 1), position));
        return g.build();
    }

    /**
     * Rotary angles in float32, as transformers computes them: each position (i32, cast exactly: far past any cache)
     * times each frequency, [rows, rotary_dim] from positions [rows, 1] (or [rotary_dim], one position expanded); the
     * frequencies those of a step at cache slot {@code slot} ({@link DynamicRope}: constants but for dynamic scaling).
     */
    private static Tensor angles(GraphBuilder g, LlamaConfig c, Tensor slot, Tensor positions, int rows) {
        // the position cast once per angle: read element by element, it is part of the angles' kernel rather than one of its own
        return positions.cast(DType.F32).mul(DynamicRope.frequencies(g, c, slot)).reshape(rows, c.rotaryDim());
    }

    /** A ragged step's mask [batch, maxLen]: each sequence's gap, and every slot after the step's, -inf. */
    private static Tensor raggedMask(GraphBuilder g, Tensor position, Tensor gap, int maxLen, DType dtype) {
        Tensor later = g.arange(DType.I32, maxLen).le(position).where(0.0, Double.NEGATIVE_INFINITY).cast(dtype);
        return gap.add(later.reshape(1, maxLen));
    }

    /**
     * The tokens drawn from the logits by {@code sample}: each row's parameters and seed, at the step of the position
     * of the token whose logits these are ({@code steps}: the decode's position or positions; the prefill's
     * {@value #LAST_POSITIONS}), penalized on the context (the prefill's prompt; the decode's state, this step's
     * tokens written in first at the step's slot {@code position}). A prefill has no {@code position}.
     */
    private static Tensor drawn(GraphBuilder g, Tensor logits, Tensor ids, int b, int t, int maxLen, Tensor position, Tensor steps, DType dtype) {
        boolean decode = position != null;
        Tensor params = g.input(SAMPLING, DType.F32, b, 5), seeds = g.input(SEEDS, DType.I64, b);
        Tensor context = decode ? g.state(CONTEXT, DType.I64, b, maxLen).updateSlice(1, ids.reshape(b, 1), position) : g.input(CONTEXT, DType.I64, b, t);
        Tensor at = decode ? steps : g.input(LAST_POSITIONS, DType.I32, b);
        return (dtype == DType.F64 ? logits.cast(DType.F32) : logits).sample(params, seeds, at, context);
    }

    /** {@code y + bias} where the projection has one (the input {@code name}, {@code n} values), else {@code y}. */
    private static Tensor bias(GraphBuilder g, boolean has, Tensor y, String name, DType dtype, int n) {
        return has ? y.add(g.input(name, dtype, n)) : y;
    }

    /** {@code x @ w.mT} for a weight in the checkpoints' [out, in] layout: the product reads it transposed as it lies. */
    private static Tensor linear(Tensor x, Tensor w) { return x.matmul(w.transpose(0, 1)); }

    /** Rank {@code rank}'s shard of the weights, for either phase (see {@link LlamaPrefill#inputs}). */
    public static Map<String, NDArray> weights(LlamaConfig c, TensorFiles weights, int tp, int rank, DType dtype) {
        return LlamaPrefill.shard(c, weights, Parallelism.tensor(tp), rank, dtype, null);
    }

    /**
     * Rank {@code rank}'s shard of the weights under {@code parallel} (rank r: the "tp" shard {@code r % tp}, and where
     * {@code ep} is above 1 the experts of "ep" member {@code r / tp} only), for either phase.
     */
    public static Map<String, NDArray> weights(LlamaConfig c, TensorFiles weights, Parallelism parallel, int rank, DType dtype) {
        return LlamaPrefill.shard(c, weights, parallel, rank, dtype, null);
    }

    /**
     * {@link #weights(LlamaConfig, TensorFiles, int, int, DType)}, telling {@code progress} how far reading the
     * checkpoint has got ({@link LoadProgress}: before the first tensor, then after each, up to all the tensors the
     * model uses), e.g. {@code p -> System.err.print("\r" + p.line())}; null tells nobody.
     */
    public static Map<String, NDArray> weights(LlamaConfig c, TensorFiles weights, int tp, int rank, DType dtype, Consumer<LoadProgress> progress) {
        return LlamaPrefill.shard(c, weights, Parallelism.tensor(tp), rank, dtype, progress);
    }

    /**
     * {@link #weights(LlamaConfig, TensorFiles, Parallelism, int, DType)}, telling {@code progress} how far reading has
     * got: up to the tensors this rank reads (under expert parallelism, its "ep" member's experts and no other's).
     */
    public static Map<String, NDArray> weights(LlamaConfig c, TensorFiles weights, Parallelism parallel, int rank, DType dtype,
                                               Consumer<LoadProgress> progress) {
        return LlamaPrefill.shard(c, weights, parallel, rank, dtype, progress);
    }

    /** The prefill's inputs for a prompt: its tokens and {@link #promptTables}. */
    public static Map<String, NDArray> prompt(LlamaConfig c, int[] ids, int maxLen, int tp, DType dtype) {
        var in = promptTables(c, 1, ids.length, maxLen, tp, dtype);
        in.put("tokens", tokens(ids));
        return in;
    }

    /** The decode's state (and output) of every step's greedy tokens: {@code [batch, maxLen]} i64, the token after position p at p. */
    public static final String HISTORY = "history";

    /** A decode step's tokens (i64), one a sequence. */
    public static NDArray stepTokens(int[] tokens) {
        var out = NDArray.zeros(DType.I64, tokens.length);
        for (int i = 0; i < tokens.length; i++) out.set(i, tokens[i]);
        return out;
    }

    /** A prompt's tokens as the prefill takes them (i32), one sequence after the other. */
    public static NDArray tokens(int[]... sequences) {
        int n = 0;
        for (int[] s : sequences) n += s.length;
        var tokens = NDArray.zeros(DType.I32, n);
        int at = 0;
        for (int[] s : sequences) for (int id : s) tokens.set(at++, id);
        return tokens;
    }

    /**
     * The inputs of a {@link Form#ragged} prefill of {@code t} tokens for {@code prompts} (each 1 to {@code t} tokens):
     * the tokens, each prompt padded to {@code t} with token 0 (the causal mask keeps them from the prompt's positions),
     * {@value #LAST_ROWS}, and with {@code sampling} {@value #LAST_POSITIONS} and the {@value #CONTEXT} (the prompt,
     * -1 after it).
     */
    public static Map<String, NDArray> raggedPrompts(int[][] prompts, int t, boolean sampling) {
        int b = prompts.length;
        var tokens = NDArray.zeros(DType.I32, (long) b * t);
        var lastRows = NDArray.zeros(DType.I32, b);
        var lastPositions = NDArray.zeros(DType.I32, b);
        var context = NDArray.full(DType.I64, -1, b, t);
        for (int s = 0; s < b; s++) {
            int len = prompts[s].length;
            if (len < 1 || len > t) throw new GatunRuntimeException("LlamaDecoder.raggedPrompts: prompt " + s + " has " + len + " tokens: the prefill takes 1 to " + t);
            for (int i = 0; i < len; i++) {
                tokens.set((long) s * t + i, prompts[s][i]);
                context.set((long) s * t + i, prompts[s][i]);
            }
            lastRows.set(s, (long) s * t + len - 1);
            lastPositions.set(s, len - 1);
        }
        var in = new LinkedHashMap<String, NDArray>();
        in.put("tokens", tokens);
        in.put(LAST_ROWS, lastRows);
        if (sampling) {
            in.put(LAST_POSITIONS, lastPositions);
            in.put(CONTEXT, context);
        }
        return in;
    }

    /** The decode's {@value #CONTEXT} state at the start of a generation: each prompt's tokens, -1 after them. */
    public static NDArray context(int[][] prompts, int maxLen) {
        var context = NDArray.full(DType.I64, -1, prompts.length, maxLen);
        for (int s = 0; s < prompts.length; s++)
            for (int i = 0; i < prompts[s].length; i++) context.set((long) s * maxLen + i, prompts[s][i]);
        return context;
    }

    /**
     * A {@link Form#ragged} decode's {@value #GAP}: for each sequence, -inf at the slots from its prompt's end to
     * {@code start} (the slot of the batch's first step: the longest prompt's length), which hold no key of it; 0
     * elsewhere.
     */
    public static NDArray gap(int[] lengths, int start, int maxLen, DType dtype) {
        var gap = NDArray.zeros(dtype, lengths.length, maxLen);
        for (int s = 0; s < lengths.length; s++)
            for (int i = lengths[s]; i < start; i++) gap.set((long) s * maxLen + i, Double.NEGATIVE_INFINITY);
        return gap;
    }

    /**
     * The prefill's inputs that depend only on the prompt's length (a prompt starts at position 0): the rotary tables
     * and the caches' zero padding. {@link LlamaGenerator} binds them once.
     */
    public static Map<String, NDArray> promptTables(LlamaConfig c, int batch, int t, int maxLen, int tp, DType dtype) {
        var in = rotary(c, t, dtype);
        if (t < maxLen) {
            in.put("cache_padding", NDArray.zeros(dtype, batch, LlamaPrefill.localKvHeads(c, tp), c.headDim(), maxLen - t));
            in.put("cache_padding_v", NDArray.zeros(dtype, batch, LlamaPrefill.localKvHeads(c, tp), maxLen - t, c.headDim()));
        }
        return in;
    }

    /**
     * A decode step's per-call inputs: each sequence's token (one for a batch of one), all at {@code position}; the graph
     * makes the rotary angles and the masks from the position.
     */
    public static Map<String, NDArray> step(int[] tokens, int position, int maxLen) {
        if (position < 0 || position >= maxLen)
            throw new GatunRuntimeException("LlamaDecoder.step: position " + position + " is outside the cache of " + maxLen + " positions (0 to " + (maxLen - 1) + ")");
        var in = new LinkedHashMap<String, NDArray>();
        in.put("tokens", stepTokens(tokens));
        in.put("position", NDArray.of(new int[]{position}, 1));
        return in;
    }

    /**
     * The rotary tables of the {@code t} positions 0, 1, ...: each angle the float32 product of the position and the
     * frequency, as transformers and the decode step compute it, its cosine and sine rounded to {@code dtype}.
     */
    private static Map<String, NDArray> rotary(LlamaConfig c, int t, DType dtype) {
        int d = c.rotaryDim();   // the rotating part of each head (Phi-3's partial rotary embedding: a part)
        var in = new LinkedHashMap<String, NDArray>();
        var cos = NDArray.zeros(dtype, t, d);
        var sin = NDArray.zeros(dtype, t, d);
        double[] frequencies = DynamicRope.frequencies(c, t);   // dynamic NTK: those of the prompt's length
        double af = c.ropeAttentionFactor();
        for (int i = 0; i < t; i++)
            for (int e = 0; e < d; e++) {
                double angle = (float) i * (float) frequencies[e % (d / 2)];   // a float32 product
                // YaRN's factor as transformers applies it: to the float32 tables
                cos.set((long) i * d + e, af == 1 ? Math.cos(angle) : (float) Math.cos(angle) * (float) af);
                sin.set((long) i * d + e, af == 1 ? Math.sin(angle) : (float) Math.sin(angle) * (float) af);
            }
        in.put("cos", cos);
        in.put("sin", sin);
        return in;
    }
    /**
     * One decoder layer's two blocks, for the graph {@link #graph} builds: what every layer shares (the phase, the
     * rotary tables, the position, the caches' padding, the masks) held once.
     */
    private record Layer(GraphBuilder g, LlamaConfig c, int b, int t, int maxLen, Parallelism parallel, Tensor member, int tp, DType dtype, boolean decode, boolean ragged,
                         Tensor cos, Tensor sin, Tensor position, Tensor padK, Tensor padV, AttentionMasks masks) {
        /** The attention block of layer {@code l} on its normed input {@code xn}: its output, before the residual add. */
        Tensor attention(int l, String p, Tensor xn) {
            int d = c.headDim(), hl = c.heads() / tp, kl = LlamaPrefill.localKvHeads(c, tp), group = hl / kl, bkl = b * kl;
            int seen = decode ? maxLen : t;
            // one product for the queries, keys and values ([out, in] weights read transposed, q | k | v rows stacked; see
            // LlamaPrefill.shard) and its heads as views of it: [batch, heads, tokens, head_dim] each, read in place after
            Tensor qkv = bias(g, c.biases().qkv(), linear(xn, g.input(p + "self_attn.qkv_proj.weight", dtype, (hl + 2 * kl) * d, c.hiddenSize())),
                    p + "self_attn.qkv_proj.bias", dtype, (hl + 2 * kl) * d).reshape(b, t, hl + 2 * kl, d);
            Tensor v = qkv.slice(2, hl + kl, hl + 2 * kl).transpose(1, 2);
            Tensor[] qk = rotated(p, qkv, hl, kl, d);
            Tensor q = qk[0], k = qk[1];
            // keys are kept transposed, [batch, kv heads, head_dim, positions], as the product with the queries reads them
            Tensor kT = k.transpose(2, 3);
            Tensor keysT, values;
            if (decode) {
                // the step's key and value written in place into the caches (states) at the position
                keysT = g.state("cache." + l + ".k", dtype, b, kl, d, maxLen).updateSlice(3, kT, position);
                values = g.state("cache." + l + ".v", dtype, b, kl, maxLen, d).updateSlice(2, v, position);
            } else {
                keysT = padK != null ? kT.cat(3, padK) : kT;
                values = padV != null ? v.cat(2, padV) : v;
                g.output("cache." + l + ".k", keysT);
                g.output("cache." + l + ".v", values);
            }
            // grouped-query attention: the query heads sharing a key-value head are one batch of group * tokens rows
            Tensor qg = q.reshape(bkl, group * t, d);
            Tensor kk = (decode ? keysT : kT).reshape(bkl, d, seen), vv = (decode ? values : v).reshape(bkl, seen, d);
            Tensor heads;                                             // [batch * kv heads, group * tokens, d]: head-major
            double scale = GemmaOps.attentionScale(c);
            if (!decode) {
                // a prompt (it starts at position 0): causal, Gemma 2's window and soft-cap where the layer has them;
                // the scores never stored, the result token-major [batch, tokens, heads, d]
                int window = GemmaOps.slides(c, l) ? c.gemma().slidingWindow() : 0;
                Tensor out = q.flashAttention(k, v, scale, true, window, c.gemma() == null ? 0 : c.gemma().attnSoftcap());
                return outputProjection(p, out.reshape(b * t, hl * d), hl, d);
            }
            if (!ragged && GemmaOps.plainAttention(c, l) && Attention.fusedKernelTakes(dtype, d)) {
                // one step: the scores, the mask (the positions after this one), the softmax and the weighted values
                // (heads the fused kernels do not take, as Gemma's 256, are written out below)
                heads = qg.attention(kk, vv, position, scale);
            } else {
                // a prompt's causal mask [t, t], a step's [maxLen] (Gemma 2's soft-capped or windowed layers), or a ragged
                // step's [b, 1, 1, 1, maxLen]; Gemma 2's scores soft-capped before it
                Tensor scores = qg.matmul(kk).reshape(b, kl, group, t, seen).mul(scale);
                scores = GemmaOps.softcap(scores, c.gemma() == null ? 0 : c.gemma().attnSoftcap()).add(masks.forLayer(l, b, seen));
                Tensor e = scores.sub(scores.max(true, -1)).exp();
                heads = e.div(e.sum(true, -1)).reshape(bkl, group * t, seen).matmul(vv);
            }
            return outputProjection(p, t == 1 ? heads.reshape(b, hl * d) : heads.reshape(b, hl, t, d).transpose(1, 2).reshape(b * t, hl * d), hl, d);
        }

        /** The attention's output projection of the heads {@code attn} [rows, hl * d], its all-reduce and bias. */
        private Tensor outputProjection(String p, Tensor attn, int hl, int d) {
            Tensor out = linear(attn, g.input(p + "self_attn.o_proj.weight", dtype, c.hiddenSize(), hl * d));
            return bias(g, c.biases().output(), tp > 1 ? out.allReduce(ReduceOp.SUM, parallel.tensorGroup()) : out, p + "self_attn.o_proj.bias", dtype,
                    c.hiddenSize());
        }

        /** The query and key heads of {@code qkv}, rotated ([batch, heads, tokens, head_dim] each; Qwen3's normed first). */
        private Tensor[] rotated(String p, Tensor qkv, int hl, int kl, int d) {
            if (c.qkNorm()) {
                // Qwen3's QK-norm: each query and key head normalized (over head_dim) before its rotation
                Tensor qh = LlamaPrefill.rmsNorm(qkv.slice(2, 0, hl), g.input(p + "self_attn.q_norm.weight", dtype, d), c.rmsNormEps());
                Tensor kh = LlamaPrefill.rmsNorm(qkv.slice(2, hl, hl + kl), g.input(p + "self_attn.k_norm.weight", dtype, d), c.rmsNormEps());
                return new Tensor[]{LlamaPrefill.rope(qh.transpose(1, 2), cos, sin, d), LlamaPrefill.rope(kh.transpose(1, 2), cos, sin, d)};
            }
            if (b == 1) {
                // one rotary kernel for the query and key heads, which lie side by side in the product; each is a
                // contiguous run of heads of its result, read in place (a batch of several would make them strided)
                Tensor qk = LlamaPrefill.rope(qkv.slice(2, 0, hl + kl).transpose(1, 2), cos, sin, d);
                return new Tensor[]{qk.slice(1, 0, hl), qk.slice(1, hl, hl + kl)};
            }
            return new Tensor[]{LlamaPrefill.rope(qkv.slice(2, 0, hl).transpose(1, 2), cos, sin, d),
                    LlamaPrefill.rope(qkv.slice(2, hl, hl + kl).transpose(1, 2), cos, sin, d)};
        }

        /** The MLP block of layer {@code l} on its normed input {@code xn} (a mixture of experts where the layer is one). */
        Tensor mlp(int l, String p, Tensor xn) {
            if (MixtureOfExperts.sparse(c, l)) return MixtureOfExperts.block(g, c, p, xn, b * t, parallel, member, dtype);
            int fl = c.intermediateSize() / tp;
            // one product for the gate and up projections (gate | up side by side)
            Tensor gateUp = bias(g, c.biases().mlp(), linear(xn, g.input(p + "mlp.gate_up_proj.weight", dtype, 2 * fl, c.hiddenSize())),
                    p + "mlp.gate_up_proj.bias", dtype, 2 * fl);
            Tensor down = linear(GemmaOps.activation(c, gateUp.slice(1, 0, fl)).mul(gateUp.slice(1, fl, 2 * fl)),
                    g.input(p + "mlp.down_proj.weight", dtype, c.hiddenSize(), fl));
            return bias(g, c.biases().mlp(), tp > 1 ? down.allReduce(ReduceOp.SUM, parallel.tensorGroup()) : down, p + "mlp.down_proj.bias", dtype,
                    c.hiddenSize());
        }
    }
}
