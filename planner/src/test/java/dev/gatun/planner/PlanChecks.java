package dev.gatun.planner;

import dev.gatun.ir.SymInt;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.BitSet;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Independent checks of a {@link Plan}: lifetimes are recomputed from the plan's steps alone (not from the
 * planner's internal liveness), then every invariant docs/DESIGN.md and the planner issue state is verified.
 * Each check returns a list of violations (empty when the plan is fine), so tests can print them all.
 */
public final class PlanChecks {
    private PlanChecks() {}

    /** A storage buffer's lifetime in step indices, inclusive at both ends. */
    record Life(String buffer, int start, int end, PlanBuffer.Placement at) {
        boolean overlapsInTime(Life o) { return start <= o.end && o.start <= end; }
        boolean overlapsInMemory(Life o) {
            return at.pool().equals(o.at.pool()) && at.offset() < o.at.offset() + o.at.bytes() && o.at.offset() < at.offset() + at.bytes()
                    && at.bytes() > 0 && o.at.bytes() > 0;
        }
    }

    static String storage(Plan p, String name) { return p.buffer(name).storage().name(); }

    static List<String> names(List<PlanBuffer> bs) { return bs.stream().map(PlanBuffer::name).toList(); }

    static List<Step.Collective> collectives(Step s) { return s.collectives(); }

    /** The plan of the graph {@code body} builds, at one rank, after every check here has found nothing. */
    static Plan checkedPlan(PlanOptions options, java.util.function.Consumer<dev.gatun.dsl.GraphBuilder> body) {
        var g = dev.gatun.dsl.Gatun.graph("g");
        body.accept(g);
        Plan p = Planner.plan(dev.gatun.lowering.Lowering.lower(g.build(), dev.gatun.lowering.LoweringOptions.world(1)), options);
        var bad = all(p);
        if (!bad.isEmpty()) throw new AssertionError(p + "\n" + String.join("\n", bad));
        return p;
    }

    /**
     * The plan's steps with each fused collective as what it computes: its prologue, its collective, its epilogue, one
     * after the other (the checks below are about that order; CollectiveFusionTest checks what makes the fused launch
     * compute the same). Joined all_to_alls stay one step: between its one barrier pair a peer may read any part's rows
     * and counts and write any part's receive buffer, so every part's buffers live through the whole step.
     */
    static List<Step> steps(Plan p) {
        var out = new ArrayList<Step>();
        for (Step s : p.steps()) {
            // joined all_to_alls stay one step: between its one barrier pair peers may read and write any part's buffers
            if (s instanceof Step.JoinedAllToAll) out.add(s);
            else out.addAll(s.parts());
        }
        return out;
    }

    /** Storages a step reads (views resolved to their base). */
    static List<String> reads(Plan p, Step s) {
        return names(readBuffers(s)).stream().map(n -> storage(p, n)).distinct().toList();
    }

    /** Storages a step writes. */
    static List<String> writes(Plan p, Step s) {
        return names(writeBuffers(s)).stream().map(n -> storage(p, n)).toList();
    }

    /** Storages whose memory peers of the step's group read directly (symmetric collectives, symmetric user-op inputs). */
    static List<String> peerReads(Plan p, Step s) {
        return switch (s) {
            // an uneven all_to_all's peers read its row counts as well as its rows
            case Step.Collective c when c.call().algorithm().isSymmetric() -> c.counts() == null ? List.of(c.input().storage().name())
                    : List.of(c.input().storage().name(), c.counts().storage().name());
            case Step.CollectiveBatch b -> b.members().stream().map(c -> c.input().storage().name()).toList();
            case Step.JoinedAllToAll j -> j.members().stream().flatMap(c -> peerReads(p, c).stream()).toList();
            case Step.CallUserOp u -> {
                var out = new ArrayList<String>();
                for (int i = 0; i < u.inputs().size(); i++) if (u.op().requiresSymmetric(i)) out.add(u.inputs().get(i).storage().name());
                yield out;
            }
            default -> List.of();
        };
    }

    /**
     * Storages peers write directly at a step: an uneven all_to_all's receive buffer in symmetric memory (the senders
     * write their rows into it).
     */
    static List<String> peerWrites(Plan p, Step s) {
        if (s instanceof Step.JoinedAllToAll j) return j.members().stream().flatMap(c -> peerWrites(p, c).stream()).toList();
        return s instanceof Step.Collective c && c.uneven() && c.output().isSymmetric() ? List.of(c.output().storage().name()) : List.of();
    }

    /**
     * The first step at which a peer may write into a buffer it writes at step {@code i} (of {@link #steps}): the
     * step after the last one before {@code i} that is a barrier of {@code group} (0 where none is). Until then every
     * rank is known to have passed that barrier only: a sender may be at step i while this rank is anywhere after it.
     */
    static int firstPeerWrite(List<Step> steps, int i, String group) {
        for (int j = i - 1; j >= 0; j--) if (isBarrier(steps.get(j), group)) return j + 1;
        return 0;
    }

    /** Whether every rank of {@code group} has finished all earlier peer reads once this step completes. */
    static boolean isBarrier(Step s, String group) {
        return switch (s) {
            case Step.Collective c -> c.call().group().equals(group) && c.call().algorithm().endsWithBarrier();
            case Step.CollectiveBatch b -> isBarrier(b.first(), group);
            case Step.JoinedAllToAll j -> isBarrier(j.first(), group);
            case Step.Barrier b -> b.group().equals(group);
            default -> false;
        };
    }

