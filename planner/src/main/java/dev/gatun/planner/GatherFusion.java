package dev.gatun.planner;

import dev.gatun.ir.SymInt;
import dev.gatun.ir.ops.IndexSelect;
import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ExternBuffer;
import dev.gatun.lowering.ExternCall;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.List;

/**
 * Fusion across a gather ({@link PlanOptions#gatherFusion}): an {@code index_select} whose result only kernels read is
 * not made; each of its readers reads the table's row through the indices itself ({@link KExpr.Gather}), as Inductor's
 * consumer kernel reads {@code x[idx[i], j]}. {@code x.indexSelect(0, idx).add(1)} is then one launch instead of two,
 * and the picked rows are neither written nor read back.
 *
 * <p>A reader's load of the result at {@code o + sum(s_k * i_k)} is split into the index's position and the column in
 * the row: a stride that is a multiple of the row's length moves the index, any other the column. The split is exact
 * only if the column stays inside the row for every index of the loop, so it is taken only with constant, non-negative
 * strides and loop sizes where {@code o mod row + sum over column strides of s_k * (n_k - 1) < row}; otherwise (and for
 * a result that is an output, a part of a concatenation, or read by anything but a kernel, or by a kernel that may
 * join a product or a collective ({@link #joinsAProductOrCollective}), or a table or indices that are views or parts)
 * the op stays a launch of its own, as without the option. A kernel that gathers is not elementwise
 * (nothing is written over its inputs in place) and no later pass joins it with a product or a collective.
 */
final class GatherFusion {
    private GatherFusion() {}

    /** {@code works} with every index_select that can be read through its indices taken into its readers. */
    static List<Work> apply(List<Work> works, BufferTable table, ByBuffer.Set outputs) {
        var out = new ArrayList<>(works);
        for (Work w : works)
            if (w instanceof Work.ExternWork e && e.call().call() instanceof ExternCall.Registered r && r.spec() == IndexSelect.SPEC)
                fuse(out, e, table, outputs);
        return out;
    }

    private static void fuse(List<Work> works, Work.ExternWork e, BufferTable table, ByBuffer.Set outputs) {
        ExternBuffer y = e.call();
        Buffer x = y.inputs().get(0), ids = y.inputs().get(1);
        if (outputs.contains(y) || Slices.isPart(y) || !y.extraOutputs().isEmpty() || !own(x, table) || !own(ids, table)) return;
        if (!table.of(y).isContiguous() || !y.type().shape().isStatic() || !x.type().shape().isStatic()) return;
        long rows = x.type().shape().dim(0).size();
        long row = rows == 0 ? 0 : x.type().shape().numel() / rows;
        if (row == 0) return;
        String op = "index_select(" + x.name() + ", " + ids.name() + ") -> " + y.name();
        var source = new Source(table.of(y), table.of(x), table.of(ids), row, rows, op);
        var rewritten = new ArrayList<Work.KernelWork>();
        var at = new ArrayList<Integer>();
        for (int i = 0; i < works.size(); i++) {
            Work w = works.get(i);
            if (w == e || !w.reads().contains(y)) continue;
            if (!(w instanceof Work.KernelWork k) || joinsAProductOrCollective(k, works)) return;
            Work.KernelWork r = reading(k, source, y, x, ids);
            if (r == null) return;
            rewritten.add(r);
            at.add(i);
        }
        if (rewritten.isEmpty()) return;
        for (int j = 0; j < at.size(); j++) works.set(at.get(j), rewritten.get(j));
        works.remove(e);
    }

    /**
     * Whether kernel {@code k} reads what a product or a collective writes, or writes what a collective reads: a kernel
     * a later pass may make that launch's epilogue or prologue ({@code ProductEpilogues}, {@code CollectiveFusion}),
     * which a gathering kernel never is. The op then stays a launch and the join is kept: a Llama's embedding, read by
     * the first residual add after the attention's output projection (and its all-reduce), keeps that add in the
     * product's (or the all-reduce's) launch, where reading the table through the indices would save one launch and
     * cost another.
     */
    private static boolean joinsAProductOrCollective(Work.KernelWork k, List<Work> works) {
        for (Work w : works) {
            if (!(w instanceof Work.ExternWork e) || !(e.call().call() instanceof ExternCall.Matmul || e.call().call() instanceof ExternCall.Collective)) continue;
            for (Buffer b : k.reads()) for (Buffer out : e.writes()) if (out.storage() == b.storage()) return true;
            if (e.call().call() instanceof ExternCall.Collective)
                for (Buffer b : k.writes()) for (Buffer in : e.reads()) if (in.storage() == b.storage()) return true;
        }
        return false;
    }

    /** The index_select's result, its table and indices as kernels see them, the table's row length and rows. */
    private record Source(PlanBuffer result, PlanBuffer table, PlanBuffer ids, long row, long rows, String op) {}

