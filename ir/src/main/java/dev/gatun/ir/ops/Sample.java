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
import java.util.StringJoiner;

/**
 * {@code sample}: one token drawn from each row of logits, on the device. Input 0 the logits [B, V] (f32, f16 or bf16;
 * cast f64 first), input 1 each row's parameters [B, 5] f32 ({@link #PARAMETERS}: temperature, top_k, top_p, min_p,
 * repetition_penalty), input 2 each row's seed [B] i64, input 3 each row's step (i32 or i64, one value for every row or
 * one a row: the position of the token whose logits these are), input 4 each row's context [B, H] (i32 or i64: the
 * tokens seen so far, an entry outside [0, V) none). The result is i64 [B]. The parameters are data, so they change
 * from call to call without a new compile. Per row, each element's float32 value x:
 * <ol>
 *   <li>repetition penalty r (where r &gt; 0 and r != 1): a token of the context has x / r where x &gt; 0, else x * r
 *   (float32 arithmetic; as transformers, once however often the token occurs);</li>
 *   <li>temperature T: where !(T &gt; 0), or where the largest value is not finite (NaN, +inf, or every value -inf),
 *   the result is argmax of the penalized values, exactly;</li>
 *   <li>top_k k (1 &lt;= k &lt; V, else off): the values at least the k-th largest are kept (ties with it too);</li>
 *   <li>top_p p (p &lt; 1, else off): of those, a value is kept where the probability (softmax of value / T over the
 *   kept) of the values strictly larger than it is below p; the largest always stays;</li>
 *   <li>min_p m (m &gt; 0, else off): of those, a value is kept where exp((value - largest) / T) &gt;= min(m, 1);</li>
 *   <li>the token is the kept element with the largest (value - largest) / T + g, g = -log(-log(u)) with u a uniform
 *   in (0, 1) hashed from (seed, step, column) ({@link TokenSampling}: splitmix64's finalizer), the smaller index on a
 *   tie: a draw from the softmax over the kept elements (the Gumbel-max trick), the same for the same seed and step on
 *   any backend and at any row of a batch.</li>
 * </ol>
 * The probabilities are exp((value - largest) / T) in float64. The filters come in transformers' order (temperature,
 * top-k, top-p, min-p, each on what the one before kept).
 *
 * <p>The reference and the host body are {@link TokenSampling}'s rule row by row; the CUDA backend's kernel
 * ({@code CudaSample}) restates it. The JSON form is {@code "op": "sample"} with no field of its own, as before the op
 * was registered.
 */
public final class Sample implements OpSpec {
    public static final Sample SPEC = new Sample();

    /** The sampling parameters' columns, in order. */
    public static final List<String> PARAMETERS = List.of("temperature", "top_k", "top_p", "min_p", "repetition_penalty");

    private Sample() {}

    @Override public String name() { return "sample"; }

    @Override public List<Attribute> attributes() { return List.of(); }

    @Override public List<TensorType> infer(List<Operand> inputs, OpAttrs attrs) {
        if (inputs.size() != 5)
            throw new GraphException("sample takes logits, parameters, seeds, steps and a context, got " + inputs.size() + " tensors");
        Operand logits = inputs.get(0), params = inputs.get(1), seeds = inputs.get(2), steps = inputs.get(3), context = inputs.get(4);
        var all = new StringJoiner(", ");
        inputs.forEach(x -> all.add(x.describe()));
        String call = "sample(" + all + ")";
        for (Operand x : inputs)
            if (!x.type().shape().isStatic()) throw new GraphException(call + ": " + x.label() + " must have a static shape, not " + x.type().shape());
        if (logits.type().rank() != 2) throw new GraphException(call + ": the logits " + logits.label() + " have " + logits.type().rank() + " dimensions; they are [B, V]");
        DType t = logits.type().dtype();
        if (t != DType.FLOAT32 && !t.isHalf())
            throw new GraphException(call + ": the logits are " + t + "; they must be f32, f16 or bf16" + (t == DType.FLOAT64 ? " (cast them to f32 first)" : ""));
        long b = logits.type().shape().sizes()[0], v = logits.type().shape().sizes()[1];
        if (v < 1) throw new GraphException(call + ": the logits' rows are empty; there is no token to draw");
        if (v > Integer.MAX_VALUE) throw new GraphException(call + ": rows of " + v + " logits; at most 2^31 - 1 are supported");
        expect(call, params, DType.FLOAT32, new long[]{b, PARAMETERS.size()}, "the parameters", " (a row's " + String.join(", ", PARAMETERS) + ")");
        expect(call, seeds, DType.INT64, new long[]{b}, "the seeds", " (one a row)");
        if (steps.type().dtype() != DType.INT32 && steps.type().dtype() != DType.INT64)
            throw new GraphException(call + ": the steps " + steps.label() + " are " + steps.type().dtype() + "; they must be i32 or i64");
        long n = steps.type().shape().numel();
        if (steps.type().rank() > 1 || (n != 1 && n != b))
            throw new GraphException(call + ": the steps " + steps.label() + " are " + steps.type().shape() + "; they are one value or one a row ([" + b + "])");
        if (context.type().dtype() != DType.INT32 && context.type().dtype() != DType.INT64)
            throw new GraphException(call + ": the context " + context.label() + " is " + context.type().dtype() + "; it must be i32 or i64");
        if (context.type().rank() != 2 || context.type().shape().sizes()[0] != b)
            throw new GraphException(call + ": the context " + context.label() + " is " + context.type().shape() + "; it is [" + b + ", H] (H tokens a row, -1 for none)");
        return List.of(new TensorType(DType.INT64, new Shape(List.of(Dim.of(b)))));
    }

    private static void expect(String call, Operand x, DType dtype, long[] shape, String what, String why) {
        var want = new TensorType(dtype, Shape.of(shape));
        if (!x.type().equals(want))
            throw new GraphException(call + ": " + what + " " + x.label() + " are " + x.type() + "; they must be " + want + why);
    }

    /** Each row's token by {@link TokenSampling#sample}: its logits as float32, its parameters, seed, step and context. */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor logits = inputs.get(0), params = inputs.get(1), seeds = inputs.get(2), steps = inputs.get(3), context = inputs.get(4);
        HostTensor out = outputs.getFirst();
        int rows = (int) logits.shape()[0], cols = (int) logits.shape()[1], h = (int) context.shape()[1];
        boolean oneStep = steps.numel() == 1;
        float[] x = new float[cols], p = new float[TokenSampling.PARAMETERS];
        boolean[] seen = new boolean[cols];
        for (int r = 0; r < rows; r++) {
            for (int j = 0; j < cols; j++) x[j] = (float) logits.get((long) r * cols + j);
            for (int j = 0; j < p.length; j++) p[j] = (float) params.get((long) r * p.length + j);
            Arrays.fill(seen, false);
            for (int j = 0; j < h; j++) {
                long id = context.getLong((long) r * h + j);
                if (id >= 0 && id < cols) seen[(int) id] = true;
            }
            out.setLong(r, TokenSampling.sample(x, p, seeds.getLong(r), steps.getLong(oneStep ? 0 : r), seen));
        }
    }
}
