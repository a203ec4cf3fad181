package dev.gatun.runtime.host;

import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.RankFailedException;
import dev.gatun.runtime.distributed.Rendezvous;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * Exchanges over TCP: a socket between every pair of ranks, which may be on different hosts. Set-up goes through the
 * rendezvous: each rank listens on its address toward the store ({@link Rendezvous#localAddress()}), publishes it,
 * connects to every lower rank and accepts every higher one. Each connection proves, in both directions, that its
 * ends know the job's secret (HMAC-SHA256 challenge-response over fresh nonces, {@link Rendezvous#mac}); one that
 * does not is logged and closed, and the rank goes on waiting for the real peer.
 *
 * <p>An exchange sends this rank's bytes to every other member (each on a virtual thread of its own, so two ranks
 * sending each other more than the sockets buffer cannot block each other) and reads theirs in member order. Each
 * frame carries the link's sequence number, the plan's step and the byte count, checked on arrival. A peer whose
 * call failed, whose session closed or whose process ended closes its sockets: the read ends at once, naming it.
 * A rank whose exchange fails lets its own frames of that exchange go out first (then says goodbye with the reason),
 * so a peer learns the real cause, such as different shapes, rather than only that the connection closed.
 */
final class TcpTransport implements Transport {
    private static final System.Logger LOG = System.getLogger("dev.gatun.runtime.distributed");
    private static final int MAGIC = 0x47544350; // "GTCP"
    private static final int NONCE = 32;
    /** How long one incoming connection may take to prove itself before the next is accepted. */
    private static final int HANDSHAKE_MS = 10_000;
    /** The sequence number of a goodbye frame, whose bytes are the reason a rank stopped. */
    private static final long GOODBYE = -1;
    private static final int MAX_REASON = 4096, GOODBYE_MS = 200;

    /** One connection to a peer (known once its handshake says who it is), with the sequence numbers of the frames sent and received on it. */
    private static final class Link {
        int peer;
        final Socket socket;
        final DataInputStream in;
        final DataOutputStream out;
        long sent, received;

        Link(int peer, Socket socket) throws IOException {
            this.peer = peer;
            this.socket = socket;
            socket.setTcpNoDelay(true);
            this.in = new DataInputStream(new BufferedInputStream(socket.getInputStream(), 64 << 10));
            this.out = new DataOutputStream(new BufferedOutputStream(socket.getOutputStream(), 64 << 10));
        }

        void close() {
            try {
                socket.close();
            } catch (IOException ignored) {
                // closing anyway
            }
        }
    }

    private final int rank;
    private final Link[] links;
    private final ExecutorService senders = Executors.newVirtualThreadPerTaskExecutor();
    private volatile String broken;
    /** Whether the rank is inside {@link #allGather} (its sender threads may be writing to the links). */
    private volatile boolean inExchange;
    private boolean closed;
    /** Tests only: how long each frame's sender waits before it writes (a loaded machine's late sender thread); 0: none. */
    private volatile long sendDelayNanos;

    private TcpTransport(int rank, Link[] links) {
        this.rank = rank;
        this.links = links;
    }

    /** Connects rank {@code r.rank()} to every other rank through {@code r} (keys under {@code prefix}), within {@code timeout}. */
    static TcpTransport open(Rendezvous r, String prefix, Duration timeout) {
        int rank = r.rank(), world = r.worldSize();
        var links = new Link[world];
        long deadline = System.nanoTime() + timeout.toNanos();
        try (var server = new ServerSocket()) {
            server.bind(new InetSocketAddress(r.localAddress(), 0), world);
            var all = r.allGather(prefix + "/tcp", (r.localAddress().getHostAddress() + " " + server.getLocalPort()).getBytes(StandardCharsets.UTF_8), timeout);
            var handshake = new Handshake(r, prefix);
            var accepted = new Link[world];
            var accepting = new FutureTask<Void>(() -> { accept(server, handshake, accepted, deadline); return null; });
            Thread.ofVirtual().name("gatun-tcp-accept-" + rank).start(accepting);
            for (int peer = 0; peer < rank; peer++) links[peer] = connect(handshake, peer, all.get(peer), deadline);
            accepting.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            for (int peer = rank + 1; peer < world; peer++) links[peer] = accepted[peer];
            return new TcpTransport(rank, links);
        } catch (IOException | InterruptedException | ExecutionException | TimeoutException | RuntimeException e) {
            // the listener is closed by now: an accept still under way ends and closes what it accepted
            for (Link l : links) if (l != null) l.close();
            if (e instanceof InterruptedException) Thread.currentThread().interrupt();
            if (e instanceof ExecutionException x && x.getCause() instanceof GatunRuntimeException g) throw g;
            if (e instanceof GatunRuntimeException g) throw g;
            throw new GatunRuntimeException("rank " + rank + " could not connect to every other rank over TCP within " + timeout.toMillis()
                    + " ms: " + (e instanceof TimeoutException ? "some never connected" : String.valueOf(e instanceof ExecutionException x ? x.getCause() : e)), e);
        }
    }

    /** The two halves of the challenge-response, under the job's secret and this session's prefix. */
    private record Handshake(Rendezvous r, String prefix) {
        byte[] proof(String side, int from, int to, byte[] theirNonce, byte[] myNonce) {
            return r.mac("tcp-" + side, prefix.getBytes(StandardCharsets.UTF_8), ByteBuffer.allocate(8).putInt(from).putInt(to).array(), theirNonce, myNonce);
        }
    }

    /** Connects to lower rank {@code peer} at its published address and proves both ends know the secret. */
    private static Link connect(Handshake h, int peer, byte[] address, long deadline) throws IOException {
        String[] hostPort = new String(address, StandardCharsets.UTF_8).split(" ");
        var s = new Socket();
        try {
            s.connect(new InetSocketAddress(hostPort[0], Integer.parseInt(hostPort[1])), timeLeftMs(deadline));
            s.setSoTimeout(timeLeftMs(deadline));
            var link = new Link(peer, s);
            int me = h.r().rank();
            byte[] mine = nonce();
            link.out.writeInt(MAGIC);
            link.out.writeUTF(h.prefix());
            link.out.writeInt(me);
            link.out.writeInt(peer);
            link.out.write(mine);
            link.out.flush();
            byte[] theirs = link.in.readNBytes(NONCE), proof = link.in.readNBytes(32);
            if (theirs.length != NONCE || !MessageDigest.isEqual(proof, h.proof("acceptor", peer, me, mine, theirs)))
                throw new GatunRuntimeException("rank " + me + ": the listener at " + hostPort[0] + ":" + hostPort[1]
                        + " that rank " + peer + " published failed to prove it knows the job's secret; not talking to it");
            link.out.write(h.proof("connector", me, peer, theirs, mine));
            link.out.flush();
            s.setSoTimeout(0);
            return link;
        } catch (IOException | RuntimeException e) {
            s.close();
            throw e;
        }
    }

    /**
     * Accepts every higher rank's connection until all came; a connection that cannot prove itself is logged and closed.
     * Where it fails (the listener closed, the deadline passed), it closes what it accepted.
     */
    private static void accept(ServerSocket server, Handshake h, Link[] accepted, long deadline) throws IOException {
        int me = h.r().rank(), expected = accepted.length - 1 - me;
        try {
            for (int got = 0; got < expected; ) {
                server.setSoTimeout(timeLeftMs(deadline));
                Socket s = server.accept();
                try {
                    s.setSoTimeout(Math.min(HANDSHAKE_MS, timeLeftMs(deadline)));
                    var link = new Link(-1, s);
                    link.peer = verify(h, link, accepted);
                    s.setSoTimeout(0);
                    accepted[link.peer] = link;
                    got++;
                } catch (IOException | RuntimeException e) {
                    LOG.log(System.Logger.Level.WARNING, "rank {0}: closed a connection from {1} that did not prove it is a rank of this job: {2}",
                            me, s.getRemoteSocketAddress(), e.getMessage());
                    s.close();
                }
            }
        } catch (IOException | RuntimeException e) {
            for (Link l : accepted) if (l != null) l.close();
            throw e;
        }
    }

    /** The acceptor's half of the handshake: the connecting rank, once it proved itself. */
    private static int verify(Handshake h, Link link, Link[] links) throws IOException {
        int me = h.r().rank();
        if (link.in.readInt() != MAGIC) throw new IOException("not a Gatun host transport connection");
        String prefix = link.in.readUTF();
        int from = link.in.readInt(), to = link.in.readInt();
        byte[] theirs = link.in.readNBytes(NONCE);
        if (!prefix.equals(h.prefix()) || to != me || from <= me || from >= links.length || links[from] != null || theirs.length != NONCE)
            throw new IOException("unexpected session '" + prefix + "' or ranks " + from + " -> " + to);
        byte[] mine = nonce();
        link.out.write(mine);
        link.out.write(h.proof("acceptor", me, from, theirs, mine));
        link.out.flush();
        byte[] proof = link.in.readNBytes(32);
        if (!MessageDigest.isEqual(proof, h.proof("connector", from, me, mine, theirs))) throw new IOException("a wrong proof of the secret");
        return from;
    }

    private static byte[] nonce() {
        var n = new byte[NONCE];
        new SecureRandom().nextBytes(n);
        return n;
    }

    private static int timeLeftMs(long deadline) {
        return (int) Math.max(1, Math.min(Integer.MAX_VALUE, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
    }

    @Override public String describe() { return "tcp"; }

    @Override public MemorySegment[] allGather(Exchange x, MemorySegment mine) {
        inExchange = true;   // before broken is read: an abort either stops this exchange or sees it (and says no goodbye)
        try {
            return exchange(x, mine);
        } finally {
            inExchange = false;
        }
    }

    private MemorySegment[] exchange(Exchange x, MemorySegment mine) {
        String b = broken;
        if (b != null) throw new RankFailedException(rank, x.where() + ": the world's connections are unusable after an earlier failure: " + b, null);
        if (mine.byteSize() > Integer.MAX_VALUE - 64)
            throw new RankFailedException(rank, x.where() + ": contributes " + mine.byteSize() + " bytes; the TCP transport moves at most 2 GiB at once", null);
        byte[] own = mine.toArray(ValueLayout.JAVA_BYTE);   // first: the output may be the input
        var out = new MemorySegment[x.members().size()];
        long deadline = System.nanoTime() + x.timeoutNanos();
        var sends = new ArrayList<Future<?>>();
        try {
            for (int peer : x.members()) if (peer != rank) sends.add(senders.submit(() -> send(x, links[peer], own)));
            for (int k = 0; k < out.length; k++) {
                int peer = x.members().get(k);
                out[k] = MemorySegment.ofArray(peer == rank ? own : receive(x, links[peer], own.length, deadline));
            }
            for (int i = 0; i < sends.size(); i++) awaitSend(x, sends.get(i), deadline);
            return out;
        } catch (RuntimeException e) {
            if (sent(sends, deadline)) inExchange = false;   // nothing writes to the links any more: the abort may say goodbye
            abort(e.getMessage());
            throw e;
        }
    }

    /**
     * After a failed exchange, before its sockets close: waits (until the exchange's deadline) for this rank's frames to
     * be out, and whether all went out. A peer then reads this rank's frame, and with it the cause (different shapes,
     * steps), whichever of the two saw it first; closing at once would lose a frame whose sender thread had not yet run,
     * and tell the peer only that this rank "closed its connection". A peer that reads no more makes the write fail.
     */
    private static boolean sent(List<Future<?>> sends, long deadline) {
        boolean all = true;
        for (Future<?> f : sends) {
            try {
                f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return false;
            } catch (ExecutionException | TimeoutException | java.util.concurrent.CancellationException e) {
                all = false;
            }
        }
        return all;
    }

    /** Tests only: holds each frame this rank sends for {@code d} first, as a sender thread a loaded machine runs late. */
    void delaySends(Duration d) { sendDelayNanos = d.toNanos(); }

    /** One frame: the link's sequence number, the step, the byte count, the bytes. */
    private Void send(Exchange x, Link l, byte[] bytes) {
        try {
            if (sendDelayNanos > 0) java.util.concurrent.locks.LockSupport.parkNanos(sendDelayNanos);
            l.out.writeLong(++l.sent);
            l.out.writeInt(x.step());
            l.out.writeLong(bytes.length);
            l.out.write(bytes);
            l.out.flush();
            return null;
        } catch (IOException e) {
            throw lost(x, l.peer, e);
        }
    }

    private byte[] receive(Exchange x, Link l, int expected, long deadline) {
        try {
            l.socket.setSoTimeout(timeLeftMs(deadline));
            long seq = l.in.readLong();
            int step = l.in.readInt();
            long bytes = l.in.readLong();
            if (seq == GOODBYE) {
                byte[] why = l.in.readNBytes((int) Math.min(Math.max(0, bytes), MAX_REASON));
                throw new RankFailedException(l.peer, x.where() + ": rank " + l.peer + " stopped: " + new String(why, StandardCharsets.UTF_8), null);
            }
            if (seq != ++l.received || step != x.step())
                throw new RankFailedException(l.peer, x.where() + ": rank " + l.peer + " sent its exchange " + seq + " of step " + step
                        + " instead; the ranks run different plans, or one skipped a call", null);
            if (bytes != expected)
                throw new RankFailedException(l.peer, x.where() + ": rank " + l.peer + " contributes " + bytes + " bytes and this rank " + expected
                        + "; every rank must call with the same shapes", null);
            var data = new byte[expected];
            l.in.readFully(data);
            return data;
        } catch (SocketTimeoutException e) {
            throw new RankFailedException(l.peer, x.where() + " timed out after " + TimeUnit.NANOSECONDS.toMillis(x.timeoutNanos())
                    + " ms waiting for rank " + l.peer, e);
        } catch (IOException e) {
            throw lost(x, l.peer, e);
        }
    }

    private void awaitSend(Exchange x, Future<?> f, long deadline) {
        try {
            f.get(Math.max(1, deadline - System.nanoTime()), TimeUnit.NANOSECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RankFailedException(rank, x.where() + " was interrupted while sending", e);
        } catch (TimeoutException e) {
            throw new RankFailedException(rank, x.where() + " timed out after " + TimeUnit.NANOSECONDS.toMillis(x.timeoutNanos())
                    + " ms sending to a peer that does not read", e);
        } catch (ExecutionException e) {
            throw e.getCause() instanceof RankFailedException failed ? failed : new RankFailedException(rank, x.where() + ": " + e.getCause(), e.getCause());
        }
    }

    /** A connection that ended: this rank's own abort, or the peer's end. */
    private RankFailedException lost(Exchange x, int peer, IOException e) {
        String b = broken;
        if (b != null) return new RankFailedException(rank, x.where() + " stopped: " + b, e);
        return new RankFailedException(peer, x.where() + ": rank " + peer + " closed its connection"
                + (e instanceof EOFException ? "" : " (" + e.getMessage() + ")") + ": its call failed, its session closed or its process ended", e);
    }

    /**
     * Closes every socket: this rank's waits end at once, and every peer reading from it sees the connection end. Where
     * no exchange is in flight (nothing else writes to the links), each peer is first told why, in a goodbye frame.
     */
    @Override public synchronized void abort(String why) {
        if (broken != null) return;
        broken = why == null ? "aborted" : why;
        if (!inExchange && !closed) sayGoodbye(broken);
        for (Link l : links) if (l != null) l.close();
        senders.shutdownNow();
    }

    /** A goodbye frame to every peer with the reason, given at most {@value #GOODBYE_MS} ms in all (a peer may not read). */
    private void sayGoodbye(String why) {
        byte[] text = why.getBytes(StandardCharsets.UTF_8);
        byte[] reason = java.util.Arrays.copyOf(text, Math.min(text.length, MAX_REASON));
        var said = new ArrayList<Future<?>>();
        for (Link l : links)
            if (l != null) said.add(senders.submit(() -> {
                l.out.writeLong(GOODBYE);
                l.out.writeInt(-1);
                l.out.writeLong(reason.length);
                l.out.write(reason);
                l.out.flush();
                return null;
            }));
        long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(GOODBYE_MS);
        for (Future<?> f : said) {
            try {
                f.get(Math.max(1, until - System.nanoTime()), TimeUnit.NANOSECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return;
            } catch (ExecutionException | TimeoutException e) {
                // the peer is gone or does not read: it sees the connection end instead
            }
        }
    }

    @Override public synchronized void close() {
        if (closed) return;
        abort("its session was closed");
        closed = true;
    }
}
