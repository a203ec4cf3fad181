package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ScalarMath;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.DTypes;
import dev.gatun.runtime.Elements;

import java.lang.foreign.MemorySegment;
import java.util.Map;

/**
 * A fused kernel's expressions compiled for the {@link KernelInterpreter}, each in the lane of its value: floating
 * values as doubles ({@link F}), integers and bool as exact longs ({@link L}), so an int64 keeps all its 64 bits. An op
 * whose operands are all integers and whose result is an integer (or a comparison of integers) computes in Java
 * {@code long} ({@link ScalarMath#applyLong}) and wraps to its dtype; every other op computes in double
 * ({@link ScalarMath#apply}) and rounds to its dtype (to float32 for an f16/bf16 result of a kernel that holds its
 * intermediates in float, {@link Kernel#held}). An integer becomes a double only where the graph makes it a float: a
 * cast, or an op with a floating operand or result, which PyTorch promotes to a float too. Floating expressions
 * evaluate as they did before integers had their own lane: one call a node, no conversion.
 */
final class KernelExpressions {

    /** One index's values: every local and every reduction of the current row, each in its lane's array. */
    static final class Frame {
        final double[] locals, reduced;
        final long[] intLocals, intReduced;

        Frame(int locals, int reductions) {
            this.locals = new double[locals];
            this.intLocals = new long[locals];
            this.reduced = new double[reductions];
            this.intReduced = new long[reductions];
        }
    }

    /** A compiled expression: a double ({@link F}) or an exact long ({@link L}), by its value's dtype. */
    sealed interface Eval permits F, L {}

    /** An expression whose value is floating. */
    @FunctionalInterface non-sealed interface F extends Eval { double at(long[] idx, Frame f); }

    /** An expression whose value is an integer or bool. */
    @FunctionalInterface non-sealed interface L extends Eval { long at(long[] idx, Frame f); }

    /** The kernel's locals compiled: local i is {@code floats[i]} or, when its value is an integer, {@code ints[i]}. */
    record Locals(F[] floats, L[] ints) {
        boolean isExact(int i) { return ints[i] != null; }

        /** Evaluates local i at {@code idx} into the frame. */
        void eval(int i, long[] idx, Frame f) {
            L l = ints[i];
            if (l == null) f.locals[i] = floats[i].at(idx, f);
            else f.intLocals[i] = l.at(idx, f);
        }

        int size() { return floats.length; }
    }

    private final Kernel k;
    private final KernelInterpreter.Bound b;
    private final Map<String, Long> env;
    private final F[] floats;
    private final L[] ints;

    private KernelExpressions(Kernel k, KernelInterpreter.Bound b, Map<String, Long> env) {
        this.k = k;
        this.b = b;
        this.env = env;
        this.floats = new F[k.locals().size()];
        this.ints = new L[k.locals().size()];
    }

    /** Compiles every local of {@code k} for one launch (its inputs' memory and its symbols' sizes). */
    static Locals compile(Kernel k, KernelInterpreter.Bound b, Map<String, Long> env) {
        var c = new KernelExpressions(k, b, env);
        for (int i = 0; i < c.floats.length; i++) {
            switch (c.compile(k.locals().get(i))) {
                case F f -> c.floats[i] = f;
                case L l -> c.ints[i] = l;
            }
        }
        return new Locals(c.floats, c.ints);
    }

    /** Whether reduction {@code r} of {@code k} accumulates (and holds its result) as an exact long. */
    static boolean isExactReduction(Kernel k, int r) { return DTypes.isExact(k.held(k.reductions().get(r).dtype())); }

    private Eval compile(KExpr e) {
        return switch (e) {
            case KExpr.Const c -> {
                if (DTypes.isExact(c.dtype())) {
                    long v = DTypes.toLong(c.value(), c.dtype());
                    yield (L) (idx, f) -> v;
                }
                double v = DTypes.round(c.value(), c.dtype());
                yield (F) (idx, f) -> v;
            }
            case KExpr.Local l -> {
                int i = l.index();
                yield ints[i] != null ? (L) (idx, f) -> f.intLocals[i] : (F) (idx, f) -> f.locals[i];
            }
            case KExpr.Reduced rd -> {
                int i = rd.reduction();
                yield isExactReduction(k, i) ? (L) (idx, f) -> f.intReduced[i] : (F) (idx, f) -> f.reduced[i];
            }
            case KExpr.Cast c -> cast(compile(c.x()), c.dtype());
            case KExpr.Load ld -> load(ld);
            case KExpr.Gather g -> gather(g);
            case KExpr.Apply a -> apply(a);
        };
    }

    /** A cast: integers wrap to an integer type or round once to a float; floats round, or truncate to an integer. */
    private static Eval cast(Eval x, DType t) {
        return switch (x) {
            case L l when DTypes.isExact(t) -> (L) (idx, f) -> DTypes.wrap(l.at(idx, f), t);
            case L l -> (F) (idx, f) -> DTypes.fromLong(l.at(idx, f), t);
            case F v when DTypes.isExact(t) -> (L) (idx, f) -> DTypes.toLong(v.at(idx, f), t);
            case F v -> (F) (idx, f) -> DTypes.round(v.at(idx, f), t);
        };
    }

