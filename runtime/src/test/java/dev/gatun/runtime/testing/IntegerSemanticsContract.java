package dev.gatun.runtime.testing;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.runtime.NDArray;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongBinaryOperator;
import java.util.function.LongUnaryOperator;

import static dev.gatun.ir.DType.BOOL;
import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.DType.F64;
import static dev.gatun.ir.DType.I32;
import static dev.gatun.ir.DType.I64;
import static dev.gatun.ir.DType.I8;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Integer semantics every evaluator of a graph must keep (the host backend, the reference interpreter): int64 values
 * are exact to all 64 bits (above 2^53 too) through copies, views, concatenation, arithmetic, reductions, lookups,
 * slice updates and collectives; arithmetic wraps as Java's {@code long} does (int32 as {@code int}, int8 as
 * {@code byte}); comparisons compare the integers, not their nearest doubles. Casts from floating types truncate toward
 * zero as PyTorch does, and out of range (undefined in PyTorch) follow Java's {@code (long) v}, then wrap to the width.
 *
 * <p>Every expected value comes from a plain loop over Java {@code long}/{@code int} here, never from an evaluator:
 * the reference interpreter is one of the implementations under test, not the oracle.
 */
public abstract class IntegerSemanticsContract {

    /** Runs {@code graph} on {@code inputsPerRank.size()} ranks and returns each rank's outputs as host arrays. */
    protected abstract List<Map<String, NDArray>> run(Graph graph, List<Map<String, NDArray>> inputsPerRank);

    /** One call on one rank with the graph's states holding {@code states} before it. */
    protected abstract Map<String, NDArray> runWithStates(Graph graph, Map<String, NDArray> states, Map<String, NDArray> inputs);

    private Map<String, NDArray> run1(Graph graph, Map<String, NDArray> inputs) { return run(graph, List.of(inputs)).getFirst(); }

    static final long P53 = 1L << 53;

    /** [3, 4]: values a double cannot hold, the extremes and small ones. */
    static final long[] X = {P53 + 1, -(P53 + 1), Long.MAX_VALUE, Long.MIN_VALUE,
            Long.MAX_VALUE - 1, Long.MIN_VALUE + 1, 123_456_789_012_345_677L, -3,
            0, 1, (1L << 62) + 3, -(1L << 60) - 7};
    static final long[] Y = {P53 + 2, P53 + 1, 1, -1,
            Long.MAX_VALUE, Long.MIN_VALUE, 987_654_321_987_654_321L, 5,
            -7, Long.MIN_VALUE, (1L << 62) + 5, 3};

    static final int[] XI = {Integer.MAX_VALUE, Integer.MIN_VALUE, Integer.MAX_VALUE - 1, -3,
            123_456_789, -987_654_321, 65_537, 0,
            1, -1, 1 << 30, Integer.MIN_VALUE + 1};
    static final int[] YI = {1, -1, Integer.MAX_VALUE, Integer.MIN_VALUE,
            2_000_000_000, -2_000_000_000, 65_539, 7,
            -5, Integer.MAX_VALUE, 3, -2};

    static NDArray i64(long[] v, long... shape) { return NDArray.of(v, shape); }

    static long[] map(long[] a, LongUnaryOperator f) {
        long[] r = new long[a.length];
        for (int i = 0; i < a.length; i++) r[i] = f.applyAsLong(a[i]);
        return r;
    }

    static long[] zip(long[] a, long[] b, LongBinaryOperator f) {
        long[] r = new long[a.length];
        for (int i = 0; i < a.length; i++) r[i] = f.applyAsLong(a[i], b[i]);
        return r;
    }

    static long[] widen(int[] a) {
        long[] r = new long[a.length];
        for (int i = 0; i < a.length; i++) r[i] = a[i];
        return r;
    }

    /** {@code a} [rows, cols] transposed, by plain index arithmetic. */
    static long[] transposed(long[] a, int rows, int cols) {
        long[] r = new long[a.length];
        for (int i = 0; i < rows; i++) for (int j = 0; j < cols; j++) r[j * rows + i] = a[i * cols + j];
        return r;
    }

