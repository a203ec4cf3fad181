package dev.gatun.runtime.distributed;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.DataOutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.catchThrowable;

@Timeout(30)
class RendezvousTest {
    static final byte[] SECRET = "s3cret".getBytes(StandardCharsets.UTF_8);
    static final Duration T = Duration.ofSeconds(10);

    static byte[] b(String s) { return s.getBytes(StandardCharsets.UTF_8); }

    static String s(byte[] b) { return new String(b, StandardCharsets.UTF_8); }

    static List<String> strings(List<byte[]> l) { return l.stream().map(RendezvousTest::s).toList(); }

    @Test
    void setGetAddAcrossThreads() {
        int world = 3;
        var seen = Collections.synchronizedList(new ArrayList<String>());
        var counters = Collections.synchronizedList(new ArrayList<Long>());
        LocalWorld.run(world, r -> {
            if (r.rank() == 0) {
                Thread.sleep(200); // the others block in get meanwhile
                r.set("nccl-id", b("id-from-rank-0"));
            }
            seen.add(r.rank() + ":" + s(r.get("nccl-id", T)));
            for (int i = 0; i < 100; i++) r.add("count", 1);
            r.barrier("counted", T);
            counters.add(r.add("count", 0));
            assertThat(r.get("count", T)).hasSize(8);
            r.set("nccl-id", b("replaced"));
            r.barrier("replaced", T);
            assertThat(s(r.get("nccl-id", T))).isEqualTo("replaced");
        });
        assertThat(seen).containsExactlyInAnyOrder("0:id-from-rank-0", "1:id-from-rank-0", "2:id-from-rank-0");
        assertThat(counters).containsOnly(300L).hasSize(3);
    }

    @Test
    void barrierAndAllGatherRepeatByRound() {
        int world = 4;
        var results = new ArrayList<List<String>>(Collections.nCopies(world * 5, null));
        var order = Collections.synchronizedList(new ArrayList<String>());
        LocalWorld.run(world, r -> {
            for (int round = 0; round < 5; round++) {
                Thread.sleep((r.rank() * 7 + round * 3) % 11); // skew the ranks
                var all = r.allGather("handles", b("r" + r.rank() + "/" + round), T);
                synchronized (results) {
                    results.set(round * world + r.rank(), strings(all));
                }
                order.add("before-" + round);
                r.barrier("step", T);
                order.add("after-" + round);
                r.barrier("step2", T);
            }
        });
        for (int round = 0; round < 5; round++) {
            for (int rank = 0; rank < world; rank++) {
                assertThat(results.get(round * world + rank)).containsExactly("r0/" + round, "r1/" + round, "r2/" + round, "r3/" + round);
            }
        }
        // every rank's "before-k" comes before any rank's "after-k"
        for (int round = 0; round < 5; round++) {
            int lastBefore = order.lastIndexOf("before-" + round), firstAfter = order.indexOf("after-" + round);
            assertThat(lastBefore).isLessThan(firstAfter);
        }
        LocalWorld.run(1, r -> assertThat(strings(r.allGather("solo", b("x"), T))).containsExactly("x"));
    }

