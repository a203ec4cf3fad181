package dev.gatun.ir.ops;

import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.List;

/**
 * {@code flash_attention}: scaled dot-product attention of a whole sequence in one op, never holding the scores:
 * {@code softmax(mask(cap(scale * q kT))) v} per head. Inputs are head-major, as PyTorch's
 * {@code scaled_dot_product_attention} takes them: the queries {@code q} [B, Hq, T, d], the keys {@code k} [B, Hkv, S, d]
 * and the values {@code v} [B, Hkv, S, d], one dtype (f32, bf16, f16, or f64 on the host), Hq a multiple of Hkv (grouped-query attention:
 * query head h reads key-value head {@code h / (Hq / Hkv)}, with no copy). The result is token-major, [B, T, Hq, d], the
 * layout an output projection reads as [B * T, Hq * d] without a transposition.
 *
 * <p>Attributes: {@code scale} multiplies the scores; {@code softcap} (0: none) makes each scaled score
 * {@code softcap * tanh(s / softcap)} (Gemma 2); {@code causal} (1 or 0): query {@code i} stands at position
 * {@code S - T + i} (the last T of S positions, as a prompt's continuation) and sees the keys at or before it;
 * {@code window} (0: none; causal only): it sees only the {@code window} positions up to its own, {@code pos - window < j
 * <= pos}. Masked scores are -inf before the softmax; a row that sees no key at all (causal with {@code T > S}) is
 * refused at type inference, so the softmax never divides 0 by 0.
 *
 * <p>Sums are float64 in {@link #reference} and the host body and rounded once to the dtype; a GPU kernel computes in
 * float32 (its probabilities rounded to the dtype before the weighted values, as flash attention does, where the inputs
 * are 16-bit).
 */
public final class FlashAttention implements OpSpec {
    public static final FlashAttention SPEC = new FlashAttention();

    private FlashAttention() {}

    @Override public String name() { return "flash_attention"; }

    @Override public List<Attribute> attributes() {
        return List.of(new Attribute("scale", Attribute.Kind.REAL), new Attribute("causal", Attribute.Kind.INT), new Attribute("window", Attribute.Kind.INT),
                new Attribute("softcap", Attribute.Kind.REAL));
    }

    @Override public List<TensorType> infer(List<Operand> inputs, OpAttrs attrs) {
        if (inputs.size() != 3) throw new GraphException("flash_attention takes q, k and v, got " + inputs.size() + " tensors");
        Operand q = inputs.get(0), k = inputs.get(1), v = inputs.get(2);
        String call = "flash_attention(" + q.describe() + ", " + k.describe() + ", " + v.describe() + ")";
        for (Operand o : inputs) {
            if (o.type().rank() != 4) throw new GraphException(call + ": " + o.label() + " has rank " + o.type().rank() + "; q, k and v are [batch, heads, tokens, head_dim]");
            if (o.type().dtype() != q.type().dtype()) throw new GraphException(call + ": " + o.label() + " is " + o.type().dtype() + " and q " + q.type().dtype() + "; one dtype for all three");
            for (Dim d : o.type().shape().dims())
                if (!d.isStatic()) throw new GraphException(call + ": " + o.label() + " has a symbolic size (" + d + "); flash_attention takes static shapes");
        }
        DType t = q.type().dtype();
        if (t != DType.F32 && t != DType.BF16 && t != DType.F16 && t != DType.F64)
            throw new GraphException(call + ": dtype " + t + "; flash_attention takes f32, bf16, f16 or f64");
        long[] qs = q.type().shape().sizes(), ks = k.type().shape().sizes(), vs = v.type().shape().sizes();
        if (!java.util.Arrays.equals(ks, vs)) throw new GraphException(call + ": k and v differ in shape; they must be the same [batch, kv heads, positions, head_dim]");
        if (qs[0] != ks[0]) throw new GraphException(call + ": q's batch is " + qs[0] + " and k's " + ks[0]);
        if (qs[3] != ks[3]) throw new GraphException(call + ": q's head_dim is " + qs[3] + " and k's " + ks[3]);
        if (ks[1] < 1 || qs[1] % ks[1] != 0)
            throw new GraphException(call + ": " + qs[1] + " query heads cannot share " + ks[1] + " key-value heads; the query heads must be a multiple of them");
        if (qs[3] < 1 || qs[3] > 256) throw new GraphException(call + ": head_dim " + qs[3] + "; flash_attention takes 1 to 256");
        double scale = attrs.real("scale"), softcap = attrs.real("softcap");
        long causal = attrs.integer("causal"), window = attrs.integer("window");
        if (!Double.isFinite(scale)) throw new GraphException(call + ": scale " + scale + " is not finite");
        if (!(softcap >= 0) || Double.isInfinite(softcap)) throw new GraphException(call + ": softcap " + softcap + "; 0 (none) or a positive number");
        if (causal != 0 && causal != 1) throw new GraphException(call + ": causal=" + causal + "; 1 or 0");
        if (window < 0 || (window > 0 && causal == 0)) throw new GraphException(call + ": window=" + window + "; 0 (none), or a positive window of a causal attention");
        if (causal == 1 && qs[2] > ks[2])
            throw new GraphException(call + ": causal with " + qs[2] + " queries over " + ks[2] + " positions: the first queries would see no key");
        if (ks[2] < 1) throw new GraphException(call + ": no positions to attend to");
        return List.of(new TensorType(t, Shape.of(qs[0], qs[2], qs[1], qs[3])));
    }

