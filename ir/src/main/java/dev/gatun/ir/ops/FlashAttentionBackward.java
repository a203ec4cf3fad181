package dev.gatun.ir.ops;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.List;

/**
 * {@code flash_attention_backward}: the gradients of {@link FlashAttention} in one op, flash attention 2's backward
 * pass, which recomputes the scores tile by tile instead of holding the [T, S] probabilities of every head. Inputs:
 * {@code q} [B, Hq, T, d], {@code k} and {@code v} [B, Hkv, S, d] (as flash_attention takes them), the forward's result
 * {@code o} and its gradient {@code dout}, both token-major [B, T, Hq, d], one dtype; the attributes are
 * flash_attention's ({@code scale}, {@code causal}, {@code window}, {@code softcap}), with its checks.
 *
 * <p>Outputs, in order, in float32 (float64 for f64 inputs): {@code dq} [B, Hq, T, d], which a GPU kernel sums across
 * key tiles in this buffer; {@code dk} and {@code dv} [B, Hq, S, d], each query head's part of the key-value head's
 * gradient (grouped-query attention: the gradient rule sums a group's parts, so a GPU block per (query head, key tile)
 * writes its own part, with no atomics and the same sums every run); and {@code stats} [B, Hq, T, 2]: per query row
 * the logsumexp {@code L} of its masked, scaled (and capped) scores and {@code D = sum(dout * o)}, which a GPU kernel
 * computes first and the main kernel reads. The rule casts the gradients to the dtype. These buffers are ordinary
 * outputs so the plan shows and places them; nothing is allocated behind it.
 *
 * <p>With {@code P = exp(s - L)} (s the score after the cap), {@code dP = dout v^T} and {@code dS = P (dP - D)} (times
 * {@code 1 - (s / softcap)^2} under a cap): {@code dv = P^T dout}, {@code dk = scale dS^T q}, {@code dq = scale dS k}
 * (dk and dv per query head).
 * The reference sums in float64 and rounds each output once.
 */
public final class FlashAttentionBackward implements OpSpec {
    public static final FlashAttentionBackward SPEC = new FlashAttentionBackward();

    private FlashAttentionBackward() {}

    @Override public String name() { return "flash_attention_backward"; }

    @Override public List<Attribute> attributes() { return FlashAttention.SPEC.attributes(); }

    /** The dtype the outputs are summed in for inputs of dtype {@code t}: float64 for f64, else float32. */
    public static DType accumulator(DType t) { return t == DType.F64 ? DType.F64 : DType.F32; }

    @Override public List<TensorType> infer(List<Operand> inputs, OpAttrs attrs) {
        if (inputs.size() != 5) throw new GraphException("flash_attention_backward takes q, k, v, o and dout, got " + inputs.size() + " tensors");
        TensorType forward;
        try {
            forward = FlashAttention.SPEC.infer(inputs.subList(0, 3), attrs).getFirst();
        } catch (GraphException e) {
            throw new GraphException("flash_attention_backward: " + e.getMessage());
        }
        Operand q = inputs.get(0), k = inputs.get(1);
        String call = "flash_attention_backward(" + q.describe() + ", " + k.describe() + ", ...)";
        for (Operand x : inputs.subList(3, 5))
            if (!x.type().equals(forward))
                throw new GraphException(call + ": " + x.label() + " is " + x.type() + "; o and dout must be the forward's result type " + forward
                        + " (token-major [batch, tokens, query heads, head_dim])");
        long[] qs = q.type().shape().sizes(), ks = k.type().shape().sizes();
        DType acc = accumulator(q.type().dtype());
        var parts = new TensorType(acc, Shape.of(qs[0], qs[1], ks[2], qs[3]));
        return List.of(new TensorType(acc, q.type().shape()), parts, parts, new TensorType(acc, Shape.of(qs[0], qs[1], qs[2], 2)));
    }

    /** Per query row: its scores and L in float64, D, then each seen key's dS added to dq and to its head's dk and dv. */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor q = inputs.get(0), k = inputs.get(1), v = inputs.get(2), o = inputs.get(3), dout = inputs.get(4);
        long[] qs = q.shape(), ks = k.shape();
        long b = qs[0], hq = qs[1], tq = qs[2], d = qs[3], hkv = ks[1], s = ks[2], group = hq / hkv;
        double scale = attrs.real("scale"), cap = attrs.real("softcap");
        boolean causal = attrs.integer("causal") == 1;
        long window = attrs.integer("window");
        double[] dk = new double[(int) outputs.get(1).numel()], dv = new double[(int) outputs.get(1).numel()], dq = new double[(int) d], sc = new double[(int) s];
        boolean[] seen = new boolean[(int) s];
        for (long bi = 0; bi < b; bi++)
            for (long h = 0; h < hq; h++) {
                long kvh = h / group;
                for (long i = 0; i < tq; i++) {
                    long qo = ((bi * hq + h) * tq + i) * d, to = ((bi * tq + i) * hq + h) * d;
                    double max = FlashAttention.rowScores(q, k, qo, (bi * hkv + kvh) * s * d, i, tq, s, d, causal, window, scale, cap, seen, sc);
                    double sum = 0;
                    for (long j = 0; j < s; j++) if (seen[(int) j]) sum += Math.exp(sc[(int) j] - max);
                    double lse = max + Math.log(sum), dsum = 0;
                    for (long e = 0; e < d; e++) dsum += dout.get(to + e) * o.get(to + e);
                    java.util.Arrays.fill(dq, 0);
                    for (long j = 0; j < s; j++) {
                        if (!seen[(int) j]) continue;
                        long ko = ((bi * hkv + kvh) * s + j) * d, po = ((bi * hq + h) * s + j) * d;
                        double p = Math.exp(sc[(int) j] - lse), dp = 0;
                        for (long e = 0; e < d; e++) dp += dout.get(to + e) * v.get(ko + e);
                        double ds = p * (dp - dsum);
                        if (cap > 0) ds *= 1 - (sc[(int) j] / cap) * (sc[(int) j] / cap);
                        for (long e = 0; e < d; e++) {
                            dq[(int) e] += ds * scale * k.get(ko + e);
                            dk[(int) (po + e)] += ds * scale * q.get(qo + e);
                            dv[(int) (po + e)] += p * dout.get(to + e);
                        }
                    }
                    for (long e = 0; e < d; e++) outputs.get(0).set(qo + e, dq[(int) e]);
                    long so = ((bi * hq + h) * tq + i) * 2;
                    outputs.get(3).set(so, lse);
                    outputs.get(3).set(so + 1, dsum);
                }
            }
        for (int x = 0; x < dk.length; x++) {
            outputs.get(1).set(x, dk[x]);
            outputs.get(2).set(x, dv[x]);
        }
    }
}
