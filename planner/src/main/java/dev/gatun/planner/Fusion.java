package dev.gatun.planner;

import dev.gatun.ir.SymInt;
import dev.gatun.ir.Layout;
import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ComputedBuffer;
import dev.gatun.lowering.ConcatBuffer;
import dev.gatun.lowering.ConstantBuffer;
import dev.gatun.lowering.Expr;
import dev.gatun.lowering.ExternBuffer;
import dev.gatun.lowering.ExternOutputBuffer;
import dev.gatun.lowering.InputBuffer;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.lowering.ViewBuffer;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Groups loops into kernels. A pointwise loop joins an earlier kernel when it reads one of the kernel's results
 * element by element (vertical fusion) or shares an input with it (horizontal fusion), provided everything it reads
 * is ready by then. A reduction absorbs a pointwise producer that nothing else needs.
 *
 * <p>A reduction starts a <em>row kernel</em> (see {@link Kernel}): its output index is the row, its reduced
 * dimensions the row's elements. Later loops join it in three roles: another reduction over the same rows (the
 * variance after the mean, softmax's sum after its max, a sum beside an amax), a pointwise loop over the whole
 * tensor that reads the row's reductions broadcast along the row (an <em>element</em> member: {@code x - mean}, the
 * normalised output), and a pointwise loop over the rows alone (a <em>row</em> member: {@code rsqrt(var + eps)}).
 * So a softmax, an RMSNorm or a layer norm is one kernel reading its input once. Size-1 dimensions never stop this:
 * loops are matched on their other dimensions.
 *
 * <p>Collectives, matmul and user ops are barriers: they stay extern calls. A fused result that nothing outside its
 * kernel needs is never stored.
 */
final class Fusion {
    /** How far back a loop looks for a kernel to join; keeps planning near-linear on huge graphs. */
    private static final int WINDOW = 64;

    private final LoweredGraph graph;
    // tables by buffer, in arrays by Buffer.id() (see ByBuffer)
    private final ByBuffer<List<Buffer>> consumers;
    private final ByBuffer.Set viewed, outputs, absorbed;
    private final List<Group> groups = new ArrayList<>();
    private final ByBuffer<Group> groupOf;
    /** The group (kernel or extern call) position a buffer is ready after; -1 for inputs and constants; {@link #NOT_PRODUCED} for views. */
    private final int[] producedAt;
    private static final int NOT_PRODUCED = Integer.MIN_VALUE;
    // each asked for several times per buffer; expression walks and stride products are the bulk of fusion's time
    private final ByBuffer<List<Buffer>> loads;
    private final ByBuffer<List<SymInt>> contiguous;
    private final ByBuffer<List<Expr.Load>> effective;
    /**
     * For each member of a kernel, which kernel dimension each of its own loop dimensions is (-1: size 1, dropped): set
     * as it joins, kept when its kernel is pulled into another, rewritten when a reduction makes its kernel a row kernel.
     */
    private final ByBuffer<int[]> dimsOf;

    private static final class Group {
        final int position;
        final ExternBuffer extern;
        final List<ComputedBuffer> members = new ArrayList<>(2);
        final Set<Buffer> reads = newSet(4);   // a group reads and holds a few buffers: small tables (a large graph has ~100k groups)
        /** The loop of a pointwise kernel; the rows of a row kernel. */
        List<SymInt> ranges;
        /** The elements of each row, for a row kernel; null for a pointwise kernel (until a reduction joins it). */
        List<SymInt> rowRanges;
        /** Fusion's decisions about this kernel worth explaining (by loop, until the kernel is named). */
        final List<String> notes = new ArrayList<>();
        /** Merged into a later group: emits nothing. */
        boolean merged;
        /**
         * A row kernel's element loop narrowed to this many columns (0: not narrowed) for the members in
         * {@link #narrowed}, which read its row at several columns (see {@link RowColumns}).
         */
        int narrow;
        final Set<ComputedBuffer> narrowed = newSet(2);

        Group(int position, ExternBuffer extern, List<SymInt> ranges, List<SymInt> rowRanges) {
            this.position = position;
            this.extern = extern;
            this.ranges = ranges;
            this.rowRanges = rowRanges;
        }

        boolean isRow() { return rowRanges != null; }

        /** The kernel's dimensions: the ranges, then the row's. */
        List<SymInt> dims() {
            if (!isRow()) return ranges;
            var all = new ArrayList<SymInt>(ranges);
            all.addAll(rowRanges);
            return all;
        }
    }

    private final BufferTable table;

    private Fusion(LoweredGraph graph, BufferTable table) {
        this.graph = graph;
        this.table = table;
        consumers = new ByBuffer<>(graph);
        viewed = new ByBuffer.Set(graph);
        outputs = new ByBuffer.Set(graph);
        absorbed = new ByBuffer.Set(graph);
        groupOf = new ByBuffer<>(graph);
        producedAt = new int[graph.buffers().size()];
        java.util.Arrays.fill(producedAt, NOT_PRODUCED);
        loads = new ByBuffer<>(graph);
        contiguous = new ByBuffer<>(graph);
        effective = new ByBuffer<>(graph);
        dimsOf = new ByBuffer<>(graph);
    }

