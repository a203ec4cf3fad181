package dev.gatun.ir.ops;

import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.Arrays;
import java.util.List;

/**
 * {@code gather}: elements of {@code x} picked along one dimension by an index tensor, as {@code torch.gather(x, dim,
 * index)}. The result has the index's shape and x's dtype; for rank 3 and dim 1, {@code out[i][j][k] =
 * x[i][index[i][j][k]][k]}. The index is i32 or i64 (PyTorch takes int64 only) of x's rank, with
 * {@code index.size(d) <= x.size(d)} for every {@code d != dim}; {@code dim} is {@code -rank} to {@code rank - 1}.
 * Elements are copied exactly (integers as longs, floating elements as doubles).
 *
 * <p>An index outside {@code [0, x.size(dim))} is an error at run time, never a read elsewhere (no wrapping of negative
 * indices, as in PyTorch): the op {@link #checksValues}, and {@link #refusal} names the value, its position in the index
 * and the bound. The CUDA backend's kernel ({@code CudaGatherScatter}) checks on the device and stops the call with the
 * same words.
 *
 * <p>The walk over an index tensor, its checks and its refusal are shared with {@link ScatterAdd}, the op's inverse for
 * mixture-of-experts dispatch and combine: they live here, as package-private statics, so each op stays one file.
 */
public final class Gather implements OpSpec {
    public static final Gather SPEC = new Gather();

    private Gather() {}

    @Override public String name() { return "gather"; }

    @Override public List<Attribute> attributes() { return List.of(new Attribute("dim", Attribute.Kind.INT)); }

    @Override public List<TensorType> infer(List<Operand> inputs, OpAttrs attrs) {
        long dim = attrs.integer("dim");
        if (inputs.size() != 2) throw new GraphException("gather takes a tensor and an index, got " + inputs.size() + " tensors");
        Operand x = inputs.get(0), index = inputs.get(1);
        String call = "gather(" + x.describe() + ", dim=" + dim + ", " + index.describe() + ")";
        int d = checkDim(call, x, dim);
        checkIndex(call, x, index, d);
        return List.of(new TensorType(x.type().dtype(), index.type().shape()));
    }

    /** The dimension {@code dim} names in a tensor of {@code x}'s rank (negative counts from the end), or an error. */
    static int checkDim(String call, Operand x, long dim) {
        int rank = x.type().rank();
        if (rank < 1) throw new GraphException(call + ": " + x.label() + " is a scalar; it has no dimension to index along");
        if (dim < -rank || dim >= rank)
            throw new GraphException(call + ": dim=" + dim + " is outside " + (-rank) + " to " + (rank - 1) + " for " + x.label() + " of rank " + rank);
        return (int) (dim < 0 ? dim + rank : dim);
    }

    /** The index: i32 or i64, x's rank, and no larger than x in every dimension but {@code dim}. */
    static void checkIndex(String call, Operand x, Operand index, int dim) {
        DType t = index.type().dtype();
        if (t != DType.INT32 && t != DType.INT64)
            throw new GraphException(call + ": the index " + index.label() + " is " + t + "; it must be i64 (or i32)");
        if (index.type().rank() != x.type().rank())
            throw new GraphException(call + ": the index " + index.label() + " has rank " + index.type().rank() + " and " + x.label()
                    + " rank " + x.type().rank() + "; they must have the same rank");
        for (int d = 0; d < x.type().rank(); d++) if (d != dim) checkNotLarger(call, index, x, d, "every dimension but dim=" + dim);
    }

    /** {@code small.size(d) <= large.size(d)}: both static, or the same symbol. */
    static void checkNotLarger(String call, Operand small, Operand large, int d, String where) {
        Dim a = small.type().shape().dim(d), b = large.type().shape().dim(d);
        if (a.equals(b)) return;
        if (!a.isStatic() || !b.isStatic())
            throw new GraphException(call + ": dimension " + d + " of " + small.label() + " is " + a + " and of " + large.label() + " " + b
                    + "; symbolic sizes must be the same symbol");
        if (a.size() > b.size())
            throw new GraphException(call + ": dimension " + d + " of " + small.label() + " is " + a.size() + ", larger than " + b.size()
                    + " of " + large.label() + "; the index may be no larger than " + large.label() + " in " + where);
    }

