package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.DTypes;
import dev.gatun.runtime.Elements;
import dev.gatun.ir.graph.ScalarMath;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Map;

/**
 * Runs a fused kernel on the host: a loop over the iteration space evaluating the kernel's locals in double
 * precision, rounding every op's result to its dtype (as the reference interpreter does; to float32 for an f16/bf16
 * result of a kernel that holds its intermediates in float, {@link Kernel#floatIntermediates}), then storing. A row
 * kernel runs its phases one after the other for each row (see {@link Kernel}). All loads of an element happen
 * before its stores, so an in-place output is safe.
 */
final class KernelInterpreter {
    private KernelInterpreter() {}

    /** Where a kernel's inputs and outputs are, for one call. */
    record Bound(MemorySegment[] inputs, DType[] inputTypes, MemorySegment[] outputs, DType[] outputTypes) {}

    private interface Eval {
        double at(long[] idx, double[] locals, double[] reduced);
    }

    static void run(Kernel k, Bound b, Map<String, Long> env) {
        int rank = k.ranges().size(), red = k.reductionRanges().size();
        long[] ranges = eval(k.ranges(), env), redRanges = eval(k.reductionRanges(), env);
        Eval[] locals = new Eval[k.locals().size()];
        for (int i = 0; i < locals.length; i++) locals[i] = compile(k, k.locals().get(i), b, env);
        Place[] places = new Place[k.stores().size()];
        for (int s = 0; s < places.length; s++) places[s] = Place.of(k.stores().get(s), env);
        long[] idx = new long[rank + red];
        double[] values = new double[locals.length];
        double[] reduced = new double[k.reductions().size()];
        long outCount = product(ranges), redCount = product(redRanges);
        if (!k.isReduction()) {
            for (long o = 0; o < outCount; o++) {
                unravel(o, ranges, idx, 0);
                for (int i = 0; i < locals.length; i++) values[i] = locals[i].at(idx, values, reduced);
                for (int s = 0; s < places.length; s++)
                    Elements.set(b.outputs()[s], b.outputTypes()[s], places[s].at(o, idx), values[k.stores().get(s).local()]);
            }
            return;
        }
        boolean[] element = k.perElement();
        int phases = k.reductions().size();
        // the folds of per-row results (Kernel.Fold): each row's value as its store wrote it, folded in row order
        double[] folded = new double[k.folds().size()];
        for (int f = 0; f < folded.length; f++) folded[f] = init(k.folds().get(f).fn());
        boolean[][] needed = new boolean[phases + 1][];
        for (int p = 0; p <= phases; p++) needed[p] = k.neededIn(p);
        for (long o = 0; o < outCount; o++) {
            unravel(o, ranges, idx, 0);
            for (int d = rank; d < idx.length; d++) idx[d] = 0;
            // phase p folds reduction p over the row; the last phase evaluates everything and stores the elements
            for (int p = 0; p <= phases; p++) {
                Kernel.Reduction r = p < phases ? k.reductions().get(p) : null;
                double acc = r == null ? 0 : init(r.fn());
                for (long e = 0; e < redCount; e++) {
                    unravel(e, redRanges, idx, rank);
                    for (int i = 0; i < locals.length; i++) if (needed[p][i]) values[i] = locals[i].at(idx, values, reduced);
                    if (r != null) {
                        acc = combine(r.fn(), acc, values[r.local()]);
                        continue;
                    }
                    for (int s = 0; s < places.length; s++) {
                        var st = k.stores().get(s);
                        if (!st.perRow()) Elements.set(b.outputs()[s], b.outputTypes()[s], places[s].at(o * redCount + e, idx), values[st.local()]);
                    }
                }
                if (r != null) reduced[p] = DTypes.round(finish(r.fn(), acc, redCount), k.held(r.dtype()));
            }
            // what is one value per row, evaluated even for an empty row
            for (int d = rank; d < idx.length; d++) idx[d] = 0;
            for (int i = 0; i < locals.length; i++) if (!element[i]) values[i] = locals[i].at(idx, values, reduced);
            for (int s = 0; s < places.length; s++) {
                var st = k.stores().get(s);
                if (st.perRow()) Elements.set(b.outputs()[s], b.outputTypes()[s], places[s].at(o, idx), values[st.local()]);
            }
            for (int f = 0; f < folded.length; f++) {
                var fold = k.folds().get(f);
                int of = fold.of();
                folded[f] = combine(fold.fn(), folded[f], DTypes.round(values[k.stores().get(of).local()], b.outputTypes()[of]));
            }
        }
        for (int f = 0; f < folded.length; f++) {
            var fold = k.folds().get(f);
            int s = k.stores().size() + f;
            Elements.set(b.outputs()[s], b.outputTypes()[s], 0, DTypes.round(finish(fold.fn(), folded[f], outCount), fold.dtype()));
        }
    }

