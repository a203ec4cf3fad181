package dev.gatun.planner;

import dev.gatun.ir.ByteSize;
import dev.gatun.ir.Layout;
import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ConstantBuffer;
import dev.gatun.lowering.ExternBuffer;
import dev.gatun.lowering.ExternCall;
import dev.gatun.lowering.InputBuffer;
import dev.gatun.lowering.LoweredGraph;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The pool planners, one per kind of pool, run in this order (which is also the pools' numbering):
 * <ol>
 *   <li>{@link #communication}: one pool per group for the buffers lowering put in symmetric memory, planned in
 *   isolation from everything else, each slot live until every rank has finished reading it
 *   ({@link Liveness#crossRankEnd}), a receive buffer the senders write into from where a sender may first write it
 *   ({@link Liveness#firstWrite}); same offsets on every rank, released before the call returns;</li>
 *   <li>{@link #symmetricInputs}: one persistent pool per group for path-2 graph inputs, a slot each;</li>
 *   <li>{@link #states}: the graph's states, a slot each for the session, which their in-place updates share (and
 *   the old and new values {@link StateWrites} writes in place);</li>
 *   <li>{@link #regular}: the rank's arena for every other buffer, an in-place chain sharing one slot;</li>
 *   <li>{@link #constants}: constant tensors, written once per session.</li>
 * </ol>
 * Offsets come from {@link OffsetAssigner}; {@link SlotHistory} records, for each slot, its interval and its
 * earlier occupant.
 */
final class Pools {
    private final PlanOptions options;
    final List<Pool> pools = new ArrayList<>();
    final ByBuffer<PlanBuffer.Placement> placements;
    /** Constants, then path-2 inputs: placed once, before the first step. */
    final List<Buffer> persistent = new ArrayList<>();
    final SlotHistory history;

    Pools(LoweredGraph graph, PlanOptions options) {
        this.options = options;
        this.history = new SlotHistory(graph);
        this.placements = new ByBuffer<>(graph);
    }

    /** Slot alignment: 128 bytes, or the buffer's size rounded up to a power of two (at least 16) when smaller. */
    static long alignment(long bytes) {
        long p = Long.highestOneBit(Math.max(bytes, 1));
        if (p < bytes) p <<= 1;
        return Math.min(128, Math.max(16, p));
    }

    private String nextName() { return "pool" + pools.size(); }

    private static OffsetAssigner.Item item(Buffer b, int def, int end) {
        long bytes = b.type().byteSize();
        return new OffsetAssigner.Item(b.name(), def, end + 1, bytes, alignment(bytes));
    }

    /** The communication pool of each group: lifetimes end where every rank has finished reading. */
    void communication(Liveness live) {
        var bufs = new TreeMap<String, List<Buffer>>();
        var items = new TreeMap<String, List<OffsetAssigner.Item>>();
        for (Buffer b : live.written) {
            if (!b.type().shape().isStatic() || !(b.layout() instanceof Layout.CommBuffer cb)) continue;
            int cross = live.crossRankEnd(b, cb.group());
            int end = Math.max(live.localEnd(b), cross);
            // a receive buffer holds its slot from where a sender may first write it (Liveness.firstWrite)
            int start = live.firstWrite(b);
            history.interval(b, start, live.localEnd(b), cross);
            bufs.computeIfAbsent(cb.group(), g -> new ArrayList<>()).add(b);
            items.computeIfAbsent(cb.group(), g -> new ArrayList<>()).add(item(b, start, end));
        }
        for (var e : items.entrySet()) {
            var r = OffsetAssigner.assign(e.getValue());
            String pool = nextName();
            pools.add(new Pool(pool, Pool.Kind.COMM, e.getKey(), r.size(), r.maxLive(), ByteSize.roundUp(r.size(), options.commGranularity())));
            history.record(pool, bufs.get(e.getKey()), e.getValue(), r, placements);
        }
    }

    /**
     * Path-2 inputs of each group, a slot each for the session. The next call's copy overwrites them, so peers
     * must have finished reading them by the end of this call: a trailing barrier of a later collective, or a
     * final barrier.
     */
    void symmetricInputs(LoweredGraph graph, Liveness live) {
        var groups = new TreeMap<String, List<Buffer>>();
        for (InputBuffer in : graph.inputs().values())   // in buffer order, like every input buffer: not a walk of all buffers
            if (in.isSymmetric()) groups.computeIfAbsent(in.layout().allocator().group(), g -> new ArrayList<>()).add(in);
        for (var e : groups.entrySet()) {
            String pool = nextName();
            long size = sequential(pool, e.getValue());
            pools.add(new Pool(pool, Pool.Kind.SYMM_INPUTS, e.getKey(), size, size, ByteSize.roundUp(size, options.commGranularity())));
            persistent.addAll(e.getValue());
            for (Buffer b : e.getValue()) live.crossRankEnd(b, e.getKey());
        }
    }

    /**
     * The graph's states, one after the other in a pool kept for the session; each in-place update of a state
     * ({@link ExternCall#inPlace}: {@code update_slice}) takes the slot of the version it writes over (they are placed before the first step, like constants).
     */
    void states(LoweredGraph graph, StateWrites writes, Liveness live) {
        var states = new ArrayList<Buffer>();
        for (Buffer b : graph.buffers()) if (b instanceof InputBuffer in && in.isState()) states.add(b);
        if (states.isEmpty()) return;
        String pool = nextName();
        long size = sequential(pool, states);
        pools.add(new Pool(pool, Pool.Kind.STATE, null, size, size, ByteSize.roundUp(size, options.regularGranularity())));
        persistent.addAll(states);
        for (Buffer b : graph.buffers()) {   // in lowered order: a chain of updates from its state on
            if (!(b instanceof ExternBuffer e && e.call().inPlace())) continue;
            var p = placements.get(e.inputs().getFirst());
            if (p == null || !p.pool().equals(pool)) continue;
            placements.put(b, new PlanBuffer.Placement(pool, p.offset(), p.bytes()));
            history.inPlace(b, e.inputs().getFirst());
        }
        for (StateWrites.Written w : writes.written) {   // the old value there from the start, the new one from its kernel on
            var p = placements.get(w.state());
            placements.put(w.old(), p);
            persistent.add(w.old());
            history.inPlace(w.old(), w.state());
            placements.put(w.value(), p);
            history.inPlace(w.value(), w.state());
            history.interval(w.value(), live.def(w.value()), live.n, -1);   // the state's from its writer on, to the end
        }
    }

    /** The regular arena: every other static buffer; an in-place chain shares one slot, from its first write to its last read. */
    void regular(LoweredGraph graph, Liveness live, Map<Buffer, Buffer> inPlace) {
        var rootOf = new ByBuffer<Buffer>(graph);
        int[] chainEnd = new int[graph.buffers().size()];   // by the root's index
        for (Buffer b : live.written) {
            if (!b.type().shape().isStatic() || b.layout() instanceof Layout.CommBuffer || placements.containsKey(b)) continue;
            int end = live.localEnd(b);
            history.interval(b, live.def(b), end, -1);
            Buffer in = inPlace.get(b);
            Buffer root = in != null ? rootOf.get(in) : b;
            rootOf.put(b, root);
            chainEnd[root.id()] = root == b ? end : Math.max(chainEnd[root.id()], end);
        }
        var bufs = new ArrayList<Buffer>();
        var items = new ArrayList<OffsetAssigner.Item>();
        for (Buffer b : live.written) {
            if (rootOf.get(b) != b) continue;
            bufs.add(b);
            items.add(item(b, live.def(b), chainEnd[b.id()]));
        }
        if (items.isEmpty()) return;
        var r = OffsetAssigner.assign(items);
        String pool = nextName();
        pools.add(new Pool(pool, Pool.Kind.REGULAR, null, r.size(), r.maxLive(), ByteSize.roundUp(r.size(), options.regularGranularity())));
        history.record(pool, bufs, items, r, placements);
        for (Buffer out : live.written) {
            Buffer in = inPlace.get(out);
            if (in == null) continue;
            var p = placements.get(rootOf.get(out));
            placements.put(out, new PlanBuffer.Placement(pool, p.offset(), out.type().byteSize()));
            history.inPlace(out, in);
        }
    }

    /** The regions of each group's barrier-free all-reduces ({@link RotatingSlots}), one after the other in a persistent pool. */
    final Map<Buffer, RotatingSlots> rotating = new IdentityHashMap<>();

    /**
     * The rotating pool of each group with barrier-free all-reduces: a region each, for the session (the rounds carry
     * over from call to call).
     */
    void rotating(LoweredGraph graph) {
        var groups = new TreeMap<String, List<dev.gatun.lowering.ExternBuffer>>();
        for (Buffer b : graph.buffers())
            if (b instanceof dev.gatun.lowering.ExternBuffer e && e.call() instanceof dev.gatun.lowering.ExternCall.Collective c
                    && c.algorithm() == dev.gatun.ir.Algorithm.BARRIER_FREE)
                groups.computeIfAbsent(c.group(), g -> new ArrayList<>()).add(e);
        for (var e : groups.entrySet()) {
            String pool = nextName();
            int ranks = graph.graph().groups().get(e.getKey()).size(graph.worldSize());
            long off = 0;
            for (var b : e.getValue()) {
                long n = b.type().shape().numel();
                var slots = new RotatingSlots(pool, off, ranks, n, b.type().dtype());
                rotating.put(b, slots);
                off = OffsetAssigner.align(off + slots.bytes(), 128);
            }
            pools.add(new Pool(pool, Pool.Kind.ROTATING, e.getKey(), off, off, ByteSize.roundUp(off, options.commGranularity())));
        }
    }

    /** Constant tensors, one after the other. */
    void constants(LoweredGraph graph) {
        var constants = new ArrayList<Buffer>();
        for (Buffer b : graph.buffers()) if (b instanceof ConstantBuffer) constants.add(b);
        if (constants.isEmpty()) return;
        String pool = nextName();
        long size = sequential(pool, constants);
        pools.add(new Pool(pool, Pool.Kind.CONSTANT, null, size, size, size));
        persistent.addAll(0, constants);
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
}