    /** {@code f} folded over each row of {@code a} [rows, cols] from {@code init}. */
    static long[] rows(long[] a, int cols, long init, LongBinaryOperator f) {
        long[] r = new long[a.length / cols];
        for (int i = 0; i < r.length; i++) {
            long acc = init;
            for (int j = 0; j < cols; j++) acc = f.applyAsLong(acc, a[i * cols + j]);
            r[i] = acc;
        }
        return r;
    }

    static void assertLongs(NDArray got, DType dtype, long[] want, String what) {
        assertThat(got.dtype()).as(what + " dtype").isEqualTo(dtype);
        assertThat(got.toLongArray()).as(what).containsExactly(want);
    }

    static void assertBools(NDArray got, long[] a, long[] b, LongBinaryOperator cmp, String what) {
        assertThat(got.dtype()).as(what + " dtype").isEqualTo(BOOL);
        boolean[] want = new boolean[a.length];
        for (int i = 0; i < a.length; i++) want[i] = cmp.applyAsLong(a[i], b[i]) != 0;
        assertThat(got.toBooleanArray()).as(what).containsExactly(want);
    }

    @Test
    void int64ValuesAbove2To53PassThroughCopiesViewsAndConcatenationUnchanged() {
        var g = Gatun.graph("moves");
        Tensor x = g.input("x", I64, 3, 4), y = g.input("y", I64, 3, 4);
        g.output("copy", x.copy());
        g.output("t", x.t());
        g.output("tcopy", x.t().copy());
        g.output("slice", x.slice(1, 1, 3));
        g.output("reshape", x.reshape(4, 3).add(0));
        g.output("cat0", x.cat(0, y));
        g.output("cat1", x.cat(1, y));
        g.output("bcast", x.slice(0, 0, 1).expand(3, 4).copy());
        var out = run1(g.build(), Map.of("x", i64(X, 3, 4), "y", i64(Y, 3, 4)));
        assertLongs(out.get("copy"), I64, X, "copy");
        assertLongs(out.get("t"), I64, transposed(X, 3, 4), "transposed view");
        assertLongs(out.get("tcopy"), I64, transposed(X, 3, 4), "transposed copy");
        long[] slice = new long[6], cat1 = new long[24], bcast = new long[12];
        for (int i = 0; i < 3; i++) {
            for (int j = 0; j < 2; j++) slice[i * 2 + j] = X[i * 4 + 1 + j];
            for (int j = 0; j < 4; j++) {
                cat1[i * 8 + j] = X[i * 4 + j];
                cat1[i * 8 + 4 + j] = Y[i * 4 + j];
                bcast[i * 4 + j] = X[j];
            }
        }
        long[] cat0 = new long[24];
        System.arraycopy(X, 0, cat0, 0, 12);
        System.arraycopy(Y, 0, cat0, 12, 12);
        assertLongs(out.get("slice"), I64, slice, "slice");
        assertLongs(out.get("reshape"), I64, X, "reshape + 0");
        assertLongs(out.get("cat0"), I64, cat0, "cat along 0");
        assertLongs(out.get("cat1"), I64, cat1, "cat along 1");
        assertLongs(out.get("bcast"), I64, bcast, "broadcast row");
    }