    /** Where {@code b} is ready, or {@code otherwise} when nothing produces it (a view). */
    private int producedAt(Buffer b, int otherwise) {
        int at = producedAt[b.id()];
        return at == NOT_PRODUCED ? otherwise : at;
    }

    static List<Work> fuse(LoweredGraph graph, BufferTable table) { return new Fusion(graph, table).run(); }

    private List<Work> run() {
        index();
        for (Buffer b : graph.buffers()) {
            switch (b) {
                case InputBuffer i -> producedAt[b.id()] = -1;
                case ConstantBuffer c -> producedAt[b.id()] = -1;
                case ViewBuffer v -> { }
                case ConcatBuffer cat -> {   // written by its parts: ready once the last of them is
                    int at = -1;
                    for (Buffer w : cat.reads()) at = Math.max(at, producedAt(w, -1));
                    producedAt[cat.id()] = at;
                }
                case ExternOutputBuffer o -> producedAt[b.id()] = producedAt[o.call().id()];
                case ExternBuffer e -> {
                    var g = new Group(groups.size(), e, List.of(), null);
                    for (Buffer in : e.inputs()) g.reads.add(in.storage());
                    groups.add(g);
                    producedAt[e.id()] = g.position;
                }
                case ComputedBuffer c -> {
                    if (absorbed.contains(c)) continue;
                    Join join = findGroup(c);
                    Group g;
                    if (join == null) {
                        g = new Group(groups.size(), null, c.ranges(), c.isReduction() ? c.reductionRanges() : null);
                        dimsOf.put(c, LoopIndex.identity(g.dims().size()));
                        g.notes.addAll(refusals);
                        groups.add(g);
                        if (!g.isRow()) pullIn(c, g);
                    } else {
                        g = join.group();
                        g.notes.addAll(refusals);
                        g.notes.addAll(join.notes());
                        if (join.rows() != null) {
                            g.ranges = c.ranges();
                            g.rowRanges = c.reductionRanges();
                            join.rows().forEach(dimsOf::put);
                        }
                        dimsOf.put(c, join.dims());
                        if (join.narrow() > 0) {
                            g.narrow = join.narrow();
                            g.narrowed.add(c);
                        }
                        if (!g.isRow()) pullIn(c, g);
                    }
                    g.members.add(c);
                    groupOf.put(c, g);
                    for (Expr.Load l : effectiveLoads(c)) g.reads.add(l.storage());
                    producedAt[c.id()] = g.position;
                }
            }
        }
        var out = new ArrayList<Work>();
        int[] counter = {0};
        for (Group g : groups) if (!g.merged) out.add(g.extern != null ? externWork(g.extern) : kernelWork(g, counter));
        return out;
    }

    // ------------------------------------------------------------ analysis

    private void index() {
        for (Buffer b : graph.buffers()) {
            if (b instanceof ViewBuffer v) viewed.add(v.base());
            for (Buffer r : directReads(b)) consumers.computeIfAbsent(r, k -> new ArrayList<>(2)).add(b);
        }
        for (Buffer o : graph.outputs().values()) outputs.add(o.storage());
        // consumers come after their producers: deciding from the last buffer back lets a whole private chain in
        // front of a reduction be absorbed, each link into the next
        var buffers = graph.buffers();
        for (int i = buffers.size() - 1; i >= 0; i--)
            if (buffers.get(i) instanceof ComputedBuffer p && canAbsorb(p)) absorbed.add(p);
    }

    /** Storages whose data this buffer's own work reads (views do no work). */
    private Iterable<Buffer> directReads(Buffer b) {
        return switch (b) {
            case ComputedBuffer c -> loadsOf(c);
            case ExternBuffer e -> {
                var out = new ArrayList<Buffer>(e.inputs().size());
                for (Buffer in : e.inputs()) out.add(in.storage());
                yield out;
            }
            case ConcatBuffer cat -> cat.reads();   // its parts' writers: a group moving one of them must not pass its readers
            default -> List.of();
        };
    }

    /** The storages c loads, in first-load order (cached: callers only read it). */
    private List<Buffer> loadsOf(ComputedBuffer c) {
        return loads.computeIfAbsent(c, k -> {
            var s = new ArrayList<Buffer>(4);
            LoopIndex.collectLoads(c.body(), s);
            return s;
        });
    }

    /**
     * A private pointwise producer whose only consumer is a reduction, or a producer already absorbed into one, and
     * reads it with a plain index remap: its body is evaluated inside the reduction's loop instead of stored.
     */
    private boolean canAbsorb(ComputedBuffer p) {
        if (p.isReduction() || !p.layout().isFlexible() || outputs.contains(p) || viewed.contains(p)) return false;
        var users = consumers.getOrDefault(p, List.of());
        if (users.size() != 1 || !(users.getFirst() instanceof ComputedBuffer r) || !(r.isReduction() || absorbed.contains(r))) return false;
        var loads = LoopIndex.allLoadsOf(r.body(), p);
        // into an absorbed link, only what it reads once: each link is inlined where it is read, so a chain that
        // read each link twice would grow the reduction's body exponentially
        if (!r.isReduction() && loads.size() != 1) return false;
        List<SymInt> loop = r.isReduction() ? LoopIndex.concat(r.ranges(), r.reductionRanges()) : r.ranges();
        return loads.stream().allMatch(l -> LoopIndex.remap(l, p, loop) != null);
    }

