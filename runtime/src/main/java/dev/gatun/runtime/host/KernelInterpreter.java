package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.DTypes;
import dev.gatun.runtime.Elements;
import dev.gatun.runtime.host.KernelExpressions.Frame;
import dev.gatun.runtime.host.KernelExpressions.Locals;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Map;

/**
 * Runs a fused kernel on the host: a loop over the iteration space evaluating the kernel's locals
 * ({@link KernelExpressions}: floating values in double precision, integers and bool in exact Java {@code long}),
 * rounding every op's result to its dtype (as the reference interpreter does; to float32 for an f16/bf16 result of a
 * kernel that holds its intermediates in float, {@link Kernel#floatIntermediates}), then storing. A row kernel runs its
 * phases one after the other for each row (see {@link Kernel}); its reductions accumulate in the lane of their dtype
 * (integer sums wrap as Java's {@code long} does). All loads of an element happen before its stores, so an in-place
 * output is safe.
 */
final class KernelInterpreter {
    private KernelInterpreter() {}

    /** Where a kernel's inputs and outputs are, for one call. */
    record Bound(MemorySegment[] inputs, DType[] inputTypes, MemorySegment[] outputs, DType[] outputTypes) {}

    static void run(Kernel k, Bound b, Map<String, Long> env) {
        Locals locals = KernelExpressions.compile(k, b, env);
        var frame = new Frame(locals.size(), k.reductions().size());
        Writer[] stores = new Writer[k.stores().size()];
        for (int s = 0; s < stores.length; s++) stores[s] = Writer.of(k.stores().get(s), b.outputs()[s], b.outputTypes()[s], locals, env);
        long[] idx = new long[k.ranges().size() + k.reductionRanges().size()];
        if (k.isReduction()) {
            rows(k, b, env, locals, frame, stores, idx);
            return;
        }
        long[] ranges = eval(k.ranges(), env);
        long outCount = product(ranges);
        for (long o = 0; o < outCount; o++) {
            unravel(o, ranges, idx, 0);
            for (int i = 0; i < locals.size(); i++) locals.eval(i, idx, frame);
            for (Writer w : stores) w.write(o, idx, frame);
        }
    }

    /** A row kernel: each row's phases (one per reduction, then its elements), its per-row values, then the folds of them. */
    private static void rows(Kernel k, Bound b, Map<String, Long> env, Locals locals, Frame frame, Writer[] stores, long[] idx) {
        int rank = k.ranges().size(), phases = k.reductions().size();
        long[] ranges = eval(k.ranges(), env), redRanges = eval(k.reductionRanges(), env);
        long outCount = product(ranges), redCount = product(redRanges);
        boolean[] element = k.perElement();
        var reductions = new Accumulator[phases];
        for (int p = 0; p < phases; p++) reductions[p] = new Accumulator(k.reductions().get(p).fn(), k.held(k.reductions().get(p).dtype()));
        // the folds of per-row results (Kernel.Fold): each row's value as its store wrote it, folded in row order
        var folds = new Accumulator[k.folds().size()];
        for (int f = 0; f < folds.length; f++) folds[f] = new Accumulator(k.folds().get(f).fn(), k.folds().get(f).dtype()).reset();
        boolean[][] needed = new boolean[phases + 1][];
        for (int p = 0; p <= phases; p++) needed[p] = k.neededIn(p);
        for (long o = 0; o < outCount; o++) {
            unravel(o, ranges, idx, 0);
            for (int d = rank; d < idx.length; d++) idx[d] = 0;
            // phase p folds reduction p over the row; the last phase evaluates everything and stores the elements
            for (int p = 0; p <= phases; p++) {
                Accumulator acc = p < phases ? reductions[p].reset() : null;
                int of = p < phases ? k.reductions().get(p).local() : -1;
                for (long e = 0; e < redCount; e++) {
                    unravel(e, redRanges, idx, rank);
                    for (int i = 0; i < locals.size(); i++) if (needed[p][i]) locals.eval(i, idx, frame);
                    if (acc != null) acc.add(frame, of, locals.isExact(of));
                    else for (Writer w : stores) if (!w.perRow) w.write(o * redCount + e, idx, frame);
                }
                if (acc != null) acc.finishInto(frame, p, redCount);
            }
            // what is one value per row, evaluated even for an empty row
            for (int d = rank; d < idx.length; d++) idx[d] = 0;
            for (int i = 0; i < locals.size(); i++) if (!element[i]) locals.eval(i, idx, frame);
            for (Writer w : stores) if (w.perRow) w.write(o, idx, frame);
            for (int f = 0; f < folds.length; f++) stores[k.folds().get(f).of()].readInto(folds[f], o, idx);
        }
        for (int f = 0; f < folds.length; f++) {
            int s = k.stores().size() + f;
            folds[f].write(b.outputs()[s], b.outputTypes()[s], 0, outCount);
        }
    }