    /**
     * Lifetimes of every placed storage: from the step that writes it to its last reader, outputs to the end,
     * persistent buffers (constants, path-2 inputs, states and what updates write in their place, rotating slots) the
     * whole plan; communication buffers until the first
     * barrier of their group at or after the last peer read (or the end); a receive buffer peers write
     * ({@link #peerWrites}) from the first step a peer may write it ({@link #firstPeerWrite}).
     */
    static Map<String, Life> lifetimes(Plan p) {
        var steps = steps(p);
        int end = steps.size();
        var start = new HashMap<String, Integer>();
        var lastRead = new HashMap<String, Integer>();
        var lastPeer = new HashMap<String, Integer>();
        var peerWritten = new HashMap<String, Integer>();
        for (int i = 0; i < steps.size(); i++) {
            Step s = steps.get(i);
            for (String b : peerWrites(p, s)) peerWritten.putIfAbsent(b, firstPeerWrite(steps, i, s.collectives().getFirst().call().group()));
            for (String b : writes(p, s)) start.putIfAbsent(b, i);
            for (String b : reads(p, s)) lastRead.put(b, i);
            for (String b : peerReads(p, s)) lastPeer.put(b, i);
        }
        var outputs = new HashSet<String>();
        p.outputs().values().forEach(o -> outputs.add(o.storage().name()));
        var lives = new LinkedHashMap<String, Life>();
        for (PlanBuffer pb : p.buffers()) {
            if (pb.placement() == null) continue;
            String b = pb.name();
            PlanBuffer.Placement at = pb.placement();
            Pool pool = p.pool(at.pool());
            // persistent: kept from call to call (states, and the slots an update writes in place of one), or set up once
            if (pool.kind() == Pool.Kind.CONSTANT || pool.kind() == Pool.Kind.SYMM_INPUTS || pool.kind() == Pool.Kind.STATE
                    || pool.kind() == Pool.Kind.ROTATING) {
                lives.put(b, new Life(b, 0, end, at));
                continue;
            }
            int s = start.getOrDefault(b, -1);
            if (s < 0) throw new AssertionError("placed buffer " + b + " is never written by a step");
            int e2 = Math.max(s, lastRead.getOrDefault(b, s));
            if (peerWritten.containsKey(b)) s = Math.min(s, peerWritten.get(b));
            if (outputs.contains(b)) e2 = end;
            if (pool.kind() == Pool.Kind.COMM && lastPeer.containsKey(b)) {
                int free = end;
                for (int i = lastPeer.get(b); i < steps.size(); i++) if (isBarrier(steps.get(i), pool.group())) { free = i; break; }
                e2 = Math.max(e2, free);
            }
            lives.put(b, new Life(b, s, e2, at));
        }
        return lives;
    }

    static Map<String, Step.Place> places(Plan p) {
        var m = new HashMap<String, Step.Place>();
        for (Step s : steps(p)) if (s instanceof Step.Place pl) m.put(pl.buffer().name(), pl);
        return m;
    }

    /** (a) No two buffers alive at once overlap in memory, save a legal in-place reuse. */
    static List<String> overlaps(Plan p) {
        var bad = new ArrayList<String>();
        var lives = new ArrayList<>(lifetimes(p).values());
        var places = places(p);
        var updatedFrom = updatedFrom(p);
        for (int i = 0; i < lives.size(); i++) {
            for (int j = i + 1; j < lives.size(); j++) {
                Life a = lives.get(i), b = lives.get(j);
                if (!a.overlapsInTime(b) || !a.overlapsInMemory(b)) continue;
                if (legalInPlace(p, places, a, b) || legalInPlace(p, places, b, a)) continue;
                if (updatedInPlace(p, places, updatedFrom, a, b) || updatedInPlace(p, places, updatedFrom, b, a)) continue;
                bad.add("buffers " + a + " and " + b + " are alive at the same time and overlap in " + a.at.pool());
            }
        }
        return bad;
    }

    /** {@code out} written in place of {@code in}: regular pool, same slot, by an elementwise kernel that reads in last, aligned. */
    static boolean legalInPlace(Plan p, Map<String, Step.Place> places, Life in, Life out) {
        Step.Place pl = places.get(out.buffer());
        if (pl == null || !pl.inPlace() || !in.buffer().equals(pl.reuses())) return false;
        if (p.pool(out.at.pool()).kind() != Pool.Kind.REGULAR) return false;
        if (in.at.offset() != out.at.offset() || in.at.bytes() != out.at.bytes()) return false;
        if (in.end != out.start) return false;
        if (!(steps(p).get(out.start) instanceof Step.Launch l)) return false;
        Kernel k = l.kernel();
        // the output is stored once per element of the kernel's whole loop, at that element's row-major place
        var store = k.stores().stream().filter(s -> s.buffer().name().equals(out.buffer())).findFirst();
        if (store.isEmpty() || store.get().perRow() || store.get().strides() != null || !store.get().offset().equals(SymInt.ZERO)) return false;
        int idx = names(k.inputs()).indexOf(in.buffer());
        if (idx < 0) return false;
        // nor may the kernel read the input's memory through another buffer (a part of a concatenation it is the storage of)
        for (PlanBuffer b : k.inputs()) if (!b.name().equals(in.buffer()) && b.storage().name().equals(in.buffer())) return false;
        var loop = new ArrayList<SymInt>(k.ranges());
        loop.addAll(k.reductionRanges());
        var want = new ArrayList<SymInt>();
        SymInt step = SymInt.ONE;
        for (int d = loop.size() - 1; d >= 0; d--) {
            want.addFirst(step);
            step = step.times(loop.get(d));
        }
        // every load of the input reads the element the store of the same index writes: strides as row-major over the
        // loop, except in loop dimensions of size 1, whose index is always 0
        for (KExpr e : k.locals())
            for (KExpr.Load ld : loads(e)) {
                if (ld.input() != idx) continue;
                if (!ld.offset().equals(SymInt.ZERO) || ld.strides().size() != want.size()) return false;
                for (int d = 0; d < want.size(); d++)
                    if (!ld.strides().get(d).equals(want.get(d)) && !loop.get(d).equals(SymInt.ONE)) return false;
            }
        return true;
    }