    /**
     * A kernel to join, and where the joining loop's dimensions go in it; {@code rows}: a reduction turns a pointwise
     * kernel into a row kernel, and these are its members' new dimensions.
     */
    private record Join(Group group, int[] dims, Map<ComputedBuffer, int[]> rows, List<String> notes, boolean sibling, int narrow) {
        Join(Group group, int[] dims, Map<ComputedBuffer, int[]> rows, List<String> notes, boolean sibling) { this(group, dims, rows, notes, sibling, 0); }
    }

    /** Why the last loop looked at was kept out of a kernel it shares an input with (for its own kernel's notes). */
    private final List<String> refusals = new ArrayList<>();

    /** The latest kernel {@code c} may join, or null. */
    private Join findGroup(ComputedBuffer c) {
        refusals.clear();
        var loads = effectiveLoads(c);
        int ready = -1;
        for (Expr.Load l : loads) ready = Math.max(ready, producedAt(l.storage(), -1));
        Join sibling = null;   // a join only for writing the same concatenation: taken when no kernel c reads from or with is
        for (int i = groups.size() - 1; i >= 0 && i >= groups.size() - WINDOW; i--) {
            Group g = groups.get(i);
            if (g.position < ready) break;            // something c reads is produced after this kernel
            if (g.extern != null) continue;
            int[] own = fit(c, g);
            Join join = own != null ? tryJoin(c, g, loads, own, false) : c.isReduction() ? tryJoin(c, g, loads, null, false) : null;
            // a loop of a square shape fits in its own order too: when that order misreads a member, try the reordered one
            int[] other = join == null || join == REFUSED ? (c.isReduction() ? null : reordered(c, g)) : null;
            if (other != null) {
                Join again = tryJoin(c, g, loads, other, true);
                if (again != null) join = again;
            }
            if (join == null && g.isRow() && !c.isReduction()) join = narrowJoin(c, g, loads);
            if (join != null && join != REFUSED) {
                if (!join.sibling()) return join;
                if (sibling == null) sibling = join;
            }
        }
        return sibling;
    }

    /** A join refused for memory (its note is kept in {@link #refusals}). */
    private static final Join REFUSED = new Join(null, null, null, List.of(), false);

    /**
     * {@code c} joining {@code g} with its loop dimensions at {@code dims} (null: as the reduction that makes {@code g} a
     * row kernel, if it is one): the join, {@link #REFUSED}, or null when it does not fit or misreads a member.
     */
    private Join tryJoin(ComputedBuffer c, Group g, List<Expr.Load> loads, int[] dims, boolean reordered) {
        Map<ComputedBuffer, int[]> rows = null;
        if (dims == null) {
            rows = asRows(g, c);
            if (rows == null) return null;
            dims = LoopIndex.identity(c.ranges().size() + c.reductionRanges().size());
        }
        List<SymInt> kernelDims = rows == null ? g.dims() : LoopIndex.concat(c.ranges(), c.reductionRanges());
        boolean shares = false, vertical = false, ok = true;
        for (Expr.Load l : loads) {
            Buffer s = l.storage();
            if (groupOf.get(s) == g) {
                shares = vertical = true;
                ok &= alignedIn(l, dims, s, kernelDims, rows == null ? dimsOf.get(s) : rows.get(s));
            } else if (g.reads.contains(s)) shares = true;
            else if ((groupOf.get(s) != null || s instanceof ConcatBuffer) && producedAt[s.id()] == g.position) ok = false;
        }
        boolean sibling = !shares && writesSameConcat(c, g);
        if (!ok || !(shares || sibling)) return null;
        if (!vertical && !sibling && raisesPeak(c, g)) {
            refusals.add(c.label() + " (" + table.of(c).name() + ") kept out of the kernel making " + firstKept(g)
                    + ": both wait for a later extern call, and made together they would be alive together");
            return REFUSED;
        }
        var notes = new ArrayList<String>();
        if (reordered) notes.add(c.label() + " (" + table.of(c).name() + ") loop reordered to the kernel's: it reads "
                + firstMemberRead(c, g) + " in another order, so it stores through strides instead");
        if (rows != null) notes.add(c.reduceFn().opName() + " (" + table.of(c).name() + ") made this a row kernel: it reduces the rows the kernel's loop already walks");
        return new Join(g, dims, rows, notes, sibling);
    }