    @Test
    void int64ArithmeticIsExactAndWrapsAsJavaLong() {
        var g = Gatun.graph("arith");
        Tensor x = g.input("x", I64, 3, 4), y = g.input("y", I64, 3, 4), row = g.input("row", I64, 4);
        g.output("add", x.add(y));
        g.output("sub", x.sub(y));
        g.output("mul", x.mul(y));
        g.output("neg", x.neg());
        g.output("abs", x.abs());
        g.output("max", x.maximum(y));
        g.output("min", x.minimum(y));
        g.output("relu", x.relu());
        g.output("plus1", x.add(1));
        g.output("rowmul", x.mul(row));
        g.output("chain", x.mul(3).sub(y).add(x.neg()));
        long[] r = {3, -1, 1L << 40, 2};
        var out = run1(g.build(), Map.of("x", i64(X, 3, 4), "y", i64(Y, 3, 4), "row", i64(r, 4)));
        assertLongs(out.get("add"), I64, zip(X, Y, (a, b) -> a + b), "add");
        assertLongs(out.get("sub"), I64, zip(X, Y, (a, b) -> a - b), "sub");
        assertLongs(out.get("mul"), I64, zip(X, Y, (a, b) -> a * b), "mul");
        assertLongs(out.get("neg"), I64, map(X, a -> -a), "neg");
        assertLongs(out.get("abs"), I64, map(X, Math::abs), "abs (abs of MIN_VALUE is MIN_VALUE)");
        assertLongs(out.get("max"), I64, zip(X, Y, Math::max), "maximum");
        assertLongs(out.get("min"), I64, zip(X, Y, Math::min), "minimum");
        assertLongs(out.get("relu"), I64, map(X, a -> Math.max(a, 0)), "relu");
        assertLongs(out.get("plus1"), I64, map(X, a -> a + 1), "add 1");
        long[] rowmul = new long[12];
        for (int i = 0; i < 12; i++) rowmul[i] = X[i] * r[i % 4];
        assertLongs(out.get("rowmul"), I64, rowmul, "broadcast mul");
        assertLongs(out.get("chain"), I64, zip(X, Y, (a, b) -> a * 3 - b + -a), "fused chain");
    }

    @Test
    void int64PowIsExactIntegerPowerAsPyTorchComputesIt() {
        var g = Gatun.graph("pow");
        Tensor x = g.input("x", I64, 6), e = g.input("e", I64, 6);
        g.output("pow", x.pow(e));
        long[] xs = {3, (1L << 31) + 1, -2, 7, 2, -1}, es = {39, 2, 63, 30, -1, -3};
        var out = run1(g.build(), Map.of("x", i64(xs, 6), "e", i64(es, 6)));
        long[] want = new long[6];
        for (int i = 0; i < 6; i++) {
            long p = 1;
            if (es[i] < 0) p = xs[i] == 1 ? 1 : xs[i] == -1 ? ((-es[i]) % 2 == 0 ? 1 : -1) : 0;
            else for (long k = 0; k < es[i]; k++) p *= xs[i];
            want[i] = p;
        }
        assertLongs(out.get("pow"), I64, want, "pow");
    }

    @Test
    void int64ReductionsAreExactAndSumsWrap() {
        var g = Gatun.graph("reduce");
        Tensor x = g.input("x", I64, 3, 4);
        g.output("sum1", x.sum(1));
        g.output("sum0", x.sum(0));
        g.output("sumall", x.sum());
        g.output("max1", x.max(1));
        g.output("min1", x.min(1));
        g.output("rowdiff", x.sub(x.max(true, 1)));
        g.output("sumsq", x.mul(x).sum(1));
        var out = run1(g.build(), Map.of("x", i64(X, 3, 4)));
        assertLongs(out.get("sum1"), I64, rows(X, 4, 0, Long::sum), "sum over dim 1");
        long[] sum0 = rows(transposed(X, 3, 4), 3, 0, Long::sum);
        assertLongs(out.get("sum0"), I64, sum0, "sum over dim 0");
        assertLongs(out.get("sumall"), I64, rows(X, 12, 0, Long::sum), "sum of all");
        assertLongs(out.get("max1"), I64, rows(X, 4, Long.MIN_VALUE, Math::max), "max over dim 1");
        assertLongs(out.get("min1"), I64, rows(X, 4, Long.MAX_VALUE, Math::min), "min over dim 1");
        long[] max1 = rows(X, 4, Long.MIN_VALUE, Math::max), rowdiff = new long[12];
        for (int i = 0; i < 12; i++) rowdiff[i] = X[i] - max1[i / 4];
        assertLongs(out.get("rowdiff"), I64, rowdiff, "x - rowmax");
        assertLongs(out.get("sumsq"), I64, rows(map(X, a -> a * a), 4, 0, Long::sum), "sum of squares");
    }