    /**
     * {@code out} written in place of {@code in} by an update (update_slice, alone or in a batch): a state's slot, or a
     * regular slot whose contents (the target's copy made for the call) the update is the last to read; the same slot,
     * and the update's target is {@code in}; the update copies only its slice, so the rest of the slot is what it was.
     * {@code updatedFrom}: {@link #updatedFrom}.
     */
    static boolean updatedInPlace(Plan p, Map<String, Step.Place> places, Map<String, String> updatedFrom, Life in, Life out) {
        if (in.at.offset() != out.at.offset() || in.at.bytes() != out.at.bytes()) return false;
        // a state's slot, or a regular slot whose old contents (a copy of the target made for the call) the update reads last
        var kind = p.pool(out.at.pool()).kind();
        if (kind != Pool.Kind.STATE && !(kind == Pool.Kind.REGULAR && in.end == out.start)) return false;
        // back along the chain of updates (a state updated twice: the second writes in place of the first's result)
        String b = out.buffer();
        for (int hops = 0; hops <= places.size(); hops++) {
            Step.Place pl = places.get(b);
            if (pl == null || !pl.inPlace() || !pl.reuses().equals(updatedFrom.get(b))) return false;
            if (pl.reuses().equals(in.buffer())) return true;
            b = pl.reuses();
        }
        return false;
    }

    /**
     * (h) Updates in place: once an update has written its slice into a state's slot, no later step reads what the slot
     * held before (the target's storage), since those bytes are gone; its readers come first.
     */
    static List<String> updatesAfterReads(Plan p) {
        var bad = new ArrayList<String>();
        var steps = steps(p);
        var places = places(p);
        for (int i = 0; i < steps.size(); i++)
            for (UpdateSliceCall u : members(steps.get(i))) {
                String old = u.target().storage().name();
                Step.Place pl = places.get(u.output().name());
                if (pl == null || !pl.inPlace() || !old.equals(pl.reuses())) continue;   // written elsewhere: the old value stays
                for (int j = i + 1; j < steps.size(); j++)
                    if (reads(p, steps.get(j)).contains(old))
                        bad.add("step " + j + " (" + steps.get(j).format() + ") reads " + old + " after step " + i + " updated its slot in place");
            }
        return bad;
    }

    /** The updates a step makes: an update alone, each member of a batch, else none. */
    static List<UpdateSliceCall> members(Step s) {
        if (UpdateSliceCall.is(s)) return List.of(UpdateSliceCall.of((Step.OpCall) s));
        return s instanceof Step.UpdateSlices b ? b.members() : List.of();
    }

    /** Every update of the plan, batched ones one by one. */
    static List<UpdateSliceCall> updates(Plan p) { return steps(p).stream().flatMap(s -> members(s).stream()).toList(); }

    /** For each update's result, the storage of its target: the state (or earlier result) it is written in place of. */
    static Map<String, String> updatedFrom(Plan p) {
        var m = new HashMap<String, String>();
        for (UpdateSliceCall u : updates(p)) m.put(u.output().name(), u.target().storage().name());
        return m;
    }

    static List<KExpr.Load> loads(KExpr e) {
        var out = new ArrayList<KExpr.Load>();
        collect(e, out);
        return out;
    }

    private static void collect(KExpr e, List<KExpr.Load> out) {
        switch (e) {
            case KExpr.Load l -> out.add(l);
            case KExpr.Apply a -> a.args().forEach(x -> collect(x, out));
            case KExpr.Cast c -> collect(c.x(), out);
            default -> { }
        }
    }

    /**
     * (b) Communication buffers are never reused in place and never graph outputs; in-place only in regular pools, and
     * in the state pool where an update writes its state's slot.
     */
    static List<String> commRules(Plan p) {
        var bad = new ArrayList<String>();
        for (var e : p.outputs().entrySet()) {
            var at = e.getValue().storage().placement();
            if (at != null && p.pool(at.pool()).isSymmetric())
                bad.add("output " + e.getKey() + " = " + e.getValue() + " lives in symmetric pool " + at.pool());
            if (e.getValue().isSymmetric()) bad.add("output " + e.getKey() + " = " + e.getValue() + " is a symmetric buffer");
        }
        var updatedFrom = updatedFrom(p);
        for (Step s : steps(p)) {
            if (s instanceof Step.Place pl && pl.inPlace()) {
                boolean update = p.pool(pl.pool()).kind() == Pool.Kind.STATE && pl.reuses().equals(updatedFrom.get(pl.buffer().name()));
                if (p.pool(pl.pool()).kind() != Pool.Kind.REGULAR && !update) bad.add("in-place reuse outside a regular pool: " + pl.format());
                if (p.buffer(pl.reuses()).isSymmetric() || pl.buffer().isSymmetric()) bad.add("in-place reuse of a symmetric buffer: " + pl.format());
            }
            if (s instanceof Step.Place pl) {
                boolean symBuf = pl.buffer().isSymmetric();
                boolean symPool = p.pool(pl.pool()).isSymmetric();
                if (symBuf != symPool) bad.add("buffer and pool disagree on symmetry: " + pl.format());
            }
        }
        return bad;
    }

    /**
     * (i) Receive buffers: an uneven all_to_all on symmetric memory receives into a communication buffer of its own
     * group (the pool its senders write into), of exactly the capacity's rows, unless its result is a graph output
     * (then a regular buffer the members fill by reading the senders' rows); its senders' rows and counts lie in
     * symmetric memory of that group too.
     */
    static List<String> receiveBuffers(Plan p) {
        var bad = new ArrayList<String>();
        var outputs = new HashSet<String>();
        p.outputs().values().forEach(o -> outputs.add(o.storage().name()));
        for (Step s : p.steps()) for (Step.Collective c : s.collectives()) {   // a joined all_to_all's parts too
            if (!c.uneven() || !c.call().algorithm().isSymmetric()) continue;
            PlanBuffer out = c.output();
            String group = c.call().group();
            if (!out.isSymmetric()) {
                if (!outputs.contains(out.storage().name())) bad.add(c.format() + ": its receive buffer " + out.name() + " is not in symmetric memory");
                continue;
            }
            var at = out.placement();
            long[] in = c.input().shape().sizes(), sizes = out.shape().sizes();
            long row = c.input().dtype().byteSize();
            for (int d = 1; d < in.length; d++) row *= in[d];
            if (at == null || p.pool(at.pool()).kind() != Pool.Kind.COMM || !group.equals(p.pool(at.pool()).group()))
                bad.add(c.format() + ": receive buffer " + out.name() + " at " + at + " is not in the communication pool of \"" + group + "\"");
            else if (at.bytes() != sizes[0] * row)
                bad.add(c.format() + ": receive buffer " + out.name() + " takes " + at.bytes() + " B, not the capacity's " + sizes[0] + " rows of " + row + " B");
            for (PlanBuffer b : c.reads())
                if (!group.equals(b.storage().group())) bad.add(c.format() + ": " + b.name() + ", which peers read, is not in symmetric memory of \"" + group + "\"");
        }
        return bad;
    }

