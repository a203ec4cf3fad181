package dev.gatun.runtime;

import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class NDArrayTest {

    /** Memory a factory made is the array's own (a GPU backend may page-lock it); wrapped memory never is. */
    @Test
    void ownsTheMemoryOfItsFactoriesNotWrappedMemory() {
        assertThat(NDArray.zeros(DType.FLOAT32, 4, 4).ownsMemory()).isTrue();
        assertThat(NDArray.of(new float[]{1, 2}, 2).ownsMemory()).isTrue();
        assertThat(NDArray.randn(DType.FLOAT32, 1, 8).to(DType.FLOAT64).ownsMemory()).isTrue();
        try (var arena = java.lang.foreign.Arena.ofConfined()) {
            assertThat(NDArray.wrap(DType.FLOAT32, arena.allocate(64), 4, 4).ownsMemory()).isFalse();
        }
    }

    @Test
    void factoriesFromJavaArraysKeepValuesAndShape() {
        var f = NDArray.of(new float[]{1, 2, 3, 4, 5, 6}, 2, 3);
        assertThat(f.dtype()).isEqualTo(DType.FLOAT32);
        assertThat(f.shape()).containsExactly(2, 3);
        assertThat(f.get(1, 2)).isEqualTo(6);
        assertThat(f.get(-1, 0)).isEqualTo(4);
        assertThat(f.toFloatArray()).containsExactly(1, 2, 3, 4, 5, 6);
        assertThat(NDArray.of(new double[]{0.1}, 1).toDoubleArray()).containsExactly(0.1);
        assertThat(NDArray.of(new int[]{-7, 8}, 2).toIntArray()).containsExactly(-7, 8);
        assertThat(NDArray.of(new long[]{Long.MAX_VALUE}, 1).toLongArray()).containsExactly(Long.MAX_VALUE);
        assertThat(NDArray.of(new byte[]{-128, 127}, 2).dtype()).isEqualTo(DType.INT8);
        assertThat(NDArray.of(new byte[]{-128, 127}, 2).toByteArray()).containsExactly(-128, 127);
        assertThat(NDArray.of(new boolean[]{true, false}, 2).toBooleanArray()).containsExactly(true, false);
        assertThat(NDArray.of(new boolean[]{true, false}, 2).segment().byteSize()).isEqualTo(2);
        assertThatThrownBy(() -> NDArray.of(new float[]{1, 2, 3}, 2, 2)).hasMessageContaining("3 values do not fill shape [2, 2]");
        assertThatThrownBy(() -> f.get(2, 0)).isInstanceOf(IndexOutOfBoundsException.class).hasMessageContaining("dimension 0");
    }

    @Test
    void float16RoundsToNearestEven() {
        var h = NDArray.zeros(DType.FLOAT16, 4);
        h.set(0, 1 + Math.pow(2, -11));      // halfway between 1 and the next half (1 + 2^-10): ties to even, 1
        h.set(1, 1 + 3 * Math.pow(2, -11));  // halfway between 1+2^-10 and 1+2^-9: ties to even, 1 + 2^-9
        h.set(2, 70000);                     // beyond the largest half (65504): infinity
        h.set(3, 1e-8);                      // below the smallest subnormal's half: zero
        assertThat(h.toDoubleArray()).containsExactly(1, 1 + Math.pow(2, -9), Double.POSITIVE_INFINITY, 0);
        assertThat(h.byteSize()).isEqualTo(8);
    }

    @Test
    void bfloat16RoundsToNearestEven() {
        var b = NDArray.zeros(DType.BFLOAT16, 5);
        b.set(0, 1 + Math.pow(2, -8));       // tie: stays 1 (even)
        b.set(1, 1 + 3 * Math.pow(2, -8));   // tie: rounds up to 1 + 2^-6 (even)
        b.set(2, 1 + Math.pow(2, -8) + Math.pow(2, -20)); // above the tie: up
        b.set(3, Double.NaN);
        b.set(4, 3.0e38);                    // inside bfloat16's range (it shares float32's exponent)
        double[] v = b.toDoubleArray();
        assertThat(v[0]).isEqualTo(1);
        assertThat(v[1]).isEqualTo(1 + Math.pow(2, -6));
        assertThat(v[2]).isEqualTo(1 + Math.pow(2, -7));
        assertThat(v[3]).isNaN();
        assertThat(v[4]).isCloseTo(3.0e38, org.assertj.core.data.Percentage.withPercentage(0.5));
        assertThat(DTypes.floatToBf16(1.0f)).isEqualTo((short) 0x3F80);
    }

    @Test
    void integerStoresTruncateTowardZeroAndBoolIsNonZero() {
        var i = NDArray.of(DType.INT32, new double[]{2.9, -2.9, 0.5}, 3);
        assertThat(i.toIntArray()).containsExactly(2, -2, 0);
        var b = NDArray.of(DType.BOOL, new double[]{0, -0.0, 0.1, Double.NaN}, 4);
        assertThat(b.toBooleanArray()).containsExactly(false, false, true, true);
        assertThat(NDArray.of(DType.INT8, new double[]{200}, 1).toIntArray()).containsExactly(-56); // wraps like a C cast
    }

    /** Values a double cannot hold (2^53 + 1) and the extremes; expected values from Java's own conversions. */
    static final long[] BIG = {(1L << 53) + 1, -(1L << 53) - 3, Long.MAX_VALUE, Long.MIN_VALUE, (1L << 60) + (1L << 36) + 1, 4_000_000_001L};

    @Test
    void int64ElementsReadAndWriteExactlyAsLongs() {
        var a = NDArray.zeros(DType.INT64, 2, 3);
        for (int i = 0; i < BIG.length; i++) a.setLong(i, BIG[i]);
        for (int i = 0; i < BIG.length; i++) assertThat(a.getLong(i)).isEqualTo(BIG[i]);
        assertThat(a.getLong(1, 0)).isEqualTo(Long.MIN_VALUE);
        assertThat(a.getLong(-1, -1)).isEqualTo(4_000_000_001L);
        assertThat(a.toLongArray()).containsExactly(BIG);
        var i32 = NDArray.zeros(DType.INT32, 2);
        i32.setLong(0, Long.MAX_VALUE);   // wraps as (int) does
        i32.setLong(1, 4_000_000_001L);
        assertThat(i32.toIntArray()).containsExactly((int) Long.MAX_VALUE, (int) 4_000_000_001L);
        var f32 = NDArray.zeros(DType.FLOAT32, 1);
        f32.setLong(0, BIG[4]);           // one rounding, not two through a double
        assertThat(f32.get(0)).isEqualTo((double) (float) BIG[4]);
        assertThat(NDArray.of(new double[]{2.9, -2.9, 1e30}, 3).getLong(2)).isEqualTo(Long.MAX_VALUE);
    }

    @Test
    void conversionsOfInt64AreExactCasts() {
        var a = NDArray.of(BIG, BIG.length);
        long[] asInt = new long[BIG.length], asByte = new long[BIG.length];
        for (int i = 0; i < BIG.length; i++) {
            asInt[i] = (int) BIG[i];
            asByte[i] = (byte) BIG[i];
        }
        assertThat(a.to(DType.INT32).toLongArray()).containsExactly(asInt);
        assertThat(a.to(DType.INT8).toLongArray()).containsExactly(asByte);
        assertThat(a.toIntArray()).containsExactly(java.util.Arrays.stream(asInt).mapToInt(x -> (int) x).toArray());
        assertThat(a.to(DType.INT32).to(DType.INT64).toLongArray()).containsExactly(asInt);
        for (int i = 0; i < BIG.length; i++) {
            assertThat(a.to(DType.FLOAT32).get(i)).as("%d to f32", BIG[i]).isEqualTo((double) (float) BIG[i]);
            assertThat(a.to(DType.FLOAT64).get(i)).as("%d to f64", BIG[i]).isEqualTo((double) BIG[i]);
        }
        assertThat(NDArray.of(new double[]{0x1p62, -0x1p63, 1e19, Double.NaN}, 4).to(DType.INT64).toLongArray())
                .containsExactly(1L << 62, Long.MIN_VALUE, Long.MAX_VALUE, 0);
    }

    @Test
    void int64ArraysCompareAndPrintTheirExactValues() {
        var a = NDArray.of(new long[]{1L << 53, Long.MAX_VALUE}, 2);
        var b = NDArray.of(new long[]{(1L << 53) + 1, Long.MAX_VALUE}, 2);
        assertThat(a.mismatch(b, 0, 0)).isEqualTo("element 0 [0]: 9007199254740992 vs 9007199254740993 (|diff| 1 > 0.0)");
        assertThat(a.allClose(b, 0, 1)).isTrue();
        assertThat(NDArray.of(new long[]{Long.MIN_VALUE}, 1).mismatch(NDArray.of(new long[]{Long.MAX_VALUE}, 1), 0, 1e18)).contains("|diff| 1.8446744073709552E19");
        assertThat(b.toString()).isEqualTo("NDArray i64[2] [   9007199254740993, 9223372036854775807]");   // padded to one width
    }

    @Test
    void fullRandomAndConversions() {
        assertThat(NDArray.full(DType.FLOAT64, 2.5, 2, 2).toDoubleArray()).containsOnly(2.5);
        assertThat(NDArray.scalar(DType.INT64, 3).shape()).isEmpty();
        assertThat(NDArray.scalar(DType.INT64, 3).get(0)).isEqualTo(3);
        var r1 = NDArray.random(DType.FLOAT32, 42, 3, 5);
        assertThat(r1).isEqualTo(NDArray.random(DType.FLOAT32, 42, 3, 5)).isNotEqualTo(NDArray.random(DType.FLOAT32, 43, 3, 5));
        for (double v : r1.toDoubleArray()) assertThat(v).isBetween(-1.0, 1.0);
        for (int v : NDArray.random(DType.INT32, 1, 100).toIntArray()) assertThat(v).isBetween(-10, 10);
        assertThat(r1.to(DType.FLOAT16).dtype()).isEqualTo(DType.FLOAT16);
        assertThat(r1.to(DType.FLOAT16).allClose(r1, 1e-3, 1e-3)).isTrue();
        assertThat(r1.copy()).isEqualTo(r1);
    }

    @Test
    void allCloseFollowsNumPysRuleAndExplainsMismatches() {
        var a = NDArray.of(new double[]{1, 2, Double.NaN, Double.POSITIVE_INFINITY}, 4);
        var b = NDArray.of(new double[]{1 + 1e-6, 2, Double.NaN, Double.POSITIVE_INFINITY}, 4);
        assertThat(a.allClose(b)).isTrue();
        var c = NDArray.of(new double[]{1, 2.1, Double.NaN, Double.POSITIVE_INFINITY}, 4);
        assertThat(a.allClose(c)).isFalse();
        assertThat(a.mismatch(c, 1e-5, 1e-8)).startsWith("element 1 [1]: 2.0 vs 2.1");
        assertThat(a.allClose(c, 0, 0.2)).isTrue();
        assertThat(a.mismatch(NDArray.of(new double[]{1, 2}, 2), 1, 1)).contains("shapes differ");
        var inf = NDArray.of(new double[]{Double.NEGATIVE_INFINITY}, 1);
        assertThat(inf.allClose(NDArray.of(new double[]{Double.POSITIVE_INFINITY}, 1), 1, 1)).isFalse();
    }

    @Test
    void toStringShowsRank0And1OnOneLine() {
        assertThat(NDArray.of(new float[]{1, 2, 3, 4}, 4).toString()).isEqualTo("NDArray f32[4] [1.0, 2.0, 3.0, 4.0]");
        assertThat(NDArray.of(new boolean[]{true}, 1).toString()).isEqualTo("NDArray bool[1] [true]");
        assertThat(NDArray.scalar(DType.INT64, 3).toString()).isEqualTo("NDArray i64[] 3");
        assertThat(NDArray.zeros(DType.FLOAT32, 0).toString()).isEqualTo("NDArray f32[0] []");
    }

    @Test
    void toStringShowsMatricesAsRowsLikeNumPy() {
        assertThat(NDArray.of(new float[]{1, 2, 3, 4}, 2, 2).toString()).isEqualTo("NDArray f32[2,2]\n[[1.0, 2.0],\n [3.0, 4.0]]");
        // values right-aligned to the widest
        assertThat(NDArray.of(new int[]{1, 10, 100, -5}, 2, 2).toString()).isEqualTo("NDArray i32[2,2]\n[[  1,  10],\n [100,  -5]]");
        // rank 3: a blank line between blocks, the inner brackets indented
        assertThat(NDArray.of(new int[]{0, 1, 2, 3, 4, 5, 6, 7}, 2, 2, 2).toString())
                .isEqualTo("NDArray i32[2,2,2]\n[[[0, 1],\n  [2, 3]],\n\n [[4, 5],\n  [6, 7]]]");
    }

    @Test
    void toStringElidesTheMiddleOfLargeArrays() {
        int n = 100;
        int[] v = new int[n * n];
        for (int i = 0; i < v.length; i++) v[i] = i;
        assertThat(NDArray.of(v, n, n).toString()).isEqualTo(String.join("\n",
                "NDArray i32[100,100]",
                "[[   0,    1,    2, ...,   97,   98,   99],",
                " [ 100,  101,  102, ...,  197,  198,  199],",
                " [ 200,  201,  202, ...,  297,  298,  299],",
                " ...,",
                " [9700, 9701, 9702, ..., 9797, 9798, 9799],",
                " [9800, 9801, 9802, ..., 9897, 9898, 9899],",
                " [9900, 9901, 9902, ..., 9997, 9998, 9999]]"));
        assertThat(NDArray.full(DType.INT32, 7, 2000).toString()).isEqualTo("NDArray i32[2000] [7, 7, 7, ..., 7, 7, 7]");
        // at the threshold everything is shown
        assertThat(NDArray.full(DType.INT8, 1, 1000).toString()).doesNotContain("...");
    }

    @Test
    void toStringWrapsLongRows() {
        float[] v = new float[30];
        for (int i = 0; i < v.length; i++) v[i] = i + 1;
        String s = NDArray.of(v, 30).toString();
        String values = s.substring("NDArray f32[30] ".length());
        for (String line : values.split("\n")) assertThat(line.length()).as(line).isLessThanOrEqualTo(75);
        assertThat(values.replace(",\n ", ", ")).isEqualTo(expectedList(v));
        assertThat(values).contains("\n ");
    }

    private static String expectedList(float[] v) {
        var sb = new StringBuilder("[");
        for (int i = 0; i < v.length; i++) {
            if (i > 0) sb.append(", ");
            String x = Float.toString(v[i]);
            sb.append(" ".repeat(4 - x.length())).append(x);
        }
        return sb.append("]").toString();
    }

    @Test
    void sliceCopiesARangeOfOneDimension() {
        var a = NDArray.of(iota(3 * 4), 3, 4);                  // a[i][j] = 4 i + j
        var cols = a.slice(1, 1, 3);
        assertThat(cols.shape()).containsExactly(3, 2);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 2; j++) assertThat(cols.get(i, j)).isEqualTo(4 * i + (j + 1));
        assertThat(a.slice(0, -1, 3).toFloatArray()).containsExactly(8, 9, 10, 11);  // the last row
        assertThat(a.slice(-1, 0, 0).shape()).containsExactly(3, 0);
        cols.set(0, 99);
        assertThat(a.get(0, 1)).as("a slice is a copy").isEqualTo(1);
        assertThatThrownBy(() -> a.slice(1, 2, 5)).isInstanceOf(IndexOutOfBoundsException.class)
                .hasMessageContaining("[2, 5) is not inside dimension 1 of f32[3,4] (size 4)");
        assertThatThrownBy(() -> a.slice(2, 0, 1)).hasMessageContaining("dimension 2 does not exist in f32[3,4]");
    }

    @Test
    void shardSplitsAWeightByRowsOrColumnsPerRank() {
        int in = 4, out = 6, world = 3;
        var w = NDArray.of(iota(in * out), in, out);            // w[i][j] = 6 i + j
        for (int r = 0; r < world; r++) {
            var col = w.shard(1, r, world);                    // column-parallel: columns 2r, 2r+1
            assertThat(col.shape()).containsExactly(in, out / world);
            for (int i = 0; i < in; i++)
                for (int j = 0; j < out / world; j++) assertThat(col.get(i, j)).isEqualTo(6 * i + 2 * r + j);
        }
        var rows = w.shard(0, 1, 2);                           // row-parallel: rows 2, 3
        assertThat(rows.toFloatArray()).containsExactly(12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23);
        assertThat(NDArray.concat(1, w.chunk(world, 1))).isEqualTo(w);
        assertThat(NDArray.concat(0, w.chunk(2, 0))).isEqualTo(w);
        assertThat(w.chunk(2, -1)).extracting(NDArray::shape).containsExactly(new long[]{4, 3}, new long[]{4, 3});

        assertThatThrownBy(() -> w.shard(0, 0, 3)).isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class)
                .hasMessageContaining("shard(dim 0, rank 0, worldSize 3): dimension 0 of f32[4,6] has size 4, which 3 does not divide");
        assertThatThrownBy(() -> w.shard(1, 3, 3)).hasMessageContaining("rank must be in [0, 3)");
        assertThatThrownBy(() -> w.chunk(4, 1)).isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class)
                .hasMessageContaining("chunk(chunks 4, dim 1) of f32[4,6]: dimension 1 has size 6, which 4 chunks do not divide");
        assertThatThrownBy(() -> NDArray.concat(0, java.util.List.of(w, w.to(DType.F64))))
                .hasMessageContaining("f64[4,6] does not match f32[4,6]");
    }

    private static float[] iota(int n) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = i;
        return v;
    }

    @Test
    void randnHasMeanZeroAndVarianceOne() {
        int n = 200_000;
        var a = NDArray.randn(DType.FLOAT64, 5, n);
        double sum = 0, sumSq = 0;
        for (int i = 0; i < n; i++) sum += a.get(i);
        double mean = sum / n;
        for (int i = 0; i < n; i++) sumSq += (a.get(i) - mean) * (a.get(i) - mean);
        double variance = sumSq / (n - 1);
        // standard errors: 1/sqrt(n) ~ 0.0022 for the mean, sqrt(2/n) ~ 0.0032 for the variance; 5 sigma
        assertThat(mean).isBetween(-0.011, 0.011);
        assertThat(variance).isBetween(1 - 0.016, 1 + 0.016);
        long beyond2 = 0;
        for (int i = 0; i < n; i++) if (Math.abs(a.get(i)) > 2) beyond2++;
        assertThat(beyond2 / (double) n).as("P(|z| > 2) = 0.0455").isBetween(0.043, 0.048);
        assertThat(NDArray.randn(DType.F32, 5, 3, 3)).isEqualTo(NDArray.randn(DType.F32, 5, 3, 3)).isNotEqualTo(NDArray.randn(DType.F32, 6, 3, 3));
        assertThatThrownBy(() -> NDArray.randn(DType.I32, 1, 3)).hasMessageContaining("randn: normal values need a floating dtype, not i32");
    }

    @Test
    void wrapsAnExistingSegmentWithoutCopying() {
        var a = NDArray.of(new float[]{1, 2}, 2);
        var view = NDArray.wrap(DType.FLOAT32, a.segment(), 2);
        view.set(0, 9);
        assertThat(a.get(0)).isEqualTo(9);
        assertThatThrownBy(() -> NDArray.wrap(DType.FLOAT64, a.segment(), 2)).hasMessageContaining("cannot hold");
    }
}
