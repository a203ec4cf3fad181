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
 * A decoder layer's mixture-of-experts MLP ({@link MoeConfig}), computed densely: every expert runs on every token and
 * its output is weighted by the token's routing weight for it, which is zero where the token was not routed to it. That
 * is the arithmetic of transformers' sparse dispatch (each expert on its tokens, weighted, summed), without gathering
 * tokens by expert: correct at any batch, though each token costs all experts' products rather than top-k's.
 *
 * <p>The router, as transformers computes it: the logits {@code x @ gate^T} [tokens, experts], their softmax in
 * float32, {@code topk}, the top-k probabilities divided by their sum where {@link MoeConfig#normTopK}; the top-k
 * indices compared with the expert ids ({@code arange}) give each token's weight for each expert, the sum over k of
 * its probability where the index is that expert's. The experts' gate and up projections are one product (per expert,
 * its gate rows then its up rows: [experts * 2 * width, hidden]); SwiGLU, the weights multiplied in; and one down
 * product over all experts' columns side by side ([hidden, experts * width]), which sums the weighted experts. Qwen2-MoE's
 * shared expert is a SwiGLU MLP beside them whose output is multiplied by {@code sigmoid(x @ shared_expert_gate^T)}.
 *
 * <p>Under tensor parallelism each rank holds a slice of every expert's width (and of the shared expert's), as of a
 * dense MLP: column-parallel gate and up, row-parallel down, one all-reduce of the block's sum. The router and the
 * shared expert's gate are replicated: every rank sees the same normalized hidden state, so the same routing.
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
     * {@code tp}), expert after expert, gate before up; the same columns of every expert's down projection, side by
     * side; the shared expert's likewise, and its gate whole.
     */
    static void shard(LlamaConfig c, TensorFiles weights, WeightReads reads, Map<String, NDArray> in, String p, int tp, int rank, DType dtype) {
        MoeConfig m = c.moe();
        int fl = m.expertSize() / tp, n = m.experts();
        String router = router(m, p);
        in.put(p + ROUTER, reads.read(weights.get(router).to(dtype), router));
        var gateUp = new LlamaPrefill.Rows[2 * n];
        var down = new NDArray[n];
        var names = new String[3 * n];
        for (int e = 0; e < n; e++) {
            String[] t = expert(m, p, e);
            gateUp[2 * e] = new LlamaPrefill.Rows(weights.get(t[0]), (long) rank * fl, fl);
            gateUp[2 * e + 1] = new LlamaPrefill.Rows(weights.get(t[1]), (long) rank * fl, fl);
            down[e] = weights.get(t[2]);
            System.arraycopy(t, 0, names, 3 * e, 3);
        }
        in.put(p + GATE_UP, LlamaPrefill.rows(dtype, gateUp));
        in.put(p + DOWN, reads.read(sideBySide(down, (long) rank * fl, fl, dtype), names));
        if (m.sharedSize() > 0) {
            int sl = m.sharedSize() / tp;
            String[] s = shared(p);
            in.put(p + SHARED_GATE_UP, LlamaPrefill.rows(dtype, new LlamaPrefill.Rows(weights.get(s[0]), (long) rank * sl, sl),
                    new LlamaPrefill.Rows(weights.get(s[1]), (long) rank * sl, sl)));
            in.put(p + SHARED_DOWN, reads.read(sideBySide(new NDArray[]{weights.get(s[2])}, (long) rank * sl, sl, dtype), s[0], s[1], s[2]));
            in.put(p + SHARED_GATE, reads.read(weights.get(s[3]).to(dtype), s[3]));
        }
    }

    /** Columns {@code [first, first + n)} of each [out, in] matrix, side by side: [out, matrices * n]. */
    private static NDArray sideBySide(NDArray[] matrices, long first, long n, DType dtype) {
        long out = matrices[0].shape()[0], width = matrices.length * n, e = dtype.byteSize();
        var result = NDArray.zeros(dtype, out, width);
        for (int i = 0; i < matrices.length; i++) {
            NDArray a = matrices[i];
            long cols = a.shape()[1];
            for (long r = 0; r < out; r++) {
                long to = r * width + i * n;
                if (a.dtype() == dtype) MemorySegment.copy(a.segment(), (r * cols + first) * e, result.segment(), to * e, n * e);
                else for (long j = 0; j < n; j++) result.set(to + j, a.get(r * cols + first + j));
            }
        }
        return result;
    }

    /**
     * The block's output for the normalized hidden states {@code xn} [rows, hidden] of the layer with prefix {@code p},
     * summed over the ranks (to be added to the residual stream).
     */
    static Tensor block(GraphBuilder g, LlamaConfig c, String p, Tensor xn, int rows, int tp, DType dtype) {
        MoeConfig m = c.moe();
        int h = c.hiddenSize(), n = m.experts(), fl = m.expertSize() / tp;
        Tensor routing = routing(g, m, linear(xn, g.input(p + ROUTER, dtype, n, h)), rows);
        if (dtype != DType.F32) routing = routing.cast(dtype);
        // every expert on every token: gate | up of each expert side by side, [rows, experts, 2 * width]
        Tensor gateUp = linear(xn, g.input(p + GATE_UP, dtype, 2 * n * fl, h)).reshape(rows, n, 2 * fl);
        Tensor act = gateUp.slice(2, 0, fl).silu().mul(gateUp.slice(2, fl, 2 * fl)).mul(routing.reshape(rows, n, 1));
        // one product over all experts' down columns: the weighted sum of the experts' outputs
        Tensor out = linear(act.reshape(rows, n * fl), g.input(p + DOWN, dtype, h, n * fl));
        if (m.sharedSize() > 0) {
            int sl = m.sharedSize() / tp;
            Tensor sgu = linear(xn, g.input(p + SHARED_GATE_UP, dtype, 2 * sl, h));
            Tensor shared = linear(sgu.slice(1, 0, sl).silu().mul(sgu.slice(1, sl, 2 * sl)), g.input(p + SHARED_DOWN, dtype, h, sl));
            out = out.add(shared.mul(linear(xn, g.input(p + SHARED_GATE, dtype, 1, h)).sigmoid()));
        }
        return tp > 1 ? out.allReduce(ReduceOp.SUM) : out;
    }

    /**
     * Each token's weight for each expert [rows, experts], float32, from the router logits [rows, experts]: softmax,
     * top-k, renormalised where the configuration says so; zero for the experts a token is not routed to.
     */
    static Tensor routing(GraphBuilder g, MoeConfig m, Tensor logits, int rows) {
        int n = m.experts(), k = m.topK();
        Tensor l = logits.dtype() == DType.F32 ? logits : logits.cast(DType.F32);
        Tensor e = l.sub(l.max(true, -1)).exp();
        var top = e.div(e.sum(true, -1)).topk(k);
        Tensor w = m.normTopK() ? top.values().div(top.values().sum(true, -1)) : top.values();
        // [rows, k, experts]: whether the token's j-th choice is expert e
        Tensor chosen = top.indices().reshape(rows, k, 1).eq(g.arange(DType.I64, n).reshape(1, 1, n));
        return chosen.where(w.reshape(rows, k, 1), g.scalar(0, DType.F32)).sum(1);
    }

    /** {@code x @ w.mT} for a weight in the checkpoints' [out, in] layout. */
    private static Tensor linear(Tensor x, Tensor w) { return x.matmul(w.transpose(0, 1)); }
}
