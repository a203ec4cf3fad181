package dev.gatun.runtime.distributed;

import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.RankFailedException;

import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * Single-process mode: every rank is a thread of this JVM (for tests, and for driving several GPUs from threads).
 * An in-process {@link RendezvousStore} on loopback with a random secret connects them exactly as separate
 * processes would be connected. Each rank compiles its own session with {@code CompileOptions.world(n).rank(rv)}:
 * on GPUs, one per GPU; on the host backend (no GPU needed), each session performs its collectives with the others
 * for real, through shared memory, as processes of gatun-run on one host would, and gets the simulated world's bits.
 */
public final class LocalWorld {
    private LocalWorld() {}

    /** How long stopped ranks get to finish after the first failure before {@link #run} gives up on them. */
    private static final Duration STOP_GRACE = Duration.ofSeconds(10);

    /** {@link #run(int, Duration, RankBody)} with {@link Rendezvous#DEFAULT_TIMEOUT} as the ranks' default timeout. */
    public static void run(int worldSize, RankBody body) {
        run(worldSize, Rendezvous.DEFAULT_TIMEOUT, body);
    }

    /**
     * Runs {@code body} on {@code worldSize} threads, rank r getting a connected {@link Rendezvous} of rank r (local
     * rank r) whose default timeout is {@code defaultTimeout}, and returns when all finished. When a rank throws, the
     * others are stopped (interrupted, their clients closed so their waits fail at once) and this method throws a
     * {@link RankFailedException} naming the rank that failed first, with its exception as the cause.
     */
    public static void run(int worldSize, Duration defaultTimeout, RankBody body) {
        if (worldSize < 1) throw new GatunRuntimeException("world size must be at least 1, not " + worldSize);
        byte[] secret = new byte[32];
        new SecureRandom().nextBytes(secret);
        record Failure(int rank, Throwable error) {}
        var failure = new AtomicReference<Failure>();
        var clients = new AtomicReferenceArray<Rendezvous>(worldSize);
        var threads = new ArrayList<Thread>(worldSize);
        try (var store = RendezvousStore.start(worldSize, secret)) {
            Runnable[] stopOthers = new Runnable[1];
            for (int r = 0; r < worldSize; r++) {
                final int rank = r;
                threads.add(Thread.ofPlatform().daemon().name("gatun-rank-" + rank).unstarted(() -> {
                    Rendezvous c = null;
                    try {
                        c = Rendezvous.connect(store.address(), rank, rank, worldSize, secret, defaultTimeout);
                        clients.set(rank, c);
                        if (failure.get() != null) return; // stopped before it began
                        body.run(c);
                    } catch (Throwable t) {
                        if (failure.compareAndSet(null, new Failure(rank, t))) stopOthers[0].run();
                    } finally {
                        if (c != null) c.close();
                    }
                }));
            }
            stopOthers[0] = () -> {
                int failed = failure.get().rank();
                for (int o = 0; o < worldSize; o++) {
                    if (o == failed) continue;
                    threads.get(o).interrupt();
                    Rendezvous c = clients.get(o);
                    if (c != null) c.close();
                }
            };
            threads.forEach(Thread::start);
            long stopDeadline = 0;
            List<Integer> stuck = new ArrayList<>();
            for (int r = 0; r < worldSize; r++) {
                Thread t = threads.get(r);
                while (t.isAlive()) {
                    if (failure.get() != null && stopDeadline == 0) stopDeadline = System.nanoTime() + STOP_GRACE.toNanos();
                    if (stopDeadline != 0 && System.nanoTime() - stopDeadline >= 0) {
                        stuck.add(r);
                        break;
                    }
                    try {
                        t.join(stopDeadline == 0 ? 100 : Math.max(1, TimeUnit.NANOSECONDS.toMillis(stopDeadline - System.nanoTime())));
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        for (int o = 0; o < worldSize; o++) {
                            threads.get(o).interrupt();
                            Rendezvous c = clients.get(o);
                            if (c != null) c.close();
                        }
                        throw new RankFailedException(-1, "interrupted while waiting for the ranks of a local world", e);
                    }
                }
            }
            Failure f = failure.get();
            if (f != null) {
                String note = stuck.isEmpty() ? "" : " (ranks " + stuck + " did not stop within " + Wire.human(STOP_GRACE) + ")";
                throw new RankFailedException(f.rank(), "rank " + f.rank() + " failed: " + f.error() + note, f.error());
            }
        }
    }
}