    /** Writes one local into a store's output, from its lane (the dtype's rounding or wrapping is {@link Elements}'). */
    private record Writer(MemorySegment out, DType type, Place place, int local, boolean exact, boolean perRow) {
        static Writer of(Kernel.Store s, MemorySegment out, DType type, Locals locals, Map<String, Long> env) {
            return new Writer(out, type, Place.of(s, env), s.local(), locals.isExact(s.local()), s.perRow());
        }

        void write(long rowMajor, long[] idx, Frame f) {
            long p = place.at(rowMajor, idx);
            if (exact) Elements.setLong(out, type, p, f.intLocals[local]);
            else Elements.set(out, type, p, f.locals[local]);
        }

        /** Folds the element this store wrote for {@code rowMajor} into {@code acc}. */
        void readInto(Accumulator acc, long rowMajor, long[] idx) {
            long p = place.at(rowMajor, idx);
            if (DTypes.isExact(type)) acc.add(Elements.getLong(out, type, p));
            else acc.add(Elements.get(out, type, p));
        }
    }

    /**
     * A reduction's running value, in the lane of its dtype: a wrapping long for integers and bool, a double for floats
     * (max and min propagate NaN, as torch's reductions do; a mean divides by the count).
     */
    private static final class Accumulator {
        private final ReduceFn fn;
        private final DType type;
        private final boolean exact;
        private double value;
        private long exactValue;

        Accumulator(ReduceFn fn, DType type) {
            this.fn = fn;
            this.type = type;
            this.exact = DTypes.isExact(type);
        }

        Accumulator reset() {
            value = init(fn);
            exactValue = switch (fn) {
                case SUM, MEAN -> 0;
                case MAX -> Long.MIN_VALUE;
                case MIN -> Long.MAX_VALUE;
            };
            return this;
        }

        void add(double v) {
            if (exact) exactValue = combine(fn, exactValue, DTypes.toLong(v, DType.INT64));
            else value = combine(fn, value, v);
        }

        void add(long v) {
            if (exact) exactValue = combine(fn, exactValue, v);
            else value = combine(fn, value, (double) v);
        }

        /** Adds local {@code local} of the frame, from its lane. */
        void add(Frame f, int local, boolean exactLocal) {
            if (exactLocal) add(f.intLocals[local]);
            else add(f.locals[local]);
        }

        /** The result over {@code count} values, rounded to the dtype, as reduction {@code slot} of the frame. */
        void finishInto(Frame f, int slot, long count) {
            if (exact) f.intReduced[slot] = DTypes.wrap(exactValue, type);
            else f.reduced[slot] = DTypes.round(finish(fn, value, count), type);
        }

        /** The result over {@code count} values, rounded to the dtype, into element {@code at} of {@code out}. */
        void write(MemorySegment out, DType outType, long at, long count) {
            if (exact) Elements.setLong(out, outType, at, DTypes.wrap(exactValue, type));
            else Elements.set(out, outType, at, DTypes.round(finish(fn, value, count), type));
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

    /** Integers: sums wrap as Java's {@code long} does. */
    static long combine(ReduceFn f, long acc, long v) {
        return switch (f) {
            case SUM, MEAN -> acc + v;
            case MAX -> Math.max(acc, v);
            case MIN -> Math.min(acc, v);
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
