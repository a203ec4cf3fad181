package dev.gatun.runtime.distributed;

import dev.gatun.runtime.GatunRuntimeException;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.charset.StandardCharsets;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One rank's client of a {@link RendezvousStore}: a key-value store with blocking gets, counters, barriers among all
 * ranks and all-gathers, used to exchange IPC handles, NCCL ids and plan fingerprints.
 *
 * <p>Thread-safe: several threads of one rank may wait at once (requests are multiplexed on one connection).
 * Every wait has a timeout; its message names the ranks that never arrived. A barrier or all-gather that waits for a
 * rank whose process died fails as soon as the store notices the dropped connection ({@link RankLeftException}).
 *
 * <p>Barriers and all-gathers may be repeated under the same name: the n-th call of each rank meets the n-th call
 * of the others. Their payloads are not visible to {@link #get}. Counters ({@link #add}) live in the key-value space
 * as 8-byte big-endian values.
 */
public final class Rendezvous implements AutoCloseable {
    /** Environment variables {@link #fromEnvironment()} reads. */
    public static final String RANK = "RANK", LOCAL_RANK = "LOCAL_RANK", WORLD_SIZE = "WORLD_SIZE",
            GATUN_RENDEZVOUS = "GATUN_RENDEZVOUS", GATUN_SECRET = "GATUN_SECRET",
            GATUN_RENDEZVOUS_SERVER = "GATUN_RENDEZVOUS_SERVER", GATUN_RENDEZVOUS_TIMEOUT = "GATUN_RENDEZVOUS_TIMEOUT";

    /** Default for waits without an explicit timeout and for connecting, unless GATUN_RENDEZVOUS_TIMEOUT says otherwise. */
    public static final Duration DEFAULT_TIMEOUT = Duration.ofMinutes(5);

    /** Extra time the client gives the store to answer after a wait's own timeout. */
    private static final long ANSWER_GRACE_MS = 10_000;
    private static final SecureRandom RANDOM = new SecureRandom();
    private static final System.Logger PROGRESS = System.getLogger("dev.gatun.runtime.distributed");
    /** How long one handshake attempt waits for each answer of the store before trying again. */
    private static final int HANDSHAKE_WAIT_MS = 10_000;
    /** Longest pause between two handshake attempts with a busy store (the first is 10 to 20 ms, then doubling). */
    private static final long MAX_BACKOFF_MS = 500;
    /** How often a long wait reports that it is still waiting. */
    private static final long PROGRESS_MS = 10_000;

    private final int rank;
    private final int localRank;
    private final int worldSize;
    private final InetSocketAddress address;
    private final Duration defaultTimeout;
    private final Socket socket;
    private final DataInputStream in;
    private final DataOutputStream out;
    private final Map<Long, CompletableFuture<Response>> pending = new ConcurrentHashMap<>();
    private final AtomicLong ids = new AtomicLong();
    private final AtomicBoolean closed = new AtomicBoolean();
    private volatile String broken;
    private volatile RendezvousStore hosted;
    /** The job's secret, kept for {@link #mac}: connections between ranks prove with it that they belong to the job. */
    private final byte[] secret;

    private record Response(byte status, List<byte[]> values, String message, List<Integer> missing, List<Integer> gone) {}

    private Rendezvous(int rank, int localRank, int worldSize, InetSocketAddress address, Duration defaultTimeout,
                       Socket socket, DataInputStream in, DataOutputStream out, byte[] secret) {
        this.secret = secret.clone();
        this.rank = rank;
        this.localRank = localRank;
        this.worldSize = worldSize;
        this.address = address;
        this.defaultTimeout = defaultTimeout;
        this.socket = socket;
        this.in = in;
        this.out = out;
    }

    /**
     * Connects rank {@code rank} of {@code worldSize} to the store at {@code address}, retrying while nobody listens
     * yet or the store closes the connection before answering (it is busy, for instance with a connection flood), for
     * at most {@code timeout}; {@code timeout} is also the default of waits without one. A store that rejects the rank
     * (another secret, world size or version) fails at once.
     */
    public static Rendezvous connect(InetSocketAddress address, int rank, int localRank, int worldSize, byte[] secret, Duration timeout) {
        Objects.requireNonNull(address, "address");
        Objects.requireNonNull(secret, "secret");
        Objects.requireNonNull(timeout, "timeout");
        if (worldSize < 1) throw new GatunRuntimeException("world size must be at least 1, not " + worldSize);
        if (rank < 0 || rank >= worldSize) throw new GatunRuntimeException("rank " + rank + " is outside 0.." + (worldSize - 1));
        if (localRank < 0) throw new GatunRuntimeException("local rank must not be negative, not " + localRank);
        String where = Wire.hostPort(address);
        long deadline = System.nanoTime() + timeout.toNanos();
        long backoffMs = 10;
        for (int attempt = 1; ; attempt++) {
            Socket s = open(address, rank, timeout, deadline);
            try {
                var r = handshake(s, address, rank, localRank, worldSize, secret, timeout, deadline);
                Thread.ofVirtual().name("gatun-rendezvous-reader-" + rank).start(r::readLoop);
                return r;
            } catch (StoreBusy busy) {
                closeQuietly(s);
                if (System.nanoTime() - deadline >= 0)
                    throw new RendezvousException("the rendezvous store at " + where + " closed the connection of rank " + rank
                            + " during the handshake " + attempt + (attempt == 1 ? " time" : " times") + " within " + Wire.human(timeout)
                            + " (last: " + busy.getMessage() + "); it is overloaded, or something floods it with connections", busy.getCause());
                if (Long.toString(attempt).matches("10+"))
                    PROGRESS.log(System.Logger.Level.INFO, "rank {0}: the rendezvous store at {1} closed {2} handshakes before answering"
                            + " (busy, or flooded with connections); still trying", rank, where, attempt);
                long jittered = backoffMs + java.util.concurrent.ThreadLocalRandom.current().nextLong(backoffMs);
                sleep(rank, where, Math.min(jittered, Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()))));
                backoffMs = Math.min(backoffMs * 2, MAX_BACKOFF_MS);
            } catch (RuntimeException e) {
                closeQuietly(s);
                throw e;
            }
        }
    }

    /** The store closed the connection, or did not answer in time, before its whole answer came: worth trying again. */
    private static final class StoreBusy extends Exception {
        StoreBusy(String message, IOException cause) { super(message, cause); }
    }

    /** A TCP connection to the store, retrying while nobody listens there, until {@code deadline}. */
    private static Socket open(InetSocketAddress address, int rank, Duration timeout, long deadline) {
        while (true) {
            Socket s = new Socket();
            try {
                long leftMs = Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()));
                s.connect(address, (int) Math.min(leftMs, 5_000));
                return s;
            } catch (IOException e) {
                closeQuietly(s);
                if (System.nanoTime() - deadline >= 0)
                    throw new RendezvousException("rank " + rank + " could not reach the rendezvous store at " + Wire.hostPort(address) + " within "
                            + Wire.human(timeout) + ": " + e.getMessage() + " (is the launcher or rank 0 running?)", e);
                sleep(rank, Wire.hostPort(address), 50);
            }
        }
    }

    private static void sleep(int rank, String where, long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException ie) {
            Thread.currentThread().interrupt();
            throw new RendezvousException("rank " + rank + " was interrupted while connecting to " + where, ie);
        }
    }

    /** One handshake on a fresh connection (see {@code Wire}); StoreBusy where the store closed it before answering. */
    private static Rendezvous handshake(Socket s, InetSocketAddress address, int rank, int localRank, int worldSize, byte[] secret,
                                        Duration timeout, long deadline) throws StoreBusy {
        String where = Wire.hostPort(address);
        DataInputStream in;
        DataOutputStream out;
        byte[] clientNonce = new byte[Wire.NONCE_BYTES];
        RANDOM.nextBytes(clientNonce);
        int answer;
        byte[] serverNonce = new byte[Wire.NONCE_BYTES];
        byte[] mac = new byte[Wire.MAC_BYTES];
        int waitMs = (int) Math.max(1, Math.min(TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()), HANDSHAKE_WAIT_MS));
        try {
            s.setTcpNoDelay(true);
            s.setSoTimeout(waitMs);
            in = new DataInputStream(new BufferedInputStream(s.getInputStream()));
            out = new DataOutputStream(new BufferedOutputStream(s.getOutputStream()));
            Wire.ClientHello.of(secret, clientNonce, rank, worldSize).write(out);
            out.flush();
            int magic = in.readInt();
            int version = in.readInt();
            if (magic != Wire.MAGIC) throw new RendezvousException("the server at " + where + " is not a Gatun rendezvous store");
            if (version != Wire.VERSION)
                throw new RendezvousException("the rendezvous store at " + where + " speaks protocol " + version + ", this client " + Wire.VERSION);
            in.readFully(serverNonce);
            out.write(Wire.clientMac(secret, serverNonce, clientNonce, rank, worldSize));
            out.flush();
            answer = in.readByte();
            if (answer == Wire.ACCEPT) in.readFully(mac);
        } catch (SocketTimeoutException e) {
            throw new StoreBusy("no answer within " + Wire.human(Duration.ofMillis(waitMs)), e);
        } catch (IOException e) {
            throw new StoreBusy(e instanceof EOFException ? "closed" : String.valueOf(e.getMessage()), e);
        }
        try {
            if (answer == Wire.REJECT)
                throw new RendezvousException("the rendezvous store at " + where + " rejected rank " + rank + ": " + Wire.readString(in, Wire.MAX_REASON));
            if (answer != Wire.ACCEPT) throw new RendezvousException("the rendezvous store at " + where + " sent a bad handshake answer");
            if (!Wire.macEquals(mac, Wire.serverMac(secret, clientNonce, serverNonce)))
                throw new RendezvousException("the server at " + where + " failed to prove it knows GATUN_SECRET; not talking to it");
            s.setSoTimeout(0);
            return new Rendezvous(rank, localRank, worldSize, address, timeout, s, in, out, secret);
        } catch (IOException e) {
            throw new RendezvousException("rank " + rank + ": handshake with the rendezvous store at " + where + " failed: " + e.getMessage(), e);
        }
    }

    /** {@link #fromEnvironment(Map)} of {@link System#getenv()}. */
    public static Rendezvous fromEnvironment() { return fromEnvironment(System.getenv()); }

    /**
     * Connects as the rank the environment describes ({@link LaunchEnvironment}: gatun-run's or torchrun's RANK,
     * LOCAL_RANK, WORLD_SIZE, Slurm's or Open MPI's own variables), at GATUN_RENDEZVOUS (host:port; else
     * MASTER_ADDR and MASTER_PORT + 1), with GATUN_SECRET (required; gatun-run sets it) and GATUN_RENDEZVOUS_TIMEOUT
     * (seconds, optional, default 300).
     *
     * <p>Unless GATUN_RENDEZVOUS_SERVER is {@code launcher} (or {@code external}), rank 0 hosts the store itself,
     * listening at GATUN_RENDEZVOUS; closing rank 0's client then waits (at most the default timeout) for the other
     * ranks to close theirs before stopping the store, whose limits on unauthenticated connections
     * {@link RendezvousLimits#fromEnvironment} reads. gatun-run hosts the store in the launcher instead.
     */
    public static Rendezvous fromEnvironment(Map<String, String> env) {
        LaunchEnvironment job = LaunchEnvironment.of(env);
        if (job == null) required(env, RANK, "this process's rank");
        int world = job.worldSize(), rank = job.rank(), localRank = job.localRank();
        String addr = job.address() != null ? job.address()
                : required(env, GATUN_RENDEZVOUS, "host:port of the rendezvous store, for example 127.0.0.1:29500; or MASTER_ADDR and MASTER_PORT");
        InetSocketAddress address = Wire.parseAddress(addr, env.containsKey(GATUN_RENDEZVOUS) ? GATUN_RENDEZVOUS : "MASTER_ADDR:MASTER_PORT+1");
        String secret = required(env, GATUN_SECRET, "the shared secret that authenticates rendezvous connections");
        Duration timeout = DEFAULT_TIMEOUT;
        String t = env.get(GATUN_RENDEZVOUS_TIMEOUT);
        if (t != null && !t.isBlank()) {
            double seconds = Numbers.decimal(t);
            if (!(seconds > 0)) throw new RendezvousException(GATUN_RENDEZVOUS_TIMEOUT + " must be a positive number of seconds, not '" + t + "'");
            timeout = Duration.ofMillis((long) Math.ceil(seconds * 1000));
        }
        String server = env.getOrDefault(GATUN_RENDEZVOUS_SERVER, "rank0").trim();
        boolean rank0Hosts = switch (server) {
            case "", "rank0" -> true;
            case "launcher", "external" -> false;
            default -> throw new RendezvousException(GATUN_RENDEZVOUS_SERVER + " must be rank0, launcher or external, not '" + server + "'");
        };
        byte[] key = secret.getBytes(StandardCharsets.UTF_8);
        RendezvousStore store = null;
        if (rank0Hosts && rank == 0) store = RendezvousStore.start(address, world, key, RendezvousLimits.fromEnvironment(env));
        try {
            Rendezvous r = connect(store == null ? address : store.address(), rank, localRank, world, key, timeout);
            r.hosted = store;
            return r;
        } catch (RuntimeException e) {
            if (store != null) store.close();
            throw e;
        }
    }

    private static String required(Map<String, String> env, String name, String what) {
        String v = env.get(name);
        if (v == null || v.isBlank())
            throw new RendezvousException("environment variable " + name + " is not set (" + what + "); " + LaunchEnvironment.HOW);
        return v.trim();
    }


    public int rank() { return rank; }

    public int localRank() { return localRank; }

    public int worldSize() { return worldSize; }

    /** The store's address. */
    public InetSocketAddress address() { return address; }

    /**
     * This host's address as the store sees it (the local end of this client's connection): where ranks on other
     * hosts can reach this one, as the store's address is where they reach the store.
     */
    public java.net.InetAddress localAddress() { return socket.getLocalAddress(); }

    /**
     * HMAC-SHA256 under the job's secret of {@code purpose} and {@code parts} (each length-prefixed), in a domain of its
     * own ("gatun-peer/"), so no such value is ever one of the store's handshake's: what lets a connection between two
     * ranks prove, in both directions, that each end knows the secret (the host backend's TCP transport).
     */
    public byte[] mac(String purpose, byte[]... parts) {
        Objects.requireNonNull(purpose, "purpose");
        var framed = new java.io.ByteArrayOutputStream();
        var o = new DataOutputStream(framed);
        try {
            o.writeUTF("gatun-peer/" + purpose);
            for (byte[] p : parts) {
                o.writeInt(p.length);
                o.write(p);
            }
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e); // a byte array stream does not fail
        }
        return Wire.hmac(secret, framed.toByteArray());
    }

    /** The timeout of waits that do not give one. */
    public Duration defaultTimeout() { return defaultTimeout; }

    public boolean isClosed() { return closed.get(); }

    /** Sets {@code key} (replacing any earlier value) and wakes every rank blocked in {@link #get} on it. */
    public void set(String key, byte[] value) {
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(value, "value");
        call("set '" + key + "'", Wire.OP_SET, defaultTimeout, o -> {
            Wire.writeString(o, key);
            Wire.writeBytes(o, value);
        });
    }

    /** The value of {@code key}, waiting until some rank sets it, at most {@code timeout}. */
    public byte[] get(String key, Duration timeout) {
        Objects.requireNonNull(key, "key");
        return call("get '" + key + "'", Wire.OP_GET, timeout, o -> {
            Wire.writeString(o, key);
            o.writeLong(timeout.toMillis());
        }).values().getFirst();
    }

    /** {@link #get(String, Duration)} with the default timeout. */
    public byte[] get(String key) { return get(key, defaultTimeout); }

    /** Atomically adds {@code delta} to the counter {@code key} (absent: 0) and returns the new value. */
    public long add(String key, long delta) {
        Objects.requireNonNull(key, "key");
        byte[] v = call("add '" + key + "'", Wire.OP_ADD, defaultTimeout, o -> {
            Wire.writeString(o, key);
            o.writeLong(delta);
        }).values().getFirst();
        return Wire.longOf(v);
    }

    /** Waits until every rank of the world reached the barrier {@code name} (its n-th call meets the others' n-th). */
    public void barrier(String name, Duration timeout) {
        collect(Wire.KIND_BARRIER, "barrier '" + name + "'", name, new byte[0], timeout);
    }

    /** {@link #barrier(String, Duration)} with the default timeout. */
    public void barrier(String name) { barrier(name, defaultTimeout); }

    /** Every rank contributes {@code mine}; returns all contributions in rank order (the n-th call meets the others' n-th). */
    public List<byte[]> allGather(String key, byte[] mine, Duration timeout) {
        Objects.requireNonNull(mine, "mine");
        return collect(Wire.KIND_GATHER, "allGather '" + key + "'", key, mine, timeout);
    }

    /** {@link #allGather(String, byte[], Duration)} with the default timeout. */
    public List<byte[]> allGather(String key, byte[] mine) { return allGather(key, mine, defaultTimeout); }

    private List<byte[]> collect(byte kind, String what, String name, byte[] payload, Duration timeout) {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(timeout, "timeout");
        return call(what, Wire.OP_COLLECT, timeout, o -> {
            o.writeByte(kind);
            Wire.writeString(o, name);
            Wire.writeBytes(o, payload);
            o.writeLong(timeout.toMillis());
        }).values();
    }

    /**
     * Closes the connection; waits of this client's other threads fail. Idempotent. If this rank hosts the store
     * (rank 0 without a launcher), waits first for the other ranks to close theirs (at most the default timeout).
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) return;
        try {
            byte[] bye = Wire.request(Wire.OP_CLOSE, ids.incrementAndGet(), o -> { });
            synchronized (out) {
                Wire.writeFrame(out, bye, true);
            }
        } catch (IOException ignored) {
            // the store is gone already
        }
        closeQuietly(socket);
        failPending("the rendezvous client of rank " + rank + " was closed");
        RendezvousStore store = hosted;
        if (store != null) {
            try {
                store.awaitNoConnections(defaultTimeout);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                store.close();
            }
        }
    }

    /** Drops the connection without saying goodbye, as a crashing process would (for tests). */
    void dropConnection() {
        if (!closed.compareAndSet(false, true)) return;
        closeQuietly(socket);
        failPending("the rendezvous client of rank " + rank + " dropped its connection");
    }

    @Override
    public String toString() {
        return "Rendezvous[rank " + rank + " of " + worldSize + ", local rank " + localRank + ", store " + Wire.hostPort(address) + "]";
    }

    // ---------------------------------------------------------------- plumbing

    private Response call(String what, byte op, Duration timeout, Wire.Body body) {
        Objects.requireNonNull(timeout, "timeout");
        if (closed.get()) throw new RendezvousException("rank " + rank + ": " + what + " on a closed rendezvous client");
        String b = broken;
        if (b != null) throw new RendezvousException("rank " + rank + ": " + what + " failed: " + b);
        long id = ids.incrementAndGet();
        var future = new CompletableFuture<Response>();
        pending.put(id, future);
        try {
            byte[] frame = Wire.request(op, id, body);
            synchronized (out) {
                Wire.writeFrame(out, frame, true);
            }
        } catch (IOException | java.io.UncheckedIOException e) {
            pending.remove(id);
            lost("cannot write to the rendezvous store at " + Wire.hostPort(address) + ": " + e.getMessage());
            throw new RendezvousException("rank " + rank + ": " + what + " failed: " + broken, e);
        }
        if (broken != null || closed.get()) failPending(closed.get() ? "the rendezvous client of rank " + rank + " was closed" : broken);
        Response r;
        try {
            long waitMs = Math.max(0, timeout.toMillis()) + ANSWER_GRACE_MS;
            long start = System.nanoTime();
            while (true) {
                long left = waitMs - TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                if (left <= 0) throw new TimeoutException();
                try {
                    r = future.get(Math.min(left, PROGRESS_MS), TimeUnit.MILLISECONDS);
                    break;
                } catch (TimeoutException still) {
                    // long waits (peers still compiling, or stuck) say so, so users see progress instead of silence
                    if (TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start) < waitMs)
                        PROGRESS.log(System.Logger.Level.INFO, "rank {0}: rendezvous {1} still waiting after {2} s",
                                rank, what, TimeUnit.NANOSECONDS.toSeconds(System.nanoTime() - start));
                }
            }
        } catch (TimeoutException e) {
            pending.remove(id);
            throw new RendezvousTimeoutException("rank " + rank + ": " + what + ": no answer from the rendezvous store at "
                    + Wire.hostPort(address) + " within " + Wire.human(timeout.plusMillis(ANSWER_GRACE_MS)), List.of());
        } catch (InterruptedException e) {
            pending.remove(id);
            Thread.currentThread().interrupt();
            throw new RendezvousException("rank " + rank + " was interrupted during rendezvous " + what, e);
        } catch (ExecutionException e) {
            throw new RendezvousException("rank " + rank + ": rendezvous " + what + " failed: " + e.getCause().getMessage(), e.getCause());
        }
        return switch (r.status()) {
            case Wire.ST_OK -> r;
            case Wire.ST_TIMEOUT -> throw new RendezvousTimeoutException(r.message(), r.missing());
            case Wire.ST_PEER_LOST -> throw new RankLeftException(r.message(), r.gone(), r.missing());
            default -> throw new RendezvousException(r.message());
        };
    }

    private void readLoop() {
        try {
            while (true) {
                byte[] frame = Wire.readFrame(in);
                if (frame == null) break;
                var d = new DataInputStream(new ByteArrayInputStream(frame));
                long id = d.readLong();
                byte status = d.readByte();
                Response r;
                if (status == Wire.ST_OK) {
                    r = new Response(status, Wire.readByteList(d), null, List.of(), List.of());
                } else {
                    String msg = Wire.readString(d, Wire.MAX_FRAME);
                    r = new Response(status, List.of(), msg, Wire.readInts(d), Wire.readInts(d));
                }
                var f = pending.remove(id);
                if (f != null) f.complete(r);
            }
            if (!closed.get()) lost("the rendezvous store at " + Wire.hostPort(address) + " closed the connection"
                    + " (the process hosting it may have died)");
        } catch (IOException | RuntimeException e) {
            if (!closed.get()) lost("lost the connection to the rendezvous store at " + Wire.hostPort(address) + ": " + e.getMessage());
        }
    }


    private void lost(String why) {
        if (broken == null) broken = why;
        closeQuietly(socket);
        failPending(broken);
    }

    private void failPending(String why) {
        for (Long id : List.copyOf(pending.keySet())) {
            var f = pending.remove(id);
            if (f != null) f.completeExceptionally(new RendezvousException(why));
        }
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }
}
