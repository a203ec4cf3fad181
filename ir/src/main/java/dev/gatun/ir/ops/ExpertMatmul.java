package dev.gatun.ir.ops;

import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.Arrays;
import java.util.List;

/**
 * {@code expert_matmul}: each token's product with the experts it is routed to, and with no other, the routed product
 * of a mixture-of-experts layer. The inputs: the activations {@code x}, [N, k, In] (one row per token and choice: the
 * SwiGLU output going into the down projection), [N, 1, In] or [N, In] (one row per token, used for each of its k
 * choices: the hidden state going into gate and up); the experts' weights {@code w} [E, Out, In], each expert in
 * {@code nn.Linear}'s [out, in] layout, stacked; the expert ids {@code ids} [N, k] i64 (what {@code topk} of the
 * router's probabilities gives). The result is [N, k, Out] of x's dtype:
 * {@code y[n, j, :] = w[ids[n, j]] @ x[n, j or 0, :]}.
 *
 * <p>Why an op and not a gather of weights and a batched product: a decode step's time is reading the weights, and a
 * step that computes every expert densely reads all E of them where its tokens need {@code N * k} (Mixtral's top-2 of
 * 8 at one token: a quarter). The op reads, for each (token, choice), that one expert's matrix and nothing else; the
 * ids are read where the product runs (on the device on a GPU), so no host synchronisation comes between the router
 * and the product, and a captured graph runs it as is. Pairs that share an expert read it again: the routed form pays
 * where {@code N * k < E}, the rule the decoder applies ({@code MixtureOfExperts}).
 *
 * <p>x and w have one floating dtype (f32, bf16, f16, or f64 on the host); In, Out, E and k are static, N may be
 * symbolic (the same symbol in x and ids). An id outside {@code [0, E)} is an error at run time, never a read
 * elsewhere: the op {@link #checksValues}, and {@link #refusal} names the id, its position in ids and the experts
 * (the CUDA kernel checks on the device and stops the call in the same words, {@link #outOfRange}). Sums are float64
 * in {@link #reference} and the host body and rounded once to the dtype; a GPU kernel sums in float32, as its dense
 * products do.
 */
public final class ExpertMatmul implements OpSpec {
    public static final ExpertMatmul SPEC = new ExpertMatmul();

    private ExpertMatmul() {}

    @Override public String name() { return "expert_matmul"; }

    @Override public List<Attribute> attributes() { return List.of(); }

    @Override public List<TensorType> infer(List<Operand> inputs, OpAttrs attrs) {
        if (inputs.size() != 3) throw new GraphException("expert_matmul takes x, w and ids, got " + inputs.size() + " tensors");
        Operand x = inputs.get(0), w = inputs.get(1), ids = inputs.get(2);
        String call = "expert_matmul(" + x.describe() + ", " + w.describe() + ", " + ids.describe() + ")";
        DType t = x.type().dtype();
        if (t != DType.F32 && t != DType.BF16 && t != DType.F16 && t != DType.F64)
            throw new GraphException(call + ": " + x.label() + " is " + t + "; expert_matmul takes f32, bf16, f16 or f64");
        if (w.type().dtype() != t)
            throw new GraphException(call + ": the weights " + w.label() + " are " + w.type().dtype() + " and " + x.label() + " " + t + "; cast one to the other's dtype");
        if (w.type().rank() != 3 || !w.type().shape().isStatic())
            throw new GraphException(call + ": the weights " + w.label() + " must be [experts, out, in] of static sizes (each expert's nn.Linear weight, stacked)");
        if (ids.type().dtype() != DType.INT64) throw new GraphException(call + ": the ids " + ids.label() + " are " + ids.type().dtype() + "; they must be i64 (as topk gives)");
        if (ids.type().rank() != 2 || !ids.type().shape().dim(1).isStatic())
            throw new GraphException(call + ": the ids " + ids.label() + " must be [tokens, k] with a static k");
        int xr = x.type().rank();
        if (xr != 2 && xr != 3) throw new GraphException(call + ": " + x.label() + " has rank " + xr + "; it must be [tokens, in], [tokens, 1, in] or [tokens, k, in]");
        long[] ws = w.type().shape().sizes();
        long k = ids.type().shape().dim(1).size();
        Dim tokens = x.type().shape().dim(0), in = x.type().shape().dim(xr - 1);
        if (!tokens.equals(ids.type().shape().dim(0)))
            throw new GraphException(call + ": " + x.label() + " has " + tokens + " tokens and the ids " + ids.label() + " " + ids.type().shape().dim(0) + "; one row of ids a token");
        if (!in.isStatic() || in.size() != ws[2])
            throw new GraphException(call + ": rows of " + x.label() + " have " + in + " elements and the experts' rows " + ws[2] + "; they must be the same (w is [experts, out, in])");
        if (xr == 3) {
            Dim choices = x.type().shape().dim(1);
            if (!choices.isStatic() || (choices.size() != 1 && choices.size() != k))
                throw new GraphException(call + ": " + x.label() + " has " + choices + " rows a token; 1 (one for all k choices) or k=" + k + " (one a choice)");
        }
        if (ws[0] < 1) throw new GraphException(call + ": " + w.label() + " has no experts");
        return List.of(new TensorType(t, new Shape(List.of(tokens, Dim.of(k), Dim.of(ws[1])))));
    }