    @Test
    void timeoutsNameTheMissingRanks() throws Exception {
        try (var store = RendezvousStore.start(4, SECRET);
             var r0 = Rendezvous.connect(store.address(), 0, 0, 4, SECRET, T);
             var r1 = Rendezvous.connect(store.address(), 1, 1, 4, SECRET, T)) {
            var wait = Duration.ofMillis(500);
            var f0 = CompletableFuture.runAsync(() -> r0.barrier("plan", wait));
            long t0 = System.nanoTime();
            assertThatThrownBy(() -> r1.barrier("plan", wait))
                    .isInstanceOf(RendezvousTimeoutException.class)
                    .hasMessage("rendezvous barrier 'plan' timed out after 500 ms: ranks [2, 3] never arrived (never connected: [2, 3])")
                    .satisfies(e -> assertThat(((RendezvousTimeoutException) e).missingRanks()).containsExactly(2, 3));
            assertThat(Duration.ofNanos(System.nanoTime() - t0)).isBetween(Duration.ofMillis(400), Duration.ofSeconds(5));
            assertThatThrownBy(f0::get).isInstanceOf(ExecutionException.class).cause().isInstanceOf(RendezvousTimeoutException.class)
                    .hasMessageContaining("ranks [2, 3] never arrived");

            // ranks 2 and 3 connect; 3 never joins the all-gather
            try (var r2 = Rendezvous.connect(store.address(), 2, 2, 4, SECRET, T);
                 var r3 = Rendezvous.connect(store.address(), 3, 3, 4, SECRET, T)) {
                var g = List.of(r0, r1, r2).stream()
                        .map(r -> CompletableFuture.supplyAsync(() -> r.allGather("ipc", b("h"), Duration.ofSeconds(1)))).toList();
                for (var f : g) {
                    assertThatThrownBy(f::get).cause().isInstanceOf(RendezvousTimeoutException.class)
                            .hasMessage("rendezvous allGather 'ipc' timed out after 1 s: rank 3 never arrived");
                }
                assertThatThrownBy(() -> r3.get("nobody", Duration.ofMillis(200))).isInstanceOf(RendezvousTimeoutException.class)
                        .hasMessage("rendezvous get 'nobody' timed out after 200 ms: no rank set it");
                assertThat(r3.add("c", 5)).isEqualTo(5);
            }
        }
    }

    @Test
    void wrongSecretIsRejectedAndForeignersAreKeptOut() throws Exception {
        try (var store = RendezvousStore.start(2, SECRET)) {
            assertThatThrownBy(() -> Rendezvous.connect(store.address(), 0, 0, 2, b("guess"), T))
                    .isInstanceOf(RendezvousException.class)
                    .hasMessageContaining("rejected rank 0")
                    .hasMessageContaining("authentication failed: the client's GATUN_SECRET differs from the store's");
            assertThat(store.rejectedConnections()).isEqualTo(1);

            // a foreign process that speaks garbage
            try (var s = new Socket()) {
                s.connect(store.address());
                var out = new DataOutputStream(s.getOutputStream());
                out.writeBytes("GET / HTTP/1.1\r\nHost: x\r\n\r\n");
                out.flush();
                assertThat(s.getInputStream().readAllBytes()).hasSizeLessThan(100); // hello, then closed
            } catch (java.io.IOException e) {
                // reset by the store: fine too
            }
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
            while (store.rejectedConnections() < 2 && System.nanoTime() < deadline) Thread.sleep(10);
            assertThat(store.rejectedConnections()).isEqualTo(2);
            assertThat(store.connectedRanks()).isEmpty();

            // a wrong world size, a bad rank, a duplicate rank
            assertThatThrownBy(() -> Rendezvous.connect(store.address(), 0, 0, 3, SECRET, T)).hasMessageContaining("world size 3 differs from the store's 2");
            try (var r0 = Rendezvous.connect(store.address(), 0, 0, 2, SECRET, T)) {
                assertThatThrownBy(() -> Rendezvous.connect(store.address(), 0, 0, 2, SECRET, T)).hasMessageContaining("rank 0 is already connected");
                r0.set("k", b("v"));
                assertThat(s(r0.get("k", T))).isEqualTo("v");
            }
        }
        // a server that does not know the secret cannot impersonate the store: the client checks its proof
        try (var store = RendezvousStore.start(1, b("other"))) {
            assertThatThrownBy(() -> Rendezvous.connect(store.address(), 0, 0, 1, SECRET, T)).hasMessageContaining("authentication failed");
        }
    }

