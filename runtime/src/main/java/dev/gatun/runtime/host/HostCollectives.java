package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Step;
import dev.gatun.runtime.DTypes;
import dev.gatun.runtime.Elements;

import java.lang.foreign.MemorySegment;
import java.util.List;

/**
 * Collectives among simulated ranks. The symmetric algorithms read peers' communication buffers at the same
 * offsets and follow the GPU protocol: start barrier, reads, trailing barrier; sums go in rank order so every
 * rank gets bit-identical results. The barrier-free all-reduce pushes into peers' rotating slots instead
 * ({@link BarrierFreeAllReduce}). The NCCL path exchanges copies through a mailbox instead, as NCCL copies
 * through its own buffers. A rank outside the group passes its input through; along a mesh axis every slice runs
 * the collective among its own ranks, with its own barriers. Integer elements combine as exact longs (sums wrap as
 * Java's {@code long} does, then to the dtype's width), floating ones in double rounded once; elements that only move
 * are copied as bytes; an all_to_all's parts move as bytes too ({@link HostAllToAll}).
 */
final class HostCollectives {
    private HostCollectives() {}

    static void run(HostExecutable.RankRun r, int step, Step.Collective c) {
        var call = c.call();
        List<Integer> members = r.world().members(call.group(), r.rank());
        PlanBuffer inB = c.input(), outB = c.output();
        DType t = inB.dtype();
        MemorySegment out = r.segment(c.output());
        long n = r.numel(inB);
        if (!members.contains(r.rank())) {
            MemorySegment.copy(r.segment(c.input()), 0, out, 0, n * t.byteSize());
            return;
        }
        String where = c.format();
        switch (call.algorithm()) {
            case ONE_SHOT -> {
                r.barrier(call.group(), where + " (start)");
                r.world().maybeDelay(r.rank());
                reduceInto(r, c, members, t, 0, n, out, 0);
                r.barrier(call.group(), where + " (end)");
            }
            case TWO_SHOT -> {
                // reduce my slice into my own slot (in place), then gather every rank's slice from its slot
                int me = members.indexOf(r.rank()), size = members.size();
                long chunk = Math.ceilDiv(n, size);
                MemorySegment mine = r.peer(r.rank(), c.input());
                r.barrier(call.group(), where + " (start)");
                r.world().maybeDelay(r.rank());
                reduceInto(r, c, members, t, me * chunk, Math.min(n, (me + 1) * chunk), mine, me * chunk);
                r.barrier(call.group(), where + " (reduced)");
                r.world().maybeDelay(r.rank());
                for (int k = 0; k < size; k++) {
                    MemorySegment src = r.peer(members.get(k), c.input());
                    long from = k * chunk, to = Math.min(n, (k + 1) * chunk);
                    if (to > from) MemorySegment.copy(src, from * t.byteSize(), out, from * t.byteSize(), (to - from) * t.byteSize());
                }
                r.barrier(call.group(), where + " (end)");
            }
            case SYMM_MEM -> {
                int me = members.indexOf(r.rank()), size = members.size();
                r.barrier(call.group(), where + " (start)");
                r.world().maybeDelay(r.rank());
                switch (call.kind()) {
                    case REDUCE_SCATTER -> {
                        long m = r.numel(outB);
                        reduceInto(r, c, members, t, me * m, me * m + m, out, 0);
                    }
                    case ALL_GATHER -> {
                        for (int k = 0; k < size; k++) {
                            MemorySegment src = r.peer(members.get(k), c.input());
                            MemorySegment.copy(src, 0, out, k * n * t.byteSize(), n * t.byteSize());
                        }
                    }
                    case BROADCAST -> MemorySegment.copy(r.peer(members.get(call.root()), c.input()), 0, out, 0, n * t.byteSize());
                    case ALL_TO_ALL -> symmetricAllToAll(r, c, members);
                    default -> throw new IllegalStateException(call.kind() + " has no symmetric-memory algorithm");
                }
                r.barrier(call.group(), where + " (end)");
            }
            case NCCL -> nccl(r, step, c, members, t, n, out);
            case BARRIER_FREE -> barrierFree(r, c, members, out);
        }
    }

