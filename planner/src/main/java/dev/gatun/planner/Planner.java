package dev.gatun.planner;

import dev.gatun.ir.ByteSize;
import dev.gatun.ir.Layout;
import dev.gatun.ir.lower.Buffer;
import dev.gatun.ir.lower.ConstantBuffer;
import dev.gatun.ir.lower.ExternBuffer;
import dev.gatun.ir.lower.ExternCall;
import dev.gatun.ir.lower.InputBuffer;
import dev.gatun.ir.lower.LoweredGraph;
import dev.gatun.ir.lower.ViewBuffer;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * Turns a lowered graph into a {@link Plan}: fusion, a memory-aware order, liveness, offsets in one regular
 * arena per rank and one communication pool per (type, group) planned in isolation with cross-rank
 * lifetimes, CUDA-graph partitions, and the printable step list.
 */
public final class Planner {
    private final LoweredGraph graph;
    private final PlanOptions options;
    private List<Work> order;
    private BufferTable table;
    private final Set<Buffer> outputs = Collections.newSetFromMap(new IdentityHashMap<>());

    private Planner(LoweredGraph graph, PlanOptions options) {
        this.graph = graph;
        this.options = options;
    }

    public static Plan plan(LoweredGraph graph) { return plan(graph, PlanOptions.DEFAULT); }

    public static Plan plan(LoweredGraph graph, PlanOptions options) { return new Planner(graph, options).run(); }

    /** Slot alignment: 128 bytes, or the buffer's size rounded up to a power of two (at least 16) when smaller. */
    static long alignment(long bytes) {
        long p = Long.highestOneBit(Math.max(bytes, 1));
        if (p < bytes) p <<= 1;
        return Math.min(128, Math.max(16, p));
    }

    private Plan run() {
        for (Buffer o : graph.outputs().values()) outputs.add(o.storage());
        table = BufferTable.of(graph);
        List<Work> fused = Fusion.fuse(graph, table);
        var choice = Scheduler.choose(fused, outputs, options.reorder());
        order = choice.order();
        var memory = new Memory();
        memory.plan();
        memory.placements.forEach((b, p) -> table.of(b).place(p));
        var steps = new ArrayList<Step>();
        var kernels = new ArrayList<Kernel>();
        for (Pool p : memory.pools) steps.add(new Step.AllocPool(p));
        // persistent buffers first: constants, then path-2 inputs and their copies (inside the first partition)
        for (Buffer b : memory.persistent) steps.add(memory.placeStep(b));
        for (Buffer b : memory.persistent)
            if (b instanceof InputBuffer in) steps.add(new Step.CopyIn(table.of(in)));
        for (int i = 0; i < order.size(); i++) {
            Work w = order.get(i);
            for (Buffer b : w.writes()) steps.add(memory.placeStep(b));
            switch (w) {
                case Work.KernelWork k -> { steps.add(new Step.Launch(k.kernel())); kernels.add(k.kernel()); }
                case Work.ExternWork e -> steps.add(externStep(e.call(), memory.freedAt.get(i)));
            }
        }
        memory.finalBarriers.forEach((group, why) -> steps.add(new Step.Barrier(group, why)));
        for (Pool p : memory.pools) if (p.kind() == Pool.Kind.COMM) steps.add(new Step.Release(p.name()));
        List<Step> finished = CollectivePasses.apply(steps, options);
        return new Plan(graph, table.all(), memory.pools, finished, kernels, partitions(finished), choice.name(), choice.plainPeak(), choice.peak(), options);
    }

    private Step externStep(ExternBuffer e, String freed) {
        return switch (e.call()) {
            case ExternCall.Collective c -> new Step.Collective(table.of(e), table.of(e.inputs().getFirst()),
                    new Step.CollectiveCall(c.kind(), c.reduceOp(), c.group(), c.root(), c.algorithm()), freed, false);
            case ExternCall.Matmul m -> new Step.Matmul(table.of(e), table.of(e.inputs().get(0)), table.of(e.inputs().get(1)));
            case ExternCall.UserOpCall u -> {
                var outs = new ArrayList<PlanBuffer>();
                outs.add(table.of(e));
                e.extraOutputs().forEach(o -> outs.add(table.of(o)));
                yield new Step.CallUserOp(u.op(), u.group(), table.of(e.inputs()), outs);
            }
        };
    }

    /** Contiguous runs of device work without symbolic shapes. */
    private static List<Plan.Partition> partitions(List<Step> steps) {
        var parts = new ArrayList<Plan.Partition>();
        int start = -1, last = -1;
        for (int i = 0; i < steps.size(); i++) {
            Step s = steps.get(i);
            if (s instanceof Step.AllocDynamic || (s.isDeviceWork() && touchesDynamic(s))) {
                if (start >= 0) parts.add(new Plan.Partition(parts.size(), start, last));
                start = -1;
            } else if (s.isDeviceWork()) {
                if (start < 0) start = i;
                last = i;
            }
        }
        if (start >= 0) parts.add(new Plan.Partition(parts.size(), start, last));
        return parts;
    }

