package dev.gatun.planner.kernel;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.PointwiseFn;

import java.util.List;

/**
 * Expressions of a fused kernel. Index variables are the kernel's iteration dimensions: its ranges, then
 * (for a reduction) its reduction ranges.
 */
public sealed interface KExpr {
    DType dtype();

    /** Element {@code offset + sum(strides[k] * i_k)} of kernel input {@code input}. */
    record Load(int input, SymInt offset, List<SymInt> strides, DType dtype) implements KExpr {
        public Load { strides = List.copyOf(strides); }
    }

    record Const(double value, DType dtype) implements KExpr {}

    record Apply(PointwiseFn fn, List<KExpr> args, DType dtype) implements KExpr {
        public Apply { args = List.copyOf(args); }
    }

    record Cast(KExpr x, DType dtype) implements KExpr {}

    /** The result of the kernel's reduction {@code reduction} for the current row (see {@link Kernel}). */
    record Reduced(int reduction, DType dtype) implements KExpr {}

    /** The value of an earlier local of the same kernel at the same index. */
    record Local(int index, DType dtype) implements KExpr {}

    /** Every load in {@code e}, in order, added to {@code out} (earlier locals it reads are not followed). */
    static void loads(KExpr e, List<Load> out) {
        switch (e) {
            case Load l -> out.add(l);
            case Apply a -> a.args().forEach(x -> loads(x, out));
            case Cast c -> loads(c.x(), out);
            default -> {}
        }
    }
}
