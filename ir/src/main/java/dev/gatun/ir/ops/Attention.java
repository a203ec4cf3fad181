package dev.gatun.ir.ops;

import dev.gatun.ir.GraphException;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.List;

/**
 * {@code attention} of one query position over a cache: input 0 the queries q {@code [B, R, d]}, input 1 the keys
 * transposed kT {@code [B, d, S]}, input 2 the values v {@code [B, S, d]} (one floating dtype, static shapes), input 3
 * the queries' position (an i32 or i64 tensor of one element, given at run time); attribute {@code scale} (a real). The
 * result {@code [B, R, d]} is {@code softmax(scale * q kT) v} over the positions 0 to the position, inclusive: the later
 * positions of the cache (not written yet) count as masked. A decode step's scores, causal mask, softmax and weighted
 * values in one; a position outside {@code [0, S)} is an error at run time ({@link #refusal}).
 *
 * <p>The reference computes in float64 and rounds once; the host backend's body ({@link #host}) in float32, as the CUDA
 * kernel does. The JSON form is {@code "op": "attention"} with the field {@code scale}, as before the op was
 * registered. The planner joins the update of the caches to it, and chooses to load the cache early, through its typed
 * view of the step ({@code dev.gatun.planner.AttentionCall}).
 */
public final class Attention implements OpSpec {
    public static final Attention SPEC = new Attention();

    private Attention() {}

    /** The head sizes the fused kernels take ({@link #fusedKernelTakes}). */
    private static final long[] KERNEL_HEADS = {16, 32, 64, 128};

    /**
     * Whether the fused kernels of the backends that have one (the CUDA backend's decode attention) take heads of
     * {@code d} elements of {@code dtype}: 16, 32, 64 or 128 of float16 and bfloat16, up to 64 of float32 (a lane holds
     * a key column and its share of 32 value rows in registers). A graph builder writes the attention from matmul and
     * softmax for other heads (Gemma's 256, a float32 head of 128), so the plan holds the same form on every backend;
     * the host backend's body would take any.
     */
    public static boolean fusedKernelTakes(dev.gatun.ir.DType dtype, long d) {
        boolean half = dtype == dev.gatun.ir.DType.FLOAT16 || dtype == dev.gatun.ir.DType.BFLOAT16;
        if (!half && dtype != dev.gatun.ir.DType.FLOAT32) return false;
        for (long h : KERNEL_HEADS) if (h == d) return half || d <= 64;
        return false;
    }

    @Override public String name() { return "attention"; }

    @Override public List<Attribute> attributes() { return List.of(new Attribute("scale", Attribute.Kind.REAL)); }

    @Override public boolean checksValues() { return true; }

    @Override public List<TensorType> infer(List<Operand> args, OpAttrs attrs) {
        if (args.size() != 4) throw new GraphException("attention takes queries, keys (transposed), values and a position, got " + args.size() + " tensors");
        Operand q = args.get(0), kT = args.get(1), v = args.get(2), at = args.get(3);
        double scale = attrs.real("scale");
        String call = "attention(" + String.join(", ", args.stream().map(Operand::describe).toList()) + ", scale=" + scale + ")";
        for (Operand x : List.of(q, kT, v)) {
            if (x.type().rank() != 3) throw new GraphException(call + ": " + x.label() + " has " + x.type().rank() + " dimensions; q is [B, R, d], kT [B, d, S], v [B, S, d]");
            if (!x.type().shape().isStatic()) throw new GraphException(call + ": " + x.label() + " must have a static shape, not " + x.type().shape());
            if (x.type().dtype() != q.type().dtype())
                throw new GraphException(call + ": " + x.label() + " is " + x.type().dtype() + " but q is " + q.type().dtype() + "; cast it first");
        }
        if (!q.type().dtype().isFloating()) throw new GraphException(call + ": q is " + q.type().dtype() + "; it must be a floating dtype");
        long[] qs = q.type().shape().sizes(), ks = kT.type().shape().sizes(), vs = v.type().shape().sizes();
        if (ks[0] != qs[0] || vs[0] != qs[0])
            throw new GraphException(call + ": the batches differ (q " + qs[0] + ", kT " + ks[0] + ", v " + vs[0] + ")");
        if (ks[1] != qs[2]) throw new GraphException(call + ": kT's dimension 1 is " + ks[1] + " but q's head size is " + qs[2] + " (kT is [B, d, S])");
        if (vs[1] != ks[2]) throw new GraphException(call + ": v has " + vs[1] + " positions but kT " + ks[2] + " (v is [B, S, d])");
        if (vs[2] != qs[2]) throw new GraphException(call + ": v's head size is " + vs[2] + " but q's " + qs[2]);
        if (ks[2] < 1) throw new GraphException(call + ": the cache has no position");
        if (!Double.isFinite(scale)) throw new GraphException(call + ": the scale must be finite, not " + scale);
        Position.check(call, at);
        return List.of(q.type());
    }