    /** Where a store puts the element of an index: its row-major number, or offset plus strides. */
    private record Place(long offset, long[] strides) {
        static Place of(Kernel.Store s, Map<String, Long> env) {
            return s.strides() == null ? new Place(s.offset().eval(env), null) : new Place(s.offset().eval(env), eval(s.strides(), env));
        }

        long at(long rowMajor, long[] idx) {
            if (strides == null) return offset + rowMajor;
            long p = offset;
            for (int k = 0; k < strides.length; k++) p += strides[k] * idx[k];
            return p;
        }
    }

    static double init(ReduceFn f) {
        return switch (f) {
            case SUM, MEAN -> 0;
            case MAX -> Double.NEGATIVE_INFINITY;
            case MIN -> Double.POSITIVE_INFINITY;
        };
    }

    /** A reduction's accumulated {@code acc} over {@code count} values: divided by the count for a mean (NaN for none). */
    static double finish(ReduceFn f, double acc, long count) {
        return f != ReduceFn.MEAN ? acc : count == 0 ? Double.NaN : acc / count;
    }

    /** max and min propagate NaN, as torch's reductions do. */
    static double combine(ReduceFn f, double acc, double v) {
        return switch (f) {
            case SUM, MEAN -> acc + v;
            case MAX -> Double.isNaN(acc) || Double.isNaN(v) ? Double.NaN : Math.max(acc, v);
            case MIN -> Double.isNaN(acc) || Double.isNaN(v) ? Double.NaN : Math.min(acc, v);
        };
    }

    private static Eval compile(Kernel k, KExpr e, Bound b, Map<String, Long> env) {
        return switch (e) {
            case KExpr.Const c -> {
                double v = DTypes.round(c.value(), c.dtype());
                yield (idx, l, r) -> v;
            }
            case KExpr.Local l -> {
                int i = l.index();
                yield (idx, locals, r) -> locals[i];
            }
            case KExpr.Reduced rd -> {
                int i = rd.reduction();
                yield (idx, l, reduced) -> reduced[i];
            }
            case KExpr.Cast c -> {
                Eval x = compile(k, c.x(), b, env);
                DType t = c.dtype();
                yield (idx, l, r) -> DTypes.round(x.at(idx, l, r), t);
            }
            case KExpr.Load ld -> {
                MemorySegment seg = b.inputs()[ld.input()];
                DType t = b.inputTypes()[ld.input()];
                long off = ld.offset().eval(env);
                long[] strides = eval(ld.strides(), env);
                yield (idx, l, r) -> {
                    long p = off;
                    for (int d = 0; d < strides.length; d++) p += strides[d] * idx[d];
                    return Elements.get(seg, t, p);
                };
            }
            case KExpr.Apply a -> {
                Eval[] args = new Eval[a.args().size()];
                for (int i = 0; i < args.length; i++) args[i] = compile(k, a.args().get(i), b, env);
                PointwiseFn fn = a.fn();
                DType t = k.held(a.dtype());
                yield switch (args.length) {
                    case 1 -> (idx, l, r) -> DTypes.round(ScalarMath.apply(fn, args[0].at(idx, l, r), 0, 0), t);
                    case 2 -> (idx, l, r) -> DTypes.round(ScalarMath.apply(fn, args[0].at(idx, l, r), args[1].at(idx, l, r), 0), t);
                    default -> (idx, l, r) -> DTypes.round(ScalarMath.apply(fn, args[0].at(idx, l, r), args[1].at(idx, l, r), args[2].at(idx, l, r)), t);
                };
            }
        };
    }

    static long[] eval(List<SymInt> xs, Map<String, Long> env) {
        long[] out = new long[xs.size()];
        for (int i = 0; i < out.length; i++) out[i] = xs.get(i).eval(env);
        return out;
    }

    static long product(long[] xs) {
        long p = 1;
        for (long x : xs) p *= x;
        return p;
    }

    /** Row-major digits of {@code linear} over {@code ranges}, written into idx[from..]. */
    static void unravel(long linear, long[] ranges, long[] idx, int from) {
        for (int d = ranges.length - 1; d >= 0; d--) {
            long r = ranges[d];
            idx[from + d] = r == 0 ? 0 : linear % r;
            linear = r == 0 ? 0 : linear / r;
        }
    }
}
