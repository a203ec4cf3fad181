package dev.gatun.models.llama;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The Llama architecture's two phases in the DSL, one rank's share under tensor parallelism (see {@link LlamaPrefill}
 * for the layer and the sharding), with a KV cache of {@code maxLen} positions:
 * <ul>
 *   <li>{@link #prefill}: a prompt of {@code tokens} tokens; outputs the last position's logits and greedy token, and
 *   each layer's cache ({@code cache.L.k}, {@code cache.L.v}: [kv heads, maxLen, head_dim], the rotated keys and the
 *   values of the prompt, zeros after it);</li>
 *   <li>{@link #decode}: one token at a position given by the call's inputs; reads and writes the caches (a new
 *   key and value at the position: {@code where} over a one-hot {@code write} mask, every other entry kept) and
 *   attends over the positions up to it ({@code mask}: 0, then -inf after it). Its outputs are the logits, the greedy
 *   token ({@code next}, i64) and the updated caches, which the next call takes as its inputs.</li>
 * </ul>
 * Each phase is one compiled session reused for every step. The cache is updated functionally (the whole cache is
 * rewritten each step, a small fraction of the weights' bytes at these lengths); an in-place update at a position
 * given at run time is the later optimisation.
 */
public final class LlamaDecoder {
    private LlamaDecoder() {}

    /** The prefill phase: the prompt, the caches filled up to its length. */
    public static Graph prefill(LlamaConfig c, int tokens, int maxLen, int tp, DType dtype) {
        if (tokens < 1 || tokens > maxLen) throw new IllegalArgumentException("a prompt of " + tokens + " tokens does not fit a cache of " + maxLen);
        return graph(c, tokens, maxLen, tp, dtype, false, false);
    }

    /** The decode phase: one token, the caches read and updated. */
    public static Graph decode(LlamaConfig c, int maxLen, int tp, DType dtype) { return graph(c, 1, maxLen, tp, dtype, true, false); }

    /**
     * Either phase: a prompt of {@code tokens} ({@code decode} false) or one token; {@code allPositions} gives the logits
     * of every position instead of the last's.
     */
    static Graph graph(LlamaConfig c, int tokens, int maxLen, int tp, DType dtype, boolean decode, boolean allPositions) {
        c.checkTensorParallel(tp);
        int d = c.headDim(), hl = c.heads() / tp, kl = LlamaPrefill.localKvHeads(c, tp), fl = c.intermediateSize() / tp, group = hl / kl;
        GraphBuilder g = Gatun.graph(decode ? "llama_decode" : "llama_prefill").world(tp);
        Tensor ids = g.input("tokens", DType.I32, tokens);
        Tensor cos = g.input("cos", dtype, tokens, d), sin = g.input("sin", dtype, tokens, d);
        // attention mask over the positions a query may see: [tokens, tokens] for the prompt, [1, maxLen] for a step
        Tensor mask = g.input("mask", dtype, tokens, decode ? maxLen : tokens);
        Tensor write = decode ? g.input("write", DType.BOOL, maxLen).reshape(1, maxLen, 1) : null;
        Tensor pad = decode || tokens == maxLen ? null : g.input("cache_padding", dtype, kl, maxLen - tokens, d);
        Tensor embed = g.input("model.embed_tokens.weight", dtype, c.vocabSize(), c.hiddenSize());
        Tensor x = embed.indexSelect(0, ids);
        for (int l = 0; l < c.layers(); l++) {
            String p = "model.layers." + l + ".";
            Tensor xn = LlamaPrefill.rmsNorm(x, g.input(p + "input_layernorm.weight", dtype, c.hiddenSize()), c.rmsNormEps());
            // projection weights come [in, out] (LlamaPrefill.shard transposes the checkpoint's [out, in] once)
            Tensor q = LlamaPrefill.heads(xn.matmul(g.input(p + "self_attn.q_proj.weight", dtype, c.hiddenSize(), hl * d)), tokens, hl, d);
            Tensor k = LlamaPrefill.heads(xn.matmul(g.input(p + "self_attn.k_proj.weight", dtype, c.hiddenSize(), kl * d)), tokens, kl, d);
            Tensor v = LlamaPrefill.heads(xn.matmul(g.input(p + "self_attn.v_proj.weight", dtype, c.hiddenSize(), kl * d)), tokens, kl, d);
            q = LlamaPrefill.rope(q, cos, sin, d);
            k = LlamaPrefill.rope(k, cos, sin, d);
            Tensor keys, values;
            if (decode) {
                // the step's key and value go to the position `write` marks; every other position keeps the cache
                keys = write.where(k.expand(kl, maxLen, d), g.input("cache." + l + ".k", dtype, kl, maxLen, d));
                values = write.where(v.expand(kl, maxLen, d), g.input("cache." + l + ".v", dtype, kl, maxLen, d));
            } else {
                keys = pad == null ? k : k.cat(1, pad);
                values = pad == null ? v : v.cat(1, pad);
            }
            g.output("cache." + l + ".k", keys);
            g.output("cache." + l + ".v", values);
            // attention over the prompt (prefill) or over the cache (decode)
            int seen = decode ? maxLen : tokens;
            Tensor kk = (decode ? keys : k).reshape(kl, 1, seen, d).expand(kl, group, seen, d).reshape(hl, seen, d);
            Tensor vv = (decode ? values : v).reshape(kl, 1, seen, d).expand(kl, group, seen, d).reshape(hl, seen, d);
            Tensor scores = q.matmul(kk.transpose(1, 2)).mul(1 / Math.sqrt(d)).add(mask);
            Tensor e = scores.sub(scores.max(true, -1)).exp();
            Tensor attn = e.div(e.sum(true, -1)).matmul(vv).transpose(0, 1).reshape(tokens, hl * d);
            Tensor out = attn.matmul(g.input(p + "self_attn.o_proj.weight", dtype, hl * d, c.hiddenSize()));
            x = x.add(tp > 1 ? out.allReduce(ReduceOp.SUM) : out);
            xn = LlamaPrefill.rmsNorm(x, g.input(p + "post_attention_layernorm.weight", dtype, c.hiddenSize()), c.rmsNormEps());
            Tensor gate = xn.matmul(g.input(p + "mlp.gate_proj.weight", dtype, c.hiddenSize(), fl)).silu();
            Tensor up = xn.matmul(g.input(p + "mlp.up_proj.weight", dtype, c.hiddenSize(), fl));
            Tensor down = gate.mul(up).matmul(g.input(p + "mlp.down_proj.weight", dtype, fl, c.hiddenSize()));
            x = x.add(tp > 1 ? down.allReduce(ReduceOp.SUM) : down);
        }
        Tensor last = tokens == 1 || allPositions ? x : x.slice(0, tokens - 1, tokens);
        Tensor h = LlamaPrefill.rmsNorm(last, g.input("model.norm.weight", dtype, c.hiddenSize()), c.rmsNormEps());
        // the output projection [hidden, vocab] (the embedding's transpose where they are tied, made once at load)
        Tensor logits = h.matmul(g.input("lm_head.weight", dtype, c.hiddenSize(), c.vocabSize()));
        g.output("logits", logits);
        g.output("next", logits.argmax(-1));
        return g.build();
    }

    /** Rank {@code rank}'s shard of the weights, for either phase (see {@link LlamaPrefill#inputs}). */
    public static Map<String, NDArray> weights(LlamaConfig c, SafeTensors weights, int tp, int rank, DType dtype) {
        return LlamaPrefill.shard(c, weights, tp, rank, dtype);
    }

    /** The prefill's per-call inputs for a prompt: tokens, rotary tables, causal mask, the caches' zero padding. */
    public static Map<String, NDArray> prompt(LlamaConfig c, int[] ids, int maxLen, int tp, DType dtype) {
        var in = positions(c, ids, 0, dtype);
        int t = ids.length;
        var mask = NDArray.zeros(dtype, t, t);
        for (int i = 0; i < t; i++) for (int j = i + 1; j < t; j++) mask.set((long) i * t + j, Double.NEGATIVE_INFINITY);
        in.put("mask", mask);
        if (t < maxLen) in.put("cache_padding", NDArray.zeros(dtype, LlamaPrefill.localKvHeads(c, tp), maxLen - t, c.headDim()));
        return in;
    }

    /** A decode step's per-call inputs: the token at {@code position}, its rotary row, the write and attention masks. */
    public static Map<String, NDArray> step(LlamaConfig c, int token, int position, int maxLen, DType dtype) {
        if (position < 0 || position >= maxLen) throw new IllegalArgumentException("position " + position + " is outside the cache of " + maxLen);
        var in = positions(c, new int[]{token}, position, dtype);
        var mask = NDArray.zeros(dtype, 1, maxLen);
        for (int j = position + 1; j < maxLen; j++) mask.set(j, Double.NEGATIVE_INFINITY);
        in.put("mask", mask);
        var write = NDArray.zeros(DType.BOOL, maxLen);
        write.set(position, 1);
        in.put("write", write);
        return in;
    }

    /** Tokens (i32) and the rotary tables of positions {@code first}, {@code first + 1}, ... */
    private static Map<String, NDArray> positions(LlamaConfig c, int[] ids, int first, DType dtype) {
        int t = ids.length, d = c.headDim();
        var in = new LinkedHashMap<String, NDArray>();
        var tokens = NDArray.zeros(DType.I32, t);
        for (int i = 0; i < t; i++) tokens.set(i, ids[i]);
        in.put("tokens", tokens);
        var cos = NDArray.zeros(dtype, t, d);
        var sin = NDArray.zeros(dtype, t, d);
        for (int i = 0; i < t; i++)
            for (int e = 0; e < d; e++) {
                double angle = (first + i) / Math.pow(c.ropeTheta(), 2.0 * (e % (d / 2)) / d);
                cos.set((long) i * d + e, Math.cos(angle));
                sin.set((long) i * d + e, Math.sin(angle));
            }
        in.put("cos", cos);
        in.put("sin", sin);
        return in;
    }
}