    private static boolean touchesDynamic(Step s) {
        return switch (s) {
            case Step.Launch l -> anyDynamic(l.kernel().inputs()) || anyDynamic(l.kernel().outputs());
            case Step.Collective c -> c.output().isDynamic() || c.input().isDynamic();
            case Step.CollectiveBatch b -> b.members().stream().anyMatch(Planner::touchesDynamic);
            case Step.Matmul m -> m.output().isDynamic() || m.a().isDynamic() || m.b().isDynamic();
            case Step.CallUserOp u -> anyDynamic(u.inputs()) || anyDynamic(u.outputs());
            default -> false;
        };
    }

    private static boolean anyDynamic(List<PlanBuffer> bs) {
        for (PlanBuffer b : bs) if (b.isDynamic()) return true;
        return false;
    }

    /** Liveness and offsets. */
    private final class Memory {
        final List<Pool> pools = new ArrayList<>();
        final Map<Buffer, PlanBuffer.Placement> placements = new LinkedHashMap<>();
        final List<Buffer> persistent = new ArrayList<>();
        final Map<Integer, String> freedAt = new HashMap<>();
        final Map<String, String> finalBarriers = new TreeMap<>();
        final Map<Buffer, String> reuses = new IdentityHashMap<>();
        final Set<Buffer> inPlace = Collections.newSetFromMap(new IdentityHashMap<>());

        void plan() {
            int n = order.size();
            var writer = new IdentityHashMap<Buffer, Integer>();
            var lastRead = new IdentityHashMap<Buffer, Integer>();
            var lastPeerRead = new IdentityHashMap<Buffer, Integer>();
            for (int i = 0; i < n; i++) {
                Work w = order.get(i);
                for (Buffer b : w.writes()) writer.put(b, i);
                for (Buffer b : w.reads()) lastRead.put(b, i);
                if (w instanceof Work.ExternWork e) for (Buffer b : peerReads(e.call())) lastPeerRead.put(b, i);
            }
            // constants and path-2 inputs: persistent, each its own slot
            var constants = new ArrayList<Buffer>();
            var symmInputs = new TreeMap<String, List<Buffer>>();
            for (Buffer b : graph.buffers()) {
                if (b instanceof ConstantBuffer) constants.add(b);
                if (b instanceof InputBuffer in && in.isSymmetric()) symmInputs.computeIfAbsent(in.layout().allocator().group(), g -> new ArrayList<>()).add(b);
            }
            // regular and communication buffers
            var regular = new ArrayList<OffsetAssigner.Item>();
            var regularBufs = new ArrayList<Buffer>();
            var comm = new TreeMap<String, List<Buffer>>();
            var commItems = new TreeMap<String, List<OffsetAssigner.Item>>();
            var merged = inPlacePairs(writer, lastRead);
            // an in-place chain shares one slot: from its first buffer's start to its last buffer's end
            var rootOf = new IdentityHashMap<Buffer, Buffer>();
            var chainEnd = new IdentityHashMap<Buffer, Integer>();
            var written = new ArrayList<Buffer>();
            for (Work w : order) written.addAll(w.writes());
            for (Buffer b : written) {
                if (!b.type().shape().isStatic()) continue;
                int def = writer.get(b);
                int end = outputs.contains(b) ? n : lastRead.getOrDefault(b, def);
                if (b.layout() instanceof Layout.CommBuffer cb) {
                    end = Math.max(end, commEnd(b, cb.group(), lastPeerRead.get(b), n));
                    long bytes = b.type().byteSize();
                    comm.computeIfAbsent(cb.group(), g -> new ArrayList<>()).add(b);
                    commItems.computeIfAbsent(cb.group(), g -> new ArrayList<>()).add(new OffsetAssigner.Item(b.name(), def, end + 1, bytes, alignment(bytes)));
                    continue;
                }
                Buffer root = merged.containsKey(b) ? rootOf.get(merged.get(b)) : b;
                rootOf.put(b, root);
                chainEnd.merge(root, end, Math::max);
            }
            for (Buffer b : written) {
                if (rootOf.get(b) != b) continue;
                long bytes = b.type().byteSize();
                regularBufs.add(b);
                regular.add(new OffsetAssigner.Item(b.name(), writer.get(b), chainEnd.get(b) + 1, bytes, alignment(bytes)));
            }
            int poolNo = 0;
            for (var e : commItems.entrySet()) {
                var r = OffsetAssigner.assign(e.getValue());
                String pool = "pool" + poolNo++;
                pools.add(new Pool(pool, Pool.Kind.COMM, e.getKey(), r.size(), r.maxLive(), ByteSize.roundUp(r.size(), options.commGranularity())));
                record(pool, comm.get(e.getKey()), e.getValue(), r);
            }
            for (var e : symmInputs.entrySet()) {
                String pool = "pool" + poolNo++;
                long size = sequential(pool, e.getValue());
                pools.add(new Pool(pool, Pool.Kind.SYMM_INPUTS, e.getKey(), size, size, ByteSize.roundUp(size, options.commGranularity())));
                persistent.addAll(e.getValue());
                // the next call's copy_in overwrites these slots: peers must have finished reading them by the
                // end of this call (a trailing barrier of a later collective, or a final barrier)
                for (Buffer b : e.getValue()) commEnd(b, e.getKey(), lastPeerRead.get(b), n);
            }
            if (!regular.isEmpty()) {
                var r = OffsetAssigner.assign(regular);
                String pool = "pool" + poolNo++;
                pools.add(new Pool(pool, Pool.Kind.REGULAR, null, r.size(), r.maxLive(), ByteSize.roundUp(r.size(), options.regularGranularity())));
                record(pool, regularBufs, regular, r);
                for (Buffer out : written) {
                    Buffer in = merged.get(out);
                    if (in == null) continue;
                    var p = placements.get(rootOf.get(out));
                    placements.put(out, new PlanBuffer.Placement(pool, p.offset(), out.type().byteSize()));
                    reuses.put(out, in.name());
                    inPlace.add(out);
                }
            }
            if (!constants.isEmpty()) {
                String pool = "pool" + poolNo;
                long size = sequential(pool, constants);
                pools.add(new Pool(pool, Pool.Kind.CONSTANT, null, size, size, size));
                persistent.addAll(0, constants);
            }
        }