    /** (c) Every pool holds at least its max-live bound, every placement fits in its pool, and allocation rounds up. */
    static List<String> poolSizes(Plan p) {
        var bad = new ArrayList<String>();
        for (Pool pool : p.pools()) {
            if (pool.bytes() < pool.maxLive()) bad.add(pool + ": size below max-live");
            if (pool.allocationBytes() < pool.bytes()) bad.add(pool + ": allocation below size");
        }
        for (PlanBuffer b : p.buffers()) {
            var at = b.placement();
            if (at == null) continue;
            Pool pool = p.pool(at.pool());
            if (at.offset() < 0 || at.offset() + at.bytes() > pool.bytes()) bad.add(b.name() + " " + at + " does not fit in " + pool);
            if (at.bytes() != b.type().byteSize()) bad.add(b.name() + " " + at + " has the wrong size");
        }
        return bad;
    }

    /** The buffers a step reads, as the step names them (views and parts of concatenations not resolved). */
    static List<PlanBuffer> readBuffers(Step s) {
        return switch (s) {
            case Step.Launch l -> l.kernel().inputs();
            case Step.Collective c -> c.counts() == null ? List.of(c.input()) : List.of(c.input(), c.counts());
            case Step.CollectiveBatch b -> b.members().stream().map(Step.Collective::input).toList();
            case Step.JoinedAllToAll j -> j.members().stream().flatMap(c -> readBuffers(c).stream()).toList();
            case Step.Matmul m -> List.of(m.a(), m.b());
            case Step.OpCall o -> o.inputs();
            case Step.CallUserOp u -> u.inputs();
            case Step.UpdateSlices b -> b.members().stream().flatMap(u -> readBuffers(u.call()).stream()).toList();
            default -> List.of();
        };
    }

    /** The buffers a step writes, as the step names them. */
    static List<PlanBuffer> writeBuffers(Step s) {
        return switch (s) {
            case Step.Launch l -> l.kernel().outputs();
            case Step.Collective c -> List.of(c.output());
            case Step.CollectiveBatch b -> b.members().stream().map(Step.Collective::output).toList();
            case Step.JoinedAllToAll j -> j.members().stream().map(Step.Collective::output).toList();
            case Step.Matmul m -> List.of(m.output());
            case Step.OpCall o -> o.outputs();
            case Step.CallUserOp u -> u.outputs();
            case Step.CopyIn c -> List.of(c.buffer());
            case Step.UpdateSlices b -> b.members().stream().map(UpdateSliceCall::output).toList();
            default -> List.of();
        };
    }

    /** Concatenations whose elements are checked one by one: static and at most this many elements. */
    private static final long MAX_TRACKED = 1 << 22;

    /** Whether {@code storage} is a concatenation's storage, written in parts, whose elements the checks track. */
    static boolean tracked(PlanBuffer storage) {
        return !storage.parts().isEmpty() && storage.shape().isStatic() && storage.shape().numel() <= MAX_TRACKED;
    }

    /** The elements of its storage a buffer of static shape addresses (offset plus strides over its shape), as indices. */
    static BitSet elements(PlanBuffer b) {
        var out = new BitSet();
        long[] shape = b.shape().sizes(Map.of());
        long n = 1;
        for (long d : shape) n *= d;
        long off = b.offset().eval(Map.of());
        long[] st = new long[shape.length];
        for (int k = 0; k < st.length; k++) st[k] = b.strides().get(k).eval(Map.of());
        long[] idx = new long[shape.length];
        for (long e = 0; e < n; e++) {
            long at = off;
            for (int k = 0; k < shape.length; k++) at += idx[k] * st[k];
            out.set(Math.toIntExact(at));
            for (int k = shape.length - 1; k >= 0; k--) {
                if (++idx[k] < shape[k]) break;
                idx[k] = 0;
            }
        }
        return out;
    }

