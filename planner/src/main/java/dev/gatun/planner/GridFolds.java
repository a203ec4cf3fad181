package dev.gatun.planner;

import dev.gatun.ir.SymInt;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.List;

/**
 * Folds a whole reduction of what a row kernel stores once per row into that kernel: {@code y = sum(sum(x, -1))} is
 * one launch, whose rows store their sums and whose last block to finish adds them up ({@link Kernel.Fold}), not a
 * second kernel reading 4096 values. Taken when the reduction kernel does nothing else: one input, the row kernel's
 * row-major per-row buffer, read whole in its row order, folded once and stored as it is; and when the rows are a
 * static count of at most {@link #MAX_ROWS}, which one block reads back quickly. The row kernel's launch says
 * which kernel it took in.
 */
final class GridFolds {
    private GridFolds() {}

    static List<Work> apply(List<Work> works) {
        var out = new ArrayList<>(works);
        // the last kernel so far that stores each buffer, by position in out: one lookup per whole reduction
        var maker = new java.util.IdentityHashMap<PlanBuffer, Integer>();
        for (int j = 0; j < out.size(); j++) {
            if (!(out.get(j) instanceof Work.KernelWork whole)) continue;
            Integer i = isWholeReduction(whole.kernel()) ? maker.get(whole.kernel().inputs().getFirst()) : null;
            if (i != null && fold(out, i, whole)) {
                out.remove(j--);
                for (PlanBuffer b : ((Work.KernelWork) out.get(i)).kernel().outputs()) maker.put(b, i);
                continue;
            }
            for (PlanBuffer b : whole.kernel().outputs()) maker.put(b, j);
        }
        return out;
    }

    /** Folds whole reduction {@code whole} into the kernel at {@code i} that stores its rows, where that one can take it. */
    private static boolean fold(List<Work> out, int i, Work.KernelWork whole) {
        var made = (Work.KernelWork) out.get(i);
        PlanBuffer rows = whole.kernel().inputs().getFirst();
        int store = perRowStore(made.kernel(), rows, whole.kernel());
        if (store < 0) return false;
        Kernel k2 = whole.kernel();
        var r = k2.reductions().getFirst();
        var fold = new Kernel.Fold(k2.stores().getFirst().buffer(), r.fn(), store, k2.held(r.dtype()));
        var writes = new ArrayList<>(made.writes());
        writes.addAll(whole.writes());
        var notes = new ArrayList<>(made.notes());
        notes.add("takes in " + k2.name() + ": " + fold.buffer().name() + " = " + r.fn().opName() + " of " + rows.name()
                + " over the rows, by the last block to finish (one launch, not two)");
        out.set(i, new Work.KernelWork(made.kernel().withFolds(List.of(fold)), writes, made.reads(), made.elementwise(), notes));
        return true;
    }

    /** A kernel that only reduces its one input, whole and in row-major order, into one stored value. */
    private static boolean isWholeReduction(Kernel k) {
        if (!k.ranges().isEmpty() || k.reductions().size() != 1 || k.inputs().size() != 1 || k.stores().size() != 1 || !k.folds().isEmpty()) return false;
        var r = k.reductions().getFirst();
        if (!(k.locals().get(r.local()) instanceof KExpr.Load l) || l.input() != 0 || !l.offset().equals(SymInt.ZERO)) return false;
        SymInt step = SymInt.ONE;
        for (int d = k.reductionRanges().size() - 1; d >= 0; d--) {
            if (!l.strides().get(d).equals(step)) return false;
            step = step.times(k.reductionRanges().get(d));
        }
        if (l.dtype() != k.inputs().getFirst().dtype()) return false;
        var st = k.stores().getFirst();
        KExpr v = k.locals().get(st.local());
        while (v instanceof KExpr.Local loc && loc.dtype() == k.locals().get(loc.index()).dtype()) v = k.locals().get(loc.index());
        return st.perRow() && st.isRowMajor() && v instanceof KExpr.Reduced red && red.reduction() == 0 && st.buffer().dtype() == r.dtype()
                && red.dtype() == r.dtype();
    }

    /** The most rows a fold takes: one block reads them all back (a second kernel spreads more over the GPU). */
    static final long MAX_ROWS = 16384;

    /**
     * The index of {@code k}'s row-major per-row store into {@code rows} over the rows {@code whole} reduces, or -1;
     * the rows must be a static count of at most {@link #MAX_ROWS}.
     */
    private static int perRowStore(Kernel k, PlanBuffer rows, Kernel whole) {
        if (!k.isReduction() || !k.ranges().equals(whole.reductionRanges())) return -1;
        SymInt count = SymInt.product(k.ranges());
        if (!count.isConstant() || count.constant() > MAX_ROWS) return -1;
        for (int s = 0; s < k.stores().size(); s++) {
            var st = k.stores().get(s);
            if (st.buffer() == rows && st.perRow() && st.isRowMajor()) return s;
        }
        return -1;
    }
}