        /** Symmetric inputs read by peers: symmetric collectives and user ops that declared symmetric inputs. */
        private List<Buffer> peerReads(ExternBuffer e) {
            return switch (e.call()) {
                case ExternCall.Collective c -> c.algorithm().isSymmetric() ? List.of(e.inputs().getFirst().storage()) : List.of();
                case ExternCall.UserOpCall u -> {
                    var out = new ArrayList<Buffer>();
                    for (int i = 0; i < e.inputs().size(); i++) if (u.op().requiresSymmetric(i)) out.add(e.inputs().get(i).storage());
                    yield out;
                }
                case ExternCall.Matmul m -> List.of();
            };
        }

        /**
         * Cross-rank lifetime: a slot is free only once every rank has finished reading it, that is at the
         * first collective of its group that ends with a barrier, at or after the last read by a peer.
         */
        private int commEnd(Buffer b, String group, Integer lastPeer, int n) {
            if (lastPeer == null) return -1;
            for (int i = lastPeer; i < n; i++) {
                if (order.get(i) instanceof Work.ExternWork e && e.call().call() instanceof ExternCall.Collective c
                        && c.group().equals(group) && c.algorithm().endsWithBarrier()) {
                    if (i == lastPeer && e.reads().contains(b)) freedAt.merge(i, b.name(), (x, y) -> x + ", " + y);
                    return i;
                }
            }
            finalBarriers.put(group, "peers may still read " + b.name() + " and no later collective of \"" + group + "\" ends with a barrier");
            return n;
        }

        /** Elementwise kernels that may write an output over a dead, identically shaped regular input. */
        private Map<Buffer, Buffer> inPlacePairs(Map<Buffer, Integer> writer, Map<Buffer, Integer> lastRead) {
            var pairs = new IdentityHashMap<Buffer, Buffer>();
            if (!options.inPlace()) return pairs;
            var taken = Collections.newSetFromMap(new IdentityHashMap<Buffer, Boolean>());
            var viewed = Collections.newSetFromMap(new IdentityHashMap<Buffer, Boolean>());
            for (Buffer b : graph.buffers()) if (b instanceof ViewBuffer v) viewed.add(v.base());
            for (int i = 0; i < order.size(); i++) {
                if (!(order.get(i) instanceof Work.KernelWork k) || !k.elementwise()) continue;
                for (Buffer out : k.writes()) {
                    if (!regularCandidate(out) || viewed.contains(out)) continue;
                    for (int inIdx = 0; inIdx < k.reads().size(); inIdx++) {
                        Buffer in = k.reads().get(inIdx);
                        if (taken.contains(in) || !regularCandidate(in) || viewed.contains(in) || !writer.containsKey(in)
                                || lastRead.get(in) != i || !in.type().equals(out.type()) || !readsAligned(k.kernel(), inIdx, in)) continue;
                        pairs.put(out, in);
                        taken.add(in);
                        break;
                    }
                }
            }
            return pairs;
        }

