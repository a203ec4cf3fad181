package dev.gatun.runtime.host;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A reusable barrier among a group's ranks, as the GPU collectives' signal-pad barriers are: each arrival
 * bumps the rank's epoch; a rank waits until every member reached its epoch. A timeout names the ranks that
 * never arrived; a failure elsewhere in the world wakes every waiter.
 */
final class GroupBarrier {
    private final List<Integer> members;
    private final long[] epochs;
    private final HostWorld world;

    GroupBarrier(List<Integer> members, HostWorld world) {
        this.members = List.copyOf(members);
        this.epochs = new long[members.size()];
        this.world = world;
    }

    void await(int rank, String where) {
        int me = members.indexOf(rank);
        long target;
        synchronized (this) {
            target = ++epochs[me];
            notifyAll();
        }
        long deadline = System.nanoTime() + world.timeoutNanos();
        synchronized (this) {
            while (true) {
                world.checkFailed(rank);
                boolean all = true;
                for (long e : epochs) all &= e >= target;
                if (all) return;
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    var missing = new ArrayList<Integer>();
                    for (int i = 0; i < epochs.length; i++) if (epochs[i] < target) missing.add(members.get(i));
                    throw new HostWorld.Timeout("rank " + rank + " timed out after " + world.timeoutNanos() / 1_000_000 + " ms at " + where
                            + " waiting for ranks " + missing, missing);
                }
                try {
                    wait(Math.max(1, TimeUnit.NANOSECONDS.toMillis(Math.min(left, 50_000_000L))));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new HostWorld.Stopped("rank " + rank + " was interrupted at " + where);
                }
            }
        }
    }

    synchronized void wake() { notifyAll(); }
}