    /** Whether query {@code i} of {@code tq} sees key {@code j} of {@code s} under {@code attrs}' causal mask and window. */
    static boolean sees(long i, long j, long tq, long s, boolean causal, long window) {
        if (!causal) return true;
        long pos = s - tq + i;
        return j <= pos && (window == 0 || j > pos - window);
    }

    /**
     * The scaled (and soft-capped) float64 scores of query row {@code qo} (the offset of its d elements in {@code q}) over
     * the keys of key-value head offset {@code kvo} (key j's elements at {@code kvo + j * d}) that query {@code i} of
     * {@code tq} sees: {@code seen[j]} says which, {@code scores[j]} holds each; returns the largest (-inf: none seen).
     */
    static double rowScores(HostTensor q, HostTensor k, long qo, long kvo, long i, long tq, long s, long d, boolean causal, long window,
                            double scale, double cap, boolean[] seen, double[] scores) {
        double max = Double.NEGATIVE_INFINITY;
        for (long j = 0; j < s; j++) {
            seen[(int) j] = sees(i, j, tq, s, causal, window);
            if (!seen[(int) j]) continue;
            long ko = kvo + j * d;
            double dot = 0;
            for (long e = 0; e < d; e++) dot += q.get(qo + e) * k.get(ko + e);
            double score = dot * scale;
            if (cap > 0) score = cap * Math.tanh(score / cap);
            scores[(int) j] = score;
            max = Math.max(max, score);
        }
        return max;
    }

    /** Every score in float64, the row's softmax from its largest seen score, the weighted sum of the values. */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor q = inputs.get(0), k = inputs.get(1), v = inputs.get(2), out = outputs.getFirst();
        long[] qs = q.shape(), ks = k.shape();
        long b = qs[0], hq = qs[1], tq = qs[2], d = qs[3], hkv = ks[1], s = ks[2], group = hq / hkv;
        double scale = attrs.real("scale"), cap = attrs.real("softcap");
        boolean causal = attrs.integer("causal") == 1;
        long window = attrs.integer("window");
        double[] p = new double[(int) s], acc = new double[(int) d];
        boolean[] seen = new boolean[(int) s];
        for (long bi = 0; bi < b; bi++)
            for (long h = 0; h < hq; h++) {
                long kvh = h / group;
                for (long i = 0; i < tq; i++) {
                    long qo = ((bi * hq + h) * tq + i) * d;
                    double max = rowScores(q, k, qo, (bi * hkv + kvh) * s * d, i, tq, s, d, causal, window, scale, cap, seen, p);
                    double sum = 0;
                    java.util.Arrays.fill(acc, 0);
                    for (long j = 0; j < s; j++) {
                        if (!seen[(int) j]) continue;
                        double w = Math.exp(p[(int) j] - max);
                        sum += w;
                        long vo = ((bi * hkv + kvh) * s + j) * d;
                        for (long e = 0; e < d; e++) acc[(int) e] += w * v.get(vo + e);
                    }
                    long oo = ((bi * tq + i) * hq + h) * d;
                    for (long e = 0; e < d; e++) out.set(oo + e, acc[(int) e] / sum);
                }
            }
    }
}
