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
        try (var store = RendezvousStore.start(2, SECRET)) {
            store.handshakeDeadline(Duration.ofMillis(800)); // before connecting: the deadline is taken when the handshake starts
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

    @Test
    @Timeout(60)
    void atMostSoManyHandshakesAtOnceAndTheRestAreClosedUnanswered() throws Exception {
        try (var store = RendezvousStore.start(1, SECRET)) {
            store.handshakeDeadline(Duration.ofSeconds(3));
            var silent = new ArrayList<Socket>();
            try {
                int extra = 6;
                for (int i = 0; i < RendezvousStore.MAX_PENDING_HANDSHAKES + extra; i++)
                    silent.add(new Socket(store.address().getAddress(), store.address().getPort()));
                int answered = 0;
                for (Socket s : silent) {
                    s.setSoTimeout(2_000);
                    if (hello(s)) answered++;
                }
                assertThat(answered).isEqualTo(RendezvousStore.MAX_PENDING_HANDSHAKES);
                waitFor(() -> store.rejectedConnections() >= extra);
            } finally {
                for (Socket s : silent) s.close();
            }
            // every silent handshake ended (and gave its place back) once it is counted as dropped
            waitFor(() -> store.rejectedConnections() >= RendezvousStore.MAX_PENDING_HANDSHAKES + 6);
            // a rank that knows the secret still gets in
            try (var rank = Rendezvous.connect(store.address(), 0, 0, 1, SECRET, Duration.ofSeconds(10))) {
                rank.set("k", new byte[]{1});
                assertThat(rank.get("k")).containsExactly(1);
            }
        }
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