    /**
     * Class 4 ({@link RowColumns}): a pointwise loop over row kernel {@code g}'s rows and a divisor {@code w} of its row's
     * columns that reads {@code g}'s members at columns {@code c + k w} joins it with the kernel's element loop narrowed
     * to {@code w} columns. Null where it does not fit; refused with a note where {@code g}'s reductions cannot be folded
     * {@code K} columns at a time.
     */
    private Join narrowJoin(ComputedBuffer c, Group g, List<Expr.Load> loads) {
        var narrowDims = RowColumns.narrowDims(c.ranges(), g.ranges, g.rowRanges);
        if (narrowDims == null || (g.narrow != 0 && g.narrow != narrowDims.getLast().constant()) || !spreads(g.ranges, g.rowRanges)) return null;
        int w = (int) narrowDims.getLast().constant(), copies = (int) (g.rowRanges.getFirst().constant() / w);
        // c's loop in order, else in the kernel's order as a member it reads lies (heads rotated as [b, h, t, d] of [b, t, h, d])
        int[] dims = LoopIndex.match(c.ranges(), narrowDims);
        boolean reordered = false;
        if (dims != null && !readsBlocks(c, g, loads, dims, narrowDims, copies)) dims = null;
        for (int i = 0; dims == null && i < loads.size(); i++)
            if (groupOf.get(loads.get(i).storage()) == g && (dims = orderOnto(c, loads.get(i), narrowDims)) != null) {
                reordered = true;
                if (!readsBlocks(c, g, loads, dims, narrowDims, copies)) dims = null;
            }
        if (dims == null) return null;
        String why = RowColumns.unfoldable(g.members, copies);
        if (why != null) {
            refusals.add(c.label() + " (" + table.of(c).name() + ") kept out of the row kernel making " + table.of(g.members.getLast()).name()
                    + ": it reads the row at " + copies + " blocks of " + w + " columns, and " + why);
            return REFUSED;
        }
        var notes = new ArrayList<String>();
        if (g.narrow == 0) notes.add(c.label() + " (" + table.of(c).name() + ") " + RowColumns.note(w, copies));
        if (reordered) notes.add(c.label() + " (" + table.of(c).name() + ") loop reordered to the kernel's: it reads " + firstMemberRead(c, g)
                + " in another order, so it stores through strides instead");
        return new Join(g, dims, null, notes, false, w);
    }

    /**
     * Whether {@code c}, its loop at {@code dims} of narrowed kernel dimensions {@code narrowDims}, reads {@code g}'s
     * members only at whole blocks of columns of their own elements (its narrowed ones at its own), reads one at
     * least, and reads nothing made beside {@code g} (after it, in its place).
     */
    private boolean readsBlocks(ComputedBuffer c, Group g, List<Expr.Load> loads, int[] dims, List<SymInt> narrowDims, int copies) {
        boolean vertical = false;
        for (Expr.Load l : loads) {
            Buffer s = l.storage();
            if (groupOf.get(s) == g) {
                var got = LoopIndex.toKernel(l.strides(), dims, narrowDims.size());
                int k = RowColumns.block(l.offset(), got, wantIn(s, dimsOf.get(s), narrowDims.size()), narrowDims, copies);
                if (k < 0 || (k > 0 && g.narrowed.contains(s))) return false;
                vertical = true;
            } else if ((groupOf.get(s) != null || s instanceof ConcatBuffer) && producedAt[s.id()] == g.position) return false;
        }
        return vertical;
    }

    /**
     * Whether {@code c} writes a part of a concatenation that a member of {@code g} writes another part of: parts of one
     * loop shape are one kernel with a store per part ({@code cat(a.sin(), b.sin())}, and the parts of a pointwise loop
     * lowering computed through a concatenation), as Inductor makes a pointwise concatenation one kernel. Their results
     * share one storage, alive from the first part's write anyway, so joining them keeps nothing more alive.
     */
    private static boolean writesSameConcat(ComputedBuffer c, Group g) {
        if (c.slice() == null) return false;
        for (ComputedBuffer m : g.members) if (m.slice() != null && m.slice().cat() == c.slice().cat()) return true;
        return false;
    }

    /**
     * Whether joining {@code c} to {@code g} only because they read the same input would keep more alive at once than
     * the written order: {@code c}'s result waits for a later extern call (a matmul, a collective) and so does one of
     * {@code g}'s, so both would be alive together where the written order makes and consumes each in turn (K branches
     * of one input, each feeding a matmul). Fusion is scored by memory as well as by launches: such joins are not taken.
     */
    private boolean raisesPeak(ComputedBuffer c, Group g) {
        if (!keptForExtern(c)) return false;
        for (ComputedBuffer m : g.members) if (keptForExtern(m)) return true;
        return false;
    }

    /**
     * A regular-pool result of at least {@link #LARGE} bytes that a later extern call reads. Outputs live to the end
     * anyway; communication buffers live in their own pool, where a collective's inputs made by one launch is the point.
     */
    private String firstKept(Group g) {
        for (ComputedBuffer m : g.members) if (keptForExtern(m)) return table.of(m).name();
        return "?";
    }

    private String firstMemberRead(ComputedBuffer c, Group g) {
        for (Expr.Load l : effectiveLoads(c))
            if (groupOf.get(l.storage()) == g) return (l.storage() instanceof ComputedBuffer m ? m.label() + "'s result " : "") + table.of(l.storage()).name();
        return "?";
    }

    private boolean keptForExtern(Buffer b) {
        if (outputs.contains(b) || b.isSymmetric() || b.layout() instanceof Layout.CommBuffer) return false;
        SymInt bytes = bytesOf(b);
        if (bytes.isConstant() && bytes.constant() < LARGE) return false;
        for (Buffer u : consumers.getOrDefault(b, List.of())) if (u instanceof ExternBuffer) return true;
        return false;
    }

    /** Below this, keeping two results alive together costs less than the launch it saves. */
    static final long LARGE = 64 * 1024;

