package dev.gatun.runtime.reference;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.runtime.DTypes;
import dev.gatun.runtime.NDArray;

import java.util.Arrays;

/**
 * The interpreter's working value: a dtype, a shape and row-major elements already rounded to the dtype, held in the
 * lane of the dtype ({@link DTypes#isExact}): doubles for the floating dtypes, longs for the integer dtypes and bool,
 * so an int64 keeps all its 64 bits. Ops that only move elements (views, concatenation, lookups, updates, gathers) move
 * them by position ({@link #pick}, {@link #copyTo}) and never convert them.
 */
final class Dense {
    private final DType dtype;
    private final long[] shape;
    /** The elements of a floating dtype, else null. */
    private final double[] floats;
    /** The elements of an integer dtype or bool, else null. */
    private final long[] ints;

    private Dense(DType dtype, long[] shape, double[] floats, long[] ints) {
        this.dtype = dtype;
        this.shape = shape;
        this.floats = floats;
        this.ints = ints;
    }

    /** Doubles already rounded to floating {@code t}. */
    static Dense floats(DType t, long[] shape, double[] values) {
        if (DTypes.isExact(t)) throw new IllegalStateException(t + " values are longs, not doubles");   // an interpreter bug, never the input
        return new Dense(t, shape, values, null);
    }

    /** Longs already wrapped to integer (or bool) {@code t}. */
    static Dense ints(DType t, long[] shape, long[] values) {
        if (!DTypes.isExact(t)) throw new IllegalStateException(t + " values are doubles, not longs");   // an interpreter bug, never the input
        return new Dense(t, shape, null, values);
    }

    /** Doubles computed for a result of dtype {@code t}, rounded to it ({@link DTypes#round}): where results become the node's dtype. */
    static Dense rounded(DType t, long[] shape, double[] values) {
        if (DTypes.isExact(t)) {
            long[] out = new long[values.length];
            for (int i = 0; i < out.length; i++) out[i] = DTypes.toLong(values[i], t);
            return ints(t, shape, out);
        }
        double[] out = new double[values.length];
        for (int i = 0; i < out.length; i++) out[i] = DTypes.round(values[i], t);
        return floats(t, shape, out);
    }

    static Dense zeros(DType t, long[] shape) {
        int n = size(shape);
        return DTypes.isExact(t) ? ints(t, shape, new long[n]) : floats(t, shape, new double[n]);
    }

    static Dense of(NDArray a) {
        return DTypes.isExact(a.dtype()) ? ints(a.dtype(), a.shape(), a.toLongArray()) : floats(a.dtype(), a.shape(), a.toDoubleArray());
    }

    NDArray toNDArray() {
        if (floats != null) return NDArray.of(dtype, floats, shape);
        NDArray a = NDArray.zeros(dtype, shape);
        for (int i = 0; i < ints.length; i++) a.setLong(i, ints[i]);
        return a;
    }

    DType dtype() { return dtype; }

    long[] shape() { return shape; }

    int numel() { return floats != null ? floats.length : ints.length; }

    int rank() { return shape.length; }

    /** Whether the elements are exact longs (an integer dtype or bool). */
    boolean isExact() { return ints != null; }

    /** Element i as a double (an int64 beyond 2^53 rounds, as PyTorch's promotion to a floating type does). */
    double get(int i) { return floats != null ? floats[i] : (double) ints[i]; }

    /** Element i as a long: exact for integers, a floating value truncated as a cast to int64. */
    long getLong(int i) { return ints != null ? ints[i] : DTypes.toLong(floats[i], DType.INT64); }

    /** Every element as a double (a copy for integers): the operand of floating arithmetic. */
    double[] doubles() {
        if (floats != null) return floats;
        double[] out = new double[ints.length];
        for (int i = 0; i < out.length; i++) out[i] = ints[i];
        return out;
    }

    /** The elements of an integer dtype or bool. */
    long[] longs() {
        if (ints == null) throw new IllegalStateException(dtype + " values are doubles");
        return ints;
    }