    /** Whether {@code b} is its own packed storage, neither a view nor a part of a concatenation. */
    private static boolean own(Buffer b, BufferTable table) {
        return b.storage() == b && !Slices.isPart(b) && table.of(b).isContiguous() && b.type().shape().isStatic();
    }

    /** {@code k} reading the table through the indices in place of the result, or null where a load cannot be split. */
    private static Work.KernelWork reading(Work.KernelWork w, Source s, Buffer y, Buffer x, Buffer ids) {
        Kernel k = w.kernel();
        int from = k.inputs().indexOf(s.result());
        if (from < 0) return null;
        for (PlanBuffer in : k.inputs()) if (in != s.result() && in.storage() == s.result()) return null;   // a view of it
        var extents = new ArrayList<SymInt>(k.ranges());
        extents.addAll(k.reductionRanges());
        for (SymInt n : extents) if (!n.isConstant()) return null;
        var inputs = new ArrayList<>(k.inputs());
        inputs.remove(from);
        int tableAt = index(inputs, s.table()), idsAt = index(inputs, s.ids());
        int[] remap = new int[k.inputs().size()];
        for (int i = 0; i < remap.length; i++) remap[i] = i < from ? i : i - 1;
        var rewrite = new Rewrite(from, remap, s, tableAt, idsAt, extents);
        var locals = new ArrayList<KExpr>();
        for (KExpr e : k.locals()) {
            KExpr r = rewrite.of(e);
            if (r == null) return null;
            locals.add(r);
        }
        var kernel = new Kernel(k.name(), k.ranges(), k.reductionRanges(), inputs, locals, k.reductions(), k.stores(), k.ops(),
                k.floatIntermediates(), k.folds());
        var reads = new ArrayList<Buffer>();
        for (Buffer b : w.reads()) if (b != y && !reads.contains(b)) reads.add(b);
        if (!reads.contains(x)) reads.add(x);
        if (!reads.contains(ids)) reads.add(ids);
        return new Work.KernelWork(kernel, w.writes(), reads, false, w.notes()).withNote("reads " + s.op() + " through its indices (gather fusion)");
    }

    /** Where {@code b} is among {@code inputs}, added at the end if it is not there. */
    private static int index(List<PlanBuffer> inputs, PlanBuffer b) {
        int i = inputs.indexOf(b);
        if (i >= 0) return i;
        inputs.add(b);
        return inputs.size() - 1;
    }

    /** A kernel's expressions with the loads of input {@code from} read through the indices, the other inputs renumbered. */
    private record Rewrite(int from, int[] remap, Source s, int tableAt, int idsAt, List<SymInt> extents) {
        KExpr of(KExpr e) {
            return switch (e) {
                case KExpr.Load l when l.input() == from -> gather(l);
                case KExpr.Load l -> new KExpr.Load(remap[l.input()], l.offset(), l.strides(), l.dtype());
                case KExpr.Gather g -> new KExpr.Gather(remap[g.input()], g.offset(), g.strides(), g.rowStride(), g.rows(),
                        (KExpr.Load) of(g.index()), g.op(), g.dtype());
                case KExpr.Apply a -> {
                    var args = new ArrayList<KExpr>();
                    for (KExpr x : a.args()) {
                        KExpr r = of(x);
                        if (r == null) yield null;
                        args.add(r);
                    }
                    yield new KExpr.Apply(a.fn(), args, a.dtype());
                }
                case KExpr.Cast c -> {
                    KExpr r = of(c.x());
                    yield r == null ? null : new KExpr.Cast(r, c.dtype());
                }
                case KExpr.Const c -> c;
                case KExpr.Local l -> l;
                case KExpr.Reduced r -> r;
            };
        }

        /** The load split into the index's position and the column in its row, or null where it cannot be. */
        private KExpr gather(KExpr.Load l) {
            if (!l.offset().isConstant() || l.offset().constant() < 0) return null;
            long row = s.row();
            long o = l.offset().constant(), reach = o % row;
            var idStrides = new ArrayList<SymInt>();
            var colStrides = new ArrayList<SymInt>();
            for (int d = 0; d < extents.size(); d++) {
                SymInt st = d < l.strides().size() ? l.strides().get(d) : SymInt.ZERO;
                if (!st.isConstant() || st.constant() < 0) return null;
                long v = st.constant(), n = extents.get(d).constant();
                if (v % row == 0) {
                    idStrides.add(SymInt.of(v / row));
                    colStrides.add(SymInt.ZERO);
                } else {
                    idStrides.add(SymInt.ZERO);
                    colStrides.add(st);
                    reach += v * Math.max(0, n - 1);
                }
            }
            if (reach >= row) return null;
            var index = new KExpr.Load(idsAt, SymInt.of(o / row), idStrides, s.ids().dtype());
            return new KExpr.Gather(tableAt, SymInt.of(o % row), colStrides, SymInt.of(row), s.rows(), index, s.op(), l.dtype());
        }
    }
}