    /**
     * Where each loop dimension of {@code m} goes in {@code g}'s kernel, or null when {@code m} does not fit it. A
     * pointwise kernel takes loops of exactly its ranges. A row kernel takes reductions over its very rows and
     * elements, pointwise loops over the whole tensor (its rows then its elements) and pointwise loops over its rows;
     * dimensions of size 1 are matched to nothing.
     */
    private static int[] fit(ComputedBuffer m, Group g) {
        if (g.narrow != 0) return null;   // a narrowed row kernel takes only loops of its narrowed columns (narrowJoin)
        if (!g.isRow()) return !m.isReduction() && m.ranges().equals(g.ranges) ? LoopIndex.identity(g.ranges.size()) : null;
        if (m.isReduction())
            return m.ranges().equals(g.ranges) && m.reductionRanges().equals(g.rowRanges) ? LoopIndex.identity(g.ranges.size() + g.rowRanges.size()) : null;
        int[] element = LoopIndex.nonOneCount(g.rowRanges) > 0 && spreads(g.ranges, g.rowRanges) ? LoopIndex.match(m.ranges(), g.dims()) : null;
        return element != null ? element : LoopIndex.match(m.ranges(), g.ranges);
    }

    /** Rows at which a row kernel is wide enough to take the whole tensor's pointwise work (a backend runs rows apart). */
    static final long MANY_ROWS = 128;
    /** Rows short enough that even a few of them take the whole tensor's pointwise work. */
    static final long SHORT_ROW = 8192;

    /**
     * Whether a row kernel over these rows may also do the pointwise work over every element: not when a handful of
     * very long rows (a whole-tensor sum) would leave that work to a handful of workers.
     */
    static boolean spreads(List<SymInt> rows, List<SymInt> row) {
        SymInt n = SymInt.ONE, len = SymInt.ONE;
        for (SymInt r : rows) n = n.times(r);
        for (SymInt r : row) len = len.times(r);
        return !n.isConstant() || n.constant() >= MANY_ROWS || (len.isConstant() && len.constant() <= SHORT_ROW);
    }

    /**
     * Loop ordering after fusion: a pointwise loop that reads a member of {@code g} in another order than its own (the
     * copy in {@code z.t().contiguous()}) joins with its loop reordered to the kernel's, so the member is read where the
     * kernel holds it; its own result is then stored at its place through strides (a transposing store). The new order
     * comes from the strides of its first load of a member; null when that does not give one.
     */
    private int[] reordered(ComputedBuffer c, Group g) {
        if (g.narrow != 0) return null;
        for (Expr.Load l : effectiveLoads(c)) {
            Buffer s = l.storage();
            if (groupOf.get(s) != g || !l.offset().equals(SymInt.ZERO)) continue;
            int[] map = orderOnto(c, l, g.dims());
            if (map == null) return null;
            if (g.isRow() && !touchesRow(map, g) && LoopIndex.nonOneCount(g.rowRanges) > 0) return null;
            if (g.isRow() && touchesRow(map, g) && !spreads(g.ranges, g.rowRanges)) return null;
            return map;
        }
        return null;
    }

    /** {@code c}'s loop onto kernel dimensions {@code dims} as its load {@code l} of a member strides (see {@link LoopIndex#order}). */
    private int[] orderOnto(ComputedBuffer c, Expr.Load l, List<SymInt> dims) {
        return LoopIndex.order(c.ranges(), l.strides(), wantIn(l.storage(), dimsOf.get(l.storage()), dims.size()), dims);
    }

    /**
     * A reduction {@code c} joining pointwise kernel {@code g} (a sum beside a cos of the same input) makes it a row
     * kernel when {@code g}'s loop is {@code c}'s rows and elements: the members' dimensions in it, or null.
     */
    private Map<ComputedBuffer, int[]> asRows(Group g, ComputedBuffer c) {
        if (!c.isReduction() || g.isRow() || g.extern != null || LoopIndex.nonOneCount(c.reductionRanges()) == 0 || !spreads(c.ranges(), c.reductionRanges()))
            return null;
        var dims = LoopIndex.concat(c.ranges(), c.reductionRanges());
        // g's loop onto the row kernel's dimensions, then each member through its own map into g's loop: a member joined
        // with its loop reordered keeps its order (matching its own ranges in order would undo the reordering)
        int[] loop = LoopIndex.match(g.ranges, dims);
        if (loop == null) return null;
        var out = new IdentityHashMap<ComputedBuffer, int[]>();
        for (ComputedBuffer m : g.members) {
            int[] own = dimsOf.get(m), d = new int[own.length];
            for (int k = 0; k < own.length; k++) d[k] = own[k] < 0 ? -1 : loop[own[k]];
            out.put(m, d);
        }
        return out;
    }

    /**
     * Whether a load (in the loading loop's own dimensions, which go to {@code loaderDims} of {@code g}'s kernel) reads
     * member {@code s} of {@code g} where the kernel holds it: an element member at the current element, a reduction
     * or row member at the current row, the same for every element of the row.
     */
    private boolean alignedIn(Expr.Load l, int[] loaderDims, Buffer s, List<SymInt> dims, int[] own) {
        if (!l.offset().equals(SymInt.ZERO)) return false;
        var got = LoopIndex.toKernel(l.strides(), loaderDims, dims.size());
        var want = wantIn(s, own, dims.size());
        for (int k = 0; k < dims.size(); k++) if (!dims.get(k).equals(SymInt.ONE) && !got.get(k).equals(want.get(k))) return false;
        return true;
    }

