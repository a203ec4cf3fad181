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
 * precision, rounding every op's result to its dtype (as the reference interpreter does), then storing.
 * All loads of an element happen before its stores, so an in-place output is safe.
 */
final class KernelInterpreter {
    private KernelInterpreter() {}

    /** Where a kernel's inputs and outputs are, for one call. */
    record Bound(MemorySegment[] inputs, DType[] inputTypes, MemorySegment[] outputs, DType[] outputTypes) {}

    private interface Eval {
        double at(long[] idx, double[] locals);
    }

    static void run(Kernel k, Bound b, Map<String, Long> env) {
        int rank = k.ranges().size(), red = k.reductionRanges().size();
        long[] ranges = eval(k.ranges(), env), redRanges = eval(k.reductionRanges(), env);
        Eval[] locals = new Eval[k.locals().size()];
        for (int i = 0; i < locals.length; i++) locals[i] = compile(k.locals().get(i), b, env);
        long[] idx = new long[rank + red];
        double[] values = new double[locals.length];
        long outCount = product(ranges), redCount = product(redRanges);
        for (long o = 0; o < outCount; o++) {
            unravel(o, ranges, idx, 0);
            if (!k.isReduction()) {
                for (int i = 0; i < locals.length; i++) values[i] = locals[i].at(idx, values);
                for (int s = 0; s < k.stores().size(); s++)
                    Elements.set(b.outputs()[s], b.outputTypes()[s], o, values[k.stores().get(s).local()]);
            } else {
                double acc = init(k.reduce());
                int last = locals.length - 1;
                for (long r = 0; r < redCount; r++) {
                    unravel(r, redRanges, idx, rank);
                    for (int i = 0; i < locals.length; i++) values[i] = locals[i].at(idx, values);
                    acc = combine(k.reduce(), acc, values[last]);
                }
                if (k.reduce() == ReduceFn.MEAN) acc = redCount == 0 ? Double.NaN : acc / redCount;
                Elements.set(b.outputs()[0], b.outputTypes()[0], o, acc);
            }
        }
    }

    static double init(ReduceFn f) {
        return switch (f) {
            case SUM, MEAN -> 0;
            case MAX -> Double.NEGATIVE_INFINITY;
            case MIN -> Double.POSITIVE_INFINITY;
        };
    }

    /** max and min propagate NaN, as torch's reductions do. */
    static double combine(ReduceFn f, double acc, double v) {
        return switch (f) {
            case SUM, MEAN -> acc + v;
            case MAX -> Double.isNaN(acc) || Double.isNaN(v) ? Double.NaN : Math.max(acc, v);
            case MIN -> Double.isNaN(acc) || Double.isNaN(v) ? Double.NaN : Math.min(acc, v);
        };
    }

    private static Eval compile(KExpr e, Bound b, Map<String, Long> env) {
        return switch (e) {
            case KExpr.Const c -> {
                double v = DTypes.round(c.value(), c.dtype());
                yield (idx, l) -> v;
            }
            case KExpr.Local l -> {
                int i = l.index();
                yield (idx, locals) -> locals[i];
            }
            case KExpr.Cast c -> {
                Eval x = compile(c.x(), b, env);
                DType t = c.dtype();
                yield (idx, l) -> DTypes.round(x.at(idx, l), t);
            }
            case KExpr.Load ld -> {
                MemorySegment seg = b.inputs()[ld.input()];
                DType t = b.inputTypes()[ld.input()];
                long off = ld.offset().eval(env);
                long[] strides = eval(ld.strides(), env);
                yield (idx, l) -> {
                    long p = off;
                    for (int k = 0; k < strides.length; k++) p += strides[k] * idx[k];
                    return Elements.get(seg, t, p);
                };
            }
            case KExpr.Apply a -> {
                Eval[] args = new Eval[a.args().size()];
                for (int i = 0; i < args.length; i++) args[i] = compile(a.args().get(i), b, env);
                PointwiseFn fn = a.fn();
                DType t = a.dtype();
                yield switch (args.length) {
                    case 1 -> (idx, l) -> DTypes.round(ScalarMath.apply(fn, args[0].at(idx, l), 0, 0), t);
                    case 2 -> (idx, l) -> DTypes.round(ScalarMath.apply(fn, args[0].at(idx, l), args[1].at(idx, l), 0), t);
                    default -> (idx, l) -> DTypes.round(ScalarMath.apply(fn, args[0].at(idx, l), args[1].at(idx, l), args[2].at(idx, l)), t);
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