    /** A position outside the cache, with the positions that are valid. */
    @Override public String refusal(List<HostTensor> inputs, OpAttrs attrs) {
        long len = inputs.get(1).shape()[2], at = inputs.get(3).getLong(0);
        if (at >= 0 && at < len) return null;
        return "position " + at + " is outside the " + len + " positions of the cache; it must be 0 to " + (len - 1);
    }

    /** In float64: the scores, their softmax and the weighted values, rounded once to q's dtype where stored. */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor q = inputs.get(0), ks = inputs.get(1), vs = inputs.get(2), out = outputs.getFirst();
        int batch = (int) q.shape()[0], rows = (int) q.shape()[1], d = (int) q.shape()[2], len = (int) ks.shape()[2];
        int last = (int) inputs.get(3).getLong(0);
        double scale = attrs.real("scale");
        double[] score = new double[last + 1];
        for (int b = 0; b < batch; b++)
            for (int r = 0; r < rows; r++) {
                long qRow = ((long) b * rows + r) * d;
                double max = Double.NEGATIVE_INFINITY, sum = 0;
                for (int s = 0; s <= last; s++) {
                    double dot = 0;
                    for (int e = 0; e < d; e++) dot += q.get(qRow + e) * ks.get(((long) b * d + e) * len + s);
                    score[s] = scale * dot;
                    max = Math.max(max, score[s]);
                }
                for (int s = 0; s <= last; s++) sum += score[s] = Math.exp(score[s] - max);
                for (int e = 0; e < d; e++) {
                    double acc = 0;
                    for (int s = 0; s <= last; s++) acc += score[s] * vs.get(((long) b * len + s) * d + e);
                    out.set(qRow + e, acc / sum);
                }
            }
    }

    /** In float32, as the GPU's kernel: the scores, their softmax and the weighted values; the result rounded once. */
    @Override public void host(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor q = inputs.get(0), ks = inputs.get(1), vs = inputs.get(2), out = outputs.getFirst();
        int batch = (int) q.shape()[0], rows = (int) q.shape()[1], d = (int) q.shape()[2], len = (int) ks.shape()[2];
        int last = (int) inputs.get(3).getLong(0);
        float scale = (float) attrs.real("scale");
        float[] score = new float[last + 1];
        for (int b = 0; b < batch; b++)
            for (int r = 0; r < rows; r++) {
                long qRow = ((long) b * rows + r) * d;
                float max = Float.NEGATIVE_INFINITY, sum = 0;
                for (int s = 0; s <= last; s++) {
                    float dot = 0;
                    for (int e = 0; e < d; e++) dot += (float) q.get(qRow + e) * (float) ks.get(((long) b * d + e) * len + s);
                    score[s] = scale * dot;
                    max = Math.max(max, score[s]);
                }
                for (int s = 0; s <= last; s++) sum += score[s] = (float) Math.exp(score[s] - max);
                for (int e = 0; e < d; e++) {
                    float acc = 0;
                    for (int s = 0; s <= last; s++) acc += score[s] * (float) vs.get(((long) b * len + s) * d + e);
                    out.set(qRow + e, acc / sum);
                }
            }
    }
}
