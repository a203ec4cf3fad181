package dev.gatun.planner;

import dev.gatun.ir.ops.Snapshot;
import dev.gatun.ir.ops.UpdateSlice;
import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ConstantBuffer;
import dev.gatun.lowering.ExternBuffer;
import dev.gatun.lowering.ExternCall;
import dev.gatun.lowering.ExternOutputBuffer;
import dev.gatun.lowering.InputBuffer;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.lowering.ViewBuffer;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * A state's new value written straight into the state's own slot, where the graph reads the old value through a
 * {@code snapshot} and writes the new one over it with an {@code update_slice} of its whole extent. The graph needs the
 * pair (see {@link Snapshot}): its rule is that an overwritten state version has no other reader, so every read of the
 * old value goes to the snapshot's copy and the write is ordered after them by data alone. The copy and the update each
 * move the state's bytes once a call (an optimizer step: every weight and moment, twice); once the order is fixed they
 * are not needed where the kernel that computes the new value is, in that order, the last reader of the old one:
 * <ul>
 *   <li>the snapshot reads the state itself (not a version written earlier in the call), the one thing that writes
 *   over its in-place output is an {@code update_slice} of the state's whole type at a constant position 0, and
 *   nothing updates that update's result again;</li>
 *   <li>the new value is a buffer of its own (no view, no part of a concatenation), stored row-major once by a
 *   pointwise kernel (no row kernel, no gather through indices, no product's epilogue), into no other state's slot;</li>
 *   <li>no work of the order reads the old value (the copy, through any view) after that kernel, and the kernel itself
 *   reads it, if at all, only at the element it writes ({@link InPlace#readsAligned}): so every reader has its old
 *   contents, as for a slot reused after its last read ({@link Liveness}) or an elementwise kernel written over a
 *   dying input ({@link InPlace});</li>
 *   <li>neither buffer is in symmetric memory or read by a peer (its reads are ordered by the peer's own steps, not
 *   by this rank's), and the old value is no graph output.</li>
 * </ul>
 * Then the copy and the new value take the state's slot ({@link Pools#states}), the snapshot and the update leave
 * the order, and the kernel's launch says so in a note; where a rule fails the plan notes which
 * ({@link Plan#notes()}), and the pair stays. Off with {@link PlanOptions#inPlace()}.
 */
final class StateWrites {
    /** One state written in place: its snapshot's copy {@code old} and the update's value {@code value} take its slot. */
    record Written(InputBuffer state, ExternBuffer snapshot, ExternOutputBuffer old, ExternBuffer update, Buffer value) {}

    final List<Work> order;
    final List<Written> written;
    final List<String> notes;

    private StateWrites(List<Work> order, List<Written> written, List<String> notes) {
        this.order = order;
        this.written = written;
        this.notes = notes;
    }

    /** The decisions for every snapshot of {@code graph} over {@code order}, and the order without the pairs removed. */
    static StateWrites of(LoweredGraph graph, List<Work> order, Liveness live, ByBuffer.Set outputs, boolean on) {
        var overwriter = new IdentityHashMap<Buffer, ExternBuffer>();
        var snapshots = new ArrayList<ExternBuffer>();
        for (Buffer b : graph.buffers()) {
            if (!(b instanceof ExternBuffer e)) continue;
            if (isSnapshot(e)) snapshots.add(e);
            if (e.call().inPlace()) overwriter.put(e.inputs().getFirst(), e);
        }
        if (snapshots.isEmpty()) return new StateWrites(order, List.of(), List.of());
        if (!on) return new StateWrites(order, List.of(), List.of("state writes: off (PlanOptions.withInPlace(false)): every snapshot copies its state and every update_slice writes the new value over it"));
        var written = new ArrayList<Written>();
        var notes = new ArrayList<String>();
        var taken = new ByBuffer<InputBuffer>(graph);
        var noteOf = new IdentityHashMap<Work, List<String>>();
        for (ExternBuffer s : snapshots) {
            ExternBuffer u = overwriter.get(s);
            String why = refusal(s, u, overwriter, live, outputs, taken);
            if (why != null) {
                notes.add("state " + s.inputs().getFirst().name() + " keeps its snapshot " + s.name() + (u == null ? "" : " and update " + u.name()) + ": " + why);
                continue;
            }
            var w = new Written((InputBuffer) s.inputs().getFirst(), s, (ExternOutputBuffer) s.extraOutputs().getFirst(), u, u.inputs().get(1));
            written.add(w);
            taken.put(w.value(), w.state());
            Work writer = live.order.get(live.def(w.value()));
            noteOf.computeIfAbsent(writer, k -> new ArrayList<>()).add(note(w, live.lastLocalRead(w.old()) == live.def(w.value())));
        }
        if (!written.isEmpty()) notes.addFirst(summary(written, snapshots.size()));
        return new StateWrites(without(order, written, noteOf), written, notes);
    }

    private static boolean isSnapshot(ExternBuffer e) {
        return e.call() instanceof ExternCall.Registered r && r.spec() == Snapshot.SPEC && e.extraOutputs().size() == 1;
    }

    private static boolean isWholeUpdate(ExternBuffer u, Buffer state) {
        return u.call() instanceof ExternCall.Registered r && r.spec() == UpdateSlice.SPEC && u.inputs().get(1).type().equals(state.type());
    }

    /** Why snapshot {@code s} and its overwriting update {@code u} must stay, or null where the state is written in place. */
    private static String refusal(ExternBuffer s, ExternBuffer u, Map<Buffer, ExternBuffer> overwriter, Liveness live, ByBuffer.Set outputs,
                                  ByBuffer<InputBuffer> taken) {
        Buffer state = s.inputs().getFirst();
        if (!(state instanceof InputBuffer in && in.isState()))
            return state.name() + " is no state but a value of the call (only a state's slot holds the old value from the start)";
        if (u == null) return "nothing writes over it in place";
        if (!isWholeUpdate(u, state))
            return u.name() + " = " + u.call().opName() + " writes " + u.inputs().get(1).type() + ", not the state's whole " + state.type();
        if (overwriter.containsKey(u)) return "its new version " + u.name() + " is updated in place again by " + overwriter.get(u).name();
        if (!(u.inputs().get(2) instanceof ConstantBuffer c) || c.values().length != 1 || c.values()[0] != 0)
            return "the update's position " + u.inputs().get(2).name() + " is not the constant 0 (read at run time, it is checked by the update)";
        ExternOutputBuffer old = s.extraOutputs().getFirst();
        Buffer value = u.inputs().get(1);
        if (outputs.contains(old)) return "the old value " + old.name() + " is a graph output";
        if (old.isSymmetric() || value.isSymmetric() || live.peerRead(old) || live.peerRead(value))
            return "peers read " + (value.isSymmetric() || live.peerRead(value) ? value.name() : old.name()) + " (their reads follow their own steps, not this rank's order)";
        if (value instanceof ViewBuffer v) return "the new value " + value.name() + " is a view of " + v.storage().name();
        if (Slices.isPart(value)) return "the new value " + value.name() + " is written into a part of a concatenation";
        if (!live.isWritten(value)) return "the new value " + value.name() + " is not computed in the call";
        if (taken.containsKey(value)) return "the new value " + value.name() + " is already written into " + taken.get(value).name() + "'s slot";
        return writerRefusal(live, old, value);
    }

    /** Why the work writing {@code value} cannot write it over the old value, or null where it can. */
    private static String writerRefusal(Liveness live, Buffer old, Buffer value) {
        int at = live.def(value);
        if (!(live.order.get(at) instanceof Work.KernelWork k))
            return "the new value " + value.name() + " is written by " + describe(live.order.get(at)) + ", not a pointwise kernel";
        Kernel kernel = k.kernel();
        if (!k.elementwise() || kernel.isReduction() || kernel.gathers())
            return "kernel " + kernel.name() + " writing " + value.name() + (kernel.isReduction() ? " is a row kernel" : " reads through indices") + ", not a pointwise kernel";
        var stores = kernel.stores().stream().filter(st -> st.buffer().id() == value.id()).toList();
        if (stores.size() != 1 || !stores.getFirst().isRowMajor() || stores.getFirst().perRow())
            return "kernel " + kernel.name() + " stores " + value.name() + " other than once, row-major";
        int lastRead = live.lastLocalRead(old);
        if (lastRead > at)
            return "the old value " + old.name() + " is read by " + describe(live.order.get(lastRead)) + " after kernel " + kernel.name()
                    + " writes " + value.name() + " (it would read the new value)";
        for (int i = 0; lastRead == at && i < k.reads().size(); i++)
            if (k.reads().get(i) == old && !InPlace.readsAligned(kernel, i, old))
                return "kernel " + kernel.name() + " reads the old value " + old.name() + " other than at the element it writes";
        return null;
    }

    private static String describe(Work w) {
        return switch (w) {
            case Work.KernelWork k -> "kernel " + k.kernel().name();
            case Work.ExternWork e -> e.call().call().opName() + " " + e.call().name();
            case Work.TiledWork t -> "the epilogues of " + t.product().call().call().opName() + " " + t.product().call().name() + " (one launch)";
        };
    }

    private static String note(Written w, boolean readHere) {
        return "writes " + w.value().name() + " straight into state " + w.state().name() + "'s slot (its new version " + w.update().name() + ") over its old value " + w.old().name()
                + (readHere ? " (read last here, element for element)" : " (read last before this kernel)") + ": no snapshot copy, no update_slice";
    }

    private static String summary(List<Written> written, int snapshots) {
        long bytes = 0;
        for (Written w : written) bytes += w.state().type().byteSize();
        return "state writes: " + written.size() + " of " + snapshots + " snapshotted states written in place by the kernel that reads the old value last; "
                + dev.gatun.ir.ByteSize.format(bytes) + " of states neither copied by a snapshot nor written again by an update_slice";
    }

    /** {@code order} without the snapshots and updates of {@code written}, each writer kernel with its notes. */
    private static List<Work> without(List<Work> order, List<Written> written, Map<Work, List<String>> noteOf) {
        var gone = java.util.Collections.newSetFromMap(new IdentityHashMap<Buffer, Boolean>());
        for (Written w : written) {
            gone.add(w.snapshot());
            gone.add(w.update());
        }
        var out = new ArrayList<Work>(order.size());
        for (Work w : order) {
            if (w instanceof Work.ExternWork e && gone.contains(e.call())) continue;
            Work noted = w;
            for (String n : noteOf.getOrDefault(w, List.of())) noted = ((Work.KernelWork) noted).withNote(n);
            out.add(noted);
        }
        return out;
    }

    /** The buffers that take a state's slot: each written state's old value and new value. */
    java.util.Set<Buffer> aliases() {
        var out = java.util.Collections.newSetFromMap(new IdentityHashMap<Buffer, Boolean>());
        for (Written w : written) {
            out.add(w.old());
            out.add(w.value());
        }
        return out;
    }
}