    @Test
    void int64ComparisonsAndWhereCompareTheIntegersNotTheirNearestDoubles() {
        var g = Gatun.graph("compare");
        Tensor x = g.input("x", I64, 3, 4), y = g.input("y", I64, 3, 4);
        g.output("eq", x.eq(y));
        g.output("ne", x.ne(y));
        g.output("lt", x.lt(y));
        g.output("le", x.le(y));
        g.output("gt", x.gt(y));
        g.output("ge", x.ge(y));
        g.output("where", x.gt(y).where(x, y));
        // a constant is at most 2^53 - 1 away from zero (2^53 itself is refused: it may be 2^53 + 1 rounded on its way in)
        g.output("gescalar", x.ge(P53 - 1));
        var out = run1(g.build(), Map.of("x", i64(X, 3, 4), "y", i64(Y, 3, 4)));
        assertBools(out.get("eq"), X, Y, (a, b) -> a == b ? 1 : 0, "eq");
        assertBools(out.get("ne"), X, Y, (a, b) -> a != b ? 1 : 0, "ne");
        assertBools(out.get("lt"), X, Y, (a, b) -> a < b ? 1 : 0, "lt");
        assertBools(out.get("le"), X, Y, (a, b) -> a <= b ? 1 : 0, "le");
        assertBools(out.get("gt"), X, Y, (a, b) -> a > b ? 1 : 0, "gt");
        assertBools(out.get("ge"), X, Y, (a, b) -> a >= b ? 1 : 0, "ge");
        assertLongs(out.get("where"), I64, zip(X, Y, (a, b) -> a > b ? a : b), "where(x > y, x, y)");
        assertBools(out.get("gescalar"), X, X, (a, b) -> a >= P53 - 1 ? 1 : 0, "ge 2^53 - 1");
    }

    @Test
    void castsBetweenIntegerTypesWrapAndToFloatsRoundOnce() {
        var g = Gatun.graph("casts");
        Tensor x = g.input("x", I64, 13);
        g.output("i32", x.cast(I32));
        g.output("i8", x.cast(I8));
        g.output("bool", x.cast(BOOL));
        g.output("f64", x.cast(F64));
        g.output("f32", x.cast(F32));
        g.output("back", x.cast(I32).cast(I64));
        g.output("boolback", x.cast(BOOL).cast(I64));
        // 2^60 + 2^36 + 1 rounds to a float tie through a double (2^60 + 2^36), then to even (2^60): once, it rounds up
        long[] v = java.util.Arrays.copyOf(X, 13);
        v[12] = (1L << 60) + (1L << 36) + 1;
        var out = run1(g.build(), Map.of("x", i64(v, 13)));
        assertLongs(out.get("i32"), I32, map(v, a -> (int) a), "i64 -> i32");
        assertLongs(out.get("i8"), I8, map(v, a -> (byte) a), "i64 -> i8");
        assertLongs(out.get("back"), I64, map(v, a -> (int) a), "i64 -> i32 -> i64");
        assertLongs(out.get("boolback"), I64, map(v, a -> a != 0 ? 1 : 0), "i64 -> bool -> i64");
        for (int i = 0; i < v.length; i++) {
            assertThat(out.get("bool").toBooleanArray()[i]).as("i64 -> bool of %d", v[i]).isEqualTo(v[i] != 0);
            assertThat(out.get("f64").get(i)).as("i64 -> f64 of %d", v[i]).isEqualTo((double) v[i]);
            assertThat(out.get("f32").get(i)).as("i64 -> f32 of %d (rounded once)", v[i]).isEqualTo((double) (float) v[i]);
        }
    }

    @Test
    void castsFromFloatsTruncateTowardZeroAndKeepExactIntegers() {
        var g = Gatun.graph("fcasts");
        Tensor x = g.input("x", F64, 10);
        g.output("i64", x.cast(I64));
        g.output("i32", x.cast(I32));
        double[] v = {0x1p62, -0x1p63, (double) (P53 + 2), 2.9, -2.9, 1e19, -1e19, Double.NaN, 3e9, -0.5};
        var out = run1(g.build(), Map.of("x", NDArray.of(v, 10)));
        long[] want64 = new long[10], want32 = new long[10];
        for (int i = 0; i < 10; i++) {
            want64[i] = (long) v[i];          // Java's narrowing: toward zero, saturating, NaN to 0
            want32[i] = (int) (long) v[i];    // then wrapping to 32 bits
        }
        assertLongs(out.get("i64"), I64, want64, "f64 -> i64");
        assertLongs(out.get("i32"), I32, want32, "f64 -> i32");
    }