    @Test
    void aRankThatDiesFailsItsPeersWaitsAtOnce() throws Exception {
        try (var store = RendezvousStore.start(3, SECRET);
             var r0 = Rendezvous.connect(store.address(), 0, 0, 3, SECRET, T);
             var r1 = Rendezvous.connect(store.address(), 1, 1, 3, SECRET, T);
             var r2 = Rendezvous.connect(store.address(), 2, 2, 3, SECRET, T)) {
            var f0 = CompletableFuture.runAsync(() -> r0.barrier("plan", Duration.ofSeconds(30)));
            Thread.sleep(100);
            long t0 = System.nanoTime();
            r1.dropConnection(); // as if its process died
            assertThatThrownBy(() -> f0.get(10, TimeUnit.SECONDS)).cause().isInstanceOf(RankLeftException.class)
                    .hasMessage("rendezvous barrier 'plan' cannot complete: rank 1 disconnected before arriving; ranks [1, 2] never arrived")
                    .satisfies(e -> assertThat(((RankLeftException) e).leftRanks()).containsExactly(1));
            assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(Duration.ofSeconds(5));
            // later arrivals fail at once too
            assertThatThrownBy(() -> r2.barrier("plan", Duration.ofSeconds(30))).isInstanceOf(RankLeftException.class)
                    .hasMessageContaining("rank 1 disconnected");
            // a rank that closes its client cleanly before arriving (the store learns of the close a moment later: a
            // wait started before that names rank 1 alone, so wait under new names until the store has seen it)
            r2.close();
            String message = "";
            for (int i = 0; i < 100 && !message.contains("rank 2 closed"); i++) {
                String name = "x" + i;
                Throwable e = catchThrowable(() -> r0.allGather(name, b("a"), Duration.ofSeconds(30)));
                assertThat(e).isInstanceOf(RankLeftException.class);
                message = e.getMessage();
                if (!message.contains("rank 2 closed")) Thread.sleep(20);
            }
            assertThat(message).contains("rank 1 disconnected, rank 2 closed its rendezvous client before arriving");
        }
    }

    @Test
    void theStoreGoingAwayFailsWaitsAndCloseIsIdempotent() throws Exception {
        var store = RendezvousStore.start(2, SECRET);
        var r0 = Rendezvous.connect(store.address(), 0, 0, 2, SECRET, T);
        var f = CompletableFuture.runAsync(() -> r0.get("never", Duration.ofSeconds(30)));
        Thread.sleep(100);
        store.close();
        store.close();
        assertThatThrownBy(() -> f.get(10, TimeUnit.SECONDS)).cause().isInstanceOf(RendezvousException.class)
                .hasMessageContaining("closed the connection");
        assertThatThrownBy(() -> r0.set("k", b("v"))).isInstanceOf(RendezvousException.class).hasMessageContaining("closed the connection");
        r0.close();
        r0.close();
        assertThat(r0.isClosed()).isTrue();
        assertThatThrownBy(() -> r0.barrier("b", T)).hasMessageContaining("closed rendezvous client");

        try (var s2 = RendezvousStore.start(2, SECRET); var a = Rendezvous.connect(s2.address(), 0, 0, 2, SECRET, T)) {
            var pending = CompletableFuture.runAsync(() -> a.barrier("b", Duration.ofSeconds(30)));
            Thread.sleep(100);
            a.close(); // from another thread: the wait ends now
            assertThatThrownBy(() -> pending.get(5, TimeUnit.SECONDS)).cause().hasMessageContaining("was closed");
        }
    }

