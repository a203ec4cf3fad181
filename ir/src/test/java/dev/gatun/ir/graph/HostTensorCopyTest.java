package dev.gatun.ir.graph;

import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/** {@link HostTensor#copyTo}'s default, element by element: exact for int64 past 2^53 and for every double. */
class HostTensorCopyTest {
    /** A tensor over plain arrays: longs for the integer dtypes, doubles otherwise. */
    record Plain(DType dtype, long[] longs, double[] doubles) implements HostTensor {
        static Plain of(DType t, int n) { return new Plain(t, new long[n], new double[n]); }
        @Override public long[] shape() { return new long[]{longs.length}; }
        @Override public long numel() { return longs.length; }
        @Override public double get(long i) { return dtype.isFloating() ? doubles[(int) i] : longs[(int) i]; }
        @Override public void set(long i, double v) { if (dtype.isFloating()) doubles[(int) i] = v; else longs[(int) i] = (long) v; }
        @Override public long getLong(long i) { return dtype.isFloating() ? (long) doubles[(int) i] : longs[(int) i]; }
        @Override public void setLong(long i, long v) { if (dtype.isFloating()) doubles[(int) i] = v; else longs[(int) i] = v; }
    }

    @Test
    void integersAndRealsAreCopiedExactlyToTheirPlace() {
        var from = Plain.of(DType.INT64, 5);
        for (int i = 0; i < 5; i++) from.longs()[i] = (1L << 60) + 2 * i + 1;   // odd: a double would round them
        var to = Plain.of(DType.INT64, 6);
        from.copyTo(1, to, 2, 3);
        assertThat(to.longs()).containsExactly(0, 0, (1L << 60) + 3, (1L << 60) + 5, (1L << 60) + 7, 0);

        var reals = Plain.of(DType.FLOAT64, 3);
        reals.doubles()[0] = Math.PI;
        reals.doubles()[1] = -0.0;
        reals.doubles()[2] = Double.MIN_VALUE;
        var into = Plain.of(DType.FLOAT64, 3);
        reals.copyTo(0, into, 0, 3);
        assertThat(into.doubles()).containsExactly(Math.PI, -0.0, Double.MIN_VALUE);
        assertThat(Double.doubleToRawLongBits(into.doubles()[1])).isEqualTo(Double.doubleToRawLongBits(-0.0));
    }
}
