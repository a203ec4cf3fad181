package dev.gatun.runtime.host;

import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

/**
 * One call's shared state among the simulated ranks: group barriers, the mailbox the NCCL emulation
 * exchanges data through, the first failure, and the random delays that expose cross-rank races. Where the session is
 * one rank of a world of sessions, the failure also goes to the transport ({@link #onFailure}), so the peers stop too.
 */
final class HostWorld {
    /** A rank gave up waiting for {@code missing}, the ranks that never arrived. */
    static final class Timeout extends RuntimeException {
        final List<Integer> missing;

        Timeout(String m, List<Integer> missing) {
            super(m);
            this.missing = List.copyOf(missing);
        }
    }

    /** A rank stopped because another failed. */
    static final class Stopped extends RuntimeException {
        Stopped(String m) { super(m); }
    }

    record Failure(int rank, Throwable cause) {}

    private final Map<String, GroupBarrier> barriers = new ConcurrentHashMap<>();
    private final Map<String, java.lang.foreign.MemorySegment[]> mailbox = new ConcurrentHashMap<>();
    private final AtomicReference<Failure> failure = new AtomicReference<>();
    /** Each group's slices: the sets of ranks that run its collectives together. */
    private final Map<String, List<List<Integer>>> groups;
    private final long timeoutNanos;
    private final long delaySeed;
    private final Random[] random;

    HostWorld(Map<String, List<List<Integer>>> groups, int worldSize, long timeoutNanos, long delaySeed, long call) {
        this.groups = groups;
        this.timeoutNanos = timeoutNanos;
        this.delaySeed = delaySeed;
        this.random = new Random[worldSize];
        for (int r = 0; r < worldSize; r++) random[r] = new Random(delaySeed * 1_000_003L + call * 131 + r);
    }

    long timeoutNanos() { return timeoutNanos; }

    /** The slice of {@code slices} that holds {@code rank}; empty when none does. */
    static List<Integer> sliceOf(List<List<Integer>> slices, int rank) {
        for (List<Integer> s : slices) if (s.contains(rank)) return s;
        return List.of();
    }

    /** The ranks {@code rank} runs the group's collectives with (its slice); empty when it is outside the group. */
    List<Integer> members(String group, int rank) { return sliceOf(groups.get(group), rank); }

    /** The barrier of {@code rank}'s slice of the group (a mesh axis has one per slice). */
    GroupBarrier barrier(String group, int rank) {
        List<Integer> slice = members(group, rank);
        return barriers.computeIfAbsent(group + "/" + slice.getFirst(), g -> new GroupBarrier(slice, this));
    }

    /** The slot array of an NCCL-emulated collective among {@code members} (one entry per member: a copy of its input's bytes). */
    java.lang.foreign.MemorySegment[] mailbox(int step, List<Integer> members) {
        return mailbox.computeIfAbsent(step + "/" + members.getFirst(), s -> new java.lang.foreign.MemorySegment[members.size()]);
    }

    private volatile java.util.function.Consumer<String> onFailure = why -> { };

    /** What the first failure also does (with its message): a session of one rank aborts its transport. */
    void onFailure(java.util.function.Consumer<String> hook) { onFailure = hook; }

    void fail(int rank, Throwable t) {
        if (!failure.compareAndSet(null, new Failure(rank, t))) return;
        barriers.values().forEach(GroupBarrier::wake);
        onFailure.accept(rank < 0 ? "the call was aborted" : "rank " + rank + " failed: " + t.getMessage());
    }

    Failure failure() { return failure.get(); }

    void checkFailed(int rank) {
        Failure f = failure.get();
        if (f != null && f.rank() != rank)
            throw new Stopped("rank " + rank + " stopped because " + (f.rank() < 0 ? "the call was aborted" : "rank " + f.rank() + " failed"));
    }

    /** With random delays on, sometimes sleeps up to 2 ms. */
    void maybeDelay(int rank) {
        if (delaySeed == 0) return;
        Random r = random[rank];
        if (r.nextInt(4) == 0) LockSupport.parkNanos(r.nextInt(2_000_000));
    }
}