        private boolean regularCandidate(Buffer b) {
            return !(b instanceof InputBuffer) && !(b instanceof ConstantBuffer) && !outputs.contains(b) && !b.isSymmetric()
                    && b.type().shape().isStatic();
        }

        private boolean readsAligned(Kernel k, int input, Buffer b) {
            var want = b.type().shape().contiguousStrides();
            var ok = new boolean[]{true};
            for (KExpr e : k.locals()) visitLoads(e, l -> {
                if (l.input() == input && (!l.offset().equals(dev.gatun.ir.SymInt.ZERO) || !l.strides().equals(want))) ok[0] = false;
            });
            return ok[0];
        }

        private void visitLoads(KExpr e, java.util.function.Consumer<KExpr.Load> f) {
            switch (e) {
                case KExpr.Load l -> f.accept(l);
                case KExpr.Apply a -> a.args().forEach(x -> visitLoads(x, f));
                case KExpr.Cast c -> visitLoads(c.x(), f);
                default -> { }
            }
        }

        private long sequential(String pool, List<Buffer> bufs) {
            long off = 0;
            for (Buffer b : bufs) {
                long bytes = b.type().byteSize();
                off = OffsetAssigner.align(off, alignment(bytes));
                placements.put(b, new PlanBuffer.Placement(pool, off, bytes));
                off += bytes;
            }
            return off;
        }

        /**
         * Records placements and, for each buffer, the earlier occupant of its slot if any: among the items
         * that ended by its start and share a byte with it, the one that ended last (the first of those in
         * item order on ties). A sweep over time paints each ended item's byte range into a segment map,
         * in order of end and then of falling index, so that a query reads the latest occupant of every byte.
         */
        private void record(String pool, List<Buffer> bufs, List<OffsetAssigner.Item> items, OffsetAssigner.Result r) {
            int n = bufs.size();
            long[] off = r.offsets();
            for (int i = 0; i < n; i++) placements.put(bufs.get(i), new PlanBuffer.Placement(pool, off[i], items.get(i).size()));
            Integer[] byEnd = new Integer[n], byStart = new Integer[n];
            for (int i = 0; i < n; i++) { byEnd[i] = i; byStart[i] = i; }
            java.util.Arrays.sort(byEnd, java.util.Comparator.<Integer>comparingLong(i -> items.get(i).upper()).thenComparing(i -> -i));
            java.util.Arrays.sort(byStart, java.util.Comparator.comparingLong(i -> items.get(i).lower()));
            var paint = new TreeMap<Long, long[]>();   // start -> {end, item}
            int e = 0;
            for (int q : byStart) {
                OffsetAssigner.Item it = items.get(q);
                while (e < n && items.get(byEnd[e]).upper() <= it.lower()) {
                    int j = byEnd[e++];
                    long a = off[j], b = off[j] + items.get(j).size();
                    if (a >= b) continue;
                    var lo = paint.lowerEntry(a);
                    if (lo != null && lo.getValue()[0] > a) {
                        long[] v = lo.getValue();
                        paint.put(lo.getKey(), new long[]{a, v[1]});
                        if (v[0] > b) paint.put(b, new long[]{v[0], v[1]});
                    }
                    var inside = paint.subMap(a, true, b, false);
                    if (!inside.isEmpty()) {
                        long[] last = inside.lastEntry().getValue();
                        if (last[0] > b) paint.put(b, new long[]{last[0], last[1]});
                        inside.clear();
                    }
                    paint.put(a, new long[]{b, j});
                }
                long a = off[q], b = off[q] + it.size();
                if (a >= b || it.upper() == it.lower()) continue;
                int prev = -1;
                var lo = paint.lowerEntry(a);
                if (lo != null && lo.getValue()[0] > a) prev = (int) lo.getValue()[1];
                for (long[] v : paint.subMap(a, true, b, false).values()) prev = better(items, prev, (int) v[1]);
                if (prev >= 0) reuses.put(bufs.get(q), items.get(prev).id());
            }
        }

        private static int better(List<OffsetAssigner.Item> items, int x, int y) {
            if (x < 0) return y;
            long ux = items.get(x).upper(), uy = items.get(y).upper();
            return uy > ux || (uy == ux && y < x) ? y : x;
        }

        Step placeStep(Buffer b) {
            if (!b.type().shape().isStatic()) return new Step.AllocDynamic(table.of(b));
            var p = placements.get(b);
            return new Step.Place(table.of(b), p.pool(), p.offset(), p.bytes(), reuses.get(b), inPlace.contains(b));
        }
    }
}
