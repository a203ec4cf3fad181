package dev.gatun.models.llama;

import dev.gatun.dsl.Tensor;
import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.LoadProgress;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.TensorFiles;

import java.lang.foreign.MemorySegment;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.Consumer;

/**
 * The Llama architecture's forward pass over a prompt of {@code tokens} tokens, written in the DSL, one rank's share of
 * it under Megatron-style tensor parallelism of degree {@code tp}: each rank holds whole query heads (key and value
 * heads too, or a replica of the one its query heads share when there are fewer key-value heads than ranks) and a
 * slice of the MLP's width; the attention's output projection and the MLP's down projection each end in one
 * all-reduce. The graph's outputs are {@code logits} [tokens, vocab] and the greedy {@code next} token of every
 * position, the same on every rank, and each layer's keys and values.
 *
 * <p>Inputs besides the weights: {@code tokens} [tokens] (i32 ids, looked up in the embedding with
 * {@code index_select}), {@code cos} and {@code sin} [tokens, rotary_dim] (the rotary tables of the positions; rotary_dim is head_dim but
 * for Phi-3's partial rotary embedding); the attention is causal by itself ({@code flash_attention}). {@link #inputs}
 * makes them all, with
 * each rank's shard of the weights, from a checkpoint. {@link LlamaDecoder} runs the same arithmetic with a KV cache,
 * token by token.
 */
public final class LlamaPrefill {
    private LlamaPrefill() {}

    /**
     * The graph of rank {@code rank}'s share (every rank's graph is the same but for the shards it is given): the
     * decoder's prefill ({@link LlamaDecoder}) over exactly the prompt, with every position's logits.
     */
    public static Graph graph(LlamaConfig c, int tokens, int tp, DType dtype) { return graph(c, tokens, Parallelism.tensor(tp), dtype); }

    /** The graph of one rank of {@code parallel}'s mesh (expert parallelism over "ep" by tensor parallelism over "tp"). */
    public static Graph graph(LlamaConfig c, int tokens, Parallelism parallel, DType dtype) {
        return LlamaDecoder.graph(c, 1, tokens, tokens, parallel, dtype, false, true);
    }

    /** Key-value heads on one rank: a share of them, or one replica where there are fewer than ranks. */
    static int localKvHeads(LlamaConfig c, int tp) { return Math.max(1, c.kvHeads() / tp); }

    static Tensor rmsNorm(Tensor x, Tensor w, double eps) {
        return x.mul(x.mul(x).mean(true, -1).add(eps).rsqrt()).mul(w);
    }

    /**
     * Rotary embedding in the half-split layout, x * cos + rotate_half(x) * sin with rotate_half(x) = (-x2, x1), written
     * per half: (x1 cos1 - x2 sin1, x2 cos2 + x1 sin2). Each product and sum rounds as the usual form's does (a product
     * with -x2 is the negated product), and both halves go straight into their slices of the result: one kernel. Where
     * the tables are narrower than the head ({@code d}), only the head's first that many dimensions rotate (halves of
     * those) and the rest pass through, as Phi-3's partial rotary embedding has it.
     */
    static Tensor rope(Tensor x, Tensor cos, Tensor sin, int d) {
        int r = (int) cos.shape().sizes()[cos.rank() - 1];
        if (r < d) return rope(x.slice(-1, 0, r), cos, sin, r).cat(-1, x.slice(-1, r, d));
        Tensor x1 = x.slice(-1, 0, d / 2), x2 = x.slice(-1, d / 2, d);
        Tensor c1 = cos.slice(-1, 0, d / 2), c2 = cos.slice(-1, d / 2, d), s1 = sin.slice(-1, 0, d / 2), s2 = sin.slice(-1, d / 2, d);
        return x1.mul(c1).sub(x2.mul(s1)).cat(-1, x2.mul(c2).add(x1.mul(s2)));
    }

    /**
     * Rank {@code rank}'s inputs for the prompt {@code ids}: its shard of the weights ({@link #shard}) and the prompt's
     * tokens and rotary tables ({@link LlamaDecoder#prompt}).
     */
    public static Map<String, NDArray> inputs(LlamaConfig c, TensorFiles weights, int[] ids, int tp, int rank, DType dtype) {
        return inputs(c, weights, ids, Parallelism.tensor(tp), rank, dtype);
    }

    /** {@link #inputs(LlamaConfig, TensorFiles, int[], int, int, DType)} for rank {@code rank} of {@code parallel}'s mesh. */
    public static Map<String, NDArray> inputs(LlamaConfig c, TensorFiles weights, int[] ids, Parallelism parallel, int rank, DType dtype) {
        var in = shard(c, weights, parallel, rank, dtype, null);
        in.putAll(LlamaDecoder.prompt(c, ids, ids.length, parallel.tp(), dtype));
        return in;
    }