    /**
     * A symmetric all_to_all's moves, between its barriers: pushed into the members' receive buffers (an uneven one whose
     * result is symmetric), else pulled from every member's communication buffer.
     */
    private static void symmetricAllToAll(HostExecutable.RankRun r, Step.Collective c, List<Integer> members) {
        int size = members.size();
        PlanBuffer outB = c.output();
        var sources = new MemorySegment[size];
        var counts = c.uneven() ? new MemorySegment[size] : null;
        for (int k = 0; k < size; k++) {
            sources[k] = r.peer(members.get(k), c.input());
            if (counts != null) counts[k] = r.peer(members.get(k), c.counts());
        }
        if (c.uneven() && outB.isSymmetric()) {
            // the receive buffers are symmetric: each rank writes its rows into the owners' buffers
            var receivers = new MemorySegment[size];
            for (int k = 0; k < size; k++) receivers[k] = r.peer(members.get(k), outB);
            HostAllToAll.push(r, c, members, HostAllToAll.counts(counts, size), receivers);
        } else HostAllToAll.run(r, c, members, sources, counts == null ? null : HostAllToAll.counts(counts, size), r.segment(outB));
    }

    /**
     * Joined all_to_alls as the GPU runs them: one starting barrier, every part's rows moved (each as it moves alone, a
     * random delay between parts), one ending barrier; a rank outside the group passes each input through. Counts a part
     * refuses fail the call on every rank before any rank passes the ending barrier, as the parts' own would.
     */
    static void joined(HostExecutable.RankRun r, Step.JoinedAllToAll j) {
        List<Integer> members = r.world().members(j.group(), r.rank());
        if (!members.contains(r.rank())) {
            for (Step.Collective c : j.members()) MemorySegment.copy(r.segment(c.input()), 0, r.segment(c.output()), 0, r.bytes(c.input()));
            return;
        }
        String where = j.format();
        r.barrier(j.group(), where + " (start)");
        for (Step.Collective c : j.members()) {
            r.world().maybeDelay(r.rank());
            symmetricAllToAll(r, c, members);
        }
        r.barrier(j.group(), where + " (end)");
    }

    /** The barrier-free all-reduce ({@link BarrierFreeAllReduce}): the members' rotating regions, no barrier. */
    private static void barrierFree(HostExecutable.RankRun r, Step.Collective c, List<Integer> members, MemorySegment out) {
        var regions = new MemorySegment[members.size()];
        for (int k = 0; k < regions.length; k++) regions[k] = r.executable().region(members.get(k), c.slots());
        HostWorld world = r.world();
        int rank = r.rank();
        long deadline = System.nanoTime() + world.timeoutNanos();
        BarrierFreeAllReduce.Wait wait = (member, element) -> {
            world.checkFailed(rank);
            if (System.nanoTime() - deadline > 0) {
                int peer = members.get(member);
                throw new HostWorld.Timeout("rank " + rank + " timed out after " + world.timeoutNanos() / 1_000_000 + " ms at " + c.format()
                        + " waiting for rank " + peer + "'s element " + element, List.of(peer));
            }
        };
        BarrierFreeAllReduce.run(c.slots(), c.call().reduceOp(), members.indexOf(rank), regions, r.segment(c.input()), out, wait, () -> world.maybeDelay(rank));
    }

    /**
     * A batch of one-shot all-reduces as the GPU runs it: one start barrier, every member reduced, one end barrier
     * (a rank outside the group passes each input through); a batch of barrier-free ones, each member's protocol in turn.
     */
    static void batch(HostExecutable.RankRun r, Step.CollectiveBatch b) {
        var call = b.first().call();
        List<Integer> members = r.world().members(call.group(), r.rank());
        if (!members.contains(r.rank())) {
            for (Step.Collective c : b.members()) MemorySegment.copy(r.segment(c.input()), 0, r.segment(c.output()), 0, r.bytes(c.input()));
            return;
        }
        if (call.algorithm() == dev.gatun.ir.Algorithm.BARRIER_FREE) {
            for (Step.Collective c : b.members()) barrierFree(r, c, members, r.segment(c.output()));
            return;
        }
        String where = b.format();
        r.barrier(call.group(), where + " (start)");
        r.world().maybeDelay(r.rank());
        for (Step.Collective c : b.members()) reduceInto(r, c, members, c.input().dtype(), 0, r.numel(c.input()), r.segment(c.output()), 0);
        r.barrier(call.group(), where + " (end)");
    }

