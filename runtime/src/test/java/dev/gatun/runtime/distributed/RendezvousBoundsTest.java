package dev.gatun.runtime.distributed;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.lang.management.ManagementFactory;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** What an unauthenticated or misbehaving peer can cost the rendezvous store: bounded time, connections, memory and log lines. */
class RendezvousBoundsTest {
    static final byte[] SECRET = "s3cret".getBytes(StandardCharsets.UTF_8);

    /** Reads the store's hello (magic, version, nonce); true when it came, false when the store closed first. */
    static boolean hello(Socket s) throws IOException {
        var in = new DataInputStream(s.getInputStream());
        try {
            in.readInt();
            in.readInt();
            in.readFully(new byte[Wire.NONCE_BYTES]);
            return true;
        } catch (EOFException | java.net.SocketException e) {
            return false;
        }
    }

    @Test
    @Timeout(30)
    void aClientTricklingBytesIsCutOffAtTheHandshakeDeadline() throws Exception {
        var limits = RendezvousLimits.DEFAULT.withHandshakeDeadline(Duration.ofMillis(800));
        try (var store = RendezvousStore.start(LOOPBACK, 2, SECRET, limits)) {
            var s = new Socket(store.address().getAddress(), store.address().getPort());
            assertThat(hello(s)).isTrue();
            var out = new java.io.DataOutputStream(s.getOutputStream());
            out.writeInt(Wire.MAGIC);   // a well-formed start, so only the deadline can stop what follows
            out.writeInt(Wire.VERSION);
            out.flush();
            long t0 = System.nanoTime();
            boolean cut = false;
            // one byte every 150 ms: each read is quick, only an overall deadline stops it
            for (int i = 0; i < 100 && !cut; i++) {
                try {
                    s.getOutputStream().write(0x47);
                    s.getOutputStream().flush();
                    s.setSoTimeout(150);
                    cut = s.getInputStream().read() < 0;
                } catch (java.net.SocketTimeoutException e) {
                    // nothing from the store yet: keep trickling
                } catch (IOException e) {
                    cut = true;
                }
            }
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertThat(cut).as("the store closed the connection").isTrue();
            assertThat(ms).isLessThan(5_000);
            waitFor(() -> store.rejectedConnections() == 1);
            s.close();
        }
    }

    static final java.net.InetSocketAddress LOOPBACK = new java.net.InetSocketAddress(java.net.InetAddress.getLoopbackAddress(), 0);

    /** A connection from {@code from} (null: any address) that has read the store's hello. */
    static Socket idle(RendezvousStore store, java.net.InetAddress from) throws IOException {
        var s = new Socket();
        try {
            if (from != null) s.bind(new java.net.InetSocketAddress(from, 0));
            s.connect(store.address(), 5_000);
            s.setSoTimeout(5_000);
            assertThat(hello(s)).as("the store's hello").isTrue();
            return s;
        } catch (IOException | RuntimeException | AssertionError e) {
            s.close();
            throw e;
        }
    }

    /** Whether the store closed {@code s}: end of stream or reset, rather than silence for {@code quietMs}. */
    static boolean closedByStore(Socket s, int quietMs) throws IOException {
        s.setSoTimeout(quietMs);
        try {
            return s.getInputStream().read() < 0;
        } catch (java.net.SocketTimeoutException e) {
            return false;
        } catch (java.net.SocketException e) {
            return true;
        }
    }

    @Test
    @Timeout(60)
    void aPeersIdleConnectionsBeyondItsBoundPushOutItsOldest() throws Exception {
        var limits = RendezvousLimits.DEFAULT.withHandshakeDeadline(Duration.ofSeconds(30)).withMaxPending(8, 4);
        try (var store = RendezvousStore.start(LOOPBACK, 1, SECRET, limits)) {
            var silent = new ArrayList<Socket>();
            try {
                for (int i = 0; i < 7; i++) silent.add(idle(store, null)); // one after another: the store admits them in this order
                for (int i = 0; i < 3; i++) assertThat(closedByStore(silent.get(i), 5_000)).as("connection %d, pushed out", i).isTrue();
                for (int i = 3; i < 7; i++) assertThat(closedByStore(silent.get(i), 300)).as("connection %d, among the newest 4", i).isFalse();
                waitFor(() -> store.rejectedConnections() == 3 && store.pendingHandshakes() == 4);
                // a rank that knows the secret gets in beside them
                try (var rank = Rendezvous.connect(store.address(), 0, 0, 1, SECRET, Duration.ofSeconds(10))) {
                    rank.set("k", new byte[]{1});
                    assertThat(rank.get("k")).containsExactly(1);
                }
                assertThat(store.pendingHandshakes()).isLessThanOrEqualTo(4);
            } finally {
                for (Socket s : silent) s.close();
            }
            waitFor(() -> store.pendingHandshakes() == 0);
        }
    }