    @Test
    void mixedIntegerAndFloatOperandsPromoteToTheFloatAsPyTorchDoes() {
        var g = Gatun.graph("mixed");
        Tensor x = g.input("x", I64, 12), f = g.input("f", F64, 12);
        g.output("add", x.add(f));
        g.output("lt", x.lt(f));
        double[] fv = new double[12];
        for (int i = 0; i < 12; i++) fv[i] = i % 2 == 0 ? (double) X[i] : 0.5;
        var out = run1(g.build(), Map.of("x", i64(X, 12), "f", NDArray.of(fv, 12)));
        for (int i = 0; i < 12; i++) {
            assertThat(out.get("add").get(i)).as("i64 + f64 at %d", i).isEqualTo((double) X[i] + fv[i]);
            assertThat(out.get("lt").toBooleanArray()[i]).as("i64 < f64 at %d", i).isEqualTo((double) X[i] < fv[i]);
        }
    }

    @Test
    void indexSelectKeepsInt64TableRowsExactForEitherIdType() {
        for (DType idType : List.of(I64, I32)) {
            var g = Gatun.graph("lookup");
            Tensor table = g.input("table", I64, 4, 3), ids = g.input("ids", idType, 5);
            g.output("rows", table.indexSelect(0, ids));
            g.output("rowsplus", table.indexSelect(0, ids).add(1));
            long[] t = java.util.Arrays.copyOf(X, 12);
            long[] pick = {3, 0, 2, 2, 1};
            NDArray idArray = NDArray.zeros(idType, 5);
            for (int i = 0; i < 5; i++) idArray.set(i, pick[i]);
            var out = run1(g.build(), Map.of("table", i64(t, 4, 3), "ids", idArray));
            long[] want = new long[15];
            for (int k = 0; k < 5; k++) System.arraycopy(t, (int) pick[k] * 3, want, k * 3, 3);
            assertLongs(out.get("rows"), I64, want, "index_select with " + idType + " ids");
            assertLongs(out.get("rowsplus"), I64, map(want, a -> a + 1), "index_select + 1 with " + idType + " ids");
        }
    }

    @Test
    void updateSliceOfAnInt64StateKeepsEveryValueExact() {
        var g = Gatun.graph("state");
        Tensor c = g.state("c", I64, 3, 4);
        Tensor u = g.input("u", I64, 3, 2), at = g.input("at", I64, 1);
        Tensor updated = c.updateSlice(1, u, at);
        g.output("c", updated);
        g.output("sum", updated.sum(1));
        long[] uv = {Long.MIN_VALUE, P53 + 3, 7, Long.MAX_VALUE, -(P53 + 5), 11};
        var out = runWithStates(g.build(), Map.of("c", i64(X, 3, 4)), Map.of("u", i64(uv, 3, 2), "at", i64(new long[]{1}, 1)));
        long[] want = X.clone();
        for (int i = 0; i < 3; i++) for (int j = 0; j < 2; j++) want[i * 4 + 1 + j] = uv[i * 2 + j];
        assertLongs(out.get("c"), I64, want, "updated state");
        assertLongs(out.get("sum"), I64, rows(want, 4, 0, Long::sum), "sum of the updated state");
    }

