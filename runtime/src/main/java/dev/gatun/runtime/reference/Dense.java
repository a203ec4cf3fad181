package dev.gatun.runtime.reference;

import dev.gatun.ir.DType;
import dev.gatun.runtime.DTypes;
import dev.gatun.runtime.NDArray;

import java.util.Arrays;

/**
 * The interpreter's working value: a dtype, a shape and row-major doubles already rounded to the dtype.
 * Doubles hold every value of every dtype exactly except int64 beyond 2^53, which the reference accepts.
 */
record Dense(DType dtype, long[] shape, double[] data) {

    static Dense zeros(DType dtype, long[] shape) { return new Dense(dtype, shape, new double[size(shape)]); }

    static Dense of(NDArray a) { return new Dense(a.dtype(), a.shape(), a.toDoubleArray()); }

    NDArray toNDArray() { return NDArray.of(dtype, data, shape); }

    int numel() { return data.length; }

    int rank() { return shape.length; }

    /** Rounds every element to {@code t}: the one place results become the node's dtype. */
    Dense roundedTo(DType t) {
        double[] out = new double[data.length];
        for (int i = 0; i < out.length; i++) out[i] = DTypes.round(data[i], t);
        return new Dense(t, shape, out);
    }

    Dense withShape(long[] newShape) { return new Dense(dtype, newShape, data); }

    static int size(long[] shape) {
        long n = 1;
        for (long s : shape) n = Math.multiplyExact(n, s);
        if (n > Integer.MAX_VALUE - 8) throw new IllegalArgumentException("the reference interpreter handles at most 2^31 elements, got " + n);
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

    /** The value of this array at every position of {@code out}, following broadcast strides. */
    double[] broadcastTo(long[] out) {
        long[] st = broadcastStrides(out);
        int n = size(out);
        double[] r = new double[n];
        long[] idx = new long[out.length];
        long src = 0;
        for (int i = 0; i < n; i++) {
            r[i] = data[(int) src];
            // odometer increment over out's shape, moving src along the broadcast strides
            for (int d = out.length - 1; d >= 0; d--) {
                if (++idx[d] < out[d]) { src += st[d]; break; }
                src -= st[d] * (out[d] - 1);
                idx[d] = 0;
            }
        }
        return r;
    }

    @Override public String toString() { return dtype + Arrays.toString(shape); }
}