    @Test
    @Timeout(60)
    void overTheTotalBoundTheHeaviestPeerMakesRoom() throws Exception {
        var other = java.net.InetAddress.getByName("127.0.0.2");
        try (var probe = new Socket()) {
            probe.bind(new java.net.InetSocketAddress(other, 0));
        } catch (IOException e) {
            org.junit.jupiter.api.Assumptions.abort("cannot bind 127.0.0.2 on this machine: " + e.getMessage());
        }
        var limits = RendezvousLimits.DEFAULT.withHandshakeDeadline(Duration.ofSeconds(30)).withMaxPending(8, 6);
        try (var store = RendezvousStore.start(LOOPBACK, 1, SECRET, limits)) {
            var mine = new ArrayList<Socket>();
            var theirs = new ArrayList<Socket>();
            try {
                for (int i = 0; i < 2; i++) mine.add(idle(store, null));
                for (int i = 0; i < 6; i++) theirs.add(idle(store, other)); // the gate is full now: 2 + 6
                mine.add(idle(store, null));                             // over the total: 127.0.0.2 holds the most
                assertThat(closedByStore(theirs.getFirst(), 5_000)).as("the oldest of the heaviest peer").isTrue();
                for (Socket s : mine) assertThat(closedByStore(s, 300)).as("a connection of the lighter peer").isFalse();
                for (Socket s : theirs.subList(1, 6)) assertThat(closedByStore(s, 100)).isFalse();
                waitFor(() -> store.pendingHandshakes() == 8);
            } finally {
                for (Socket s : mine) s.close();
                for (Socket s : theirs) s.close();
            }
        }
    }

    @Test
    @Timeout(60)
    void aGoodTicketTakesNoPlaceButAReplayedOneDoes() throws Exception {
        var limits = RendezvousLimits.DEFAULT.withHandshakeDeadline(Duration.ofSeconds(30));
        try (var store = RendezvousStore.start(LOOPBACK, 2, SECRET, limits)) {
            byte[] nonce = new byte[Wire.NONCE_BYTES];
            nonce[0] = 42;
            var bytes = new java.io.ByteArrayOutputStream();
            Wire.ClientHello.of(SECRET, nonce, 1, 2).write(new java.io.DataOutputStream(bytes));
            try (var first = new Socket(); var replay = new Socket()) {
                first.connect(store.address(), 5_000);
                first.getOutputStream().write(bytes.toByteArray());
                first.setSoTimeout(5_000);
                assertThat(hello(first)).isTrue();
                waitFor(() -> store.pendingHandshakes() == 0); // its ticket is good: no place held, whenever it was read
                replay.connect(store.address(), 5_000);
                replay.getOutputStream().write(bytes.toByteArray());
                replay.setSoTimeout(5_000);
                assertThat(hello(replay)).isTrue();
                waitFor(() -> store.pendingHandshakes() == 1);  // the same ticket again: it waits among the unauthenticated
                Thread.sleep(200);
                assertThat(store.pendingHandshakes()).isEqualTo(1);
            }
            waitFor(() -> store.pendingHandshakes() == 0);
        }
    }

    @Test
    void limitsComeFromTheEnvironmentAndBadOnesAreNamed() {
        var d = RendezvousLimits.fromEnvironment(java.util.Map.of());
        assertThat(d).isEqualTo(new RendezvousLimits(Duration.ofSeconds(3), 64, 16, 1024));
        var set = RendezvousLimits.fromEnvironment(java.util.Map.of(RendezvousLimits.HANDSHAKE_TIMEOUT, "0.5",
                RendezvousLimits.MAX_PENDING, "8", RendezvousLimits.BACKLOG, "50"));
        assertThat(set).isEqualTo(new RendezvousLimits(Duration.ofMillis(500), 8, 8, 50)); // the per-peer bound follows the total down
        assertThatThrownBy(() -> RendezvousLimits.fromEnvironment(java.util.Map.of(RendezvousLimits.HANDSHAKE_TIMEOUT, "soon")))
                .isInstanceOf(RendezvousException.class).hasMessageContaining("GATUN_RENDEZVOUS_HANDSHAKE_TIMEOUT must be a positive number of seconds, not 'soon'");
        assertThatThrownBy(() -> RendezvousLimits.fromEnvironment(java.util.Map.of(RendezvousLimits.MAX_PENDING, "4", RendezvousLimits.MAX_PENDING_PER_PEER, "5")))
                .isInstanceOf(RendezvousException.class).hasMessageContaining("GATUN_RENDEZVOUS_MAX_PENDING_PER_PEER=5 must not exceed GATUN_RENDEZVOUS_MAX_PENDING (4)");
        assertThatThrownBy(() -> RendezvousLimits.fromEnvironment(java.util.Map.of(RendezvousLimits.BACKLOG, "0")))
                .isInstanceOf(RendezvousException.class).hasMessageContaining("GATUN_RENDEZVOUS_BACKLOG must be a whole number of at least 1, not '0'");
        assertThatThrownBy(() -> RendezvousLimits.DEFAULT.withMaxPending(4, 8))
                .isInstanceOf(RendezvousException.class).hasMessageContaining("maxPendingPerPeer must be in 1..maxPending (4), not 8");
    }