    @Test
    void fromEnvironmentChecksItsVariables() throws Exception {
        Map<String, String> good = Map.of("RANK", "0", "LOCAL_RANK", "0", "WORLD_SIZE", "2",
                "GATUN_RENDEZVOUS", "127.0.0.1:1", "GATUN_SECRET", "abc", "GATUN_RENDEZVOUS_SERVER", "launcher");
        assertThatThrownBy(() -> Rendezvous.fromEnvironment(without(good, "RANK")))
                .hasMessageContaining("environment variable RANK is not set").hasMessageContaining("gatun-run");
        assertThatThrownBy(() -> Rendezvous.fromEnvironment(with(good, "WORLD_SIZE", "two")))
                .hasMessageContaining("WORLD_SIZE='two' is not an integer");
        assertThatThrownBy(() -> Rendezvous.fromEnvironment(with(good, "RANK", "2"))).hasMessageContaining("RANK=2 must be below WORLD_SIZE=2");
        assertThatThrownBy(() -> Rendezvous.fromEnvironment(with(good, "GATUN_RENDEZVOUS", "localhost")))
                .hasMessageContaining("GATUN_RENDEZVOUS must be host:port");
        assertThatThrownBy(() -> Rendezvous.fromEnvironment(with(good, "GATUN_RENDEZVOUS", "localhost:99999")))
                .hasMessageContaining("outside 1..65535");
        assertThatThrownBy(() -> Rendezvous.fromEnvironment(without(good, "GATUN_SECRET")))
                .hasMessageContaining("GATUN_SECRET is not set");
        assertThatThrownBy(() -> Rendezvous.fromEnvironment(with(good, "GATUN_RENDEZVOUS_TIMEOUT", "-1")))
                .hasMessageContaining("GATUN_RENDEZVOUS_TIMEOUT must be a positive number of seconds");

        // an external store (the launcher's)
        try (var store = RendezvousStore.start(2, b("abc"))) {
            var env = with(with(good, "GATUN_RENDEZVOUS", store.hostPort()), "GATUN_RENDEZVOUS_TIMEOUT", "7.5");
            var f1 = CompletableFuture.supplyAsync(() -> Rendezvous.fromEnvironment(with(env, "RANK", "1", "LOCAL_RANK", "1")));
            try (var r0 = Rendezvous.fromEnvironment(env); var r1 = f1.get()) {
                assertThat(r1.rank()).isEqualTo(1);
                assertThat(r1.localRank()).isEqualTo(1);
                assertThat(r0.worldSize()).isEqualTo(2);
                assertThat(r0.defaultTimeout()).isEqualTo(Duration.ofMillis(7500));
                var f = CompletableFuture.supplyAsync(() -> strings(r1.allGather("k", b("one"))));
                assertThat(strings(r0.allGather("k", b("zero")))).containsExactly("zero", "one");
                assertThat(f.get()).containsExactly("zero", "one");
            }
        }

        // rank 0 hosts the store (no launcher); rank 1 connects, retrying until it listens
        int port;
        try (var ss = new ServerSocket(0, 1, java.net.InetAddress.getLoopbackAddress())) {
            port = ss.getLocalPort();
        }
        var env = with(without(good, "GATUN_RENDEZVOUS_SERVER"), "GATUN_RENDEZVOUS", "127.0.0.1:" + port);
        var f1 = CompletableFuture.supplyAsync(() -> {
            try (var r1 = Rendezvous.fromEnvironment(with(env, "RANK", "1", "LOCAL_RANK", "0"))) {
                r1.barrier("hello");
                return s(r1.get("from-0"));
            }
        });
        try (var r0 = Rendezvous.fromEnvironment(env)) {
            assertThat(r0.address()).isEqualTo(new InetSocketAddress("127.0.0.1", port));
            r0.set("from-0", b("hi"));
            r0.barrier("hello");
        }
        assertThat(f1.get(10, TimeUnit.SECONDS)).isEqualTo("hi");
    }

    static Map<String, String> without(Map<String, String> m, String k) {
        var c = new HashMap<>(m);
        c.remove(k);
        return c;
    }

    static Map<String, String> with(Map<String, String> m, String... kv) {
        var c = new HashMap<>(m);
        for (int i = 0; i < kv.length; i += 2) c.put(kv[i], kv[i + 1]);
        return c;
    }

    /** What lets two ranks prove to each other they belong to one job: the same on every rank, another under another secret or purpose. */
    @Test
    void theMacOfTheSecretIsTheSameOnEveryRankAndNothingElse() {
        try (var store = RendezvousStore.start(2, SECRET); var other = RendezvousStore.start(1, b("another"))) {
            try (var r0 = Rendezvous.connect(store.address(), 0, 0, 2, SECRET, T); var r1 = Rendezvous.connect(store.address(), 1, 1, 2, SECRET, T);
                 var stranger = Rendezvous.connect(other.address(), 0, 0, 1, b("another"), T)) {
                byte[] mac = r0.mac("tcp-acceptor", b("nonce"), b("x"));
                assertThat(mac).hasSize(32).isEqualTo(r1.mac("tcp-acceptor", b("nonce"), b("x")));
                assertThat(stranger.mac("tcp-acceptor", b("nonce"), b("x"))).isNotEqualTo(mac);
                assertThat(r1.mac("tcp-connector", b("nonce"), b("x"))).isNotEqualTo(mac);
                assertThat(r1.mac("tcp-acceptor", b("non"), b("cex"))).as("parts are framed, not just joined").isNotEqualTo(mac);
                assertThat(r0.localAddress().isLoopbackAddress()).isTrue();
            }
        }
    }
}