    @Test
    void int64AllReducesAreExactAndSumsWrapOnTwoAndThreeRanks() {
        for (int world : new int[]{2, 3}) {
            var g = Gatun.graph("allreduce").world(world);
            Tensor x = g.input("x", I64, 12);
            g.output("sum", x.allReduce(ReduceOp.SUM));
            g.output("max", x.allReduce(ReduceOp.MAX));
            g.output("min", x.allReduce(ReduceOp.MIN));
            g.output("gathered", x.allGather());
            var inputs = new ArrayList<Map<String, NDArray>>();
            long[][] per = new long[world][];
            for (int r = 0; r < world; r++) {
                int shift = r;
                per[r] = map(r % 2 == 0 ? X : Y, a -> a + shift);
                inputs.add(Map.of("x", i64(per[r], 12)));
            }
            var out = run(g.build(), inputs);
            long[] sum = new long[12], max = new long[12], min = new long[12], gathered = new long[12 * world];
            java.util.Arrays.fill(max, Long.MIN_VALUE);
            java.util.Arrays.fill(min, Long.MAX_VALUE);
            for (int r = 0; r < world; r++) {
                for (int i = 0; i < 12; i++) {
                    sum[i] += per[r][i];
                    max[i] = Math.max(max[i], per[r][i]);
                    min[i] = Math.min(min[i], per[r][i]);
                }
                System.arraycopy(per[r], 0, gathered, r * 12, 12);
            }
            for (int r = 0; r < world; r++) {
                String at = "world " + world + " rank " + r + " ";
                assertLongs(out.get(r).get("sum"), I64, sum, at + "sum");
                assertLongs(out.get(r).get("max"), I64, max, at + "max");
                assertLongs(out.get(r).get("min"), I64, min, at + "min");
                assertLongs(out.get(r).get("gathered"), I64, gathered, at + "all_gather");
            }
        }
    }

    @Test
    void int32ArithmeticWrapsAsJavaIntAndItsSumWidensToInt64() {
        var g = Gatun.graph("i32");
        Tensor x = g.input("x", I32, 3, 4), y = g.input("y", I32, 3, 4);
        g.output("add", x.add(y));
        g.output("sub", x.sub(y));
        g.output("mul", x.mul(y));
        g.output("neg", x.neg());
        g.output("abs", x.abs());
        g.output("sum", x.sum(1));
        g.output("max", x.max(1));
        g.output("lt", x.lt(y));
        g.output("wide", x.cast(I64).mul(y.cast(I64)));
        var out = run1(g.build(), Map.of("x", NDArray.of(XI, 3, 4), "y", NDArray.of(YI, 3, 4)));
        long[] x64 = widen(XI), y64 = widen(YI);
        assertLongs(out.get("add"), I32, zip(x64, y64, (a, b) -> (int) a + (int) b), "i32 add");
        assertLongs(out.get("sub"), I32, zip(x64, y64, (a, b) -> (int) a - (int) b), "i32 sub");
        assertLongs(out.get("mul"), I32, zip(x64, y64, (a, b) -> (int) a * (int) b), "i32 mul");
        assertLongs(out.get("neg"), I32, map(x64, a -> -(int) a), "i32 neg");
        assertLongs(out.get("abs"), I32, map(x64, a -> Math.abs((int) a)), "i32 abs");
        assertLongs(out.get("sum"), I64, rows(x64, 4, 0, Long::sum), "i32 sum (an i64 result, as torch.sum)");
        assertLongs(out.get("max"), I32, rows(x64, 4, Integer.MIN_VALUE, Math::max), "i32 max");
        assertBools(out.get("lt"), x64, y64, (a, b) -> a < b ? 1 : 0, "i32 lt");
        assertLongs(out.get("wide"), I64, zip(x64, y64, (a, b) -> a * b), "i32 widened to i64, then mul");
    }

    @Test
    void int32AllReduceSumWrapsAsJavaInt() {
        for (int world : new int[]{2, 3}) {
            var g = Gatun.graph("allreduce32").world(world);
            g.output("sum", g.input("x", I32, 12).allReduce(ReduceOp.SUM));
            var inputs = new ArrayList<Map<String, NDArray>>();
            int[] sum = new int[12];
            for (int r = 0; r < world; r++) {
                int[] v = r % 2 == 0 ? XI : YI;
                for (int i = 0; i < 12; i++) sum[i] += v[i];
                inputs.add(Map.of("x", NDArray.of(v, 12)));
            }
            var out = run(g.build(), inputs);
            for (int r = 0; r < world; r++) assertLongs(out.get(r).get("sum"), I32, widen(sum), "world " + world + " rank " + r);
        }
    }

    /** The states of a graph as inputs, for evaluators that take them so (the reference interpreter). */
    protected static Map<String, NDArray> merged(Map<String, NDArray> states, Map<String, NDArray> inputs) {
        var all = new HashMap<>(inputs);
        all.putAll(states);
        return all;
    }
}