    /**
     * Rank {@code rank}'s shard of every weight of {@code weights} (rows of the column-parallel projections, columns of
     * the row-parallel ones), in {@code dtype}, in the checkpoint's [out, in] layout: a product reads a projection
     * transposed as it lies ({@code x @ W.mT}), as PyTorch's linear layers do. The query, key and value projections
     * become one, {@code self_attn.qkv_proj.weight} (their rows stacked), as do the gate and up projections,
     * {@code mlp.gate_up_proj.weight}; a Phi-3 checkpoint's fused tensors of those names are split into the same parts
     * ({@link ProjectionRows}), each rank's heads and columns taken from each. At {@code tp} 1 {@code lm_head.weight} is
     * the whole head (where the embeddings are tied, the embedding itself: the same array); above, this rank's rows of it
     * ({@link VocabParallel#shard}: a view of the embedding's rows where tied and no padding is needed), while the
     * embedding stays whole on every rank.
     */
    static Map<String, NDArray> shard(LlamaConfig c, TensorFiles weights, int tp, int rank, DType dtype) {
        return shard(c, weights, Parallelism.tensor(tp), rank, dtype, null);
    }

    /**
     * Global rank {@code globalRank}'s shard under {@code parallel}: the "tp" shard {@code globalRank % tp} of every
     * weight, the experts only of its "ep" member ({@link MixtureOfExperts#shard}); telling {@code progress} (null:
     * nobody) how far it has got.
     */
    static Map<String, NDArray> shard(LlamaConfig c, TensorFiles weights, Parallelism parallel, int globalRank, DType dtype, Consumer<LoadProgress> progress) {
        parallel.check(c);
        if (globalRank < 0 || globalRank >= parallel.world())
            throw new CompilationException("LlamaDecoder.weights: rank " + globalRank + " is outside the " + parallel.world() + " ranks of " + parallel);
        int tp = parallel.tp(), rank = parallel.tensorRank(globalRank);
        int d = c.headDim(), hl = c.heads() / tp, kl = localKvHeads(c, tp), fl = c.intermediateSize() / tp;
        // the key-value heads of this rank: a share, or the one its query heads use
        int kvFirst = c.kvHeads() >= tp ? rank * kl : rank * hl / c.groupSize();
        var reads = new WeightReads(weights, MixtureOfExperts.held(c, LlamaCheckpoint.shapes(c).keySet(), parallel, globalRank), progress);
        var in = new LinkedHashMap<String, NDArray>();
        NDArray embed = reads.read(weights.get("model.embed_tokens.weight").to(dtype), "model.embed_tokens.weight");
        in.put("model.embed_tokens.weight", embed);
        for (int l = 0; l < c.layers(); l++) {
            String p = "model.layers." + l + ".";
            var qkv = ProjectionRows.qkv(c, p, rank, hl, kl, kvFirst);   // from q/k/v_proj, or split from Phi-3's qkv_proj
            in.put(p + "input_layernorm.weight", reads.read(weights.get(p + "input_layernorm.weight").to(dtype), p + "input_layernorm.weight"));
            in.put(p + "self_attn.qkv_proj.weight", reads.read(rows(dtype, qkv.rows(weights)), qkv.names()));
            in.put(p + "self_attn.o_proj.weight", reads.read(columns(weights.get(p + "self_attn.o_proj.weight"), rank * hl * d, hl * d, dtype),
                    p + "self_attn.o_proj.weight"));
            in.put(p + "post_attention_layernorm.weight", reads.read(weights.get(p + "post_attention_layernorm.weight").to(dtype),
                    p + "post_attention_layernorm.weight"));
            for (String n : GemmaOps.extraNorms(c)) in.put(p + n, reads.read(weights.get(p + n).to(dtype), p + n));
            if (MixtureOfExperts.sparse(c, l)) MixtureOfExperts.shard(c, weights, reads, in, p, parallel, globalRank, dtype);
            else {
                var gateUp = ProjectionRows.gateUp(c, p, rank, fl);   // from gate/up_proj, or split from Phi-3's gate_up_proj
                in.put(p + "mlp.gate_up_proj.weight", reads.read(rows(dtype, gateUp.rows(weights)), gateUp.names()));
                in.put(p + "mlp.down_proj.weight", reads.read(columns(weights.get(p + "mlp.down_proj.weight"), rank * fl, fl, dtype), p + "mlp.down_proj.weight"));
            }
            biases(c, weights, reads, in, p, dtype, rank, hl, kl, kvFirst, fl);
        }
        in.put("model.norm.weight", reads.read(weights.get("model.norm.weight").to(dtype), "model.norm.weight"));
        if (tp == 1) in.put("lm_head.weight", c.tieWordEmbeddings() ? embed : reads.read(weights.get("lm_head.weight").to(dtype), "lm_head.weight"));
        else VocabParallel.shard(c, weights, reads, in, embed, tp, rank, dtype);   // this rank's rows of the head
        return in;
    }