    private Eval load(KExpr.Load ld) {
        MemorySegment seg = b.inputs()[ld.input()];
        DType t = b.inputTypes()[ld.input()];
        long off = ld.offset().eval(env);
        long[] strides = KernelInterpreter.eval(ld.strides(), env);
        if (DTypes.isExact(t)) return (L) (idx, f) -> Elements.getLong(seg, t, at(off, strides, idx));
        return (F) (idx, f) -> Elements.get(seg, t, at(off, strides, idx));
    }

    /**
     * A row picked by an index ({@link KExpr.Gather}): every index is checked against the table's rows before the read,
     * and one outside them fails the launch naming the kernel and the fused {@code index_select}, with the op's refusal.
     */
    private Eval gather(KExpr.Gather g) {
        MemorySegment seg = b.inputs()[g.input()], ids = b.inputs()[g.index().input()];
        DType t = b.inputTypes()[g.input()], it = b.inputTypes()[g.index().input()];
        long off = g.offset().eval(env), row = g.rowStride().eval(env), rows = g.rows();
        long[] strides = KernelInterpreter.eval(g.strides(), env);
        long idOff = g.index().offset().eval(env);
        long[] idStrides = KernelInterpreter.eval(g.index().strides(), env);
        L place = (idx, f) -> {
            long position = at(idOff, idStrides, idx);
            long id = Elements.getLong(ids, it, position);
            if (id < 0 || id >= rows) throw new GatunRuntimeException("kernel " + k.name() + ", which reads " + g.op() + " through its indices: index " + id
                    + " at position " + position + " of the indices is outside the " + rows + " rows of the table"
                    + (rows == 0 ? " (it has none)" : " (valid: 0 to " + (rows - 1) + ")"));
            return at(off, strides, idx) + row * id;
        };
        if (DTypes.isExact(t)) return (L) (idx, f) -> Elements.getLong(seg, t, place.at(idx, f));
        return (F) (idx, f) -> Elements.get(seg, t, place.at(idx, f));
    }

    private static long at(long offset, long[] strides, long[] idx) {
        long p = offset;
        for (int d = 0; d < strides.length; d++) p += strides[d] * idx[d];
        return p;
    }

    private Eval apply(KExpr.Apply a) {
        var args = new Eval[a.args().size()];
        boolean integers = true;
        for (int i = 0; i < args.length; i++) {
            args[i] = compile(a.args().get(i));
            integers &= args[i] instanceof L;
        }
        PointwiseFn fn = a.fn();
        DType t = k.held(a.dtype());
        if (integers && (fn.isComparison() || DTypes.isExact(t))) return applyLong(fn, args, t);
        F inDouble = applyDouble(fn, args, t);
        // an integer (a comparison of floats: 0 or 1) rounded in double is an integral double: (long) is exact
        if (DTypes.isExact(t)) return (L) (idx, f) -> (long) inDouble.at(idx, f);
        return inDouble;
    }

    /** Integer operands in wrapping long arithmetic, wrapped to {@code t}. */
    private static L applyLong(PointwiseFn fn, Eval[] args, DType t) {
        L x = (L) args[0];
        return switch (args.length) {
            case 1 -> (idx, f) -> DTypes.wrap(ScalarMath.applyLong(fn, x.at(idx, f), 0, 0), t);
            case 2 -> {
                L y = (L) args[1];
                yield (idx, f) -> DTypes.wrap(ScalarMath.applyLong(fn, x.at(idx, f), y.at(idx, f), 0), t);
            }
            default -> {
                L y = (L) args[1], z = (L) args[2];
                yield (idx, f) -> DTypes.wrap(ScalarMath.applyLong(fn, x.at(idx, f), y.at(idx, f), z.at(idx, f)), t);
            }
        };
    }

    /**
     * The op in double, rounded to {@code t} ({@link DTypes#round}); an integer operand is promoted to a double, as
     * PyTorch promotes it to a float.
     */
    private static F applyDouble(PointwiseFn fn, Eval[] args, DType t) {
        F x = asDouble(args[0]);
        return switch (args.length) {
            case 1 -> (idx, f) -> DTypes.round(ScalarMath.apply(fn, x.at(idx, f), 0, 0), t);
            case 2 -> {
                F y = asDouble(args[1]);
                yield (idx, f) -> DTypes.round(ScalarMath.apply(fn, x.at(idx, f), y.at(idx, f), 0), t);
            }
            default -> {
                F y = asDouble(args[1]), z = asDouble(args[2]);
                yield (idx, f) -> DTypes.round(ScalarMath.apply(fn, x.at(idx, f), y.at(idx, f), z.at(idx, f)), t);
            }
        };
    }

    private static F asDouble(Eval e) {
        return switch (e) {
            case F f -> f;
            case L l -> (idx, f) -> (double) l.at(idx, f);
        };
    }
}