    private static void nccl(HostExecutable.RankRun r, int step, Step.Collective c, List<Integer> members, DType t, long n, MemorySegment out) {
        var call = c.call();
        int me = members.indexOf(r.rank()), size = members.size();
        MemorySegment[] box = r.world().mailbox(step, members);
        long bytes = n * t.byteSize();
        // this rank's input copied into the mailbox, as NCCL copies through its own buffers
        box[me] = call.kind() == dev.gatun.ir.graph.CollectiveKind.ALL_TO_ALL ? HostAllToAll.packed(r, c, size)
                : MemorySegment.ofArray(new byte[Math.toIntExact(bytes)]).copyFrom(r.segment(c.input()).asSlice(0, bytes));
        r.barrier(call.group(), c.format() + " (exchange)");
        switch (call.kind()) {
            case ALL_TO_ALL -> HostAllToAll.fromPacked(r, c, members, box, out);
            case ALL_REDUCE, REDUCE_SCATTER -> {
                long m = call.kind() == dev.gatun.ir.graph.CollectiveKind.ALL_REDUCE ? n : n / size;
                long base = call.kind() == dev.gatun.ir.graph.CollectiveKind.ALL_REDUCE ? 0 : me * m;
                for (long i = 0; i < m; i++) reduceElement(call.reduceOp(), t, box, base + i, out, i);
            }
            case ALL_GATHER -> {
                for (int k = 0; k < size; k++) MemorySegment.copy(box[k], 0, out, k * bytes, bytes);
            }
            case BROADCAST -> MemorySegment.copy(box[call.root()], 0, out, 0, bytes);
        }
        r.barrier(call.group(), c.format() + " (done)");
    }

    /**
     * Elements [begin, end) of every member's input slot, combined in member order (so every rank gets the same bits)
     * and finished (avg divides), written to {@code to} from index {@code toFirst} on.
     */
    private static void reduceInto(HostExecutable.RankRun r, Step.Collective c, List<Integer> members, DType t, long begin, long end,
                                   MemorySegment to, long toFirst) {
        ReduceOp op = c.call().reduceOp();
        var peers = new MemorySegment[members.size()];
        for (int k = 0; k < peers.length; k++) peers[k] = r.peer(members.get(k), c.input());
        for (long i = begin; i < end; i++) reduceElement(op, t, peers, i, to, toFirst + (i - begin));
    }

    /**
     * Element {@code i} of every segment of {@code from}, combined in order and finished, into element {@code at} of
     * {@code to}: integers as exact longs (the sum wraps to the dtype's width), floats in double rounded once.
     */
    static void reduceElement(ReduceOp op, DType t, MemorySegment[] from, long i, MemorySegment to, long at) {
        if (DTypes.isExact(t)) {
            long acc = Elements.getLong(from[0], t, i);
            for (int k = 1; k < from.length; k++) acc = combine(op, acc, Elements.getLong(from[k], t, i));
            Elements.setLong(to, t, at, acc);   // avg of integers is refused by type inference
            return;
        }
        double acc = Elements.get(from[0], t, i);
        for (int k = 1; k < from.length; k++) acc = combine(op, acc, Elements.get(from[k], t, i));
        Elements.set(to, t, at, finish(op, acc, from.length));
    }

    /**
     * One member's value folded in. A NaN result is the canonical NaN, as a GPU's arithmetic gives: which operand's
     * payload a sum of two NaNs keeps is not fixed in Java (compiled code may swap the operands), so ranks could
     * otherwise disagree in the bits of a NaN.
     */
    static double combine(ReduceOp op, double acc, double v) {
        return switch (op) {
            case SUM, AVG -> {
                double s = acc + v;
                yield Double.isNaN(s) ? Double.NaN : s;
            }
            case MAX -> Double.isNaN(acc) || Double.isNaN(v) ? Double.NaN : Math.max(acc, v);
            case MIN -> Double.isNaN(acc) || Double.isNaN(v) ? Double.NaN : Math.min(acc, v);
        };
    }

    /** Integers: a sum wraps as Java's {@code long} does. */
    static long combine(ReduceOp op, long acc, long v) {
        return switch (op) {
            case SUM, AVG -> acc + v;
            case MAX -> Math.max(acc, v);
            case MIN -> Math.min(acc, v);
        };
    }

    static double finish(ReduceOp op, double acc, int size) { return op == ReduceOp.AVG ? acc / size : acc; }
}
