package dev.gatun.planner.kernel;

import dev.gatun.ir.SymInt;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.lowering.Expr;
import dev.gatun.planner.PlanBuffer;

import java.util.ArrayList;
import java.util.List;
import java.util.StringJoiner;

/**
 * A fused kernel: a loop over {@code ranges} (the rows) that evaluates its locals in order and stores some of them.
 *
 * <p>A <b>pointwise</b> kernel has no reductions and no reduction ranges: every local is evaluated once per index
 * and stored at its place. A <b>row</b> kernel also loops over {@code reductionRanges} (the row's elements) and
 * has one or more {@link Reduction}s over them, computed one after the other for each row: reduction {@code p}
 * folds its local over the row, and locals after it may read its result as {@link KExpr.Reduced}. This is how a
 * softmax (max, then a sum of exponentials, then the division) or a layer norm (mean, variance, the scaled row) is
 * one kernel that reads its row from memory once. Each local therefore has a <em>phase</em>: the number of
 * reductions that must be finished before it can be evaluated ({@link #phase}). For each row, phase {@code p}
 * loops over the row's elements evaluating the locals of phase at most {@code p} that reduction {@code p} needs;
 * the last phase evaluates what the element stores need and stores it; row stores come after.
 *
 * <p>Index variables: {@code i0..} are the ranges, then the reduction ranges. A local is <em>per element</em> when it
 * loads with a non-zero stride on a reduction dimension or reads a per-element local; otherwise it is one value per
 * row (a reduction result, a bias of the row).
 *
 * @param inputs     the storages the kernel reads, addressed by {@link KExpr.Load#input()}
 * @param locals     one expression per fused op, in order; later ones may refer to earlier ones
 * @param reductions the row's reductions, in the order they are computed (empty for a pointwise kernel)
 * @param stores     which locals are written to which buffers, and where
 * @param ops        the fused ops' names, for the kernel's name and its printout
 * @param floatIntermediates f16/bf16 results of the fused ops and reductions are held in float32 between the ops and
 *                   rounded to their type only where stored (or cast by the graph), as {@code torch.compile} and XLA
 *                   compute a fused kernel; false: every op's result is rounded to its type, as the reference
 *                   interpreter and eager PyTorch do ({@code PlanOptions.roundEachOp})
 */