    /**
     * (e) Steps in a valid order: everything a step reads is produced (or placed persistent / a caller input) before it,
     * and nothing is written twice. A concatenation's storage is written in parts, each once: a step that reads some of
     * its elements needs those written (a read of the concatenation itself needs them all).
     */
    static List<String> order(Plan p) {
        var bad = new ArrayList<String>();
        var produced = new HashSet<String>();
        var placed = new HashSet<String>();
        var parts = new HashMap<String, BitSet>();      // tracked concatenations: the elements written so far
        var partsWritten = new HashMap<String, Integer>(); // the others: how many parts are written
        for (var in : p.inputs()) if (!in.isSymmetric()) produced.add(in.name());
        int i = 0;
        for (Step s : steps(p)) {
            if (s instanceof Step.Place pl) {
                placed.add(pl.buffer().name());
                // a constant is written once per session, a state holds what the last call left (zeros at first)
                if (pl.buffer().kind() == PlanBuffer.Kind.CONSTANT || pl.buffer().kind() == PlanBuffer.Kind.STATE) produced.add(pl.buffer().name());
            }
            if (s instanceof Step.AllocDynamic d) placed.add(d.buffer().name());
            if (!(s instanceof Step.CopyIn))   // a collective's own path-2 copy comes first (a joined one's parts')
                for (PlanBuffer c : s.copiedIn()) produced.add(c.name());
            for (PlanBuffer rb : readBuffers(s)) {
                PlanBuffer st = rb.storage();
                String r = st.name();
                if (tracked(st) && !produced.contains(r)) {
                    BitSet missing = rb == st ? allOf(st) : elements(rb);
                    missing.andNot(parts.getOrDefault(r, new BitSet()));
                    if (!missing.isEmpty()) bad.add("step " + i + " (" + s.format() + ") reads " + rb.name() + " before all of it is written: elements "
                            + missing + " of " + r + " are not");
                } else if (!st.parts().isEmpty() && rb != st && !produced.contains(r)) {
                    // a symbolic concatenation: a part read needs that part written; a view of one, at least some part
                    boolean ok = rb.part() != null ? written(p, rb, produced) : partsWritten.getOrDefault(r, 0) > 0;
                    if (!ok) bad.add("step " + i + " (" + s.format() + ") reads " + rb.name() + " before it is produced");
                } else if (!produced.contains(r)) bad.add("step " + i + " (" + s.format() + ") reads " + r + " before it is produced");
                if (!(st.kind() == PlanBuffer.Kind.INPUT && !st.isSymmetric()) && !placed.contains(r))
                    bad.add("step " + i + " reads " + r + " which has no Place before it");
            }
            for (PlanBuffer wb : writeBuffers(s)) {
                PlanBuffer st = wb.storage();
                String w = st.name();
                if (!placed.contains(w)) bad.add("step " + i + " (" + s.format() + ") writes " + w + " which has no Place before it");
                if (wb.part() == null || st.parts().isEmpty()) {
                    if (!produced.add(w)) bad.add("step " + i + " writes " + w + " a second time");
                } else if (tracked(st)) {
                    BitSet e = elements(wb), done = parts.computeIfAbsent(w, k -> new BitSet());
                    if (e.intersects(done)) bad.add("step " + i + " writes " + wb.name() + ", elements of " + w + " already written");
                    done.or(e);
                    if (done.equals(allOf(st))) produced.add(w);
                } else {
                    if (!produced.add(wb.name())) bad.add("step " + i + " writes " + wb.name() + " a second time");
                    if (partsWritten.merge(w, 1, Integer::sum) == leafParts(p, st)) produced.add(w);
                }
            }
            i++;
        }
        for (PlanBuffer o : p.outputs().values()) {
            String st = o.storage().name();
            if (!produced.contains(st) && !(o.part() != null && produced.contains(o.name()))) bad.add("output " + o + " is never produced");
        }
        return bad;
    }

    /** Whether a part is written: by its step, or, for a concatenation placed inside another, by all of its own parts'. */
    private static boolean written(Plan p, PlanBuffer part, Set<String> produced) {
        if (part.parts().isEmpty()) return produced.contains(part.name());
        for (PlanBuffer.Part q : part.parts()) if (!written(p, p.buffer(q.writer()), produced)) return false;
        return true;
    }

    private static BitSet allOf(PlanBuffer storage) {
        var all = new BitSet();
        all.set(0, Math.toIntExact(storage.shape().numel()));
        return all;
    }

    /**
     * Whether a store writes each element of its buffer exactly once, where the buffer's layout puts it (its own strides:
     * row-major, or a slice's), over the kernel's loop (the rows, and for an element store the rows' elements), whatever
     * order the loop walks them in; null when it does, else what is wrong. Static shapes of at most 2^16 elements only.
     */
    static String storeCoversItsBuffer(Kernel k, Kernel.Store st) {
        var loop = new ArrayList<SymInt>(k.ranges());
        if (!st.perRow()) loop.addAll(k.reductionRanges());
        PlanBuffer b = st.buffer();
        if (!b.shape().isStatic() || loop.stream().anyMatch(x -> !x.isConstant()) || b.shape().numel() > 1 << 16) return null;
        if (!st.offset().isConstant() || (st.strides() != null && st.strides().stream().anyMatch(x -> !x.isConstant()))) return null;
        if (b.strides().stream().anyMatch(x -> !x.isConstant())) return null;
        var want = new HashSet<Long>();
        long[] shape = b.shape().sizes();
        long[] idx = new long[shape.length];
        for (long e = 0; e < b.shape().numel(); e++) {
            long rest = e, at = 0;
            for (int d = shape.length - 1; d >= 0; d--) {
                idx[d] = rest % shape[d];
                rest /= shape[d];
                at += idx[d] * b.strides().get(d).constant();
            }
            want.add(at);
        }
        long n = 1;
        for (SymInt x : loop) n *= x.constant();
        var got = new HashSet<Long>();
        for (long e = 0; e < n; e++) {
            long at = st.offset().constant();
            if (st.strides() == null) at += e;
            else {
                long rest = e;
                for (int d = loop.size() - 1; d >= 0; d--) {
                    long i = rest % loop.get(d).constant();
                    rest /= loop.get(d).constant();
                    at += i * st.strides().get(d).constant();
                }
            }
            if (!got.add(at)) return "twice at element " + at;
        }
        return got.equals(want) ? null : "at offset " + st.offset() + " strides " + st.strides() + ", not exactly at its elements";
    }

    /** How many steps write a concatenation's storage: its parts', and those of concatenations placed inside it. */
    static int leafParts(Plan p, PlanBuffer cat) {
        int n = 0;
        for (PlanBuffer.Part part : cat.parts()) {
            PlanBuffer w = p.buffer(part.writer());
            n += w.parts().isEmpty() ? 1 : leafParts(p, w);
        }
        return n;
    }