    /** Member {@code s}'s row-major strides over a kernel's {@code rank} dimensions, its own dimensions at {@code own}. */
    private List<SymInt> wantIn(Buffer s, int[] own, int rank) {
        return LoopIndex.toKernel(contiguous.computeIfAbsent(s, b -> b.type().shape().contiguousStrides()), own, rank);
    }

    /** c's loads with absorbed producers expanded into their own loads, all in c's loop dimensions (cached). */
    private List<Expr.Load> effectiveLoads(ComputedBuffer c) {
        return effective.computeIfAbsent(c, k -> {
            var out = new ArrayList<Expr.Load>();
            expand(c.body(), null, c.ranges().size() + c.reductionRanges().size(), out);
            return out;
        });
    }

    private void expand(Expr e, Remap remap, int rank, List<Expr.Load> out) {
        switch (e) {
            case Expr.Load l0 -> {
                Expr.Load l = remap == null ? l0 : remap.apply(l0);
                if (absorbed.contains(l.storage())) {
                    ComputedBuffer p = (ComputedBuffer) l.storage();
                    expand(p.body(), new Remap(LoopIndex.remapAccepted(l, p), rank), rank, out);
                } else out.add(l);
            }
            case Expr.Apply a -> { for (Expr x : a.args()) expand(x, remap, rank, out); }
            case Expr.Cast c -> expand(c.x(), remap, rank, out);
            case Expr.Constant c -> { }
        }
    }

    /**
     * Whether the load reads element {@code i} of row-major {@code s} at iteration index {@code i}. A loop
     * dimension of size 1 only ever has index 0, so its stride does not matter (lowering writes 0 there): such
     * keepdim shapes ({@code [R,1]}) fuse like any other.
     */
    /**
     * Pulls into {@code g} the earlier pointwise kernels whose results {@code c} (joining {@code g}) reads, so
     * {@code sin(b) + sin(c)} is one kernel, not two: where the earlier kernel has the same iteration space, every
     * load of its results by {@code c} and by {@code g}'s members is element by element, and nothing that already
     * reads its results runs between it and {@code g}.
     */
    private void pullIn(ComputedBuffer c, Group g) {
        for (Buffer s : loadsOf(c)) {
            Group h = groupOf.get(s);
            if (h == null || h == g || h.merged || h.isRow() || h.extern != null || h.position > g.position
                    || g.position - h.position > WINDOW || !h.ranges.equals(g.ranges) || !movable(h, g, c)) continue;
            String past = externBetween(h, g);
            if (past != null) {
                if (!keepsNoMoreAlive(h, c)) continue;
                for (ComputedBuffer m : h.members)
                    if (readOnlyBy(m, h, c)) g.notes.add(m.label() + " (" + table.of(m).name() + ") made in this kernel, after "
                            + past + ": only this kernel reads it, so it is never stored, and what it reads is no larger");
            }
            mergeInto(h, g);
        }
        pullInSiblings(c, g);
    }

    /** Moves every member of earlier kernel {@code h} to the front of {@code g}; {@code h} emits nothing. */
    private void mergeInto(Group h, Group g) {
        for (ComputedBuffer m : h.members) {
            groupOf.put(m, g);
            producedAt[m.id()] = g.position;
        }
        g.members.addAll(0, h.members);
        g.notes.addAll(0, h.notes);
        g.reads.addAll(h.reads);
        h.members.clear();
        h.reads.clear();
        h.merged = true;
    }

    /**
     * Pulls into {@code g} the earlier pointwise kernels of its loop that write other parts of the concatenation {@code c}
     * writes a part of ({@link #writesSameConcat}): {@code cat(a + 1, b + 2) + 10}, computed part by part, is one kernel.
     * Not past an extern call (what the earlier kernel reads would stay alive across it), nor past a reader of its results.
     */
    private void pullInSiblings(ComputedBuffer c, Group g) {
        if (c.slice() == null) return;
        for (int i = g.position - 1; i >= 0 && i >= g.position - WINDOW; i--) {
            Group h = groups.get(i);
            if (h.extern != null) break;
            if (h.merged || h.isRow() || !h.ranges.equals(g.ranges) || !writesSameConcat(c, h) || !movable(h, g, c)) continue;
            mergeInto(h, g);
        }
    }

    /** The first extern call placed between {@code h} and {@code g} (as "the matmul making buf5"), or null when none is. */
    private String externBetween(Group h, Group g) {
        for (int i = h.position + 1; i < g.position; i++) {
            Group x = groups.get(i);
            if (x.extern != null) return "the " + x.extern.call().opName() + " making " + table.of(x.extern).name();
        }
        return null;
    }

    /**
     * Whether making {@code h}'s results later, inside {@code c}'s kernel, keeps no more bytes alive across the extern
     * calls in between: what {@code h} reads (now alive until {@code c}'s kernel) is at most what it no longer stores
     * ({@code silu(gate) * up}: the gate projection instead of its silu, the same size). Unknown sizes: not moved.
     */
    private boolean keepsNoMoreAlive(Group h, ComputedBuffer c) {
        SymInt read = SymInt.ZERO, saved = SymInt.ZERO;
        for (Buffer s : h.reads)
            if (!(s instanceof InputBuffer || s instanceof ConstantBuffer) && !outputs.contains(s) && groupOf.get(s) != h)
                read = read.plus(bytesOf(s));
        for (ComputedBuffer m : h.members) if (readOnlyBy(m, h, c)) saved = saved.plus(bytesOf(m));
        return read.isConstant() && saved.isConstant() && read.constant() <= saved.constant();
    }

