package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.AllToAllCounts;
import dev.gatun.planner.Step;
import dev.gatun.runtime.Elements;
import dev.gatun.runtime.GatunRuntimeException;

import java.lang.foreign.MemorySegment;
import java.util.List;

/**
 * One rank's share of an all_to_all on the host, whatever carried the members' inputs to it: the peers' communication
 * buffers (symmetric memory, simulated), the NCCL emulation's mailbox, or a {@link Transport}'s all-gather. The
 * members' inputs are only read; what this rank receives is written into its own result: part {@code me} of every
 * member's rows, in member order. Even splits cut dimension 0 into equal parts; uneven ones follow the members' row
 * counts ({@link AllToAllCounts}), which are checked first on every rank alike, so every rank refuses the same call
 * with the same words, and the result's rows after the received ones are zeroed (never stale).
 */
final class HostAllToAll {
    private HostAllToAll() {}

    /**
     * Writes this rank's result of {@code c} into {@code out}. {@code sources[k]} holds member k's rows (its whole
     * input, packed); {@code counts[k]} its row counts per destination (null for even splits).
     */
    static void run(HostExecutable.RankRun r, Step.Collective c, List<Integer> members, MemorySegment[] sources, long[][] counts, MemorySegment out) {
        int me = members.indexOf(r.rank()), size = members.size();
        long inBytes = r.bytes(c.input());
        if (counts == null) {
            long part = inBytes / size;
            for (int k = 0; k < size; k++) MemorySegment.copy(sources[k], me * part, out, k * part, part);
            return;
        }
        long[] sizes = c.input().shape().sizes(r.env());
        long rows = sizes[0], rowBytes = c.input().dtype().byteSize();
        for (int d = 1; d < sizes.length; d++) rowBytes *= sizes[d];   // from the shape: x may have no rows
        long capacity = c.output().shape().dim(0).size();
        String why = AllToAllCounts.refusal(RankCollectives.describe(c), counts, members, rows, capacity);
        if (why != null) throw new GatunRuntimeException(why);
        long at = 0;
        for (int k = 0; k < size; k++) {
            long from = AllToAllCounts.offset(counts[k], me) * rowBytes, bytes = counts[k][me] * rowBytes;
            MemorySegment.copy(sources[k], from, out, at, bytes);
            at += bytes;
        }
        out.asSlice(at, capacity * rowBytes - at).fill((byte) 0);
    }

    /**
     * An uneven all_to_all into symmetric receive buffers ({@code receivers[k]}: member k's result, in symmetric memory,
     * which the plan keeps from every other buffer from the group's barrier before the step on): this rank writes its
     * rows for each member straight into that member's receive buffer, after the rows of the senders before it, and
     * zeroes its own after the rows it receives. The counts are checked first, on every rank alike.
     */
    static void push(HostExecutable.RankRun r, Step.Collective c, List<Integer> members, long[][] counts, MemorySegment[] receivers) {
        int me = members.indexOf(r.rank()), size = members.size();
        long[] sizes = c.input().shape().sizes(r.env());
        long rowBytes = c.input().dtype().byteSize();
        for (int d = 1; d < sizes.length; d++) rowBytes *= sizes[d];
        long capacity = c.output().shape().dim(0).size();
        String why = AllToAllCounts.refusal(RankCollectives.describe(c), counts, members, sizes[0], capacity);
        if (why != null) throw new GatunRuntimeException(why);
        MemorySegment mine = r.segment(c.input());
        for (int d = 0; d < size; d++) {
            long at = 0;
            for (int s = 0; s < me; s++) at += counts[s][d];
            MemorySegment.copy(mine, AllToAllCounts.offset(counts[me], d) * rowBytes, receivers[d], at * rowBytes, counts[me][d] * rowBytes);
            r.world().maybeDelay(r.rank());
        }
        long got = 0;
        for (int s = 0; s < size; s++) got += counts[s][me];
        receivers[me].asSlice(got * rowBytes, (capacity - got) * rowBytes).fill((byte) 0);
    }

    /** The row counts of each member, read from {@code segments[k]} ({@code size} i64 values from its start). */
    static long[][] counts(MemorySegment[] segments, int size) {
        long[][] out = new long[segments.length][size];
        for (int k = 0; k < segments.length; k++)
            for (int d = 0; d < size; d++) out[k][d] = Elements.getLong(segments[k], DType.INT64, d);
        return out;
    }

    /** This rank's input as one exchange sends it: the row counts (an uneven all_to_all's, {@code size} i64s) before the rows. */
    static MemorySegment packed(HostExecutable.RankRun r, Step.Collective c, int size) {
        long inBytes = r.bytes(c.input()), head = c.uneven() ? size * 8L : 0;
        var box = MemorySegment.ofArray(new byte[Math.toIntExact(head + inBytes)]);
        if (c.uneven()) MemorySegment.copy(r.segment(c.counts()), 0, box, 0, head);
        MemorySegment.copy(r.segment(c.input()), 0, box, head, inBytes);
        return box;
    }

    /** From exchanged {@link #packed} inputs, this rank's result. */
    static void fromPacked(HostExecutable.RankRun r, Step.Collective c, List<Integer> members, MemorySegment[] boxes, MemorySegment out) {
        int size = members.size();
        long head = c.uneven() ? size * 8L : 0;
        var sources = new MemorySegment[boxes.length];
        for (int k = 0; k < boxes.length; k++) sources[k] = boxes[k].asSlice(head);
        run(r, c, members, sources, c.uneven() ? counts(boxes, size) : null, out);
    }
}
