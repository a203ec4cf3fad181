package dev.gatun.planner;

import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import dev.gatun.ir.lower.Buffer;
import dev.gatun.ir.lower.ExternCall;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * Gated products, a pass over the scheduled order of work, before liveness and memory planning: a product of a few
 * rows whose only reader is the kernel right after it computing {@code silu(x[r, c]) * x[r, H + c]} over the two halves
 * of its columns (a decode layer's gate|up projection and its SwiGLU) joins that kernel as one {@link Work.GatedWork},
 * which becomes one {@link Step.GatedProduct}. The product's kernel can then compute each gate column beside its up
 * column and store the SwiGLU of the pair: one launch a layer fewer, and the product's own output is never written.
 * Joined before memory planning, the two are one point of the order: the SwiGLU's output is written while the
 * product's inputs are still read, so the planner never gives it their slot (apart, it may: the product reads x, the
 * SwiGLU then writes over it).
 *
 * <p>What is checked ({@link #misfit}): the product has at most {@value #MAX_ROWS} rows and no batch, its right
 * operand lies transposed (a weight {@code [2H, k]}), and it writes a whole buffer of its own, row-major, that is no
 * graph output; the kernel is pointwise over {@code [rows, H]}, reads that buffer only, as two loads at offsets 0 and H
 * of its rows, and stores {@code silu} of the first times the second, row-major, into a buffer of the same type; and no
 * other work reads the product's buffer. Anything else stays two steps. A backend whose product kernel cannot take
 * one (another type, a misaligned address) runs the two steps it holds, which compute the same values.
 */
final class GatedProducts {
    private GatedProducts() {}

    /** The most rows of a product this pass joins: a decode step's batch. */
    static final int MAX_ROWS = 8;

    /** {@code order} with each product and its SwiGLU joined; {@code outputs}: the graph's output storages, which must stay written. */
    static List<Work> join(List<Work> order, BufferTable table, Set<Buffer> outputs) {
        var out = new ArrayList<Work>(order.size());
        for (int i = 0; i < order.size(); i++) {
            if (i + 1 < order.size() && order.get(i) instanceof Work.ExternWork e && e.call().call() instanceof ExternCall.Matmul m
                    && order.get(i + 1) instanceof Work.KernelWork k && k.reads().contains(e.call())) {
                String why = outputs.contains(e.call()) ? "the product is a graph output"
                        : !readOnlyBy(order, e.call(), i + 1) ? "another step reads the product"
                        : misfit(table.of(e.call()), m.transA(), m.transB(), k.kernel());
                if (why == null) {
                    out.add(new Work.GatedWork(e, k));
                    i++;
                    continue;
                }
                // a SwiGLU after a product that stays a launch of its own says why, under its launch
                if (k.kernel().ops().contains("silu")) {
                    var notes = new ArrayList<>(k.notes());
                    notes.add("not one launch with the product before it (a gated product): " + why);
                    out.add(e);
                    out.add(new Work.KernelWork(k.kernel(), k.writes(), k.reads(), k.elementwise(), notes));
                    i++;
                    continue;
                }
            }
            out.add(order.get(i));
        }
        return out;
    }

    /** Whether no work but the one at {@code reader} reads {@code b}. */
    private static boolean readOnlyBy(List<Work> order, Buffer b, int reader) {
        for (int i = 0; i < order.size(); i++) if (i != reader && order.get(i).reads().contains(b)) return false;
        return true;
    }

    /** Null where the product {@code m} and the kernel {@code l} may be one launch; else why not. */
    static String misfit(Step.Matmul m, Step.Launch l) { return misfit(m.output(), m.transA(), m.transB(), l.kernel()); }

    /** Null where the product writing {@code x} and the kernel {@code k} may be one launch; else why not. */
    static String misfit(PlanBuffer x, boolean transA, boolean transB, Kernel k) {
        if (transA || !transB) return "the product's right operand does not lie transposed";
        if (!x.shape().isStatic() || x.shape().rank() != 2 || x.isView() || x.part() != null || !x.strides().equals(x.shape().contiguousStrides()))
            return "the product's output is not a whole row-major matrix of static shape";
        long[] xs = x.shape().sizes();
        long rows = xs[0], h = xs[1] / 2;
        if (rows < 1 || rows > MAX_ROWS) return "the product has " + rows + " rows, not 1 to " + MAX_ROWS;
        if (xs[1] % 2 != 0 || h < 1) return "the product's columns do not halve";
        if (k.isReduction() || !k.folds().isEmpty() || k.inputs().size() != 1 || k.inputs().getFirst().storage() != x.storage() || k.inputs().getFirst().isView())
            return "the kernel is not pointwise over the product's output alone";
        if (k.ranges().size() != 2 || !k.ranges().get(0).isConstant() || !k.ranges().get(1).isConstant()
                || k.ranges().get(0).constant() != rows || k.ranges().get(1).constant() != h)
            return "the kernel does not run over [" + rows + ", " + h + "]";
        if (k.stores().size() != 1 || k.locals().size() != 2) return "the kernel is not one SwiGLU";
        Kernel.Store st = k.stores().getFirst();
        PlanBuffer o = st.buffer();
        if (st.perRow() || !st.isRowMajor() || st.local() != 1 || o.isView() || o.part() != null || o.dtype() != x.dtype() || !o.shape().isStatic()
                || o.shape().rank() != 2 || o.shape().sizes()[0] != rows || o.shape().sizes()[1] != h)
            return "the kernel does not store one [" + rows + ", " + h + "] matrix of the product's type";
        // t0 = silu(x[r, c]), t1 = t0 * x[r, H + c] (either order)
        if (!(k.locals().get(0) instanceof KExpr.Apply silu) || silu.fn() != PointwiseFn.SILU || !isHalfLoad(silu.args().getFirst(), 0, rows, h))
            return "the kernel's first value is not silu of the gate half";
        if (!(k.locals().get(1) instanceof KExpr.Apply mul) || mul.fn() != PointwiseFn.MUL || mul.args().size() != 2)
            return "the kernel's second value is not a product";
        KExpr p = mul.args().get(0), q = mul.args().get(1);
        boolean ok = p instanceof KExpr.Local a && a.index() == 0 && isHalfLoad(q, h, rows, h)
                || q instanceof KExpr.Local b && b.index() == 0 && isHalfLoad(p, h, rows, h);
        if (!ok) return "the kernel does not multiply silu of the gate half by the up half";
        if (silu.dtype() != x.dtype() || mul.dtype() != x.dtype()) return "the kernel computes in another type than the product's";
        return null;
    }

    /** Whether {@code e} loads input 0 at (r, offset + c) of a [rows, 2h] row-major matrix, in its own type. */
    private static boolean isHalfLoad(KExpr e, long offset, long rows, long h) {
        if (!(e instanceof KExpr.Load ld) || ld.input() != 0 || ld.strides() == null || ld.strides().size() != 2) return false;
        if (!ld.offset().isConstant() || ld.offset().constant() != offset) return false;
        var s0 = ld.strides().get(0);
        var s1 = ld.strides().get(1);
        boolean rowStride = s0.isConstant() && (s0.constant() == 2 * h || rows == 1 && s0.constant() == 0);
        return rowStride && s1.isConstant() && s1.constant() == 1;
    }
}