    /**
     * (g) Concatenations: the parts of each lie in its storage, in their slices, without overlap, covering it; each part
     * is written by one step, a kernel's store exactly at the part's place (row-major where its slice is contiguous,
     * else at its strides from its start) or a matrix product; and a part takes no slot of its own.
     */
    static List<String> concatenations(Plan p) {
        var bad = new ArrayList<String>();
        var writers = new HashMap<String, Integer>();
        for (Step s : steps(p)) {
            for (PlanBuffer w : writeBuffers(s)) if (w.part() != null) writers.merge(w.name(), 1, Integer::sum);
            if (s instanceof Step.Launch l)
                for (Kernel.Store st : l.kernel().stores()) {
                    String why = storeCoversItsBuffer(l.kernel(), st);
                    if (why != null) bad.add(l.kernel().name() + " stores " + st.buffer().name() + " " + why
                            + (st.buffer().part() == null ? "" : " (its slice " + st.buffer().part().range() + ", strides " + st.buffer().strides() + ")"));
                }
            if (s instanceof Step.Place pl && pl.buffer().part() != null) bad.add("part " + pl.buffer().name() + " has a slot of its own: " + pl.format());
        }
        for (PlanBuffer b : p.buffers()) {
            if (b.part() != null) {
                if (b.base() == null || b.base().part() != null || b.base().parts().isEmpty())
                    bad.add("part " + b.name() + " of " + b.part().cat() + " is not addressed in a concatenation's storage (base " + b.base() + ")");
                boolean written = b.parts().isEmpty(); // a concatenation placed inside another is written by its own parts
                if (written && writers.getOrDefault(b.name(), 0) != 1)
                    bad.add("part " + b.name() + " is written by " + writers.getOrDefault(b.name(), 0) + " steps, not one");
            }
            if (b.parts().isEmpty() || !tracked(b.storage())) continue;
            // the parts tile the concatenation: disjoint, and together exactly its elements
            BitSet own = b.part() == null ? allOf(b) : elements(b), union = new BitSet();
            for (PlanBuffer.Part part : b.parts()) {
                PlanBuffer w = p.buffer(part.writer());
                if (w.storage() != b.storage()) bad.add("part " + w.name() + " of " + b.name() + " lies in " + w.storage().name() + ", not in " + b.storage().name());
                BitSet e = elements(w);
                if (e.intersects(union)) bad.add("part " + w.name() + " of " + b.name() + " overlaps an earlier part");
                union.or(e);
            }
            if (!union.equals(own)) bad.add("the parts of " + b.name() + " cover elements " + union + ", not its own " + own);
        }
        return bad;
    }

    /** (f) Path-2 copies: one per symmetric input, all inside the first capture partition and nowhere else. */
    static List<String> copyIns(Plan p) {
        var bad = new ArrayList<String>();
        var copied = new ArrayList<String>();
        for (int i = 0; i < p.steps().size(); i++) {
            String buffer;
            if (p.steps().get(i) instanceof Step.CopyIn c) buffer = c.buffer().name();
            else if (p.steps().get(i).collectives().stream().anyMatch(Step.Collective::copiesIn))
                buffer = p.steps().get(i).collectives().stream().filter(Step.Collective::copiesIn).findFirst().orElseThrow().input().name();
            else continue;
            copied.add(buffer);
            if (p.partitions().isEmpty()) { bad.add("copy_in " + buffer + " but no capture partition"); continue; }
            var first = p.partitions().getFirst();
            if (i < first.first() || i > first.last()) bad.add("copy_in " + buffer + " at step " + i + " outside partition " + first);
        }
        var want = new ArrayList<String>();
        for (var in : p.inputs()) if (in.isSymmetric()) want.add(in.name());
        if (!new HashSet<>(copied).equals(new HashSet<>(want)) || copied.size() != want.size())
            bad.add("copy_in steps " + copied + " but path-2 inputs " + want);
        return bad;
    }

    /** Partitions: disjoint, increasing, bounded by device work, and none of them contains host-only steps. */
    static List<String> partitions(Plan p) {
        var bad = new ArrayList<String>();
        int prev = -1;
        for (var part : p.partitions()) {
            if (part.first() <= prev || part.last() < part.first()) bad.add("bad partition " + part);
            prev = part.last();
            for (int i = part.first(); i <= part.last(); i++) {
                Step s = p.steps().get(i);
                if (s instanceof Step.AllocDynamic || s instanceof Step.Release || s instanceof Step.AllocPool)
                    bad.add("partition " + part + " contains host step " + s.format());
            }
            if (!p.steps().get(part.first()).isDeviceWork() || !p.steps().get(part.last()).isDeviceWork())
                bad.add("partition " + part + " does not start and end with device work");
        }
        return bad;
    }

    /**
     * Across calls: a symmetric slot is written again by the next call (the first kernels, path-2 copies) or
     * released for other graphs, so every peer read must be followed by a barrier of its group before the
     * call returns.
     */
    static List<String> barrierBeforeReturn(Plan p) {
        var bad = new ArrayList<String>();
        var lastPeer = new LinkedHashMap<String, Integer>();
        var steps = steps(p);
        for (int i = 0; i < steps.size(); i++) for (String b : peerReads(p, steps.get(i))) lastPeer.put(b, i);
        lastPeer.forEach((b, at) -> {
            var place = p.placement(b);
            if (place == null) { bad.add("peers read " + b + " which is not in a symmetric pool"); return; }
            Pool pool = p.pool(place.pool());
            if (!pool.isSymmetric()) { bad.add("peers read " + b + " in non-symmetric pool " + pool.name()); return; }
            boolean ok = false;
            for (int i = at; i < steps.size() && !ok; i++) ok = isBarrier(steps.get(i), pool.group());
            if (!ok) bad.add("peers may still read " + b + " (last at step " + at + ") when the call returns: no barrier of \"" + pool.group() + "\" follows");
        });
        return bad;
    }

    /** Every check at once. */
    public static List<String> all(Plan p) {
        var bad = new ArrayList<String>();
        bad.addAll(overlaps(p));
        bad.addAll(commRules(p));
        bad.addAll(poolSizes(p));
        bad.addAll(order(p));
        bad.addAll(concatenations(p));
        bad.addAll(copyIns(p));
        bad.addAll(partitions(p));
        bad.addAll(barrierBeforeReturn(p));
        bad.addAll(fusedTiles(p));
        bad.addAll(updatesAfterReads(p));
        bad.addAll(joinedLaunches(p));
        bad.addAll(tiledProducts(p));
        bad.addAll(receiveBuffers(p));
        if (p.estimatedPeak() > p.plainOrderPeak()) bad.add("estimated peak " + p.estimatedPeak() + " > plain order's " + p.plainOrderPeak());
        return bad;
    }

