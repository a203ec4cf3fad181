package dev.gatun.runtime.host;

import java.lang.foreign.MemorySegment;
import java.util.List;

/**
 * How one rank of a world whose ranks are separate sessions (threads, or processes, possibly on several hosts) moves
 * bytes to its peers for the host backend's collectives. Every collective is one primitive: each member of the
 * group's slice contributes its bytes and receives every member's, in member order ({@link #allGather}); the
 * arithmetic on them is {@link RankCollectives}', the same as the simulated world's.
 *
 * <p>Two implementations, each of one job: {@link SharedMemoryTransport} (memory-mapped files, every rank on one
 * host) and {@link TcpTransport} (a socket between every pair of ranks). {@link Transports#open} chooses one.
 * A transport owns its files or sockets: closing it releases them (idempotent), and a peer waiting for this rank then
 * fails at once. After any failure it stays broken: the ranks no longer agree on where their exchanges are, so every
 * later exchange fails with the first failure's reason.
 */
sealed interface Transport extends AutoCloseable permits SharedMemoryTransport, TcpTransport {

    /**
     * One exchange: this {@code rank} with the {@code members} of its slice of {@code group} (ascending, this rank among
     * them), for step {@code step} of the plan, described as {@code what} in errors; waits at most {@code timeoutNanos}.
     */
    record Exchange(int rank, List<Integer> members, String group, int step, String what, long timeoutNanos) {
        public Exchange {
            members = List.copyOf(members);
            if (!members.contains(rank)) throw new IllegalStateException("rank " + rank + " is not a member of " + members);   // the plan's groups are checked before a run
        }

        /** "rank 0 at buf4 = all_reduce.one_shot(buf3, sum, "world") (step 7)" */
        String where() { return "rank " + rank + " at " + what + " (step " + step + ")"; }
    }

    /** "shared memory (/dev/shm)", "tcp": what the log and errors say. */
    String describe();

    /**
     * Every member's {@code mine.byteSize()} bytes, in member order (this rank's own copy at its index), in memory of
     * the caller's; every member must contribute as many bytes for the same step, or all fail saying so.
     */
    MemorySegment[] allGather(Exchange x, MemorySegment mine);

    /** Fails every exchange in flight and every later one at once, and every peer waiting for this rank; safe from any thread. */
    void abort(String why);

    @Override void close();
}
