package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.planner.Step;

import java.lang.foreign.MemorySegment;
import java.util.List;

/**
 * A plan's collectives on one rank of a world whose ranks are separate sessions: each is an all-gather of the
 * members' inputs through the {@link Transport}, then the simulated world's own arithmetic on them
 * ({@link HostCollectives#reduceElement}): element {@code i} of every member's input combined in member order (ascending
 * rank within the group's slice), integers as exact longs, floats in double rounded once, then finished (avg divides by
 * the member count). That is the order every simulated algorithm sums in, so every rank computes the same bits, and
 * the same as the simulated world for the same graph, whichever algorithm the plan chose. Each rank moves
 * members × bytes, as a one-shot all-reduce does. A rank outside the group passes its input through.
 */
final class RankCollectives {
    private RankCollectives() {}

    static void run(HostExecutable.RankRun r, int step, Step.Collective c) {
        var call = c.call();
        List<Integer> members = r.world().members(call.group(), r.rank());
        DType t = c.input().dtype();
        long n = r.numel(c.input()), bytes = n * t.byteSize();
        MemorySegment in = r.segment(c.input()).asSlice(0, bytes), out = r.segment(c.output());
        if (!members.contains(r.rank())) {
            MemorySegment.copy(in, 0, out, 0, bytes);
            return;
        }
        if (call.kind() == dev.gatun.ir.graph.CollectiveKind.ALL_TO_ALL) {
            // every member's rows (and row counts) reach every member, as the all-gather carries any collective's inputs
            MemorySegment[] boxes = r.transport().allGather(exchange(r, members, call.group(), step, describe(c)), HostAllToAll.packed(r, c, members.size()));
            HostAllToAll.fromPacked(r, c, members, boxes, out);
            return;
        }
        MemorySegment[] all = r.transport().allGather(exchange(r, members, call.group(), step, describe(c)), in);
        int me = members.indexOf(r.rank());
        switch (call.kind()) {
            case ALL_REDUCE -> {
                for (long i = 0; i < n; i++) HostCollectives.reduceElement(call.reduceOp(), t, all, i, out, i);
            }
            case REDUCE_SCATTER -> {
                long m = r.numel(c.output()), base = me * m;
                for (long i = 0; i < m; i++) HostCollectives.reduceElement(call.reduceOp(), t, all, base + i, out, i);
            }
            case ALL_GATHER -> {
                for (int k = 0; k < all.length; k++) MemorySegment.copy(all[k], 0, out, k * bytes, bytes);
            }
            case BROADCAST -> MemorySegment.copy(all[call.root()], 0, out, 0, bytes);
            case ALL_TO_ALL -> throw new IllegalStateException("all_to_all is exchanged above");
        }
    }

    /** A batch computes what its members do one after the other. */
    static void batch(HostExecutable.RankRun r, int step, Step.CollectiveBatch b) {
        for (Step.Collective c : b.members()) run(r, step, c);
    }

    /**
     * Joined all_to_alls compute what their parts do one after the other: each part's exchange of every member's rows
     * and counts (an exchange is its own barrier; the parts read only what the step before wrote).
     */
    static void joined(HostExecutable.RankRun r, int step, Step.JoinedAllToAll j) {
        for (Step.Collective c : j.members()) run(r, step, c);
    }

    /** A barrier: an exchange of nothing among the rank's slice of the group (nothing where it is outside the group). */
    static void barrier(HostExecutable.RankRun r, int step, Step.Barrier b) {
        List<Integer> members = r.world().members(b.group(), r.rank());
        if (members.contains(r.rank()))
            r.transport().allGather(exchange(r, members, b.group(), step, describe(b)), MemorySegment.NULL);
    }

    private static Transport.Exchange exchange(HostExecutable.RankRun r, List<Integer> members, String group, int step, String what) {
        return new Transport.Exchange(r.rank(), members, group, step, what, r.world().timeoutNanos());
    }

    /** The step as the plan prints it, without its comment: {@code buf4 = all_reduce.one_shot(buf3, sum, "world")}. */
    static String describe(Step s) {
        String f = s.format();
        int note = f.indexOf("   #");
        return note < 0 ? f : f.substring(0, note);
    }
}
