package dev.gatun.planner;

import dev.gatun.ir.SymInt;
import dev.gatun.ir.Layout;
import dev.gatun.ir.lower.Buffer;
import dev.gatun.ir.lower.ComputedBuffer;
import dev.gatun.ir.lower.ConcatBuffer;
import dev.gatun.ir.lower.ConstantBuffer;
import dev.gatun.ir.lower.Expr;
import dev.gatun.ir.lower.ExternBuffer;
import dev.gatun.ir.lower.ExternOutputBuffer;
import dev.gatun.ir.lower.InputBuffer;
import dev.gatun.ir.lower.LoweredGraph;
import dev.gatun.ir.lower.ViewBuffer;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Groups loops into kernels. A pointwise loop joins an earlier pointwise kernel of the same iteration space
 * when it reads one of the kernel's results element by element (vertical fusion) or shares an input with it
 * (horizontal fusion), provided everything it reads is ready by then. A reduction absorbs a pointwise
 * producer that nothing else needs. Collectives, matmul and user ops are barriers: they stay extern calls.
 * A fused result that nothing outside its kernel needs is never stored.
 */
final class Fusion {
    /** How far back a loop looks for a kernel to join; keeps planning near-linear on huge graphs. */
    private static final int WINDOW = 64;

    private final LoweredGraph graph;
    private final Map<Buffer, List<Buffer>> consumers = new IdentityHashMap<>();
    private final Set<Buffer> viewed = newSet(), outputs = newSet(), absorbed = newSet();
    private final List<Group> groups = new ArrayList<>();
    private final Map<Buffer, Group> groupOf = new IdentityHashMap<>();
    private final Map<Buffer, Integer> producedAt = new IdentityHashMap<>();
    // each asked for several times per buffer; expression walks and stride products are the bulk of fusion's time
    private final Map<ComputedBuffer, Set<Buffer>> loads = new IdentityHashMap<>();
    private final Map<Buffer, List<SymInt>> contiguous = new IdentityHashMap<>();

    private static final class Group {
        final int position;
        final ExternBuffer extern;
        final List<ComputedBuffer> members = new ArrayList<>();
        final Set<Buffer> reads = newSet();
        final List<SymInt> ranges;
        final boolean reduction;
        /** Merged into a later group: emits nothing. */
        boolean merged;

        Group(int position, ExternBuffer extern, List<SymInt> ranges, boolean reduction) {
            this.position = position;
            this.extern = extern;
            this.ranges = ranges;
            this.reduction = reduction;
        }
    }

    private final BufferTable table;

    private Fusion(LoweredGraph graph, BufferTable table) { this.graph = graph; this.table = table; }

    static List<Work> fuse(LoweredGraph graph, BufferTable table) { return new Fusion(graph, table).run(); }