    /** The dimension {@code attrs}' dim names in a tensor of rank {@code rank}. */
    static int dim(OpAttrs attrs, int rank) {
        long dim = attrs.integer("dim");
        return (int) (dim < 0 ? dim + rank : dim);
    }

    @Override public boolean checksValues() { return true; }

    @Override public String refusal(List<HostTensor> inputs, OpAttrs attrs) {
        HostTensor x = inputs.get(0);
        return outOfRange(inputs.get(1), x.shape()[dim(attrs, x.shape().length)], dim(attrs, x.shape().length), "x");
    }

    /** The first index value outside {@code [0, bound)}, with its position, or null where there is none. */
    static String outOfRange(HostTensor index, long bound, int dim, String of) {
        for (long k = 0; k < index.numel(); k++) {
            long v = index.getLong(k);
            if (v < 0 || v >= bound)
                return "index " + v + " at position " + k + " " + Arrays.toString(unravel(k, index.shape())) + " of the index is outside the "
                        + bound + " elements of dimension " + dim + " of " + of + (bound == 0 ? " (it has none)" : " (valid: 0 to " + (bound - 1) + ")");
        }
        return null;
    }

    /** The row-major coordinates of element {@code k} of a tensor of {@code shape}. */
    static long[] unravel(long k, long[] shape) {
        long[] at = new long[shape.length];
        for (int d = shape.length - 1; d >= 0; d--) {
            at[d] = k % shape[d];
            k /= shape[d];
        }
        return at;
    }

    /** The row-major position of the element at {@code at} in a tensor of {@code shape}. */
    static long ravel(long[] at, long[] shape) {
        long k = 0;
        for (int d = 0; d < shape.length; d++) k = k * shape[d] + at[d];
        return k;
    }

    /** Each element of the index unravelled to coordinates, the dim-th replaced by its value, and that element of x copied. */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.get(0), index = inputs.get(1), out = outputs.getFirst();
        int dim = dim(attrs, x.shape().length);
        for (long k = 0; k < index.numel(); k++) {
            long[] at = unravel(k, index.shape());
            at[dim] = index.getLong(k);
            x.copyTo(ravel(at, x.shape()), out, k, 1);
        }
    }

    /** One pass over the index with x's offset kept by strides: no division per element. */
    @Override public void host(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.get(0), index = inputs.get(1), out = outputs.getFirst();
        var walk = new Walk(index.shape(), x.shape(), dim(attrs, x.shape().length));
        boolean floating = x.dtype().isFloating();
        for (long k = 0; k < index.numel(); k++, walk.next()) {
            long from = walk.base() + index.getLong(k) * walk.dimStride();
            if (floating) out.set(k, x.get(from));
            else out.setLong(k, x.getLong(from));
        }
    }

    /**
     * Row-major steps over an index of shape {@code shape} keeping the offset, in a tensor of shape {@code into}, of the
     * element with the same coordinates but 0 along {@code dim}: the offset an index value times {@link #dimStride} adds to.
     */
    static final class Walk {
        private final long[] shape, strides, at;
        private final int dim;
        private long base;

        Walk(long[] shape, long[] into, int dim) {
            this.shape = shape;
            this.dim = dim;
            this.at = new long[shape.length];
            this.strides = new long[into.length];
            long s = 1;
            for (int d = into.length - 1; d >= 0; d--) {
                strides[d] = s;
                s *= into[d];
            }
        }

        long base() { return base; }

        long dimStride() { return strides[dim]; }

        /** The current index element's own coordinate along {@code dim}. */
        long along() { return at[dim]; }

        void next() {
            for (int d = shape.length - 1; d >= 0; d--) {
                if (d != dim) base += strides[d];
                if (++at[d] < shape[d]) return;
                if (d != dim) base -= strides[d] * shape[d];
                at[d] = 0;
            }
        }
    }
}
