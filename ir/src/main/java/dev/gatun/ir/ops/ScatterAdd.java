package dev.gatun.ir.ops;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.List;

/**
 * {@code scatter_add}: a copy of {@code x} with the elements of {@code src} added at positions an index gives along one
 * dimension, as the out-of-place {@code x.scatter_add(dim, index, src)} of PyTorch; for rank 3 and dim 0,
 * {@code out[index[i][j][k]][j][k] += src[i][j][k]} for every element of the index. The result has x's type. The index
 * is i32 or i64 (PyTorch takes int64 only) of x's rank, {@code src} has x's dtype and rank, and
 * {@code index.size(d) <= src.size(d)} for every d and {@code index.size(d) <= x.size(d)} for every {@code d != dim}
 * (only src's elements at the index's coordinates are added; equal shapes are the usual case). x is a number, not bool.
 *
 * <p><b>Order.</b> Where indices repeat, the sums accumulate in the index's row-major order, each addition rounded to
 * x's dtype (integers wrap as two's complement), so a floating result is deterministic: element {@code p} of the
 * result is {@code (((x[p] + src[a]) + src[b]) + ...)} for the index positions {@code a < b < ...} that point at it,
 * as PyTorch computes it on a CPU (its atomics on a GPU add in no fixed order).
 *
 * <p>An index outside {@code [0, x.size(dim))} is an error at run time, never a write elsewhere: the op
 * {@link #checksValues}, and {@link #refusal} names the value, its position in the index and the bound. The CUDA
 * backend's kernel ({@code CudaGatherScatter}) adds in this order too (a thread per run of targets of one column, no atomics), so
 * its result is this body's bit for bit; it checks the index on the device and stops the call with the same words.
 */
public final class ScatterAdd implements OpSpec {
    public static final ScatterAdd SPEC = new ScatterAdd();

    private ScatterAdd() {}

    @Override public String name() { return "scatter_add"; }

    @Override public List<Attribute> attributes() { return List.of(new Attribute("dim", Attribute.Kind.INT)); }

    @Override public List<TensorType> infer(List<Operand> inputs, OpAttrs attrs) {
        long dim = attrs.integer("dim");
        if (inputs.size() != 3) throw new GraphException("scatter_add takes a tensor, an index and a source, got " + inputs.size() + " tensors");
        Operand x = inputs.get(0), index = inputs.get(1), src = inputs.get(2);
        String call = "scatter_add(" + x.describe() + ", dim=" + dim + ", " + index.describe() + ", " + src.describe() + ")";
        int d = Gather.checkDim(call, x, dim);
        if (x.type().dtype() == DType.BOOL) throw new GraphException(call + ": " + x.label() + " is bool; cast it to a number first");
        if (src.type().dtype() != x.type().dtype())
            throw new GraphException(call + ": the source " + src.label() + " is " + src.type().dtype() + " and " + x.label() + " "
                    + x.type().dtype() + "; they must have the same dtype (cast the source)");
        if (src.type().rank() != x.type().rank())
            throw new GraphException(call + ": the source " + src.label() + " has rank " + src.type().rank() + " and " + x.label()
                    + " rank " + x.type().rank() + "; they must have the same rank");
        Gather.checkIndex(call, x, index, d);
        for (int i = 0; i < x.type().rank(); i++) Gather.checkNotLarger(call, index, src, i, "every dimension");
        return List.of(x.type());
    }

    @Override public boolean checksValues() { return true; }

    @Override public String refusal(List<HostTensor> inputs, OpAttrs attrs) {
        HostTensor x = inputs.get(0);
        int dim = Gather.dim(attrs, x.shape().length);
        return Gather.outOfRange(inputs.get(1), x.shape()[dim], dim, "x");
    }

    /** x copied; then, for each index element in row-major order, its coordinates with the dim-th replaced by its value get src's element added. */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.get(0), index = inputs.get(1), src = inputs.get(2), out = outputs.getFirst();
        int dim = Gather.dim(attrs, x.shape().length);
        x.copyTo(0, out, 0, x.numel());
        for (long k = 0; k < index.numel(); k++) {
            long[] at = Gather.unravel(k, index.shape());
            long from = Gather.ravel(at, src.shape());
            at[dim] = index.getLong(k);
            add(out, Gather.ravel(at, x.shape()), src, from);
        }
    }

    /** The same additions in the same order, with both offsets kept by strides: no division per element. */
    @Override public void host(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.get(0), index = inputs.get(1), src = inputs.get(2), out = outputs.getFirst();
        int dim = Gather.dim(attrs, x.shape().length);
        x.copyTo(0, out, 0, x.numel());
        var into = new Gather.Walk(index.shape(), x.shape(), dim);
        var from = new Gather.Walk(index.shape(), src.shape(), dim);
        for (long k = 0; k < index.numel(); k++, into.next(), from.next()) {
            long i = index.getLong(k) * into.dimStride() + into.base();
            add(out, i, src, from.base() + from.along() * from.dimStride());
        }
    }

    private static void add(HostTensor out, long at, HostTensor src, long from) {
        if (out.dtype().isFloating()) out.set(at, out.get(at) + src.get(from));
        else out.setLong(at, out.getLong(at) + src.getLong(from));
    }
}