    @Test
    void aLengthPrefixAloneAllocatesNothingOfWhatItClaims() {
        var announced = 200 << 20; // 200 MiB claimed, 10 bytes sent
        byte[] wire = ByteBuffer.allocate(4 + 10).putInt(announced).put(new byte[10]).array();
        var threads = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        long tid = Thread.currentThread().threadId();
        long before = threads.getThreadAllocatedBytes(tid);
        assertThatThrownBy(() -> Wire.readFrame(new DataInputStream(new ByteArrayInputStream(wire))))
                .isInstanceOf(EOFException.class).hasMessageContaining("announced " + announced + " bytes and closed after 10");
        long allocated = threads.getThreadAllocatedBytes(tid) - before;
        assertThat(allocated).isLessThan(4L << 20);
    }

    @Test
    void framesArriveWholeWhateverTheirSize() throws IOException {
        for (int n : new int[]{0, 1, Wire.EAGER_BYTES, Wire.EAGER_BYTES + 1, 3 * Wire.EAGER_BYTES + 17}) {
            byte[] payload = new byte[n];
            for (int i = 0; i < n; i++) payload[i] = (byte) (i * 31 + 7);
            byte[] wire = ByteBuffer.allocate(4 + n).putInt(n).put(payload).array();
            // a stream that hands out at most 1000 bytes a read, as a socket may
            InputStream trickle = new ByteArrayInputStream(wire) {
                @Override public synchronized int read(byte[] b, int off, int len) { return super.read(b, off, Math.min(len, 1000)); }
            };
            assertThat(Wire.readFrame(new DataInputStream(trickle))).as("frame of %d bytes", n).isEqualTo(payload);
        }
    }

    @Test
    void requestsAndRepliesComeBackAsTheyWereWritten() throws IOException {
        for (int n : new int[]{0, 1, Wire.EAGER_BYTES, Wire.EAGER_BYTES + 1}) {
            byte[] payload = new byte[n];
            for (int i = 0; i < n; i++) payload[i] = (byte) (i * 7 + 3);
            var bytes = new java.io.ByteArrayOutputStream();
            var out = new java.io.DataOutputStream(bytes);
            Wire.writeFrame(out, Wire.request(Wire.OP_SET, 42L + n, o -> { Wire.writeString(o, "key"); Wire.writeBytes(o, payload); }), false);
            Wire.writeFrame(out, Wire.reply(7L + n, Wire.ST_TIMEOUT, o -> { Wire.writeString(o, "late"); Wire.writeInts(o, List.of(1, 3)); Wire.writeInts(o, List.of()); }), true);
            var in = new DataInputStream(new ByteArrayInputStream(bytes.toByteArray()));
            var request = new DataInputStream(new ByteArrayInputStream(Wire.readFrame(in)));
            assertThat(request.readByte()).isEqualTo(Wire.OP_SET);
            assertThat(request.readLong()).isEqualTo(42L + n);
            assertThat(Wire.readString(request, 100)).isEqualTo("key");
            assertThat(Wire.readBytes(request, Wire.MAX_FRAME)).isEqualTo(payload);
            var reply = new DataInputStream(new ByteArrayInputStream(Wire.readFrame(in)));
            assertThat(reply.readLong()).isEqualTo(7L + n);
            assertThat(reply.readByte()).isEqualTo(Wire.ST_TIMEOUT);
            assertThat(Wire.readString(reply, 100)).isEqualTo("late");
            assertThat(Wire.readInts(reply)).containsExactly(1, 3);
            assertThat(Wire.readInts(reply)).isEmpty();
            assertThat(Wire.readFrame(in)).as("nothing after the two frames").isNull();
        }
    }

    @Test
    @Timeout(60)
    void aFloodOfBadConnectionsLogsAFewLinesNotOneEach() throws Exception {
        var records = new ArrayList<LogRecord>();
        Logger jul = Logger.getLogger("dev.gatun.runtime.distributed");
        Handler h = new Handler() {
            @Override public synchronized void publish(LogRecord r) { if (r.getLevel().intValue() >= Level.WARNING.intValue()) records.add(r); }
            @Override public void flush() {}
            @Override public void close() {}
        };
        jul.addHandler(h);
        try (var store = RendezvousStore.start(1, SECRET)) {
            int bad = 150;
            for (int i = 0; i < bad; i++) {
                assertThatThrownBy(() -> Rendezvous.connect(store.address(), 0, 0, 1, "wrong".getBytes(StandardCharsets.UTF_8), Duration.ofSeconds(5)))
                        .isInstanceOf(RendezvousException.class);
            }
            waitFor(() -> store.rejectedConnections() == bad);
            List<LogRecord> mine;
            synchronized (h) {
                mine = records.stream().filter(r -> r.getMessage().contains(store.hostPort())).toList();
            }
            // 10 lines, one saying the rest are counted, and one at 100
            assertThat(mine).hasSize(RendezvousStore.LOGGED_REJECTIONS + 2);
            assertThat(mine.getLast().getMessage()).contains("100 connections rejected so far");
        } finally {
            jul.removeHandler(h);
        }
    }

    static void waitFor(java.util.function.BooleanSupplier ok) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
        while (!ok.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new AssertionError("condition not met within 10 s");
            Thread.sleep(20);
        }
    }
}
