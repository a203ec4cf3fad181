package dev.gatun.runtime.distributed;

import dev.gatun.runtime.GatunRuntimeException;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.TreeSet;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The rendezvous server: a key-value store with blocking gets, atomic counters, barriers and all-gathers among
 * {@code worldSize} ranks, over TCP (loopback unless told otherwise).
 *
 * <p>Every connection must prove it knows the shared secret (HMAC-SHA256 challenge-response, see {@code Wire});
 * a connection that does not is rejected, closed and logged ({@code System.Logger} "dev.gatun.runtime.distributed",
 * level WARNING; the first {@value #LOGGED_REJECTIONS} rejections one line each, then one line at every power of
 * ten, so a flood cannot flood the log). Each rank may hold one connection at a time.
 *
 * <p>Whoever reaches the store's address can open connections to it, so what an unauthenticated connection may cost
 * is bounded ({@link RendezvousLimits}): it must prove itself within the handshake deadline in all (a client
 * trickling a byte every second is cut off), and only so many may wait at once, per peer address and in total; a
 * newcomer beyond a bound pushes out an older one ({@code HandshakeGate}), so idle connections cannot lock ranks
 * out. A rank sends a ticket (a MAC over its own nonce) with its first bytes; the accept loop reads it when it
 * has arrived already, without waiting, and a good ticket skips the bounds altogether. The accept loop never waits
 * on a client. After the handshake, a frame's length prefix is only a claim: memory follows the bytes that arrive.
 *
 * <p>Waits are kept on the server, so their timeout messages can name the ranks that never arrived. When a rank's
 * connection drops (its process died) or it closes its client, every barrier or all-gather still waiting for that
 * rank fails at once with a {@link RankLeftException} ("rank 1 disconnected") instead of running into its timeout.
 *
 * <p>Who hosts it: {@link Launcher} (gatun-run) hosts the store in its own JVM and tells the ranks
 * {@code GATUN_RENDEZVOUS_SERVER=launcher}; ranks started by hand host it in rank 0 (see
 * {@link Rendezvous#fromEnvironment()}); {@link LocalWorld} hosts one in-process.
 */
public final class RendezvousStore implements AutoCloseable {
    private static final System.Logger LOG = System.getLogger("dev.gatun.runtime.distributed");
    private static final SecureRandom RANDOM = new SecureRandom();

    private enum RankState { NEVER, CONNECTED, CLOSED, LOST }

    private final ServerSocket server;
    private final int worldSize;
    private final byte[] secret;
    private final InetSocketAddress address;
    private final ScheduledExecutorService timer;
    private final Thread acceptor;
    private final AtomicInteger rejected = new AtomicInteger();

    static final int LOGGED_REJECTIONS = 10;
    /** Ticket nonces remembered, so a replayed ticket gets no place outside the bounds (ranks send one a connection). */
    static final int REMEMBERED_TICKETS = 4096;
    private final RendezvousLimits limits;
    private final HandshakeGate<Socket> gate;
    private final Map<String, Boolean> ticketsSeen = new java.util.LinkedHashMap<>(16, 0.75f, false) {
        @Override protected boolean removeEldestEntry(Map.Entry<String, Boolean> e) { return size() > REMEMBERED_TICKETS; }
    };

    // all below guarded by this
    private final RankState[] state;
    private final Connection[] connections;
    private final Map<String, byte[]> values = new HashMap<>();
    private final Map<String, List<GetWaiter>> getWaiters = new HashMap<>();
    private final Map<String, int[]> rounds = new HashMap<>();
    private final Map<String, Collective> collectives = new HashMap<>();
    private final List<Connection> all = new ArrayList<>();
    private boolean closed;
    private volatile boolean logDisconnects = true;

    private RendezvousStore(ServerSocket server, int worldSize, byte[] secret, RendezvousLimits limits) {
        this.server = server;
        this.limits = limits;
        this.gate = new HandshakeGate<>(limits.maxPendingPerPeer(), limits.maxPending());
        this.worldSize = worldSize;
        this.secret = secret.clone();
        this.address = new InetSocketAddress(server.getInetAddress(), server.getLocalPort());
        this.state = new RankState[worldSize];
        Arrays.fill(state, RankState.NEVER);
        this.connections = new Connection[worldSize];
        this.timer = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "gatun-rendezvous-timer");
            t.setDaemon(true);
            return t;
        });
        this.acceptor = Thread.ofPlatform().daemon().name("gatun-rendezvous-accept").unstarted(this::acceptLoop);
    }

    /** Starts a store for {@code worldSize} ranks on 127.0.0.1 at a free port ({@link #address()} tells which). */
    public static RendezvousStore start(int worldSize, byte[] secret) {
        return start(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), worldSize, secret);
    }

    /** Starts a store for {@code worldSize} ranks listening at {@code bind} (port 0: any free port), with the default limits. */
    public static RendezvousStore start(InetSocketAddress bind, int worldSize, byte[] secret) {
        return start(bind, worldSize, secret, RendezvousLimits.DEFAULT);
    }

    /** Starts a store for {@code worldSize} ranks listening at {@code bind}, with {@code limits} on unauthenticated connections. */
    public static RendezvousStore start(InetSocketAddress bind, int worldSize, byte[] secret, RendezvousLimits limits) {
        Objects.requireNonNull(bind, "bind");
        Objects.requireNonNull(secret, "secret");
        Objects.requireNonNull(limits, "limits");
        if (worldSize < 1) throw new GatunRuntimeException("world size must be at least 1, not " + worldSize);
        if (secret.length == 0) throw new GatunRuntimeException("the rendezvous secret must not be empty");
        ServerSocket ss;
        try {
            ss = new ServerSocket();
            ss.setReuseAddress(true);
            ss.bind(bind, limits.backlog());
        } catch (IOException e) {
            throw new RendezvousException("cannot listen for rendezvous connections at " + Wire.hostPort(bind) + ": " + e.getMessage(), e);
        }
        var store = new RendezvousStore(ss, worldSize, secret, limits);
        store.acceptor.start();
        return store;
    }

    /** The address ranks connect to. */
    public InetSocketAddress address() { return address; }

    /** The address as {@code host:port}, the form of {@code GATUN_RENDEZVOUS}. */
    public String hostPort() { return Wire.hostPort(address); }

    public int worldSize() { return worldSize; }

    /** How many connections were turned away (bad secret, bad rank or world size, duplicate rank, not a rank, pushed out, too slow). */
    public int rejectedConnections() { return rejected.get(); }

    /** The limits on unauthenticated connections this store was started with. */
    public RendezvousLimits limits() { return limits; }

    /** Unauthenticated connections holding a place now (for tests). */
    int pendingHandshakes() { return gate.held(); }

    /** The ranks connected now. */
    public synchronized List<Integer> connectedRanks() {
        List<Integer> r = new ArrayList<>();
        for (int i = 0; i < worldSize; i++) if (state[i] == RankState.CONNECTED) r.add(i);
        return r;
    }

    /** Waits until no rank is connected (all closed or gone); false if some still are after {@code timeout}. */
    public synchronized boolean awaitNoConnections(Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (!connectedRanks().isEmpty()) {
            long left = deadline - System.nanoTime();
            if (left <= 0) return false;
            TimeUnit.NANOSECONDS.timedWait(this, left);
        }
        return true;
    }

    /** Stops listening and drops every connection (pending waits of clients fail). Idempotent. */
    @Override
    public void close() {
        List<Connection> conns;
        synchronized (this) {
            if (closed) return;
            closed = true;
            conns = new ArrayList<>(all);
            all.clear();
            notifyAll();
        }
        try {
            server.close();
        } catch (IOException ignored) {
            // closing anyway
        }
        for (Connection c : conns) c.close();
        timer.shutdownNow();
    }

    public synchronized boolean isClosed() { return closed; }

    /** Whether to log ranks whose connection drops (the launcher reports exits itself). */
    void logDisconnects(boolean on) { logDisconnects = on; }

    // ---------------------------------------------------------------- connections

    private void acceptLoop() {
        while (true) {
            Socket s;
            try {
                s = server.accept();
            } catch (IOException e) {
                if (!isClosed()) LOG.log(System.Logger.Level.ERROR, "rendezvous store at " + hostPort() + " stopped accepting: " + e);
                return;
            }
            try {
                admit(s);
            } catch (IOException | RuntimeException e) {
                logRejection("dropped a connection from " + s.getRemoteSocketAddress() + " as it came: " + e);
                closeQuietly(s);
            }
        }
    }

    /**
     * Sorts a new connection without waiting on it: a client hello that arrived with the connection is read at once;
     * a good ticket goes straight to its handshake, bad magic is closed, and anything else takes a place in the gate,
     * pushing out an older one where a bound is reached.
     */
    private void admit(Socket s) throws IOException {
        Wire.ClientHello early = arrivedHello(s);
        if (early != null && early.magic() != Wire.MAGIC) {
            logRejection("closed a connection from " + s.getRemoteSocketAddress() + ": not a Gatun rendezvous client (bad magic)");
            closeQuietly(s);
            return;
        }
        HandshakeGate.Place<Socket> place = null;
        if (early == null || !freshTicket(early)) {
            var admission = gate.admit(s.getInetAddress(), s);
            for (var out : admission.pushedOut()) closeQuietly(out.connection); // its handshake thread counts it
            place = admission.place();
        }
        var p = place;
        Thread.ofVirtual().name("gatun-rendezvous-conn").start(() -> serve(s, early, p));
    }

    /** The client's hello if all of it has arrived already (read without blocking), else null. */
    private static Wire.ClientHello arrivedHello(Socket s) throws IOException {
        var in = s.getInputStream();
        if (in.available() < Wire.CLIENT_HELLO_BYTES) return null;
        s.setSoTimeout(100); // a guard only: the bytes are there
        return Wire.ClientHello.read(new DataInputStream(new ByteArrayInputStream(in.readNBytes(Wire.CLIENT_HELLO_BYTES))));
    }

    /** Whether the hello's ticket is good and its nonce not seen before (a replayed ticket counts as none). */
    private boolean freshTicket(Wire.ClientHello hello) {
        if (!hello.ticketValid(secret)) return false;
        synchronized (ticketsSeen) {
            return ticketsSeen.putIfAbsent(java.util.HexFormat.of().formatHex(hello.nonce()), Boolean.TRUE) == null;
        }
    }

    private void serve(Socket s, Wire.ClientHello early, HandshakeGate.Place<Socket> place) {
        Connection conn = null;
        String dropped = null;
        Duration deadline = limits.handshakeDeadline();
        var cutOff = timer.schedule(() -> closeQuietly(s), deadline.toMillis(), TimeUnit.MILLISECONDS);
        try {
            conn = handshake(s, early, place, cutOff);
        } catch (IOException | RuntimeException e) {
            dropped = place != null && gate.pushedOut(place)
                    ? "pushed out by newer connections (at most " + limits.maxPendingPerPeer() + " from one peer and "
                    + limits.maxPending() + " in all may be unauthenticated at once)"
                    : cutOff.isDone() && !cutOff.isCancelled() ? "not finished within " + Wire.human(deadline)
                    : e.getMessage() != null ? e.getMessage() : e.getClass().getSimpleName();
        } finally {
            cutOff.cancel(false);
            if (place != null) gate.release(place);
        }
        if (dropped != null) {
            logRejection("dropped a connection from " + s.getRemoteSocketAddress() + " during the handshake: " + dropped);
            closeQuietly(s);
            return;
        }
        if (conn == null) {
            closeQuietly(s);
            return;
        }
        boolean clean = false;
        try {
            while (true) {
                byte[] frame = Wire.readFrame(conn.in);
                if (frame == null) break;
                if (frame.length > 0 && frame[0] == Wire.OP_CLOSE) {
                    clean = true;
                    break;
                }
                handle(conn, frame);
            }
        } catch (IOException | RuntimeException e) {
            if (!isClosed() && !conn.closed) LOG.log(System.Logger.Level.DEBUG, "rank " + conn.rank + ": " + e);
        } finally {
            left(conn, clean);
            conn.close();
        }
    }

    /**
     * Returns the accepted connection, or null after sending a rejection. A connection that holds a place in the
     * gate gives it back as soon as its ticket is good and fresh: from then on only the deadline bounds it. Once
     * the proof is good, the deadline ({@code cutOff}) is called off before the rank is registered.
     */
    private Connection handshake(Socket s, Wire.ClientHello early, HandshakeGate.Place<Socket> place, Future<?> cutOff) throws IOException {
        s.setTcpNoDelay(true);
        s.setSoTimeout((int) Math.min(Integer.MAX_VALUE, limits.handshakeDeadline().toMillis()));
        var in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
        var out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
        byte[] serverNonce = new byte[Wire.NONCE_BYTES];
        RANDOM.nextBytes(serverNonce);
        out.writeInt(Wire.MAGIC);
        out.writeInt(Wire.VERSION);
        out.write(serverNonce);
        out.flush();
        Wire.ClientHello hello = early != null ? early : Wire.ClientHello.read(in);
        if (hello.magic() != Wire.MAGIC) throw new IOException("not a Gatun rendezvous client (bad magic)");
        String from = String.valueOf(s.getRemoteSocketAddress());
        int rank = hello.rank(), world = hello.worldSize();
        if (hello.version() != Wire.VERSION)
            return reject(s, out, from, rank, "protocol version " + hello.version() + ", the store speaks " + Wire.VERSION);
        if (place != null && freshTicket(hello)) gate.release(place);
        byte[] proof = new byte[Wire.MAC_BYTES];
        in.readFully(proof);
        if (!Wire.macEquals(proof, Wire.clientMac(secret, serverNonce, hello.nonce(), rank, world)))
            return reject(s, out, from, rank, "authentication failed: the client's GATUN_SECRET differs from the store's");
        if (world != worldSize) return reject(s, out, from, rank, "world size " + world + " differs from the store's " + worldSize);
        if (rank < 0 || rank >= worldSize) return reject(s, out, from, rank, "rank " + rank + " is outside 0.." + (worldSize - 1));
        // from here nothing else may close the socket: a rank registered on a socket closed under it would stay "connected"
        if (place != null) gate.release(place);
        if (place != null && gate.pushedOut(place)) throw new IOException("pushed out");
        if (!cutOff.cancel(false)) throw new IOException("past the deadline");
        Connection conn = new Connection(s, in, out, rank);
        RankState before;
        synchronized (this) {
            if (closed) return reject(s, out, from, rank, "the store is closed");
            if (state[rank] == RankState.CONNECTED) return reject(s, out, from, rank, "rank " + rank + " is already connected");
            before = state[rank];
            state[rank] = RankState.CONNECTED;
            connections[rank] = conn;
            all.add(conn);
            notifyAll();
        }
        try {
            out.writeByte(Wire.ACCEPT);
            out.write(Wire.serverMac(secret, hello.nonce(), serverNonce));
            out.flush();
            s.setSoTimeout(0);
        } catch (IOException e) { // the rank never heard it was accepted: as if it had not come (it tries again)
            synchronized (this) {
                all.remove(conn);
                if (connections[rank] == conn) {
                    connections[rank] = null;
                    state[rank] = before;
                }
                notifyAll();
            }
            throw e;
        }
        conn.startWriter();
        return conn;
    }

    /** Counts a rejection; logs the first few, then one line at each power of ten. */
    private void logRejection(String what) {
        int n = rejected.incrementAndGet();
        if (n <= LOGGED_REJECTIONS) LOG.log(System.Logger.Level.WARNING, "rendezvous store at " + hostPort() + " " + what);
        if (n == LOGGED_REJECTIONS) LOG.log(System.Logger.Level.WARNING, "rendezvous store at " + hostPort() + ": " + n
                + " connections rejected; further rejections are counted (rejectedConnections()) and logged at every power of ten");
        else if (n > LOGGED_REJECTIONS && Long.toString(n).matches("10+"))
            LOG.log(System.Logger.Level.WARNING, "rendezvous store at " + hostPort() + ": " + n + " connections rejected so far; the last: " + what);
    }

    private Connection reject(Socket s, DataOutputStream out, String from, int rank, String reason) {
        logRejection("rejected a connection from " + from + " (claiming rank " + rank + "): " + reason);
        try {
            out.writeByte(Wire.REJECT);
            Wire.writeString(out, reason);
            out.flush();
        } catch (IOException ignored) {
            // the peer is gone already
        }
        closeQuietly(s);
        return null;
    }

    private void left(Connection conn, boolean clean) {
        List<Runnable> replies = new ArrayList<>();
        synchronized (this) {
            all.remove(conn);
            if (connections[conn.rank] != conn) return;
            connections[conn.rank] = null;
            if (closed) return;
            state[conn.rank] = clean ? RankState.CLOSED : RankState.LOST;
            notifyAll();
            // this connection's own waits end with it
            for (var it = getWaiters.values().iterator(); it.hasNext(); ) {
                var list = it.next();
                list.removeIf(w -> w.conn == conn && w.cancel());
                if (list.isEmpty()) it.remove();
            }
            for (Collective c : collectives.values()) c.waiters.removeIf(w -> w.conn == conn && w.cancel());
            // and so do the collectives that still wait for this rank
            for (Iterator<Collective> it = collectives.values().iterator(); it.hasNext(); ) {
                Collective c = it.next();
                if (c.arrived[conn.rank]) continue;
                it.remove();
                failLeft(c, replies);
            }
        }
        if (!clean && logDisconnects && !isClosed()) LOG.log(System.Logger.Level.INFO, "rank " + conn.rank + " disconnected from the rendezvous store at " + hostPort());
        replies.forEach(Runnable::run);
    }

    // ---------------------------------------------------------------- requests

    private void handle(Connection conn, byte[] frame) throws IOException {
        var in = new DataInputStream(new ByteArrayInputStream(frame));
        byte op = in.readByte();
        long id = in.readLong();
        List<Runnable> replies = new ArrayList<>();
        switch (op) {
            case Wire.OP_SET -> {
                String key = Wire.readString(in, Wire.MAX_FRAME);
                byte[] value = Wire.readBytes(in, Wire.MAX_FRAME);
                synchronized (this) {
                    put(key, value, replies);
                }
                conn.ok(id, List.of());
            }
            case Wire.OP_ADD -> {
                String key = Wire.readString(in, Wire.MAX_FRAME);
                long delta = in.readLong();
                long now;
                synchronized (this) {
                    byte[] old = values.get(key);
                    if (old != null && old.length != 8) {
                        conn.error(id, Wire.ST_ERROR, "rendezvous add '" + key + "': the key holds " + old.length
                                + " bytes set by set(), not a counter", List.of(), List.of());
                        return;
                    }
                    now = (old == null ? 0 : Wire.longOf(old)) + delta;
                    put(key, Wire.bytesOf(now), replies);
                }
                conn.ok(id, List.of(Wire.bytesOf(now)));
            }
            case Wire.OP_GET -> {
                String key = Wire.readString(in, Wire.MAX_FRAME);
                long timeoutMs = in.readLong();
                synchronized (this) {
                    byte[] v = values.get(key);
                    if (v != null) {
                        conn.ok(id, List.of(v));
                    } else if (timeoutMs <= 0) {
                        getTimeout(conn, id, key, timeoutMs);
                    } else {
                        var w = new GetWaiter(conn, id, key);
                        getWaiters.computeIfAbsent(key, k -> new ArrayList<>()).add(w);
                        w.timeout = schedule(() -> {
                            synchronized (this) {
                                var list = getWaiters.get(key);
                                if (list == null || !list.remove(w)) return;
                                if (list.isEmpty()) getWaiters.remove(key);
                                getTimeout(conn, id, key, timeoutMs);
                            }
                        }, timeoutMs);
                    }
                }
            }
            case Wire.OP_COLLECT -> {
                byte kind = in.readByte();
                String name = Wire.readString(in, Wire.MAX_FRAME);
                byte[] payload = Wire.readBytes(in, Wire.MAX_FRAME);
                long timeoutMs = in.readLong();
                synchronized (this) {
                    collect(conn, id, kind, name, payload, timeoutMs, replies);
                }
            }
            default -> conn.error(id, Wire.ST_ERROR, "unknown rendezvous request " + op, List.of(), List.of());
        }
        replies.forEach(Runnable::run);
    }

    private void put(String key, byte[] value, List<Runnable> replies) {
        values.put(key, value);
        var waiting = getWaiters.remove(key);
        if (waiting != null) for (GetWaiter w : waiting) if (w.cancel()) replies.add(() -> w.conn.ok(w.id, List.of(value)));
    }

    private void getTimeout(Connection conn, long id, String key, long timeoutMs) {
        String msg = "rendezvous get '" + key + "' timed out after " + Wire.human(Duration.ofMillis(Math.max(0, timeoutMs)))
                + ": no rank set it" + leftNote();
        conn.error(id, Wire.ST_TIMEOUT, msg, List.of(), List.of());
    }

    private String leftNote() {
        List<Integer> lost = new ArrayList<>(), closedRanks = new ArrayList<>(), never = new ArrayList<>();
        for (int r = 0; r < worldSize; r++) {
            switch (state[r]) {
                case LOST -> lost.add(r);
                case CLOSED -> closedRanks.add(r);
                case NEVER -> never.add(r);
                default -> { }
            }
        }
        StringBuilder sb = new StringBuilder();
        if (!lost.isEmpty()) sb.append("; disconnected: ").append(lost);
        if (!closedRanks.isEmpty()) sb.append("; closed: ").append(closedRanks);
        if (!never.isEmpty()) sb.append("; never connected: ").append(never);
        return sb.toString();
    }

    private void collect(Connection conn, long id, byte kind, String name, byte[] payload, long timeoutMs, List<Runnable> replies) {
        String roundKey = kind + ":" + name;
        int round = rounds.computeIfAbsent(roundKey, k -> new int[worldSize])[conn.rank]++;
        String key = roundKey + "#" + round;
        Collective c = collectives.computeIfAbsent(key, k -> new Collective(kind, name, round));
        c.payloads[conn.rank] = payload;
        c.arrived[conn.rank] = true;
        var w = new CollectWaiter(conn, id);
        c.waiters.add(w);
        if (c.complete()) {
            collectives.remove(key);
            List<byte[]> result = List.of(c.payloads);
            for (CollectWaiter x : c.waiters) if (x.cancel()) replies.add(() -> x.conn.ok(x.id, result));
            c.waiters.clear();
            return;
        }
        for (int r = 0; r < worldSize; r++) {
            if (!c.arrived[r] && (state[r] == RankState.LOST || state[r] == RankState.CLOSED)) {
                collectives.remove(key);
                failLeft(c, replies);
                return;
            }
        }
        if (timeoutMs <= 0) {
            c.waiters.remove(w);
            collectTimeout(c, w, timeoutMs);
            return;
        }
        w.timeout = schedule(() -> {
            synchronized (this) {
                if (!c.waiters.remove(w)) return;
                collectTimeout(c, w, timeoutMs);
            }
        }, timeoutMs);
    }

    private void collectTimeout(Collective c, CollectWaiter w, long timeoutMs) {
        List<Integer> missing = c.missing();
        List<Integer> never = new ArrayList<>();
        for (int r : missing) if (state[r] == RankState.NEVER) never.add(r);
        String msg = "rendezvous " + c.describe() + " timed out after " + Wire.human(Duration.ofMillis(Math.max(0, timeoutMs)))
                + ": " + ranksNeverArrived(missing) + (never.isEmpty() ? "" : " (never connected: " + never + ")");
        w.conn.error(w.id, Wire.ST_TIMEOUT, msg, missing, List.of());
    }

    private void failLeft(Collective c, List<Runnable> replies) {
        List<Integer> missing = c.missing();
        List<Integer> gone = new ArrayList<>();
        StringBuilder why = new StringBuilder();
        for (int r : missing) {
            if (state[r] == RankState.LOST || state[r] == RankState.CLOSED) {
                gone.add(r);
                if (!why.isEmpty()) why.append(", ");
                why.append("rank ").append(r).append(state[r] == RankState.LOST ? " disconnected" : " closed its rendezvous client");
            }
        }
        String msg = "rendezvous " + c.describe() + " cannot complete: " + why + " before arriving; " + ranksNeverArrived(missing);
        for (CollectWaiter x : c.waiters) if (x.cancel()) replies.add(() -> x.conn.error(x.id, Wire.ST_PEER_LOST, msg, missing, gone));
        c.waiters.clear();
    }

    private static String ranksNeverArrived(List<Integer> missing) {
        return missing.size() == 1 ? "rank " + missing.get(0) + " never arrived" : "ranks " + missing + " never arrived";
    }

    private ScheduledFuture<?> schedule(Runnable r, long ms) {
        try {
            return timer.schedule(r, ms, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            return null; // closing
        }
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException ignored) {
            // nothing to do
        }
    }

    // ---------------------------------------------------------------- bookkeeping

    private abstract static class Waiter {
        final Connection conn;
        final long id;
        ScheduledFuture<?> timeout;
        private boolean done;

        Waiter(Connection conn, long id) { this.conn = conn; this.id = id; }

        /** Marks the waiter answered (or dropped); false if it already was. */
        boolean cancel() {
            if (done) return false;
            done = true;
            if (timeout != null) timeout.cancel(false);
            return true;
        }
    }

    private static final class GetWaiter extends Waiter {
        final String key;

        GetWaiter(Connection conn, long id, String key) { super(conn, id); this.key = key; }
    }

    private static final class CollectWaiter extends Waiter {
        CollectWaiter(Connection conn, long id) { super(conn, id); }
    }

    private final class Collective {
        final byte kind;
        final String name;
        final int round;
        final byte[][] payloads = new byte[worldSize][];
        final boolean[] arrived = new boolean[worldSize];
        final List<CollectWaiter> waiters = new ArrayList<>();

        Collective(byte kind, String name, int round) { this.kind = kind; this.name = name; this.round = round; }

        boolean complete() {
            for (boolean a : arrived) if (!a) return false;
            return true;
        }

        List<Integer> missing() {
            var m = new TreeSet<Integer>();
            for (int r = 0; r < worldSize; r++) if (!arrived[r]) m.add(r);
            return List.copyOf(m);
        }

        String describe() {
            return (kind == Wire.KIND_BARRIER ? "barrier" : "allGather") + " '" + name + "'" + (round == 0 ? "" : " (round " + (round + 1) + ")");
        }
    }

    private static final class Connection {
        final Socket socket;
        final DataInputStream in;
        final DataOutputStream out;
        final int rank;
        final LinkedBlockingQueue<byte[]> outbox = new LinkedBlockingQueue<>();
        volatile boolean closed;
        private static final byte[] POISON = new byte[0];

        Connection(Socket socket, DataInputStream in, DataOutputStream out, int rank) {
            this.socket = socket;
            this.in = in;
            this.out = out;
            this.rank = rank;
        }

        void startWriter() {
            Thread.ofVirtual().name("gatun-rendezvous-writer-" + rank).start(() -> {
                try {
                    while (true) {
                        byte[] f = outbox.take();
                        if (f == POISON) return;
                        Wire.writeFrame(out, f, outbox.isEmpty());
                    }
                } catch (IOException | InterruptedException e) {
                    close();
                }
            });
        }

        void ok(long id, List<byte[]> values) {
            send(Wire.reply(id, Wire.ST_OK, body -> {
                body.writeInt(values.size());
                for (byte[] v : values) Wire.writeBytes(body, v);
            }));
        }

        void error(long id, byte status, String message, List<Integer> missing, List<Integer> gone) {
            send(Wire.reply(id, status, body -> {
                Wire.writeString(body, message);
                Wire.writeInts(body, missing);
                Wire.writeInts(body, gone);
            }));
        }

        private void send(byte[] frame) {
            if (!closed) outbox.add(frame);
        }

        void close() {
            if (closed) return;
            closed = true;
            outbox.add(POISON);
            try {
                socket.close();
            } catch (IOException ignored) {
                // closing anyway
            }
        }
    }
}
