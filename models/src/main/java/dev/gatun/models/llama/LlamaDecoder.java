package dev.gatun.models.llama;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.ReduceOp;
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
 * window is refused ({@link LlamaConfig#checkPositions}), since there the window would change the result.
 */
public final class LlamaDecoder {
    private LlamaDecoder() {}

    /** The prefill phase: the prompt, the caches filled up to its length. */
    public static Graph prefill(LlamaConfig c, int tokens, int maxLen, int tp, DType dtype) { return prefill(c, 1, tokens, maxLen, tp, dtype); }

    /** The prefill phase for {@code batch} prompts of {@code tokens} tokens each ({@code tokens}: [batch * tokens]). */
    public static Graph prefill(LlamaConfig c, int batch, int tokens, int maxLen, int tp, DType dtype) {
        if (tokens < 1 || tokens > maxLen) throw new IllegalArgumentException("a prompt of " + tokens + " tokens does not fit a cache of " + maxLen);
        return graph(c, batch, tokens, maxLen, tp, dtype, false, false);
    }

    /** The decode phase: one token, the caches read and updated. */
    public static Graph decode(LlamaConfig c, int maxLen, int tp, DType dtype) { return decode(c, 1, maxLen, tp, dtype); }

    /** The decode phase for {@code batch} sequences at the same position: one token each ({@code tokens}: [batch]). */
    public static Graph decode(LlamaConfig c, int batch, int maxLen, int tp, DType dtype) { return graph(c, batch, 1, maxLen, tp, dtype, true, false); }

    /**
     * Either phase for {@code batch} sequences: a prompt of {@code tokens} each ({@code decode} false) or one token each;
     * {@code allPositions} gives the logits of every position instead of the last's.
     */
    static Graph graph(LlamaConfig c, int batch, int tokens, int maxLen, int tp, DType dtype, boolean decode, boolean allPositions) {
        c.checkTensorParallel(tp);
        c.checkPositions(maxLen);   // Mistral's sliding window: only where it covers every position
        if (batch < 1) throw new IllegalArgumentException("a batch of " + batch + " sequences");
        int d = c.headDim(), hl = c.heads() / tp, kl = LlamaPrefill.localKvHeads(c, tp), fl = c.intermediateSize() / tp, group = hl / kl;
        int b = batch, t = tokens, bkl = b * kl;
        GraphBuilder g = Gatun.graph(decode ? "llama_decode" : "llama_prefill").world(tp);
        // a decode step's tokens are i64, the type of the greedy token it outputs: a step may read the one before's
        Tensor ids = g.input("tokens", decode ? DType.I64 : DType.I32, b * t);
        Tensor cos, sin, mask, position = null;
        if (decode) {
            // a step computes its rotary angles from its position (in float32, as transformers computes them)
            position = g.input("position", DType.I32, 1);
            double[] f = c.ropeFrequencies(), both = new double[d];
            for (int e = 0; e < d; e++) both[e] = f[e % (d / 2)];
            // the position cast (exact to 2^24, far past any cache) once per angle: read element by element, it is part
            // of the angles' kernel rather than a kernel of its own
            Tensor angle = position.expand(d).cast(DType.F32).mul(g.constant(DType.F32, new long[]{d}, both)).reshape(1, d);
            cos = angle.cos().cast(dtype);
            sin = angle.sin().cast(dtype);
            mask = null;   // the attention step attends to the positions up to the step's own
        } else {
            // the prompt's tables and causal mask [tokens, tokens] (bound once by LlamaGenerator: a prompt starts at 0)
            cos = g.input("cos", dtype, t, d);
            sin = g.input("sin", dtype, t, d);
            mask = g.input("mask", dtype, t, t);
        }
        boolean padded = !decode && t < maxLen;
        Tensor padK = padded ? g.input("cache_padding", dtype, b, kl, d, maxLen - t) : null;
        Tensor padV = padded ? g.input("cache_padding_v", dtype, b, kl, maxLen - t, d) : null;
        Tensor embed = g.input("model.embed_tokens.weight", dtype, c.vocabSize(), c.hiddenSize());
        Tensor x = embed.indexSelect(0, ids);                         // [batch * tokens, hidden]
        int seen = decode ? maxLen : t;
        for (int l = 0; l < c.layers(); l++) {
            String p = "model.layers." + l + ".";
            Tensor xn = LlamaPrefill.rmsNorm(x, g.input(p + "input_layernorm.weight", dtype, c.hiddenSize()), c.rmsNormEps());
            // one product for the queries, keys and values ([out, in] weights read transposed, q | k | v rows stacked; see
            // LlamaPrefill.shard) and its heads as views of it: [batch, heads, tokens, head_dim] each, read in place after
            Tensor qkv = linear(xn, g.input(p + "self_attn.qkv_proj.weight", dtype, (hl + 2 * kl) * d, c.hiddenSize()))
                    .reshape(b, t, hl + 2 * kl, d);
            Tensor v = qkv.slice(2, hl + kl, hl + 2 * kl).transpose(1, 2);
            Tensor q, k;
            if (b == 1) {
                // one rotary kernel for the query and key heads, which lie side by side in the product; each is a
                // contiguous run of heads of its result, read in place (a batch of several would make them strided)
                Tensor qk = LlamaPrefill.rope(qkv.slice(2, 0, hl + kl).transpose(1, 2), cos, sin, d);
                q = qk.slice(1, 0, hl);
                k = qk.slice(1, hl, hl + kl);
            } else {
                q = LlamaPrefill.rope(qkv.slice(2, 0, hl).transpose(1, 2), cos, sin, d);
                k = LlamaPrefill.rope(qkv.slice(2, hl, hl + kl).transpose(1, 2), cos, sin, d);
            }
            // keys are kept transposed, [batch, kv heads, head_dim, positions], as the product with the queries reads them
            Tensor kT = k.transpose(2, 3);
            Tensor keysT, values;
            if (decode) {
                // the step's key and value written in place into the caches (states) at the position
                keysT = g.state("cache." + l + ".k", dtype, b, kl, d, maxLen).updateSlice(3, kT, position);
                values = g.state("cache." + l + ".v", dtype, b, kl, maxLen, d).updateSlice(2, v, position);
            } else {
                keysT = padded ? kT.cat(3, padK) : kT;
                values = padded ? v.cat(2, padV) : v;
                g.output("cache." + l + ".k", keysT);
                g.output("cache." + l + ".v", values);
            }
            // grouped-query attention: the query heads sharing a key-value head are one batch of group * tokens rows
            Tensor qg = q.reshape(bkl, group * t, d);
            Tensor kk = (decode ? keysT : kT).reshape(bkl, d, seen), vv = (decode ? values : v).reshape(bkl, seen, d);
            Tensor heads;                                             // [batch * kv heads, group * tokens, d]: head-major
            if (decode) {
                // one step: the scores, the mask (the positions after this one), the softmax and the weighted values
                heads = qg.attention(kk, vv, position, 1 / Math.sqrt(d));
            } else {
                Tensor scores = qg.matmul(kk).reshape(b, kl, group, t, seen).mul(1 / Math.sqrt(d)).add(mask);
                Tensor e = scores.sub(scores.max(true, -1)).exp();
                heads = e.div(e.sum(true, -1)).reshape(bkl, group * t, seen).matmul(vv);
            }
            Tensor attn = t == 1 ? heads.reshape(b, hl * d) : heads.reshape(b, hl, t, d).transpose(1, 2).reshape(b * t, hl * d);
            Tensor out = linear(attn, g.input(p + "self_attn.o_proj.weight", dtype, c.hiddenSize(), hl * d));
            x = x.add(tp > 1 ? out.allReduce(ReduceOp.SUM) : out);
            xn = LlamaPrefill.rmsNorm(x, g.input(p + "post_attention_layernorm.weight", dtype, c.hiddenSize()), c.rmsNormEps());
            // one product for the gate and up projections (gate | up side by side)
            Tensor gateUp = linear(xn, g.input(p + "mlp.gate_up_proj.weight", dtype, 2 * fl, c.hiddenSize()));
            Tensor down = linear(gateUp.slice(1, 0, fl).silu().mul(gateUp.slice(1, fl, 2 * fl)),
                    g.input(p + "mlp.down_proj.weight", dtype, c.hiddenSize(), fl));
            x = x.add(tp > 1 ? down.allReduce(ReduceOp.SUM) : down);
        }
        // each sequence's last position (every position's with allPositions)
        Tensor last = t == 1 || allPositions ? x : x.reshape(b, t, c.hiddenSize()).slice(1, t - 1, t).reshape(b, c.hiddenSize());
        Tensor h = LlamaPrefill.rmsNorm(last, g.input("model.norm.weight", dtype, c.hiddenSize()), c.rmsNormEps());
        // the output projection [vocab, hidden] (the embedding itself where they are tied)
        Tensor logits = linear(h, g.input("lm_head.weight", dtype, c.vocabSize(), c.hiddenSize()));
        g.output("logits", logits);
        Tensor next = logits.argmax(-1);
        g.output("next", next);
        // every step's greedy tokens kept on the device ([batch, maxLen], the token after position p at p), so a caller
        // that feeds each step the one before's token reads them once, at the end
        if (decode) g.output(HISTORY, g.state(HISTORY, DType.I64, b, maxLen).updateSlice(1, next.reshape(b, 1), position));
        return g.build();
    }

    /** {@code x @ w.mT} for a weight in the checkpoints' [out, in] layout: the product reads it transposed as it lies. */
    private static Tensor linear(Tensor x, Tensor w) { return x.matmul(w.transpose(0, 1)); }

    /** Rank {@code rank}'s shard of the weights, for either phase (see {@link LlamaPrefill#inputs}). */
    public static Map<String, NDArray> weights(LlamaConfig c, TensorFiles weights, int tp, int rank, DType dtype) {
        return LlamaPrefill.shard(c, weights, tp, rank, dtype);
    }

    /**
     * {@link #weights(LlamaConfig, TensorFiles, int, int, DType)}, telling {@code progress} how far reading the
     * checkpoint has got ({@link LoadProgress}: before the first tensor, then after each, up to all the tensors the
     * model uses), e.g. {@code p -> System.err.print("\r" + p.line())}; null tells nobody.
     */
    public static Map<String, NDArray> weights(LlamaConfig c, TensorFiles weights, int tp, int rank, DType dtype, Consumer<LoadProgress> progress) {
        return LlamaPrefill.shard(c, weights, tp, rank, dtype, progress);
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
     * The prefill's inputs that depend only on the prompt's length (a prompt starts at position 0): the rotary tables,
     * the causal mask and the caches' zero padding. {@link LlamaGenerator} binds them once.
     */
    public static Map<String, NDArray> promptTables(LlamaConfig c, int batch, int t, int maxLen, int tp, DType dtype) {
        var in = rotary(c, t, dtype);
        var mask = NDArray.zeros(dtype, t, t);
        for (int i = 0; i < t; i++) for (int j = i + 1; j < t; j++) mask.set((long) i * t + j, Double.NEGATIVE_INFINITY);
        in.put("mask", mask);
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
        if (position < 0 || position >= maxLen) throw new IllegalArgumentException("position " + position + " is outside the cache of " + maxLen);
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
        int d = c.headDim();
        var in = new LinkedHashMap<String, NDArray>();
        var cos = NDArray.zeros(dtype, t, d);
        var sin = NDArray.zeros(dtype, t, d);
        double[] frequencies = c.ropeFrequencies();
        for (int i = 0; i < t; i++)
            for (int e = 0; e < d; e++) {
                double angle = (float) i * (float) frequencies[e % (d / 2)];   // a float32 product
                cos.set((long) i * d + e, Math.cos(angle));
                sin.set((long) i * d + e, Math.sin(angle));
            }
        in.put("cos", cos);
        in.put("sin", sin);
        return in;
    }
}