    /** Whether only {@code h}'s own members and {@code c} read {@code m}, and it is not an output. */
    private boolean readOnlyBy(ComputedBuffer m, Group h, ComputedBuffer c) {
        if (outputs.contains(m) || viewed.contains(m)) return false;
        for (Buffer u : consumers.getOrDefault(m, List.of())) if (u != c && groupOf.get(u) != h) return false;
        return true;
    }

    private static SymInt bytesOf(Buffer b) { return b.type().shape().symNumel().times(SymInt.of(b.type().dtype().byteSize())); }

    /** Whether {@code h}'s results may be made at {@code g}'s place instead: read element-wise there, and by nothing in between. */
    private boolean movable(Group h, Group g, ComputedBuffer c) {
        var readers = new ArrayList<ComputedBuffer>(g.members);
        readers.add(c);
        for (ComputedBuffer m : h.members) {
            // in the kernel's coordinates: a reader or a member joined with its loop reordered is not where its own
            // loop index says, so a load that is row-major in the reader's own loop may still miss the element
            for (ComputedBuffer r : readers)
                for (Expr.Load l : LoopIndex.allLoadsOf(r.body(), m))
                    if (!aligned(l, m, g.ranges) || !alignedIn(l, dimsOf.get(r), m, g.ranges, dimsOf.get(m))) return false;
            for (Buffer u : consumers.getOrDefault(m, List.of())) {
                if (u == c || groupOf.get(u) == h || groupOf.get(u) == g) continue;
                if (absorbed.contains(u)) return false;
                int at = producedAt[u.id()];
                if (at != NOT_PRODUCED && at < g.position) return false;   // a reader already placed before g
            }
        }
        return true;
    }

    private boolean aligned(Expr.Load l, Buffer s, List<SymInt> ranges) {
        return aligned(l.offset(), l.strides(), contiguous.computeIfAbsent(s, b -> b.type().shape().contiguousStrides()), ranges);
    }

    static boolean aligned(SymInt offset, List<SymInt> strides, List<SymInt> rowMajor, List<SymInt> ranges) {
        if (!offset.equals(SymInt.ZERO) || strides.size() != rowMajor.size() || strides.size() != ranges.size()) return false;
        for (int k = 0; k < strides.size(); k++)
            if (!strides.get(k).equals(rowMajor.get(k)) && !ranges.get(k).equals(SymInt.ONE)) return false;
        return true;
    }

    // ------------------------------------------------------------ building works

    private Work externWork(ExternBuffer e) {
        var writes = new ArrayList<Buffer>();
        writes.add(e);
        writes.addAll(e.extraOutputs());
        var reads = new ArrayList<Buffer>(e.inputs().size());   // each input's storage once, in order
        for (Buffer in : e.inputs()) if (!reads.contains(in.storage())) reads.add(in.storage());
        return new Work.ExternWork(e, writes, List.copyOf(reads));
    }

    private Work kernelWork(Group g, int[] counter) {
        var inputs = new ArrayList<Buffer>();
        var locals = new ArrayList<KExpr>();
        var ops = new ArrayList<String>();
        var valueOf = new IdentityHashMap<Buffer, KExpr[]>(g.members.size());   // a member's value at each column block (one but in a narrowed kernel)
        var reductions = new ArrayList<Kernel.Reduction>();
        int rank = g.dims().size();
        int copies = g.narrow == 0 ? 1 : (int) (g.rowRanges.getFirst().constant() / g.narrow);
        List<SymInt> dims = g.narrow == 0 ? g.dims() : LoopIndex.concat(g.ranges, List.of(SymInt.of(g.narrow)));
        for (ComputedBuffer m : g.members) {
            int[] md = dimsOf.get(m);
            Remap own = LoopIndex.isIdentity(md, rank) ? null : new Remap(md, rank);
            boolean narrowed = g.narrowed.contains(m);
            int n = narrowed || !touchesRow(md, g) ? 1 : copies;   // a wide element member or reduction: at each column block
            var at = new ArrayList<KExpr>(n);
            for (int k = 0; k < n; k++)
                at.add(convert(m.body(), g, inputs, valueOf, own, g.narrow == 0 ? RowColumns.Shift.NONE : new RowColumns.Shift(k, g.narrow, g.ranges.size(), narrowed)));
            var values = new KExpr[copies];
            if (m.isReduction()) {
                locals.add(n == 1 ? at.getFirst() : RowColumns.fold(m.reduceFn(), at));
                reductions.add(new Kernel.Reduction(m.reduceFn(), locals.size() - 1, m.type().dtype()));
                java.util.Arrays.fill(values, new KExpr.Reduced(reductions.size() - 1, m.type().dtype()));
            } else {
                for (int k = 0; k < copies; k++) {
                    if (k < n) locals.add(at.get(k));
                    values[k] = new KExpr.Local(locals.size() - 1, m.type().dtype());
                }
            }
            valueOf.put(m, values);
            ops.add(m.label());
        }
        var stores = new ArrayList<Kernel.Store>();
        var writes = new ArrayList<Buffer>();
        for (ComputedBuffer m : g.members) {
            if (!needsStorage(m, g)) continue;
            KExpr[] values = valueOf.get(m);
            if (values[0] instanceof KExpr.Reduced r) {
                locals.add(r);
                var strides = LoopIndex.placeStrides(table.of(m).strides(), LoopIndex.identity(g.ranges.size()), g.ranges);
                var store = Kernel.Store.perRow(table.of(m), locals.size() - 1);
                stores.add(strides == null ? store : store.at(SymInt.ZERO, strides));
            } else {
                int[] md = dimsOf.get(m);
                boolean perRow = g.isRow() && !touchesRow(md, g);
                if (!perRow && copies > 1 && !g.narrowed.contains(m)) {   // a wide element member: each column block at its place
                    var strides = LoopIndex.toKernel(table.of(m).strides(), md, rank);
                    for (int k = 0; k < copies; k++)
                        stores.add(new Kernel.Store(table.of(m), ((KExpr.Local) values[k]).index()).at(strides.get(rank - 1).times((long) k * g.narrow), strides));
                } else {
                    int local = ((KExpr.Local) values[0]).index();
                    var store = perRow ? Kernel.Store.perRow(table.of(m), local) : new Kernel.Store(table.of(m), local);
                    var strides = LoopIndex.placeStrides(table.of(m).strides(), md, perRow ? g.ranges : dims);
                    stores.add(strides == null ? store : store.at(SymInt.ZERO, strides));
                }
            }
            writes.add(m);
        }
        String base = String.join("_", ops);
        if (base.length() > 48) base = base.substring(0, 48);
        String name = (g.members.size() > 1 ? "fused_" : "") + base + "_" + counter[0]++;
        var row = g.isRow() ? dims.subList(g.ranges.size(), dims.size()) : List.<SymInt>of();
        var kernel = new Kernel(name, g.ranges, row, table.of(inputs), locals, reductions, stores, ops);
        return new Work.KernelWork(kernel, writes, List.copyOf(inputs), true, g.notes);
    }