    /**
     * A layer's biases, sharded as their projections are: the q|k|v bias and the gate|up bias as the rows of the fused
     * weight (this rank's heads and columns), the output and down projections' whole (added after their row-parallel
     * products are summed over the ranks).
     */
    private static void biases(LlamaConfig c, TensorFiles weights, WeightReads reads, Map<String, NDArray> in, String p, DType dtype, int rank,
                               int hl, int kl, int kvFirst, int fl) {
        var b = c.biases();
        int d = c.headDim();
        if (b.qkv()) {
            String q = p + "self_attn.q_proj.bias", k = p + "self_attn.k_proj.bias", v = p + "self_attn.v_proj.bias";
            in.put(p + "self_attn.qkv_proj.bias", reads.read(vector(rows(dtype, new Rows(column(weights.get(q)), rank * hl * d, hl * d),
                    new Rows(column(weights.get(k)), kvFirst * d, kl * d), new Rows(column(weights.get(v)), kvFirst * d, kl * d))), q, k, v));
        }
        if (b.output()) in.put(p + "self_attn.o_proj.bias", reads.read(weights.get(p + "self_attn.o_proj.bias").to(dtype), p + "self_attn.o_proj.bias"));
        if (c.qkNorm())   // one weight for every head: each rank's whole
            for (String n : new String[]{p + "self_attn.q_norm.weight", p + "self_attn.k_norm.weight"}) in.put(n, reads.read(weights.get(n).to(dtype), n));
        if (b.mlp()) {
            String gate = p + "mlp.gate_proj.bias", up = p + "mlp.up_proj.bias";
            in.put(p + "mlp.gate_up_proj.bias", reads.read(vector(rows(dtype, new Rows(column(weights.get(gate)), rank * fl, fl),
                    new Rows(column(weights.get(up)), rank * fl, fl))), gate, up));
            in.put(p + "mlp.down_proj.bias", reads.read(weights.get(p + "mlp.down_proj.bias").to(dtype), p + "mlp.down_proj.bias"));
        }
    }

    /** A vector [n] as the matrix [n, 1] (the same memory), for {@link #rows}. */
    private static NDArray column(NDArray v) { return NDArray.wrap(v.dtype(), v.segment(), v.shape()[0], 1); }

    /** A matrix [n, 1] as the vector [n] (the same memory). */
    private static NDArray vector(NDArray m) { return NDArray.wrap(m.dtype(), m.segment(), m.shape()[0]); }

    /** Rows [first, first + n) of an [out, in] matrix. */
    record Rows(NDArray matrix, long first, long n) {}

    /**
     * Each part's rows, stacked: [sum of n, in] (the parts' outputs are then consecutive column ranges of one product).
     * A part already in {@code dtype} is one bulk copy (its rows are contiguous); another dtype is converted element by
     * element.
     */
    static NDArray rows(DType dtype, Rows... parts) {
        long cols = parts[0].matrix().shape()[1], height = 0, e = dtype.byteSize();
        for (Rows p : parts) height += p.n();
        var out = NDArray.zeros(dtype, height, cols);
        long at = 0;
        for (Rows p : parts) {
            if (p.matrix().dtype() == dtype)
                MemorySegment.copy(p.matrix().segment(), p.first() * cols * e, out.segment(), at * cols * e, p.n() * cols * e);
            else
                for (long r = 0; r < p.n(); r++)
                    for (long j = 0; j < cols; j++) out.set((at + r) * cols + j, p.matrix().get((p.first() + r) * cols + j));
            at += p.n();
        }
        return out;
    }

    /** Columns [first, first + n) of an [out, in] matrix: [out, n] (a bulk copy a row where the dtype is the same). */
    private static NDArray columns(NDArray a, long first, long n, DType dtype) {
        long rowsOf = a.shape()[0], cols = a.shape()[1], e = dtype.byteSize();
        var out = NDArray.zeros(dtype, rowsOf, n);
        for (long r = 0; r < rowsOf; r++)
            if (a.dtype() == dtype) MemorySegment.copy(a.segment(), (r * cols + first) * e, out.segment(), r * n * e, n * e);
            else for (long j = 0; j < n; j++) out.set(r * n + j, a.get(r * cols + first + j));
        return out;
    }
}
