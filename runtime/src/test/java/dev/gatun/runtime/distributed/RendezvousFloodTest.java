package dev.gatun.runtime.distributed;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicReferenceArray;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A connection flood from the ranks' own address (loopback) cannot keep the ranks of a world from meeting: idle
 * connections, garbage and half handshakes, re-opened as fast as the store closes them.
 */
class RendezvousFloodTest {
    static final byte[] SECRET = "flood-s3cret".getBytes(StandardCharsets.UTF_8);

    /** Rank r of {@code world}: connect, all-gather, barrier, counter; returns what it saw, or its failure. */
    static Object rank(RendezvousStore store, int r, int world, Duration timeout) {
        try (var c = Rendezvous.connect(store.address(), r, r, world, SECRET, timeout)) {
            List<byte[]> all = c.allGather("names", ("rank-" + r).getBytes(StandardCharsets.UTF_8), timeout);
            c.barrier("after", timeout);
            c.add("arrived", 1);
            c.barrier("counted", timeout);
            byte[] n = c.get("arrived", timeout);
            return all.stream().map(b -> new String(b, StandardCharsets.UTF_8)).toList() + " " + Wire.longOf(n);
        } catch (RuntimeException e) {
            return e;
        }
    }

    static void until(java.util.function.BooleanSupplier ok, Duration within, String what) throws InterruptedException {
        long deadline = System.nanoTime() + within.toNanos();
        while (!ok.getAsBoolean()) {
            if (System.nanoTime() - deadline >= 0) throw new AssertionError("waited " + Wire.human(within) + " for " + what);
            Thread.sleep(10);
        }
    }

    @Test
    @Timeout(90)
    void ranksMeetDuringAFloodFromTheirOwnAddressAndTheFloodIsClosed() throws Exception {
        int world = 3;
        try (var store = RendezvousStore.start(world, SECRET); // the default limits
             var flood = new ConnectionFlood(store.address(), null, 200, 40_000, 4_000)) {
            // the flood holds every place the store gives its address, and re-opens what the store closes, before the ranks come
            until(() -> flood.closedByServer() >= 250, Duration.ofSeconds(20), "the flood to start");
            var seen = new AtomicReferenceArray<Object>(world);
            var ranks = new ArrayList<Thread>();
            for (int r = 0; r < world; r++) {
                int rank = r;
                ranks.add(Thread.ofPlatform().name("flood-rank-" + r).start(() -> seen.set(rank, rank(store, rank, world, Duration.ofSeconds(8)))));
            }
            for (Thread t : ranks) t.join(30_000);
            int pendingDuringTheFlood = store.pendingHandshakes();
            flood.stopReopening();
            String expected = "[rank-0, rank-1, rank-2] 3";
            for (int r = 0; r < world; r++) {
                Object s = seen.get(r);
                if (s instanceof Throwable e) throw new AssertionError("rank " + r + " failed during the flood: " + e, e);
                assertThat(s).as("rank %d", r).isEqualTo(expected);
            }
            assertThat(pendingDuringTheFlood).as("unauthenticated connections the store holds from one address")
                    .isLessThanOrEqualTo(store.limits().maxPendingPerPeer());
            // every flood connection still open is closed by the store, at its handshake deadline at the latest
            assertThat(flood.awaitAllClosedByServer(Duration.ofSeconds(30)))
                    .as("the store closed all %d flood connections (%d still open)", flood.opened(), flood.open()).isTrue();
            // and gives their places back (each just after closing it)
            until(() -> store.pendingHandshakes() == 0, Duration.ofSeconds(10), "the store to give every place back");
        }
    }
}
