package dev.gatun.runtime.host;

import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.locks.LockSupport;

/**
 * One call's shared state among the simulated ranks: group barriers, the mailbox the NCCL emulation
 * exchanges data through, the first failure, and the random delays that expose cross-rank races.
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
    private final Map<Integer, double[][]> mailbox = new ConcurrentHashMap<>();
    private final AtomicReference<Failure> failure = new AtomicReference<>();
    private final Map<String, List<Integer>> groups;
    private final long timeoutNanos;
    private final long delaySeed;
    private final Random[] random;

    HostWorld(Map<String, List<Integer>> groups, int worldSize, long timeoutNanos, long delaySeed, long call) {
        this.groups = groups;
        this.timeoutNanos = timeoutNanos;
        this.delaySeed = delaySeed;
        this.random = new Random[worldSize];
        for (int r = 0; r < worldSize; r++) random[r] = new Random(delaySeed * 1_000_003L + call * 131 + r);
    }

    long timeoutNanos() { return timeoutNanos; }

    List<Integer> members(String group) { return groups.get(group); }

    GroupBarrier barrier(String group) { return barriers.computeIfAbsent(group, g -> new GroupBarrier(groups.get(g), this)); }

    /** The slot array of an NCCL-emulated collective (one entry per group rank). */
    double[][] mailbox(int step, int size) { return mailbox.computeIfAbsent(step, s -> new double[size][]); }

    void fail(int rank, Throwable t) {
        if (failure.compareAndSet(null, new Failure(rank, t))) barriers.values().forEach(GroupBarrier::wake);
    }

    Failure failure() { return failure.get(); }

    void checkFailed(int rank) {
        Failure f = failure.get();
        if (f != null && f.rank() != rank) throw new Stopped("rank " + rank + " stopped because rank " + f.rank() + " failed");
    }

    /** With random delays on, sometimes sleeps up to 2 ms. */
    void maybeDelay(int rank) {
        if (delaySeed == 0) return;
        Random r = random[rank];
        if (r.nextInt(4) == 0) LockSupport.parkNanos(r.nextInt(2_000_000));
    }
}
