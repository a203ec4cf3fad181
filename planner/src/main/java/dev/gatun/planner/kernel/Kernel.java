package dev.gatun.planner.kernel;

import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.ir.lower.Expr;
import dev.gatun.planner.PlanBuffer;

import java.util.ArrayList;
import java.util.List;
import java.util.StringJoiner;

/**
 * A fused kernel: a loop over {@code ranges} (and, for a reduction, {@code reductionRanges}) that evaluates
 * its locals in order and stores some of them. Pointwise kernels store local values at the row-major index
 * of the ranges; a reduction kernel reduces its last local over the reduction ranges and stores the result.
 *
 * @param inputs  the storages the kernel reads, addressed by {@link KExpr.Load#input()}
 * @param locals  one expression per fused op, in order; later ones may refer to earlier ones
 * @param stores  which locals are written to which buffers
 * @param ops     the fused ops' names, for the kernel's name and its printout
 */
public record Kernel(String name, List<SymInt> ranges, ReduceFn reduce, List<SymInt> reductionRanges, List<PlanBuffer> inputs,
                     List<KExpr> locals, List<Store> stores, List<String> ops) {

    public Kernel {
        ranges = List.copyOf(ranges);
        reductionRanges = List.copyOf(reductionRanges);
        inputs = List.copyOf(inputs);
        locals = List.copyOf(locals);
        stores = List.copyOf(stores);
        ops = List.copyOf(ops);
        if (reduce != null && stores.size() != 1) throw new IllegalArgumentException("a reduction kernel stores exactly one result");
    }

    /** Writes local {@code local} into buffer {@code buffer}. */
    public record Store(PlanBuffer buffer, int local) {}

    public boolean isReduction() { return reduce != null; }

    public List<PlanBuffer> outputs() { return stores.stream().map(Store::buffer).toList(); }

    /** The kernel as readable pseudo-code, close to what a backend generates. */
    public String source() {
        var sb = new StringBuilder();
        var idx = new StringJoiner(", ");
        for (int k = 0; k < ranges.size(); k++) idx.add("i" + k + " < " + ranges.get(k));
        sb.append("kernel ").append(name).append('(').append(names(inputs)).append(") -> ").append(names(outputs())).append('\n');
        sb.append("  for (").append(ranges.isEmpty() ? "scalar" : idx.toString()).append(") {\n");
        String pad = "    ";
        if (reduce != null) {
            var r = new StringJoiner(", ");
            int base = ranges.size();
            for (int k = 0; k < reductionRanges.size(); k++) r.add("i" + (base + k) + " < " + reductionRanges.get(k));
            sb.append(pad).append("acc = ").append(reduce.opName()).append(" over (").append(r).append(") {\n");
            pad = "      ";
        }
        for (int i = 0; i < locals.size(); i++)
            sb.append(pad).append('t').append(i).append(" = ").append(format(locals.get(i))).append('\n');
        if (reduce != null) sb.append("    }\n");
        for (Store s : stores)
            sb.append("    ").append(s.buffer().name()).append("[i] = ").append(reduce != null ? "acc" : "t" + s.local()).append('\n');
        sb.append("  }");
        return sb.toString();
    }

    public String format(KExpr e) {
        return switch (e) {
            case KExpr.Load l -> inputs.get(l.input()).name() + "[" + Expr.index(l.offset(), l.strides()) + "]";
            case KExpr.Const c -> Double.toString(c.value());
            case KExpr.Local l -> "t" + l.index();
            case KExpr.Cast c -> "(" + c.dtype() + ") " + format(c.x());
            case KExpr.Apply a -> {
                var args = new ArrayList<String>();
                a.args().forEach(x -> args.add(format(x)));
                yield switch (a.fn()) {
                    case ADD -> "(" + args.get(0) + " + " + args.get(1) + ")";
                    case SUB -> "(" + args.get(0) + " - " + args.get(1) + ")";
                    case MUL -> "(" + args.get(0) + " * " + args.get(1) + ")";
                    case DIV -> "(" + args.get(0) + " / " + args.get(1) + ")";
                    case WHERE -> "(" + args.get(0) + " ? " + args.get(1) + " : " + args.get(2) + ")";
                    default -> a.fn().opName() + "(" + String.join(", ", args) + ")";
                };
            }
        };
    }

    /** Whether this kernel only applies {@code fn} elementwise (used to recognize plain copies). */
    public boolean isPlainCopy() {
        return reduce == null && locals.size() == 1 && locals.getFirst() instanceof KExpr.Apply a && a.fn() == PointwiseFn.IDENTITY;
    }

    @Override public String toString() { return source(); }

    private static String names(List<PlanBuffer> bs) {
        var j = new StringJoiner(", ");
        for (PlanBuffer b : bs) j.add(b.name());
        return j.toString();
    }

}