    @Override public boolean checksValues() { return true; }

    @Override public String refusal(List<HostTensor> inputs, OpAttrs attrs) {
        HostTensor ids = inputs.get(2);
        long experts = inputs.get(1).shape()[0];
        for (long p = 0; p < ids.numel(); p++) {
            long e = ids.getLong(p);
            if (e < 0 || e >= experts) return outOfRange(e, p, ids.shape()[1], experts);
        }
        return null;
    }

    /**
     * The words of a refused id: {@code id} at position {@code position} of ids of {@code k} columns, outside
     * {@code experts}; the host's refusal and the CUDA backend's fault record say the same.
     */
    public static String outOfRange(long id, long position, long k, long experts) {
        return "expert id " + id + " at position " + position + " " + Arrays.toString(new long[]{position / k, position % k})
                + " of the ids is outside the " + experts + " experts of w (valid: 0 to " + (experts - 1) + ")";
    }

    /** For each token n and choice j: the dot product, in float64, of each row of expert ids[n, j] with x's row. */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.get(0), w = inputs.get(1), ids = inputs.get(2), y = outputs.getFirst();
        long tokens = ids.shape()[0], k = ids.shape()[1], out = w.shape()[1], in = w.shape()[2];
        long xRows = x.shape().length == 3 ? x.shape()[1] : 1;   // 1: the token's one row serves each choice
        for (long n = 0; n < tokens; n++)
            for (long j = 0; j < k; j++) {
                long e = ids.getLong(n * k + j), xo = (n * xRows + (xRows == 1 ? 0 : j)) * in, yo = (n * k + j) * out;
                for (long o = 0; o < out; o++) {
                    long wo = (e * out + o) * in;
                    double dot = 0;
                    for (long i = 0; i < in; i++) dot += x.get(xo + i) * w.get(wo + i);
                    y.set(yo + o, dot);
                }
            }
    }

    /** The same sums, x's row read once into an array for all of an expert's rows. */
    @Override public void host(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.get(0), w = inputs.get(1), ids = inputs.get(2), y = outputs.getFirst();
        long tokens = ids.shape()[0], k = ids.shape()[1], out = w.shape()[1];
        int in = (int) w.shape()[2];
        long xRows = x.shape().length == 3 ? x.shape()[1] : 1;
        double[] row = new double[in];
        for (long n = 0; n < tokens; n++)
            for (long j = 0; j < k; j++) {
                long e = ids.getLong(n * k + j), xo = (n * xRows + (xRows == 1 ? 0 : j)) * in, yo = (n * k + j) * out;
                for (int i = 0; i < in; i++) row[i] = x.get(xo + i);
                for (long o = 0; o < out; o++) {
                    long wo = (e * out + o) * in;
                    double dot = 0;
                    for (int i = 0; i < in; i++) dot += row[i] * w.get(wo + i);
                    y.set(yo + o, dot);
                }
            }
    }
}