    /** A cast to {@code t}: integers wrap or round once to a float, floats round or truncate ({@link DTypes}). */
    Dense roundedTo(DType t) {
        if (floats != null) return rounded(t, shape, floats);
        if (DTypes.isExact(t)) {
            long[] out = new long[ints.length];
            for (int i = 0; i < out.length; i++) out[i] = DTypes.wrap(ints[i], t);
            return ints(t, shape, out);
        }
        double[] out = new double[ints.length];
        for (int i = 0; i < out.length; i++) out[i] = DTypes.fromLong(ints[i], t);
        return floats(t, shape, out);
    }

    Dense withShape(long[] newShape) { return new Dense(dtype, newShape, floats, ints); }

    /** A value of {@code newShape} whose element i is this value's element {@code from[i]}. */
    Dense pick(long[] newShape, int[] from) {
        if (floats != null) {
            double[] out = new double[from.length];
            for (int i = 0; i < out.length; i++) out[i] = floats[from[i]];
            return floats(dtype, newShape, out);
        }
        long[] out = new long[from.length];
        for (int i = 0; i < out.length; i++) out[i] = ints[from[i]];
        return ints(dtype, newShape, out);
    }

    /** A copy whose elements the caller may overwrite ({@link #copyTo} into it). */
    Dense copy() { return new Dense(dtype, shape, floats == null ? null : floats.clone(), ints == null ? null : ints.clone()); }

    /** Copies {@code length} elements from position {@code from} to position {@code at} of {@code dst} (same dtype). */
    void copyTo(int from, Dense dst, int at, int length) {
        if (dst.dtype != dtype) throw new IllegalStateException("copying " + dtype + " elements into " + dst.dtype);   // an interpreter bug
        if (floats != null) System.arraycopy(floats, from, dst.floats, at, length);
        else System.arraycopy(ints, from, dst.ints, at, length);
    }

    static int size(long[] shape) {
        long n = 1;
        for (long s : shape) n = Math.multiplyExact(n, s);
        if (n > Integer.MAX_VALUE - 8)
            throw new GraphException("the reference interpreter holds a tensor in one Java array: at most 2^31 - 9 elements, not the " + n + " of "
                    + java.util.Arrays.toString(shape) + "; check this graph at smaller shapes");
        return (int) n;
    }

    /** Row-major strides of a shape, in elements. */
    static long[] strides(long[] shape) {
        long[] s = new long[shape.length];
        long acc = 1;
        for (int i = shape.length - 1; i >= 0; i--) {
            s[i] = acc;
            acc *= shape[i];
        }
        return s;
    }

    /**
     * Strides that read this value broadcast to {@code out}: dimensions it lacks or has as size 1 get
     * stride 0. The caller has checked that the shapes broadcast.
     */
    long[] broadcastStrides(long[] out) {
        long[] own = strides(shape), s = new long[out.length];
        int off = out.length - shape.length;
        for (int d = 0; d < shape.length; d++) s[d + off] = shape[d] == 1 && out[d + off] != 1 ? 0 : own[d];
        return s;
    }

    /** This value at every position of {@code out}, following broadcast strides. */
    Dense broadcastTo(long[] out) { return pick(out, positions(out, broadcastStrides(out), 0)); }

    /** The positions a strided view {@code offset + sum(strides[d] * i_d)} of shape {@code shape} reads, in row-major order. */
    static int[] positions(long[] shape, long[] strides, long offset) {
        int[] out = new int[size(shape)];
        long[] idx = new long[shape.length];
        long src = offset;
        for (int i = 0; i < out.length; i++) {
            out[i] = (int) src;
            // odometer increment over the shape, moving src along the strides
            for (int d = shape.length - 1; d >= 0; d--) {
                if (++idx[d] < shape[d]) { src += strides[d]; break; }
                src -= strides[d] * (shape[d] - 1);
                idx[d] = 0;
            }
        }
        return out;
    }

    @Override public String toString() { return dtype + Arrays.toString(shape); }
}