    /** Whether a member's loop runs along the row's elements (an element member), not only over the rows. */
    private static boolean touchesRow(int[] dims, Group g) {
        for (int d : dims) if (d >= g.ranges.size()) return true;
        return false;
    }

    private boolean needsStorage(ComputedBuffer m, Group g) {
        if (outputs.contains(m) || m.isSymmetric()) return true;
        for (Buffer u : consumers.getOrDefault(m, List.of())) if (groupOf.get(absorber(u)) != g) return true;
        return false;
    }

    /** The loop whose kernel computes {@code b}: itself, or for an absorbed producer the reduction it is inlined into. */
    private Buffer absorber(Buffer b) {
        while (absorbed.contains(b)) b = consumers.get(b).getFirst();
        return b;
    }

    /**
     * Lowered expression to kernel expression; {@code remap} re-indexes a member's or an absorbed producer's loads onto
     * the kernel's dimensions. Loads of earlier members read their value in the kernel ({@code valueOf}).
     */
    private KExpr convert(Expr e, Group g, List<Buffer> inputs, Map<Buffer, KExpr[]> valueOf, Remap remap, RowColumns.Shift shift) {
        return switch (e) {
            case Expr.Constant c -> new KExpr.Const(c.value(), c.dtype());
            case Expr.Cast c -> new KExpr.Cast(convert(c.x(), g, inputs, valueOf, remap, shift), c.dtype());
            case Expr.Apply a -> {
                var args = new ArrayList<KExpr>(a.args().size());
                for (Expr x : a.args()) args.add(convert(x, g, inputs, valueOf, remap, shift));
                yield new KExpr.Apply(a.fn(), List.copyOf(args), a.dtype());
            }
            case Expr.Load l0 -> {
                Expr.Load l = remap == null ? l0 : remap.apply(l0);
                Buffer s = l.storage();
                KExpr[] values = valueOf.get(s);
                KExpr v = values == null ? null : values[shift.copyOf(l.offset(), l.strides())];
                if (v instanceof KExpr.Local local) yield new KExpr.Local(local.index(), l.dtype());
                if (v != null) yield v.dtype() == l.dtype() ? v : new KExpr.Cast(v, l.dtype());
                if (absorbed.contains(s)) {
                    ComputedBuffer p = (ComputedBuffer) s;
                    yield convert(p.body(), g, inputs, valueOf, new Remap(LoopIndex.remapAccepted(l, p), l.strides().size()), shift);
                }
                int idx = inputs.indexOf(s);
                if (idx < 0) { inputs.add(s); idx = inputs.size() - 1; }
                yield new KExpr.Load(idx, l.offset().plus(shift.offsetOf(l.strides())), l.strides(), l.dtype());
            }
        };
    }

    /** Rewrites an absorbed producer's loads from its own iteration dims onto the consumer's. */
    private record Remap(int[] map, int consumerRank) {
        Expr.Load apply(Expr.Load l) {
            var strides = new ArrayList<SymInt>();
            for (int k = 0; k < consumerRank; k++) strides.add(SymInt.ZERO);
            for (int m = 0; m < map.length; m++)
                if (map[m] >= 0) strides.set(map[m], strides.get(map[m]).plus(l.strides().get(m)));
            return new Expr.Load(l.storage(), l.offset(), strides, l.dtype());
        }
    }

    private static <T> Set<T> newSet(int expected) { return java.util.Collections.newSetFromMap(new IdentityHashMap<>(expected)); }
}