    private List<Work> run() {
        index();
        for (Buffer b : graph.buffers()) {
            switch (b) {
                case InputBuffer i -> producedAt.put(b, -1);
                case ConstantBuffer c -> producedAt.put(b, -1);
                case ViewBuffer v -> { }
                case ConcatBuffer cat -> {   // written by its parts: ready once the last of them is
                    int at = -1;
                    for (Buffer w : cat.reads()) at = Math.max(at, producedAt.getOrDefault(w, -1));
                    producedAt.put(cat, at);
                }
                case ExternOutputBuffer o -> producedAt.put(b, producedAt.get(o.call()));
                case ExternBuffer e -> {
                    var g = new Group(groups.size(), e, List.of(), false);
                    for (Buffer in : e.inputs()) g.reads.add(in.storage());
                    groups.add(g);
                    producedAt.put(e, g.position);
                }
                case ComputedBuffer c -> {
                    if (absorbed.contains(c)) continue;
                    Group g = c.isReduction() ? null : findGroup(c);
                    if (g == null) {
                        g = new Group(groups.size(), null, c.ranges(), c.isReduction());
                        groups.add(g);
                    } else {
                        pullIn(c, g);
                    }
                    g.members.add(c);
                    groupOf.put(c, g);
                    g.reads.addAll(loadsOf(c));
                    producedAt.put(c, g.position);
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
            for (Buffer r : directReads(b)) consumers.computeIfAbsent(r, k -> new ArrayList<>()).add(b);
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
    private Set<Buffer> loadsOf(ComputedBuffer c) {
        return loads.computeIfAbsent(c, k -> {
            var s = new LinkedHashSet<Buffer>();
            collectLoads(k.body(), s);
            return s;
        });
    }

    private static void collectLoads(Expr e, Set<Buffer> out) {
        switch (e) {
            case Expr.Load l -> out.add(l.storage());
            case Expr.Apply a -> a.args().forEach(x -> collectLoads(x, out));
            case Expr.Cast c -> collectLoads(c.x(), out);
            case Expr.Constant c -> { }
        }
    }

    /**
     * A private pointwise producer whose only consumer is a reduction, or a producer already absorbed into one, and
     * reads it with a plain index remap: its body is evaluated inside the reduction's loop instead of stored.
     */
    private boolean canAbsorb(ComputedBuffer p) {
        if (p.isReduction() || !p.layout().isFlexible() || outputs.contains(p) || viewed.contains(p)) return false;
        var users = consumers.getOrDefault(p, List.of());
        if (users.size() != 1 || !(users.getFirst() instanceof ComputedBuffer r) || !(r.isReduction() || absorbed.contains(r))) return false;
        var loads = allLoadsOf(r.body(), p);
        // into an absorbed link, only what it reads once: each link is inlined where it is read, so a chain that
        // read each link twice would grow the reduction's body exponentially
        if (!r.isReduction() && loads.size() != 1) return false;
        return loads.stream().allMatch(l -> remap(l, p) != null);
    }

    private static List<Expr.Load> allLoadsOf(Expr e, Buffer target) {
        var out = new ArrayList<Expr.Load>();
        walk(e, target, out);
        return out;
    }

    private static void walk(Expr e, Buffer target, List<Expr.Load> out) {
        switch (e) {
            case Expr.Load l -> { if (l.storage() == target) out.add(l); }
            case Expr.Apply a -> a.args().forEach(x -> walk(x, target, out));
            case Expr.Cast c -> walk(c.x(), target, out);
            case Expr.Constant c -> { }
        }
    }

    /**
     * For a load of row-major buffer {@code p}, which iteration dimension of the loading loop drives each of
     * p's dimensions (-1 for a dimension of size 1); null when the load is not such a plain remap.
     */
    static int[] remap(Expr.Load l, Buffer p) {
        if (!l.offset().equals(SymInt.ZERO)) return null;
        var shape = p.type().shape();
        List<SymInt> cs = shape.contiguousStrides();
        int[] map = new int[shape.rank()];
        boolean[] used = new boolean[l.strides().size()];
        for (int m = 0; m < shape.rank(); m++) {
            var d = shape.dim(m);
            if (d.isStatic() && d.size() == 1) { map[m] = -1; continue; }
            map[m] = -1;
            for (int k = 0; k < l.strides().size(); k++)
                if (!used[k] && l.strides().get(k).equals(cs.get(m))) { map[m] = k; used[k] = true; break; }
            if (map[m] < 0) return null;
        }
        for (int k = 0; k < used.length; k++) if (!used[k] && !l.strides().get(k).equals(SymInt.ZERO)) return null;
        return map;
    }

    /** The latest pointwise kernel {@code c} may join, or null. */
    private Group findGroup(ComputedBuffer c) {
        var loads = loadsOf(c);
        int ready = -1;
        for (Buffer s : loads) ready = Math.max(ready, producedAt.getOrDefault(s, -1));
        List<SymInt> ranges = c.ranges();
        for (int i = groups.size() - 1; i >= 0 && i >= groups.size() - WINDOW; i--) {
            Group g = groups.get(i);
            if (g.position < ready) break;            // something c reads is produced after this kernel
            if (g.extern != null || g.reduction || !g.ranges.equals(ranges)) continue;
            boolean shares = false, ok = true;
            for (Buffer s : loads) {
                if (groupOf.get(s) == g) {
                    shares = true;
                    for (Expr.Load l : allLoadsOf(c.body(), s)) ok &= aligned(l, s, ranges);
                } else if (g.reads.contains(s)) shares = true;
                else if ((groupOf.get(s) != null || s instanceof ConcatBuffer) && producedAt.get(s) == g.position) ok = false;
            }
            if (ok && shares) return g;
        }
        return null;
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
            if (h == null || h == g || h.merged || h.reduction || h.extern != null || h.position > g.position
                    || g.position - h.position > WINDOW || !h.ranges.equals(g.ranges) || !movable(h, g, c)) continue;
            for (ComputedBuffer m : h.members) {
                groupOf.put(m, g);
                producedAt.put(m, g.position);
            }
            g.members.addAll(0, h.members);
            g.reads.addAll(h.reads);
            h.members.clear();
            h.reads.clear();
            h.merged = true;
        }
    }

    /** Whether {@code h}'s results may be made at {@code g}'s place instead: read element-wise there, and by nothing in between. */
    private boolean movable(Group h, Group g, ComputedBuffer c) {
        var readers = new ArrayList<ComputedBuffer>(g.members);
        readers.add(c);
        for (ComputedBuffer m : h.members) {
            for (ComputedBuffer r : readers)
                for (Expr.Load l : allLoadsOf(r.body(), m)) if (!aligned(l, m, g.ranges)) return false;
            for (Buffer u : consumers.getOrDefault(m, List.of())) {
                if (u == c || groupOf.get(u) == h || groupOf.get(u) == g) continue;
                if (absorbed.contains(u)) return false;
                Integer at = producedAt.get(u);
                if (at != null && at < g.position) return false;   // a reader already placed before g
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
        var reads = e.inputs().stream().map(Buffer::storage).distinct().toList();
        return new Work.ExternWork(e, writes, reads);
    }

    private Work kernelWork(Group g, int[] counter) {
        var inputs = new ArrayList<Buffer>();
        var locals = new ArrayList<KExpr>();
        var ops = new ArrayList<String>();
        var localOf = new IdentityHashMap<Buffer, Integer>();
        for (ComputedBuffer m : g.members) {
            locals.add(convert(m.body(), g, inputs, localOf, null));
            localOf.put(m, locals.size() - 1);
            ops.add(m.label());
        }
        var stores = new ArrayList<Kernel.Store>();
        var writes = new ArrayList<Buffer>();
        var reductions = new ArrayList<Kernel.Reduction>();
        ComputedBuffer first = g.members.getFirst();
        if (g.reduction) {
            reductions.add(new Kernel.Reduction(first.reduceFn(), locals.size() - 1, first.type().dtype()));
            locals.add(new KExpr.Reduced(0, first.type().dtype()));
            stores.add(Slices.store(first, table.of(first), locals.size() - 1, true));
            writes.add(first);
        } else {
            for (ComputedBuffer m : g.members)
                if (needsStorage(m, g)) {
                    stores.add(Slices.store(m, table.of(m), localOf.get(m), false));
                    writes.add(m);
                }
        }
        String base = String.join("_", ops);
        if (base.length() > 48) base = base.substring(0, 48);
        String name = (g.members.size() > 1 ? "fused_" : "") + base + "_" + counter[0]++;
        var kernel = new Kernel(name, first.ranges(), g.reduction ? first.reductionRanges() : List.of(), table.of(inputs), locals,
                reductions, stores, ops);
        return new Work.KernelWork(kernel, writes, List.copyOf(inputs), !g.reduction);
    }

    private boolean needsStorage(ComputedBuffer m, Group g) {
        if (outputs.contains(m) || viewed.contains(m) || m.isSymmetric() || !(m.layout().isFlexible() || m.layout() instanceof Layout.CommBuffer)) return true;
        for (Buffer u : consumers.getOrDefault(m, List.of())) if (groupOf.get(u) != g) return true;
        return false;
    }

    /** Lowered expression to kernel expression; {@code remap} re-indexes an absorbed producer's loads. */
    private KExpr convert(Expr e, Group g, List<Buffer> inputs, Map<Buffer, Integer> localOf, Remap remap) {
        return switch (e) {
            case Expr.Constant c -> new KExpr.Const(c.value(), c.dtype());
            case Expr.Cast c -> new KExpr.Cast(convert(c.x(), g, inputs, localOf, remap), c.dtype());
            case Expr.Apply a -> {
                var args = new ArrayList<KExpr>(a.args().size());
                for (Expr x : a.args()) args.add(convert(x, g, inputs, localOf, remap));
                yield new KExpr.Apply(a.fn(), List.copyOf(args), a.dtype());
            }
            case Expr.Load l0 -> {
                Expr.Load l = remap == null ? l0 : remap.apply(l0);
                Buffer s = l.storage();
                if (localOf.containsKey(s)) yield new KExpr.Local(localOf.get(s), l.dtype());
                if (absorbed.contains(s)) {
                    ComputedBuffer p = (ComputedBuffer) s;
                    yield convert(p.body(), g, inputs, localOf, new Remap(remap(l, p), l.strides().size()));
                }
                int idx = inputs.indexOf(s);
                if (idx < 0) { inputs.add(s); idx = inputs.size() - 1; }
                yield new KExpr.Load(idx, l.offset(), l.strides(), l.dtype());
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

    private static <T> Set<T> newSet() { return java.util.Collections.newSetFromMap(new IdentityHashMap<>()); }
}
