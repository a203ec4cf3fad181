package dev.gatun.planner;

import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ExternBuffer;
import dev.gatun.lowering.ExternCall;

import dev.gatun.lowering.LoweredGraph;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * When each buffer lives, over the chosen order of work (indices into it): the work that writes it, the last that
 * reads it on this rank, and the last that reads it from a peer. A slot a peer reads directly is free only once
 * every rank has finished reading it, that is after the trailing barrier of the first collective of its group
 * that ends with one at or after the last peer read ({@link #crossRankEnd}); where no later collective gives
 * such a barrier, the plan ends with an explicit barrier of the group, and the reason is recorded for the
 * printout. All_to_alls that run joined ({@link AllToAllRuns}) are one step: their buffers are written from the
 * run's first work and read until its last.
 */
final class Liveness {
    final List<Work> order;
    final int n;
    /**
     * Every written storage, in order of (first) writing: a concatenation's storage in place of its parts, which take
     * no slot of their own (see {@link Slices}); {@link #def} and {@link #localEnd} of it span all its parts.
     */
    final List<Buffer> written = new ArrayList<>();
    /** By {@link Buffer#id()}: the work that writes it, the last that reads it here, the last a peer reads it in; {@link #NONE}. */
    private final int[] writer, lastRead, lastPeerRead;
    private static final int NONE = -1;
    private final ByBuffer.Set outputs;
    /** By work index: the inputs whose slots are free on every rank once its trailing barrier passes ("x, y"), or null. */
    private final String[] freedAt;
    /** Group to why the call must end with a barrier of it. */
    final Map<String, String> finalBarriers = new TreeMap<>();
    /** The all_to_alls that run as one step ({@link AllToAllRuns}): their buffers live for the whole run. */
    final AllToAllRuns runs;

    /**
     * {@code maxJoin}: the most all_to_alls joined into one step ({@link AllToAllRuns}; below 2, none). A joined run's
     * parts read their inputs (here and from peers) until the run's last work, and write their results from its first:
     * in the one step every part's peers read and write between the same two barriers.
     */
    Liveness(LoweredGraph graph, List<Work> order, ByBuffer.Set outputs, int maxJoin) {
        this.order = order;
        this.n = order.size();
        this.outputs = outputs;
        this.freedAt = new String[n];
        int buffers = graph.buffers().size();
        writer = none(buffers);
        lastRead = none(buffers);
        lastPeerRead = none(buffers);
        for (int i = 0; i < n; i++) {
            Work w = order.get(i);
            for (Buffer b : w.writes()) {
                writer[b.id()] = i;
                // a part of a concatenation: its storage is written from the first part's write on
                Buffer s = Slices.storage(b);
                if (s == b) written.add(b);
                else if (writer[s.id()] == NONE) {
                    writer[s.id()] = i;
                    written.add(s);
                }
            }
            for (Buffer b : w.reads()) {
                lastRead[b.id()] = i;
                if (Slices.isPart(b)) lastRead[Slices.storage(b).id()] = i;
            }
            if (w instanceof Work.ExternWork e) for (Buffer b : peerReads(e.call())) lastPeerRead[b.id()] = i;
        }
        this.runs = AllToAllRuns.of(order, maxJoin);
        for (int i = 0; i < n; i++) {
            if (!runs.isJoined(i)) continue;
            Work w = order.get(i);
            int first = runs.first(i), last = runs.last(i);
            for (Buffer b : w.writes()) if (writer[b.id()] == i) writer[b.id()] = first;
            for (Buffer b : w.reads()) {
                if (lastRead[b.id()] == i) lastRead[b.id()] = last;
                Buffer s = Slices.storage(b);
                if (s != b && lastRead[s.id()] == i) lastRead[s.id()] = last;
            }
            for (Buffer b : peerReads(((Work.ExternWork) w).call())) if (lastPeerRead[b.id()] == i) lastPeerRead[b.id()] = last;
        }
    }

    private static int[] none(int size) {
        int[] a = new int[size];
        Arrays.fill(a, NONE);
        return a;
    }

    /** The work that writes {@code b}. */
    int def(Buffer b) {
        int w = writer[b.id()];
        if (w == NONE) throw new IllegalStateException(b.name() + " is written by no work of the order");
        return w;
    }

    boolean isWritten(Buffer b) { return writer[b.id()] != NONE; }

    /** The last work that reads {@code b} on this rank; {@link #n} for a graph output (it lives to the end). */
    int localEnd(Buffer b) {
        if (outputs.contains(b)) return n;
        int r = lastRead[b.id()];
        return r != NONE ? r : def(b);
    }

    /** The inputs whose slots work {@code i}'s trailing barrier frees on every rank ("x, y"), or null (see {@link #crossRankEnd}). */
    String freedAt(int i) { return freedAt[i]; }

    /** The last work that reads {@code b} on this rank, or -1 where none does (a graph output aside). */
    int lastLocalRead(Buffer b) { return lastRead[b.id()]; }

    /** Whether a peer reads {@code b} directly (a symmetric collective's input, a user op's symmetric input). */
    boolean peerRead(Buffer b) { return lastPeerRead[b.id()] != NONE; }

    /** Whether {@code b} is last read by work {@code i}. */
    boolean lastReadAt(Buffer b, int i) { return lastRead[b.id()] == i; }

    /**
     * The work whose trailing barrier frees a slot of {@code group} that peers read ({@code -1} when none does;
     * {@link #n} when only a final barrier does, whose reason is then recorded). A collective that frees its own
     * input is noted in {@link #freedAt(int)}.
     */
    int crossRankEnd(Buffer b, String group) {
        int lastPeer = lastPeerRead[b.id()];
        if (lastPeer == NONE) return -1;
        for (int i = lastPeer; i < n; i++) {
            if (order.get(i) instanceof Work.ExternWork e && e.call().call() instanceof ExternCall.Collective c
                    && c.group().equals(group) && c.algorithm().endsWithBarrier()) {
                if (i == lastPeer && (e.reads().contains(b) || runs.isJoined(i))) {   // a joined run's last part frees its parts' inputs
                    freedAt[i] = freedAt[i] == null ? b.name() : freedAt[i] + ", " + b.name();
                }
                return i;
            }
        }
        finalBarriers.put(group, "peers may still read " + b.name() + " and no later collective of \"" + group + "\" ends with a barrier");
        return n;
    }

    /**
     * The first work at which {@code b}'s slot may be written: its writer's, but for a receive buffer the senders write
     * into (an uneven all_to_all's result in symmetric memory, {@link #peerWritten}) the work after the last one before
     * its writer that ends with a barrier of its group (0 where none does). A sender may run ahead of this rank up to
     * there, so from there on no other buffer may share the slot: never aliased, across layers, with a buffer this rank
     * may still be using when a peer writes.
     */
    int firstWrite(Buffer b) {
        int d = def(b);
        if (!(b instanceof ExternBuffer e) || !peerWritten(e)) return d;
        String group = ((ExternCall.Collective) e.call()).group();
        for (int i = d - 1; i >= 0; i--)
            if (order.get(i) instanceof Work.ExternWork w && w.call().call() instanceof ExternCall.Collective c
                    && c.group().equals(group) && c.algorithm().endsWithBarrier()) return i + 1;
        return 0;
    }

    /**
     * Whether peers write {@code e}'s result directly: an uneven all_to_all's receive buffer in symmetric memory (its
     * second input the row counts). Another collective's result in symmetric memory (one made in a symmetric region)
     * is written by its own rank.
     */
    static boolean peerWritten(ExternBuffer e) {
        return e.call() instanceof ExternCall.Collective c && c.kind() == dev.gatun.ir.graph.CollectiveKind.ALL_TO_ALL && e.inputs().size() == 2
                && e.layout() instanceof dev.gatun.ir.Layout.CommBuffer;
    }

    /** Storages peers read directly: symmetric collectives' inputs and user-op inputs declared symmetric. */
    static List<Buffer> peerReads(ExternBuffer e) {
        var out = new ArrayList<Buffer>();
        for (int i = 0; i < e.inputs().size(); i++) if (e.call().peerReads(i)) out.add(e.inputs().get(i).storage());
        return out;
    }
}
