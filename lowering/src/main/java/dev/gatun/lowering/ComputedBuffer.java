package dev.gatun.lowering;

import dev.gatun.ir.Layout;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.ReduceFn;

import java.util.LinkedHashSet;
import java.util.List;
import java.util.StringJoiner;

/**
 * A buffer computed by a loop: pointwise over its shape, or a reduction whose iteration space is the output
 * dimensions followed by the reduced dimensions. Element {@code (i0..ir)} of the output is stored at the
 * row-major position of the buffer's shape.
 */
public final class ComputedBuffer extends Buffer {
    private final String label;
    private final Expr body;
    private final ReduceFn reduceFn;
    private final List<SymInt> reductionRanges;
    private List<SymInt> ranges;   // made on first use (see ranges())

    ComputedBuffer(String name, String label, Layout layout, Expr body, ReduceFn reduceFn, List<SymInt> reductionRanges, int origin) {
        super(name, layout, origin);
        this.label = label;
        this.body = body;
        this.reduceFn = reduceFn;
        this.reductionRanges = List.copyOf(reductionRanges);
    }

    /** The ops this loop computes, for kernel names ("add", "sum", "copy"). */
    public String label() { return label; }

    public Expr body() { return body; }

    public boolean isReduction() { return reduceFn != null; }

    /** The reduction, or null for a pointwise loop. */
    public ReduceFn reduceFn() { return reduceFn; }

    public List<SymInt> reductionRanges() { return reductionRanges; }

    /** Output iteration ranges (the buffer's shape); unmodifiable. */
    public List<SymInt> ranges() {
        List<SymInt> r = ranges;   // asked for many times per buffer while planning: made once (a race makes equal lists)
        if (r == null) {
            var dims = type().shape().dims();
            var made = new SymInt[dims.size()];
            for (int i = 0; i < made.length; i++) made[i] = dims.get(i).asSymInt();
            ranges = r = List.of(made);
        }
        return r;
    }

    @Override public List<Buffer> reads() {
        var out = new LinkedHashSet<Buffer>();
        collect(body, out);
        return List.copyOf(out);
    }

    static void collect(Expr e, java.util.Set<Buffer> out) {
        switch (e) {
            case Expr.Load l -> out.add(l.storage());
            case Expr.Apply a -> a.args().forEach(x -> collect(x, out));
            case Expr.Cast c -> collect(c.x(), out);
            case Expr.Constant c -> { }
        }
    }

    @Override public String format() {
        if (!isReduction()) return head("ComputedBuffer") + " = pointwise " + label + ": " + Expr.format(body);
        var j = new StringJoiner(", ", "[", "]");
        reductionRanges.forEach(r -> j.add(r.toString()));
        return head("ComputedBuffer") + " = reduction " + reduceFn.opName() + " over " + j + ": " + Expr.format(body);
    }
}