    /**
     * A launch that joins steps (updates at one position, an attention with the update of its caches, a product with
     * its epilogues) runs them in one grid, whose blocks read and write in any order: nothing it writes may
     * share a byte with anything it reads, or with another buffer it writes. (Apart, the second step may write where the
     * first one's input was: the first has read it by then.)
     */
    static List<String> joinedLaunches(Plan p) {
        var bad = new ArrayList<String>();
        for (Step s : p.steps()) {
            List<PlanBuffer> read, written;
            switch (s) {
                case Step.UpdateAttention u -> {
                    read = new ArrayList<>(List.of(u.attention().q(), u.attention().position()));
                    u.updates().members().forEach(m -> { read.add(m.update()); read.add(m.start()); });
                    written = List.of(u.attention().output());
                }
                case Step.TiledProduct t -> {
                    // the product's output among the read: no epilogue may be stored over it (other blocks read it)
                    read = new ArrayList<>(List.of(t.product().a(), t.product().b()));
                    t.epilogues().forEach(l -> read.addAll(l.kernel().inputs()));
                    written = new ArrayList<>(List.of(t.product().output()));
                    t.epilogues().forEach(l -> written.addAll(l.kernel().outputs()));
                }
                case Step.UpdateSlices b -> {
                    read = new ArrayList<>();
                    b.members().forEach(m -> { read.add(m.update()); read.add(m.start()); });
                    written = b.members().stream().map(UpdateSliceCall::output).toList();
                }
                default -> { continue; }
            }
            for (PlanBuffer w : written)
                for (PlanBuffer r : read) {
                    if (w.storage() == r.storage()) continue;
                    var at = w.storage().placement();
                    var from = r.storage().placement();
                    if (at == null || from == null || !at.pool().equals(from.pool())) continue;
                    if (at.offset() < from.offset() + from.bytes() && from.offset() < at.offset() + at.bytes())
                        bad.add(s.format().lines().findFirst().orElse("") + ": writes " + w.storage().name() + " " + at + " over "
                                + r.storage().name() + " " + from + ", which it reads");
                }
        }
        return bad;
    }

    /**
     * (g) Fused collective launches, checked byte by byte without CollectiveFusion's rules: every item (a row where the
     * epilogue is a row kernel, else an element) is a tile of its own, run by a block of its own in any order against
     * the others; within an item the phases (prologue, collective, epilogue) run in order. A byte of a pool that one
     * item writes may be neither read nor written by another item: the finest tiling, so every grid's tiles are safe.
     * Static shapes only (fusion takes nothing else); rotating regions are the barrier-free protocol's own. Launches of
     * more than {@link #TILE_CHECK_ELEMENTS} elements are not checked (the check keeps every byte).
     */
    static List<String> fusedTiles(Plan p) { return fusedTiles(p.steps()); }

    /**
     * A product with epilogues ({@link Step.TiledProduct}) runs each epilogue item in the block that holds the columns it
     * reads: every column of the product's output that one item reads (an element of a pointwise kernel, a whole row of a
     * row kernel), and every element it reads that an earlier epilogue's item stored, must be of one tile, the tile the
     * step assigns the item to; no tile may be larger than a block holds. Checked here by walking each kernel's loop
     * again, element by element, with the loads' and stores' offsets and strides.
     */
    static List<String> tiledProducts(Plan p) { return tiledProducts(p.steps()); }

    static List<String> tiledProducts(List<Step> steps) {
        var bad = new ArrayList<String>();
        for (Step s : steps) {
            if (!(s instanceof Step.TiledProduct t)) continue;
            PlanBuffer y = t.product().output();
            long columns = y.shape().sizes()[1];
            if (t.tiles().largest() > Step.TiledProduct.MAX_TILE_COLUMNS) bad.add(t.name() + ": a tile of " + t.tiles().largest() + " columns");
            var storedBy = new java.util.IdentityHashMap<PlanBuffer, int[]>();   // element -> 1 + the tile of the item that stored it
            for (int e = 0; e < t.epilogues().size(); e++) {
                dev.gatun.planner.kernel.Kernel k = t.epilogues().get(e).kernel();
                int[] assigned = t.tiles().itemGroups(e);
                var loads = new ArrayList<dev.gatun.planner.kernel.KExpr.Load>();
                for (var local : k.locals()) collectLoads(local, loads);
                long[] outer = k.ranges().stream().mapToLong(dev.gatun.ir.SymInt::constant).toArray();
                long[] inner = k.reductionRanges().stream().mapToLong(dev.gatun.ir.SymInt::constant).toArray();
                long item = 0;
                for (long[] at : points(outer)) {
                    var groups = new java.util.TreeSet<Integer>();
                    long element = 0;
                    for (long[] in : points(inner)) {
                        for (var l : loads) {
                            PlanBuffer b = k.inputs().get(l.input());
                            int[] stored = storedBy.get(b.storage());
                            if (b.storage() != y.storage() && stored == null) continue;
                            long addr = (b.isView() ? b.offset().constant() : 0) + l.offset().constant();
                            for (int d = 0; d < at.length; d++) addr += l.strides().get(d).constant() * at[d];
                            for (int d = 0; d < in.length; d++) addr += l.strides().get(at.length + d).constant() * in[d];
                            if (b.storage() == y.storage()) groups.add(t.tiles().groupOf((int) (addr % columns)));
                            else if (stored[(int) addr] != 0) groups.add(stored[(int) addr] - 1);
                        }
                        element++;
                    }
                    int want = groups.isEmpty() ? -1 : groups.first();
                    if (groups.size() > 1 || assigned[(int) item] != want)
                        bad.add(t.name() + ": " + k.name() + " item " + item + " reads tiles " + groups + ", assigned " + assigned[(int) item]);
                    item++;
                }
                // what this epilogue stores, element by element, with the tile of the item that stores it
                long perItem = java.util.Arrays.stream(inner).reduce(1, (a, b) -> a * b);
                item = 0;
                for (long[] at : points(outer)) {
                    long e2 = 0;
                    for (long[] in : points(inner)) {
                        for (var st : k.stores()) {
                            if (st.perRow() && e2 > 0) continue;
                            PlanBuffer b = st.buffer();
                            long addr = (b.isView() ? b.offset().constant() : 0) + st.offset().constant();
                            if (st.strides() == null) addr += st.perRow() ? item : item * perItem + e2;
                            else {
                                for (int d = 0; d < at.length; d++) addr += st.strides().get(d).constant() * at[d];
                                if (!st.perRow()) for (int d = 0; d < in.length; d++) addr += st.strides().get(at.length + d).constant() * in[d];
                            }
                            storedBy.computeIfAbsent(b.storage(), x -> new int[(int) x.shape().numel()])[(int) addr] = assigned[(int) item] + 1;
                        }
                        e2++;
                    }
                    item++;
                }
            }
        }
        return bad;
    }

