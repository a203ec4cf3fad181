package dev.gatun.models.llama;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.TensorFiles;

import java.lang.foreign.MemorySegment;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A decoder layer's mixture-of-experts MLP ({@link MoeConfig}), in one of two forms chosen by the step's shape, each
 * the arithmetic of transformers' sparse dispatch (each expert on its tokens, weighted, summed):
 * <ul>
 *   <li><b>Routed</b>, where the step has few tokens: {@code rows * k < experts} (a decode step: Mixtral's top-2 of 8
 *   at 1 to 3 tokens, Qwen3-MoE's top-8 of 128 at up to 15). Each token's k chosen experts only, by
 *   {@code expert_matmul} ({@link dev.gatun.ir.ops.ExpertMatmul}), which reads, for each (token, choice), that expert's
 *   weights and no other's: gate and up as one routed product over the stacked [experts, 2 * width, hidden] weights,
 *   SwiGLU, down as a routed product over the stacked [experts, hidden, width] weights, each choice's output
 *   multiplied by its router weight (in the model's dtype, as transformers multiplies) and the k summed. A step reads
 *   {@code rows * k} experts' bytes, fewer than all of them by the rule; the plan shows the two
 *   {@code expert_matmul} calls and no product over all experts.</li>
 *   <li><b>Dense</b>, otherwise (a prefill): every expert on every token, its output weighted by the token's routing
 *   weight for it, zero where the token was not routed to it; correct at any batch, and the whole weights read once
 *   as products of many rows (where routed pairs would read each expert again and again). The experts' gate and up
 *   projections are one product ([experts * 2 * width, hidden]); SwiGLU, the weights multiplied in; the down
 *   projection one batched product over the experts ([experts, rows, width] by [experts, width, hidden]) summed over
 *   the experts.</li>
 * </ul>
 *
 * <p>The router, as transformers computes it: the logits {@code x @ gate^T} [tokens, experts], their softmax in
 * float32, {@code topk}, the top-k probabilities divided by their sum where {@link MoeConfig#normTopK}. The dense form
 * compares the top-k indices with the expert ids ({@code arange}) to give each token's weight for each expert, the
 * sum over k of its probability where the index is that expert's; the routed form takes the indices as they are.
 * Qwen2-MoE's shared expert is a SwiGLU MLP beside them, in both forms, whose output is multiplied by
 * {@code sigmoid(x @ shared_expert_gate^T)}.
 *
 * <p>Under tensor parallelism each rank holds a slice of every expert's width (and of the shared expert's), as of a
 * dense MLP: column-parallel gate and up, row-parallel down, one all-reduce of the block's sum. The router and the
 * shared expert's gate are replicated: every rank sees the same normalized hidden state, so the same routing.
 *
 * <p>Under expert parallelism ({@link Parallelism}, ep above 1) each rank of the "ep" axis holds {@code experts / ep}
 * whole experts (TP-sliced over "tp" as above), and every step, prompt or decode, takes a third form: each ep member
 * routes a share of the rows through {@link ExpertParallel} (the pairs dispatched to their experts' owners by an
 * uneven all_to_all, computed there by {@code expert_matmul}, combined back) and the shares are all-gathered; the
 * router, the shared expert and the all-reduce over "tp" as above.
 */
final class MixtureOfExperts {
    private MixtureOfExperts() {}

    /** The graph inputs of a sparse layer's block (after {@code model.layers.L.}); see {@link #shard}. */
    static final String ROUTER = "moe.router.weight", GATE_UP = "moe.experts.gate_up_proj.weight", DOWN = "moe.experts.down_proj.weight",
            SHARED_GATE_UP = "moe.shared_expert.gate_up_proj.weight", SHARED_DOWN = "moe.shared_expert.down_proj.weight",
            SHARED_GATE = "moe.shared_expert_gate.weight";

    /** Whether layer {@code layer} of {@code c} is a mixture of experts. */
    static boolean sparse(LlamaConfig c, int layer) { return c.moe() != null && c.moe().sparse(layer); }

    /** The checkpoint's tensor names of one expert's gate, up and down projections (layer prefix {@code p}). */
    private static String[] expert(MoeConfig m, String p, int e) {
        return switch (m.naming()) {
            case MIXTRAL -> new String[]{p + "block_sparse_moe.experts." + e + ".w1.weight", p + "block_sparse_moe.experts." + e + ".w3.weight",
                    p + "block_sparse_moe.experts." + e + ".w2.weight"};
            case QWEN -> new String[]{p + "mlp.experts." + e + ".gate_proj.weight", p + "mlp.experts." + e + ".up_proj.weight",
                    p + "mlp.experts." + e + ".down_proj.weight"};
        };
    }

    private static String router(MoeConfig m, String p) {
        return switch (m.naming()) {
            case MIXTRAL -> p + "block_sparse_moe.gate.weight";
            case QWEN -> p + "mlp.gate.weight";
        };
    }

    /** The shared expert's gate, up and down projections and its gate (Qwen2-MoE). */
    private static String[] shared(String p) {
        return new String[]{p + "mlp.shared_expert.gate_proj.weight", p + "mlp.shared_expert.up_proj.weight", p + "mlp.shared_expert.down_proj.weight",
                p + "mlp.shared_expert_gate.weight"};
    }

    /** A sparse layer's checkpoint tensors (layer prefix {@code p}) with their shapes, in the order of the block. */
    static Map<String, long[]> shapes(LlamaConfig c, String p) {
        MoeConfig m = c.moe();
        long h = c.hiddenSize(), f = m.expertSize(), s = m.sharedSize();
        var out = new LinkedHashMap<String, long[]>();
        out.put(router(m, p), new long[]{m.experts(), h});
        for (int e = 0; e < m.experts(); e++) {
            String[] n = expert(m, p, e);
            out.put(n[0], new long[]{f, h});
            out.put(n[1], new long[]{f, h});
            out.put(n[2], new long[]{h, f});
        }
        if (s > 0) {
            String[] n = shared(p);
            out.put(n[0], new long[]{s, h});
            out.put(n[1], new long[]{s, h});
            out.put(n[2], new long[]{h, s});
            out.put(n[3], new long[]{1, h});
        }
        return out;
    }

    /** The parameters of a sparse layer's block (for the checkpoint's size check), Long.MAX_VALUE where they overflow. */
    static long parameters(LlamaConfig c) {
        MoeConfig m = c.moe();
        try {
            long h = c.hiddenSize();
            long experts = Math.multiplyExact(Math.multiplyExact((long) m.experts(), 3 * h), m.expertSize());
            return Math.addExact(Math.addExact(experts, Math.multiplyExact(3 * h, m.sharedSize()) + (m.sharedSize() > 0 ? h : 0)),
                    Math.multiplyExact(m.experts(), h));
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE;
        }
    }

    /**
     * Rank {@code rank}'s shard of a sparse layer's block into {@code in}: the router whole; rows
     * {@code [rank * w, (rank + 1) * w)} of every expert's gate and up projections (w: the expert's width over
     * {@code tp}), expert after expert, gate before up ([experts * 2 * w, hidden], which is [experts, 2 * w, hidden]);
     * the same columns of every expert's down projection, stacked ([experts, hidden, w]); the shared expert's likewise,
     * and its gate whole.
     */
    static void shard(LlamaConfig c, TensorFiles weights, WeightReads reads, Map<String, NDArray> in, String p, int tp, int rank, DType dtype) {
        shard(c, weights, reads, in, p, Parallelism.tensor(tp), rank, dtype);
    }

    /**
     * Global rank {@code globalRank}'s shard of a sparse layer's block under {@code parallel}: as
     * {@link #shard(LlamaConfig, TensorFiles, WeightReads, Map, String, int, int, DType)} at its "tp" member, of its
     * "ep" member's experts only ({@code [m * E / ep, (m + 1) * E / ep)}, stacked in order: local expert i is global
     * expert {@code m * E / ep + i}); the router and the shared expert as at {@code ep} 1.
     */
    static void shard(LlamaConfig c, TensorFiles weights, WeightReads reads, Map<String, NDArray> in, String p, Parallelism parallel, int globalRank,
                      DType dtype) {
        MoeConfig m = c.moe();
        int tp = parallel.tp(), rank = parallel.tensorRank(globalRank), first = parallel.firstExpert(m.experts(), globalRank);
        int fl = m.expertSize() / tp, n = m.experts() / parallel.ep();
        String router = router(m, p);
        in.put(p + ROUTER, reads.read(weights.get(router).to(dtype), router));
        var gateUp = new LlamaPrefill.Rows[2 * n];
        var down = new NDArray[n];
        var names = new String[3 * n];
        for (int e = 0; e < n; e++) {
            String[] t = expert(m, p, first + e);
            gateUp[2 * e] = new LlamaPrefill.Rows(weights.get(t[0]), (long) rank * fl, fl);
            gateUp[2 * e + 1] = new LlamaPrefill.Rows(weights.get(t[1]), (long) rank * fl, fl);
            down[e] = weights.get(t[2]);
            System.arraycopy(t, 0, names, 3 * e, 3);
        }
        in.put(p + GATE_UP, LlamaPrefill.rows(dtype, gateUp));
        in.put(p + DOWN, reads.read(columns(down, (long) rank * fl, fl, dtype, n, c.hiddenSize(), fl), names));
        if (m.sharedSize() > 0) {
            int sl = m.sharedSize() / tp;
            String[] s = shared(p);
            in.put(p + SHARED_GATE_UP, LlamaPrefill.rows(dtype, new LlamaPrefill.Rows(weights.get(s[0]), (long) rank * sl, sl),
                    new LlamaPrefill.Rows(weights.get(s[1]), (long) rank * sl, sl)));
            in.put(p + SHARED_DOWN, reads.read(columns(new NDArray[]{weights.get(s[2])}, (long) rank * sl, sl, dtype, c.hiddenSize(), sl), s[0], s[1], s[2]));
            in.put(p + SHARED_GATE, reads.read(weights.get(s[3]).to(dtype), s[3]));
        }
    }

    /**
     * Of {@code names} (the checkpoint's tensors the model uses), those global rank {@code globalRank} reads under
     * {@code parallel}: all of them but the experts of other "ep" members.
     */
    static java.util.Set<String> held(LlamaConfig c, java.util.Collection<String> names, Parallelism parallel, int globalRank) {
        var out = new java.util.LinkedHashSet<>(names);
        if (parallel.ep() == 1) return out;
        MoeConfig m = c.moe();
        int first = parallel.firstExpert(m.experts(), globalRank), local = m.experts() / parallel.ep();
        for (int l = 0; l < c.layers(); l++) {
            if (!sparse(c, l)) continue;
            for (int e = 0; e < m.experts(); e++)
                if (e < first || e >= first + local) for (String t : expert(m, "model.layers." + l + ".", e)) out.remove(t);
        }
        return out;
    }

    /** Columns {@code [first, first + n)} of each [out, in] matrix, stacked: [matrices, out, n], shaped {@code shape}. */
    private static NDArray columns(NDArray[] matrices, long first, long n, DType dtype, long... shape) {
        long out = matrices[0].shape()[0], e = dtype.byteSize();
        var result = NDArray.zeros(dtype, shape);
        for (int i = 0; i < matrices.length; i++) {
            NDArray a = matrices[i];
            long cols = a.shape()[1];
            for (long r = 0; r < out; r++) {
                long to = (i * out + r) * n;
                if (a.dtype() == dtype) MemorySegment.copy(a.segment(), (r * cols + first) * e, result.segment(), to * e, n * e);
                else for (long j = 0; j < n; j++) result.set(to + j, a.get(r * cols + first + j));
            }
        }
        return result;
    }

    /** Whether a step of {@code rows} tokens takes the routed form: its {@code rows * k} expert reads are fewer than the experts. */
    static boolean routed(MoeConfig m, long rows) { return rows * m.topK() < m.experts(); }

    /**
     * The block's output for the normalized hidden states {@code xn} [rows, hidden] of the layer with prefix {@code p},
     * summed over the ranks (to be added to the residual stream): the routed form where {@link #routed}, else the dense.
     */
    static Tensor block(GraphBuilder g, LlamaConfig c, String p, Tensor xn, int rows, int tp, DType dtype) {
        return block(g, c, p, xn, rows, Parallelism.tensor(tp), null, dtype);
    }

    /**
     * {@link #block(GraphBuilder, LlamaConfig, String, Tensor, int, int, DType)} on one rank of {@code parallel}'s
     * mesh: where {@code ep} is above 1 the experts by {@link #expertParallel} (whatever the step's rows), the sum over
     * the "tp" axis after it; {@code member} this rank's number along "ep" ({@link #member}, made once a graph).
     */
    static Tensor block(GraphBuilder g, LlamaConfig c, String p, Tensor xn, int rows, Parallelism parallel, Tensor member, DType dtype) {
        MoeConfig m = c.moe();
        int tp = parallel.tp(), h = c.hiddenSize(), n = m.experts(), fl = m.expertSize() / tp;
        var top = router(m, linear(xn, g.input(p + ROUTER, dtype, n, h)));
        Tensor out;
        if (parallel.ep() > 1) out = expertParallel(g, m, p, xn, top, rows, parallel, member != null ? member : member(g, parallel.ep()), dtype);
        else {
            Tensor gateUpW = g.input(p + GATE_UP, dtype, 2 * n * fl, h), downW = g.input(p + DOWN, dtype, n, h, fl);
            out = routed(m, rows) ? routedExperts(m, xn, gateUpW, downW, top, rows, fl, dtype) : denseExperts(g, m, xn, gateUpW, downW, top, rows, dtype);
        }
        if (m.sharedSize() > 0) {
            int sl = m.sharedSize() / tp;
            Tensor sgu = linear(xn, g.input(p + SHARED_GATE_UP, dtype, 2 * sl, h));
            Tensor shared = linear(sgu.slice(1, 0, sl).silu().mul(sgu.slice(1, sl, 2 * sl)), g.input(p + SHARED_DOWN, dtype, h, sl));
            out = out.add(shared.mul(linear(xn, g.input(p + SHARED_GATE, dtype, 1, h)).sigmoid()));
        }
        return tp > 1 ? out.allReduce(ReduceOp.SUM, parallel.tensorGroup()) : out;
    }

    /**
     * The routed experts under expert parallelism ({@link ExpertParallel#layer} over the "ep" axis), for the rows
     * {@code xn} [rows, hidden] every member of the axis holds alike: each member takes a share of
     * {@code ceil(rows / ep)} consecutive rows (the last share padded with copies of the last row, computed and
     * dropped), sends its (row, choice) pairs to the members holding their experts and gets the weighted sums back, and
     * the shares are all-gathered along "ep" into every row's sum, [rows, hidden] (this rank's part of the experts'
     * width: partial sums where {@code tp} is above 1); {@code member} is this rank's number along the axis
     * ({@link #member}). Each member receives at most {@code share * k * ep} rows, the capacity: never refused.
     */
    private static Tensor expertParallel(GraphBuilder g, MoeConfig m, String p, Tensor xn, Tensor.TopK top, int rows, Parallelism parallel, Tensor member,
                                         DType dtype) {
        int ep = parallel.ep(), local = m.experts() / ep, fl = m.expertSize() / parallel.tp(), k = m.topK(), h = (int) xn.shape().sizes()[1];
        int share = (rows + ep - 1) / ep;
        Tensor mine = g.arange(DType.I64, share).add(member.mul(g.scalar(share, DType.I64)).expand(share));
        if ((long) share * ep != rows) mine = mine.minimum(g.scalar(rows - 1, DType.I64));
        Tensor gateUpW = g.input(p + GATE_UP, dtype, local * 2 * fl, h).reshape(local, 2 * fl, h), downW = g.input(p + DOWN, dtype, local, h, fl);
        Tensor y = ExpertParallel.layer(g, xn.indexSelect(0, mine), top.values().indexSelect(0, mine), top.indices().indexSelect(0, mine),
                m.experts(), Parallelism.EXPERT_AXIS, ep, (long) share * k * ep, ExpertParallel.swiGluExperts(g, gateUpW, downW));
        Tensor all = y.allGather(Parallelism.EXPERT_AXIS);   // [share * ep, hidden]: the members' shares in order
        return (long) share * ep == rows ? all : all.slice(0, 0, rows);
    }

    /**
     * This rank's number along the "ep" axis of {@code ep} members, [1] i64, from the device, so every rank runs the
     * same graph: the even {@code all_to_all} of {@code 0 .. ep - 1} gives member j its j from every sender.
     */
    static Tensor member(GraphBuilder g, int ep) {
        return g.arange(DType.I64, ep).reshape(ep, 1).allToAll(Parallelism.EXPERT_AXIS).slice(0, 0, 1).reshape(1);
    }

    /**
     * Each token's k chosen experts only: gate | up of expert ids[r, j] on token r ([rows, k, 2 * width]), SwiGLU, its
     * down projection ([rows, k, hidden]), weighted by the router and summed over k.
     */
    private static Tensor routedExperts(MoeConfig m, Tensor xn, Tensor gateUpW, Tensor downW, Tensor.TopK top, int rows, int fl, DType dtype) {
        int k = m.topK(), h = (int) xn.shape().sizes()[1];
        Tensor experts = ExpertParallel.routedSwiGlu(xn, gateUpW.reshape(m.experts(), 2 * fl, h), downW, top.indices());   // [rows, k, hidden]
        Tensor weights = top.values().dtype() == dtype ? top.values() : top.values().cast(dtype);
        return experts.mul(weights.reshape(rows, k, 1)).sum(1);
    }

    /** Every expert on every token, weighted by the token's routing weight for it (zero where not routed), summed. */
    private static Tensor denseExperts(GraphBuilder g, MoeConfig m, Tensor xn, Tensor gateUpW, Tensor downW, Tensor.TopK top, int rows, DType dtype) {
        Tensor routing = routing(g, m, top, rows);
        if (dtype != DType.F32) routing = routing.cast(dtype);
        return ExpertParallel.denseSwiGlu(xn, gateUpW, downW, routing);
    }

    /**
     * The router's choice from its logits [rows, experts]: the softmax in float32, top-k, the k probabilities
     * renormalised where the configuration says so; the values [rows, k] (float32) and the experts [rows, k] (i64).
     */
    static Tensor.TopK router(MoeConfig m, Tensor logits) {
        Tensor l = logits.dtype() == DType.F32 ? logits : logits.cast(DType.F32);
        Tensor e = l.sub(l.max(true, -1)).exp();
        var top = e.div(e.sum(true, -1)).topk(m.topK());
        return m.normTopK() ? new Tensor.TopK(top.values().div(top.values().sum(true, -1)), top.indices()) : top;
    }

    /** Each token's weight for each expert [rows, experts], float32: the router's k weights, zero for the other experts. */
    static Tensor routing(GraphBuilder g, MoeConfig m, Tensor.TopK top, int rows) {
        int n = m.experts(), k = m.topK();
        // [rows, k, experts]: whether the token's j-th choice is expert e
        Tensor chosen = top.indices().reshape(rows, k, 1).eq(g.arange(DType.I64, n).reshape(1, 1, n));
        return chosen.where(top.values().reshape(rows, k, 1), g.scalar(0, DType.F32)).sum(1);
    }

    /** {@code x @ w.mT} for a weight in the checkpoints' [out, in] layout. */
    private static Tensor linear(Tensor x, Tensor w) { return x.matmul(w.transpose(0, 1)); }
}
