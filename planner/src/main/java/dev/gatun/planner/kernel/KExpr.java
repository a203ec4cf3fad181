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

    /**
     * A row of a table picked by data: element {@code offset + sum(strides[k] * i_k) + rowStride * v} of kernel input
     * {@code input}, where {@code v} is the value {@code index} loads (an i32/i64 index). This is {@code index_select}
     * read by the kernel that consumes its result ({@code PlanOptions.gatherFusion}), so the picked rows are never
     * copied. A backend checks {@code 0 <= v < rows} for every element and otherwise fails the launch with
     * {@code op}'s refusal (the message {@code index_select} gives). The table's address depends on data: a pass that
     * asks whether an input is read aligned, contiguously or element for element must answer no for {@code input}
     * ({@link #gathers}).
     */
    record Gather(int input, SymInt offset, List<SymInt> strides, SymInt rowStride, long rows, Load index, String op, DType dtype) implements KExpr {
        public Gather { strides = List.copyOf(strides); }
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
            case Gather g -> out.add(g.index());
            case Apply a -> a.args().forEach(x -> loads(x, out));
            case Cast c -> loads(c.x(), out);
            default -> {}
        }
    }

    /** Whether {@code e} (not following locals) reads a table row picked by data ({@link Gather}). */
    static boolean gathers(KExpr e) {
        return switch (e) {
            case Gather g -> true;
            case Apply a -> a.args().stream().anyMatch(KExpr::gathers);
            case Cast c -> gathers(c.x());
            default -> false;
        };
    }
}