    private static void collectLoads(dev.gatun.planner.kernel.KExpr e, List<dev.gatun.planner.kernel.KExpr.Load> out) {
        switch (e) {
            case dev.gatun.planner.kernel.KExpr.Load l -> out.add(l);
            case dev.gatun.planner.kernel.KExpr.Apply a -> a.args().forEach(x -> collectLoads(x, out));
            case dev.gatun.planner.kernel.KExpr.Cast c -> collectLoads(c.x(), out);
            default -> {}
        }
    }

    /** Every index of a loop over {@code ranges}, in row-major order (one empty index for no ranges). */
    private static List<long[]> points(long[] ranges) {
        var out = new ArrayList<long[]>();
        out.add(new long[0]);
        for (long r : ranges) {
            var next = new ArrayList<long[]>();
            for (long[] prefix : out)
                for (long i = 0; i < r; i++) {
                    long[] x = java.util.Arrays.copyOf(prefix, prefix.length + 1);
                    x[prefix.length] = i;
                    next.add(x);
                }
            out = next;
        }
        return out;
    }

    static List<String> fusedTiles(List<Step> steps) {
        var bad = new ArrayList<String>();
        for (Step s : steps) {
            if (!(s instanceof Step.FusedCollective f)) continue;
            var members = f.collectives();
            long n = members.getFirst().input().shape().numel();
            if (n > TILE_CHECK_ELEMENTS) continue;
            Kernel pro = f.prologue() == null ? null : f.prologue().kernel(), epi = f.epilogue() == null ? null : f.epilogue().kernel();
            long rowLength = epi != null && epi.isReduction() ? SymInt.product(epi.reductionRanges()).constant() : 1;
            var writer = new HashMap<String, Long>();               // pool byte -> the item that writes it
            var readers = new HashMap<String, Set<Long>>();         // pool byte -> the items that read it
            for (long item = 0; item < n / rowLength; item++) {
                long it = item;
                var touch = new Object() {
                    void at(PlanBuffer b, long storageIndex, boolean write) {
                        var pl = b.storage().placement();
                        if (pl == null) return; // a caller's input outside the pools: read only
                        for (long k = 0; k < b.dtype().byteSize(); k++) {
                            String key = pl.pool() + ":" + (pl.offset() + storageIndex * b.dtype().byteSize() + k);
                            if (write) {
                                Long w = writer.putIfAbsent(key, it);
                                if (w != null && w != it) bad.add(f.name() + ": items " + w + " and " + it + " both write " + b.name() + " (" + key + ")");
                            } else readers.computeIfAbsent(key, x -> new HashSet<>()).add(it);
                        }
                    }
                };
                // the prologue (elementwise: CollectiveFusion takes no row kernel there) over the item's elements: a row of
                // the epilogue's, or one
                if (pro != null) for (long e = item * rowLength; e < (item + 1) * rowLength; e++) kernelTile(pro, e, 1, touch::at);
                for (var c : members)
                    for (long e = item * rowLength; e < (item + 1) * rowLength; e++) {
                        touch.at(c.input(), storageIndex(c.input(), e), false);
                        touch.at(c.output(), storageIndex(c.output(), e), true);
                    }
                if (epi != null) kernelTile(epi, item, rowLength, touch::at);
            }
            readers.forEach((key, items) -> {
                Long w = writer.get(key);
                if (w != null) for (long r : items) if (r != w) bad.add(f.name() + ": item " + r + " reads " + key + ", which item " + w + " writes");
            });
        }
        return bad.stream().distinct().limit(20).toList();
    }

    static final long TILE_CHECK_ELEMENTS = 1 << 14;

    interface Touch { void at(PlanBuffer b, long storageIndex, boolean write); }

    /** The accesses of kernel {@code k}'s iterations for one item: a row (row kernels) or {@code rowLength} = 1 element. */
    private static void kernelTile(Kernel k, long item, long rowLength, Touch touch) {
        var extents = new ArrayList<SymInt>(k.ranges());
        extents.addAll(k.reductionRanges());
        long[] ext = extents.stream().mapToLong(SymInt::constant).toArray();
        boolean rows = k.isReduction();
        long perItem = rows ? SymInt.product(k.reductionRanges()).constant() : 1;
        for (long j = 0; j < perItem; j++) {
            long linear = item * perItem + j;
            long[] idx = new long[ext.length];
            long rem = linear;
            for (int d = ext.length - 1; d >= 0; d--) { idx[d] = rem % ext[d]; rem /= ext[d]; }
            for (KExpr e : k.locals())
                for (KExpr.Load l : loads(e)) {
                    long at = l.offset().constant();
                    for (int d = 0; d < Math.min(idx.length, l.strides().size()); d++) at += l.strides().get(d).constant() * idx[d];
                    touch.at(k.inputs().get(l.input()), at, false);
                }
            for (var st : k.stores()) {
                if (st.perRow()) {
                    if (j == 0) touch.at(st.buffer(), storageIndex(st.buffer(), item), true);
                    continue;
                }
                long e;
                if (st.strides() == null) e = st.offset().constant() + linear;
                else {
                    e = st.offset().constant();
                    for (int d = 0; d < st.strides().size(); d++) e += st.strides().get(d).constant() * idx[d];
                }
                touch.at(st.buffer(), storageIndex(st.buffer(), e), true);
            }
        }
    }

    /** Where element {@code e} (row-major over its shape) of a static buffer lies in its storage. */
    private static long storageIndex(PlanBuffer b, long e) {
        long[] shape = b.shape().sizes(Map.of());
        long at = b.offset().eval(Map.of());
        for (int k = shape.length - 1; k >= 0; k--) {
            at += (e % shape[k]) * b.strides().get(k).eval(Map.of());
            e /= shape[k];
        }
        return at;
    }


    /** Buffers a kernel stores, resolved. */
    static Set<String> kernelOutputs(Kernel k) { return new HashSet<>(names(k.outputs())); }
}
