package dev.gatun.ir.graph;

import dev.gatun.ir.DType;

/**
 * A tensor as a host implementation of a user op sees it: element access by row-major index, as doubles or, exact for
 * the integer dtypes and bool (int64 beyond 2^53 too), as longs.
 */
public interface HostTensor {
    DType dtype();

    long[] shape();

    long numel();

    double get(long index);

    void set(long index, double value);

    /** The element as a long; an implementation holding int64 must override this to keep values beyond 2^53 exact. */
    default long getLong(long index) { return (long) get(index); }

    /** Writes an integer; an implementation holding int64 must override this to keep values beyond 2^53 exact. */
    default void setLong(long index, long value) { set(index, value); }

    /**
     * Copies {@code count} elements from index {@code from} on into {@code to} from index {@code at} on, exactly:
     * integers and bool as longs, floating elements as doubles (which hold every value of a narrower floating dtype).
     * An implementation may copy bytes where both tensors hold the same dtype.
     */
    default void copyTo(long from, HostTensor to, long at, long count) {
        boolean floating = dtype().isFloating();
        for (long i = 0; i < count; i++) {
            if (floating) to.set(at + i, get(from + i));
            else to.setLong(at + i, getLong(from + i));
        }
    }
}
