package dev.gatun.planner;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.lowering.ComputedBuffer;
import dev.gatun.planner.kernel.KExpr;

import java.util.List;

/**
 * A row kernel whose element loop is <em>narrowed</em>: a pointwise loop over the kernel's rows and {@code w} of its
 * row's {@code n = K w} columns that reads the row's element members at columns {@code c + k w} (RoPE's rotate_half
 * reads the normalised head at {@code c} and {@code c + d/2}: {@code x1 cos1 - x2 sin1}, {@code x2 cos2 + x1 sin2})
 * joins the row kernel, as Inductor makes an RMSNorm and the RoPE of its heads one kernel. The kernel then walks
 * {@code w} columns per row; each element member and each reduction's folded value is computed at the {@code K}
 * columns {@code c + k w} an element stands for (its loads shifted, {@link Shift}), a reduction folds the {@code K}
 * values of an element together before folding along the row ({@link #fold}: a reassociated sum, as a GPU's tree
 * reduction is), and a stored element member is stored {@code K} times. The norm's fold over the head is shared; the
 * pointwise tail is evaluated at two columns. Pure functions of ranges, loads and expressions.
 */
final class RowColumns {
    private RowColumns() {}

    /**
     * The narrowed kernel dimensions ({@code rows}, then {@code w}) for a pointwise loop over {@code ranges} joining a
     * row kernel over {@code rows} and {@code row}: its last dimension is {@code w}, a proper divisor
     * of the row's one dimension {@code n}; null otherwise.
     */
    static List<SymInt> narrowDims(List<SymInt> ranges, List<SymInt> rows, List<SymInt> row) {
        if (row.size() != 1 || !row.getFirst().isConstant()) return null;
        SymInt last = ranges.isEmpty() ? SymInt.ONE : ranges.getLast();
        if (last.equals(SymInt.ONE) || !last.isConstant()) return null;
        long n = row.getFirst().constant(), w = last.constant();
        if (w >= n || n % w != 0) return null;
        return LoopIndex.concat(rows, List.of(last));
    }

    /** The plan note of a kernel narrowed to {@code w} columns for a loop reading its row at {@code copies} blocks. */
    static String note(int w, int copies) {
        return "joined this row kernel with its element loop narrowed to " + w + " of " + (copies * w) + " columns: it reads the row at "
                + copies + " column blocks, each computed where it is read";
    }

    /**
     * Which block of {@code w} columns a load reads (0: the loader's own column, k: column {@code c + k w}), given its
     * offset and its strides over the narrowed kernel dimensions {@code dims} ({@code got}) and where the loaded
     * member holds each dimension ({@code want}); -1 when the load is not that member's element at such a column.
     */
    static int block(SymInt offset, List<SymInt> got, List<SymInt> want, List<SymInt> dims, int copies) {
        for (int k = 0; k < dims.size(); k++) if (!dims.get(k).equals(SymInt.ONE) && !got.get(k).equals(want.get(k))) return -1;
        if (offset.equals(SymInt.ZERO)) return 0;
        SymInt stride = want.getLast();
        if (!offset.isConstant() || !stride.isConstant() || stride.constant() <= 0) return -1;
        long step = dims.getLast().constant() * stride.constant(), o = offset.constant();
        return o % step != 0 || o / step <= 0 || o / step >= copies ? -1 : (int) (o / step);
    }

    /**
     * Why the reductions among {@code members} cannot be folded {@code copies} columns at a time, or null when they can:
     * sums and means of floating values (a mean only for a power-of-two count, where the division by it is exact).
     */
    static String unfoldable(List<ComputedBuffer> members, int copies) {
        for (ComputedBuffer m : members) {
            if (!m.isReduction()) continue;
            ReduceFn fn = m.reduceFn();
            if (fn != ReduceFn.SUM && fn != ReduceFn.MEAN)
                return "its " + fn.opName() + " would have to be folded " + copies + " blocks at a time (only a sum or a mean is)";
            if (!m.body().dtype().isFloating()) return "its " + fn.opName() + " of " + m.body().dtype() + " values is not a floating sum";
            if (fn == ReduceFn.MEAN && Integer.bitCount(copies) != 1)
                return "its mean over " + copies + " column blocks would divide by " + copies + " inexactly";
        }
        return null;
    }

    /**
     * The value a reduction folds for an element standing for {@code K} columns: the sum of its values there, held in
     * float32 for half types (as the reduction's accumulator is), for a mean divided by {@code K} (exact: a power of two).
     */
    static KExpr fold(ReduceFn fn, List<KExpr> at) {
        DType t = at.getFirst().dtype(), held = t.isHalf() ? DType.FLOAT32 : t;
        KExpr sum = held == t ? at.getFirst() : new KExpr.Cast(at.getFirst(), held);
        for (int k = 1; k < at.size(); k++) {
            KExpr x = held == t ? at.get(k) : new KExpr.Cast(at.get(k), held);
            sum = new KExpr.Apply(PointwiseFn.ADD, List.of(sum, x), held);
        }
        if (fn == ReduceFn.MEAN) sum = new KExpr.Apply(PointwiseFn.MUL, List.of(sum, new KExpr.Const(1.0 / at.size(), held)), held);
        return sum;
    }

    /**
     * Where a member is evaluated in a narrowed kernel: {@code k} blocks of {@code width} columns right of the element
     * (its loads' offsets moved along {@code rowDim}); a {@code reader} (a narrowed member) takes each earlier member at
     * the block its load names. {@link #NONE} in a kernel that is not narrowed.
     */
    record Shift(int k, long width, int rowDim, boolean reader) {
        static final Shift NONE = new Shift(0, 0, -1, false);

        /** The offset that moves a load with these kernel strides {@code k} blocks along the row. */
        SymInt offsetOf(List<SymInt> strides) { return k == 0 ? SymInt.ZERO : strides.get(rowDim).times(k * width); }

        /** Which copy of a member a load reads: a reader's load names its block by its offset; a copy reads its own. */
        int copyOf(SymInt offset, List<SymInt> strides) {
            if (!reader || offset.equals(SymInt.ZERO)) return k;
            return (int) (offset.constant() / (width * strides.get(rowDim).constant()));
        }
    }
}