public record Kernel(String name, List<SymInt> ranges, List<SymInt> reductionRanges, List<PlanBuffer> inputs,
                     List<KExpr> locals, List<Reduction> reductions, List<Store> stores, List<String> ops,
                     boolean floatIntermediates, List<Fold> folds) {

    /** A kernel that rounds every op's result to its type. */
    public Kernel(String name, List<SymInt> ranges, List<SymInt> reductionRanges, List<PlanBuffer> inputs,
                  List<KExpr> locals, List<Reduction> reductions, List<Store> stores, List<String> ops) {
        this(name, ranges, reductionRanges, inputs, locals, reductions, stores, ops, false, List.of());
    }

    /**
     * A whole reduction of what a row kernel stores once per row, done by the same kernel after its rows: {@code buffer}
     * (one element) = {@code fn} over every row of the values per-row store {@code of} stored, rounded to {@code dtype}
     * (as a second kernel reading that buffer would compute it). On a GPU the last block to finish folds them.
     */
    public record Fold(PlanBuffer buffer, ReduceFn fn, int of, DType dtype) {}

    /**
     * Checks the kernel is well formed. Only the planner builds kernels (from a graph it has already checked), so an
     * {@code IllegalArgumentException} here is a planner bug, never a user's error.
     */
    public Kernel {
        ranges = List.copyOf(ranges);
        reductionRanges = List.copyOf(reductionRanges);
        inputs = List.copyOf(inputs);
        locals = List.copyOf(locals);
        reductions = List.copyOf(reductions);
        stores = List.copyOf(stores);
        ops = List.copyOf(ops);
        folds = List.copyOf(folds);
        if (reductions.isEmpty() != reductionRanges.isEmpty())
            throw new IllegalArgumentException("kernel " + name + ": reduction ranges go with at least one reduction");
        for (int i = 0; i < locals.size(); i++) check(name, locals.get(i), i, reductions.size());
        int[] phases = phases(locals);
        for (int p = 0; p < reductions.size(); p++) {
            int l = reductions.get(p).local();
            if (l < 0 || l >= locals.size()) throw new IllegalArgumentException("kernel " + name + ": reduction " + p + " folds local t" + l + " it does not have");
            if (phases[l] > p) throw new IllegalArgumentException("kernel " + name + ": reduction " + p + " folds t" + l + ", which needs a later reduction");
        }
        boolean[] element = perElement(locals, ranges.size());
        for (Store s : stores) {
            if (s.local() < 0 || s.local() >= locals.size()) throw new IllegalArgumentException("kernel " + name + " stores local t" + s.local() + " it does not have");
            if (s.perRow() && element[s.local()]) throw new IllegalArgumentException("kernel " + name + ": t" + s.local() + " differs along the row; it cannot be stored once per row");
            if (s.perRow() && reductions.isEmpty()) throw new IllegalArgumentException("kernel " + name + ": a pointwise kernel has no rows to store per row");
            int dims = s.perRow() ? ranges.size() : ranges.size() + reductionRanges.size();
            if (s.strides() != null && s.strides().size() != dims)
                throw new IllegalArgumentException("kernel " + name + ": the store into " + s.buffer().name() + " has " + s.strides().size() + " strides for " + dims + " dimensions");
        }
        for (Fold f : folds) {
            if (f.of() < 0 || f.of() >= stores.size() || !stores.get(f.of()).perRow() || !stores.get(f.of()).isRowMajor())
                throw new IllegalArgumentException("kernel " + name + ": the fold into " + f.buffer().name() + " reads store " + f.of() + ", which is not a row-major store per row");
            if (!f.buffer().shape().symNumel().equals(SymInt.ONE))
                throw new IllegalArgumentException("kernel " + name + ": the fold into " + f.buffer().name() + " needs a buffer of one element");
        }
    }

    /** A pointwise kernel over {@code ranges}. */
    public static Kernel pointwise(String name, List<SymInt> ranges, List<PlanBuffer> inputs, List<KExpr> locals, List<Store> stores, List<String> ops) {
        return new Kernel(name, ranges, List.of(), inputs, locals, List.of(), stores, ops);
    }

    /**
     * Reduction {@code p} of a row kernel: folds local {@code local} with {@code fn} over the row; the result is rounded
     * to {@code dtype} (the reduced buffer's), which is what {@link KExpr.Reduced} reads.
     */
    public record Reduction(ReduceFn fn, int local, DType dtype) {}

    /**
     * Writes local {@code local} into {@code buffer}: once per row ({@code perRow}, indexed by the ranges) or once per
     * element (indexed by the ranges and then the reduction ranges). The element goes to {@code offset + sum(strides[k] *
     * i_k)}; {@code strides == null} means the row-major place of the index in the buffer, at offset 0.
     */
    public record Store(PlanBuffer buffer, int local, boolean perRow, SymInt offset, List<SymInt> strides) {
        public Store {
            if (offset == null) offset = SymInt.ZERO;
            if (strides != null) strides = List.copyOf(strides);
        }

        /** An element store at the row-major place. */
        public Store(PlanBuffer buffer, int local) { this(buffer, local, false, SymInt.ZERO, null); }

        /** A store once per row, at the row-major place of the row index. */
        public static Store perRow(PlanBuffer buffer, int local) { return new Store(buffer, local, true, SymInt.ZERO, null); }

        /** The same store at {@code offset + sum(strides[k] * i_k)}. */
        public Store at(SymInt offset, List<SymInt> strides) { return new Store(buffer, local, perRow, offset, strides); }

        public boolean isRowMajor() { return strides == null && offset.equals(SymInt.ZERO); }
    }

    public boolean isReduction() { return !reductions.isEmpty(); }

    /**
     * Whether a local reads a table row picked by data ({@link KExpr.Gather}): such a kernel reads that input neither
     * aligned nor element for element, so no pass may write over it in place or split it into tiles.
     */
    public boolean gathers() { return locals.stream().anyMatch(KExpr::gathers); }

    /** This kernel with {@code more} folds of its per-row stores after its rows (see {@link Fold}). */
    public Kernel withFolds(List<Fold> more) {
        var all = new ArrayList<>(folds);
        all.addAll(more);
        return new Kernel(name, ranges, reductionRanges, inputs, locals, reductions, stores, ops, floatIntermediates, all);
    }

    /** This kernel holding its f16/bf16 intermediates in float32 where it has any (see {@link #floatIntermediates}). */
    public Kernel withFloatIntermediates() {
        return floatIntermediates || !roundsHalfValues() ? this : new Kernel(name, ranges, reductionRanges, inputs, locals, reductions, stores, ops, true, folds);
    }

    /** This kernel rounding every op's result to its type (see {@link #floatIntermediates}). */
    public Kernel withRoundEachOp() {
        return floatIntermediates ? new Kernel(name, ranges, reductionRanges, inputs, locals, reductions, stores, ops, false, folds) : this;
    }

    /** Whether some op or reduction of this kernel has an f16/bf16 result (what {@link #floatIntermediates} changes). */
    public boolean roundsHalfValues() {
        for (Reduction r : reductions) if (r.dtype().isHalf()) return true;
        for (KExpr e : locals) if (appliesHalf(e)) return true;
        return false;
    }

    private static boolean appliesHalf(KExpr e) {
        return switch (e) {
            case KExpr.Apply a -> {
                if (a.dtype().isHalf()) yield true;
                for (KExpr x : a.args()) if (appliesHalf(x)) yield true;   // loops, not streams: these walks run for every kernel
                yield false;
            }
            case KExpr.Cast c -> appliesHalf(c.x());
            default -> false;
        };
    }

    /**
     * The dtype an op's or reduction's result of {@code t} is rounded to: {@code t}, or float32 for a half type where
     * this kernel holds its intermediates in float ({@link #floatIntermediates}).
     */
    public DType held(DType t) { return floatIntermediates && t.isHalf() ? DType.FLOAT32 : t; }

    /**
     * The least memory this kernel moves: every input read once and every stored buffer written once, in bytes (what a
     * row kernel that keeps its row on chip, or a pointwise kernel, moves; the plan prints it beside each launch).
     */
    public record Traffic(SymInt read, SymInt written) {
        @Override public String toString() { return "reads " + bytes(read) + ", writes " + bytes(written); }

        private static String bytes(SymInt b) { return b.isConstant() ? b.constant() + " B" : b + " B"; }
    }

    public Traffic traffic() {
        SymInt read = SymInt.ZERO, written = SymInt.ZERO;
        for (PlanBuffer b : inputs) read = read.plus(b.shape().symNumel().times(SymInt.of(b.dtype().byteSize())));
        for (PlanBuffer b : outputs().stream().distinct().toList()) written = written.plus(b.shape().symNumel().times(SymInt.of(b.dtype().byteSize())));
        return new Traffic(read, written);
    }

    /** What the kernel writes: its stores' buffers, then its folds'. */
    public List<PlanBuffer> outputs() {
        var out = new ArrayList<PlanBuffer>();
        for (Store s : stores) out.add(s.buffer());
        for (Fold f : folds) out.add(f.buffer());
        return out;
    }

    /** For each local, how many of the row's reductions must be done before it can be evaluated. */
    public int[] phases() { return phases(locals); }

    /** For each local, whether it differs along the row (see the class comment). */
    public boolean[] perElement() { return perElement(locals, ranges.size()); }

    /**
     * Which locals phase {@code p} evaluates for each element: for {@code p <} the number of reductions, what reduction
     * {@code p} folds and what that reads; for the last phase, what the element stores need. A local may be evaluated in
     * several phases (a row kernel recomputes rather than keeps a row).
     */
    public boolean[] neededIn(int p) {
        boolean[] out = new boolean[locals.size()];
        if (p < reductions.size()) out[reductions.get(p).local()] = true;
        else for (Store s : stores) if (!s.perRow()) out[s.local()] = true;
        return withReads(out);
    }

    /** Marks in {@code marked} every local the marked ones read, directly or through others (a local reads only earlier ones); returns it. */
    public boolean[] withReads(boolean[] marked) {
        for (int i = marked.length - 1; i >= 0; i--) if (marked[i]) markReads(locals.get(i), marked);
        return marked;
    }

    /** Marks in {@code out} the locals {@code e} reads directly. */
    public static void markReads(KExpr e, boolean[] out) {
        switch (e) {
            case KExpr.Local l -> out[l.index()] = true;
            case KExpr.Apply a -> a.args().forEach(x -> markReads(x, out));
            case KExpr.Cast c -> markReads(c.x(), out);
            default -> { }
        }
    }

    /** How many reductions {@code e} needs finished, given the locals' phases so far. */
    public static int phase(KExpr e, int[] phases) {
        return switch (e) {
            case KExpr.Reduced r -> r.reduction() + 1;
            case KExpr.Local l -> phases[l.index()];
            case KExpr.Apply a -> {
                int max = 0;
                for (KExpr x : a.args()) max = Math.max(max, phase(x, phases));
                yield max;
            }
            case KExpr.Cast c -> phase(c.x(), phases);
            case KExpr.Load l -> 0;
            case KExpr.Gather g -> 0;
            case KExpr.Const c -> 0;
        };
    }

    private static int[] phases(List<KExpr> locals) {
        int[] out = new int[locals.size()];
        for (int i = 0; i < out.length; i++) out[i] = phase(locals.get(i), out);
        return out;
    }

    private static boolean[] perElement(List<KExpr> locals, int rank) {
        boolean[] out = new boolean[locals.size()];
        for (int i = 0; i < out.length; i++) out[i] = perElement(locals.get(i), out, rank);
        return out;
    }

    private static boolean perElement(KExpr e, boolean[] known, int rank) {
        return switch (e) {
            case KExpr.Load l -> {
                for (int d = rank; d < l.strides().size(); d++) if (!l.strides().get(d).equals(SymInt.ZERO)) yield true;
                yield false;
            }
            case KExpr.Gather g -> {
                for (int d = rank; d < g.strides().size(); d++) if (!g.strides().get(d).equals(SymInt.ZERO)) yield true;
                yield perElement(g.index(), known, rank);
            }
            case KExpr.Local l -> known[l.index()];
            case KExpr.Apply a -> {
                for (KExpr x : a.args()) if (perElement(x, known, rank)) yield true;
                yield false;
            }
            case KExpr.Cast c -> perElement(c.x(), known, rank);
            case KExpr.Reduced r -> false;
            case KExpr.Const c -> false;
        };
    }

    private static void check(String name, KExpr e, int at, int reductions) {
        switch (e) {
            case KExpr.Local l -> {
                if (l.index() < 0 || l.index() >= at) throw new IllegalArgumentException("kernel " + name + ": t" + at + " reads t" + l.index() + ", which is not an earlier local");
            }
            case KExpr.Reduced r -> {
                if (r.reduction() < 0 || r.reduction() >= reductions) throw new IllegalArgumentException("kernel " + name + ": t" + at + " reads reduction r" + r.reduction() + " it does not have");
            }
            case KExpr.Apply a -> a.args().forEach(x -> check(name, x, at, reductions));
            case KExpr.Cast c -> check(name, c.x(), at, reductions);
            default -> { }
        }
    }

    /** The kernel as readable pseudo-code, close to what a backend generates. */
    public String source() {
        var sb = new StringBuilder();
        sb.append("kernel ").append(name).append('(').append(names(inputs)).append(") -> ").append(names(outputs())).append('\n');
        if (floatIntermediates) sb.append("  // f16/bf16 results held in f32 between ops, rounded where stored\n");
        sb.append("  for (").append(ranges.isEmpty() ? "scalar" : loopIndex(0, ranges)).append(") {\n");
        if (!isReduction()) {
            for (int i = 0; i < locals.size(); i++) sb.append("    t").append(i).append(" = ").append(format(locals.get(i))).append('\n');
            for (Store s : stores) sb.append("    ").append(storeText(s)).append('\n');
            return sb.append("  }").toString();
        }
        boolean[] element = perElement();
        String row = loopIndex(ranges.size(), reductionRanges);
        for (int p = 0; p <= reductions.size(); p++) {
            boolean last = p == reductions.size();
            boolean[] needed = neededIn(p);
            if (last && stores.stream().allMatch(Store::perRow)) break;
            if (!last) {
                Reduction r = reductions.get(p);
                sb.append("    r").append(p).append(" = ").append(r.fn().opName()).append(" of t").append(r.local()).append(" over (").append(row).append(") {\n");
            } else {
                sb.append("    for (").append(row).append(") {\n");
            }
            for (int i = 0; i < locals.size(); i++) if (needed[i]) sb.append("      t").append(i).append(" = ").append(format(locals.get(i))).append('\n');
            if (last) for (Store s : stores) if (!s.perRow()) sb.append("      ").append(storeText(s)).append('\n');
            sb.append("    }\n");
        }
        boolean[] rowNeeds = new boolean[locals.size()];
        for (Store s : stores) if (s.perRow()) rowNeeds[s.local()] = true;
        for (int i = rowNeeds.length - 1; i >= 0; i--) if (rowNeeds[i]) markReads(locals.get(i), rowNeeds);
        for (int i = 0; i < locals.size(); i++) if (rowNeeds[i] && !element[i]) sb.append("    t").append(i).append(" = ").append(format(locals.get(i))).append('\n');
        for (Store s : stores) if (s.perRow()) sb.append("    ").append(storeText(s)).append('\n');
        sb.append("  }");
        for (Fold f : folds)
            sb.append("\n  ").append(f.buffer().name()).append("[0] = ").append(f.fn().opName()).append(" of ").append(stores.get(f.of()).buffer().name())
                    .append(" over the rows (after them, in this kernel)");
        return sb.toString();
    }

    private static String loopIndex(int first, List<SymInt> rs) {
        var j = new StringJoiner(", ");
        for (int k = 0; k < rs.size(); k++) j.add("i" + (first + k) + " < " + rs.get(k));
        return j.toString();
    }

    private String storeText(Store s) {
        String at = s.strides() == null ? (s.offset().equals(SymInt.ZERO) ? "i" : s.offset() + " + i") : Expr.index(s.offset(), s.strides());
        return s.buffer().name() + "[" + at + "] = t" + s.local();
    }

    public String format(KExpr e) {
        return switch (e) {
            case KExpr.Load l -> inputs.get(l.input()).name() + "[" + Expr.index(l.offset(), l.strides()) + "]";
            case KExpr.Gather g -> inputs.get(g.input()).name() + "[" + Expr.index(g.offset(), g.strides()) + " + " + g.rowStride() + "*" + format(g.index()) + "]";
            case KExpr.Const c -> Double.toString(c.value());
            case KExpr.Local l -> "t" + l.index();
            case KExpr.Reduced r -> "r" + r.reduction();
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
        return !isReduction() && locals.size() == 1 && locals.getFirst() instanceof KExpr.Apply a && a.fn() == PointwiseFn.IDENTITY
                && stores.stream().allMatch(Store::isRowMajor);
    }

    @Override public String toString() { return source(); }

    private static String names(List<PlanBuffer> bs) {
        var j = new StringJoiner(", ");
        for (PlanBuffer b : bs) j.add(b.name());
        return j.toString();
    }
}
