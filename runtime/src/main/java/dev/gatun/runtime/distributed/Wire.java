package dev.gatun.runtime.distributed;

import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The rendezvous wire protocol, shared by {@link RendezvousStore} and {@link Rendezvous}.
 *
 * <p>Handshake (fixed sizes, so an unauthenticated peer cannot make either side allocate much):
 * <ol>
 *   <li>client, as soon as it is connected ({@link ClientHello}, {@value #CLIENT_HELLO_BYTES} bytes): {@code MAGIC,
 *       VERSION, rank, worldSize, clientNonce[32], HMAC-SHA256(secret, "gatun-rendezvous-ticket" | clientNonce |
 *       rank | worldSize)}. That last MAC is a ticket: a store under a connection flood lets a connection whose
 *       ticket is good past its bounds on unauthenticated connections (see {@code HandshakeGate}); it proves
 *       nothing on its own (it could be replayed), so the store takes each ticket's nonce once.</li>
 *   <li>server, as soon as it admits the connection: {@code MAGIC, VERSION, serverNonce[32]}</li>
 *   <li>client: {@code HMAC-SHA256(secret, "gatun-rendezvous-client" | serverNonce | clientNonce | rank | worldSize)},
 *       the proof, fresh for the server's nonce</li>
 *   <li>server: {@code ACCEPT, HMAC-SHA256(secret, "gatun-rendezvous-server" | clientNonce | serverNonce)} or
 *       {@code REJECT, reason} and close. The client checks the server's MAC too (mutual authentication).</li>
 * </ol>
 * Both hellos are sent without waiting for the other side's, so a store and a client of different versions tell
 * each other so instead of waiting. A store that closes a connection before its answer (step 4) was too busy
 * for it: the client tries again.
 * Then length-prefixed frames, written by {@link #writeFrame} and read by {@link #readFrame} on both sides.
 * Request ({@link #request}): {@code op, id, fields...}. Reply ({@link #reply}): {@code id, status, body}: for
 * {@link #ST_OK} a list of byte strings, otherwise a message and two rank lists (missing, gone).
 */
final class Wire {
    private Wire() {}

    static final int MAGIC = 0x47545256; // "GTRV"
    static final int VERSION = 2;
    static final int NONCE_BYTES = 32;
    static final int MAC_BYTES = 32;
    /** Size of the client's first message, {@link ClientHello}. */
    static final int CLIENT_HELLO_BYTES = 4 + 4 + 4 + 4 + NONCE_BYTES + MAC_BYTES;
    static final int MAX_FRAME = 256 << 20;
    static final int MAX_REASON = 4096;

    static final byte ACCEPT = 1, REJECT = 2;

    // requests
    static final byte OP_SET = 1, OP_GET = 2, OP_ADD = 3, OP_COLLECT = 4, OP_CLOSE = 5;
    // collective kinds
    static final byte KIND_BARRIER = 1, KIND_GATHER = 2;
    // response status
    static final byte ST_OK = 0, ST_ERROR = 1, ST_TIMEOUT = 2, ST_PEER_LOST = 3;

    static byte[] ticket(byte[] secret, byte[] clientNonce, int rank, int worldSize) {
        return hmac(secret, "gatun-rendezvous-ticket".getBytes(StandardCharsets.US_ASCII), clientNonce, ints(rank, worldSize));
    }

    /** The client's first message: who it says it is, its nonce and its ticket. */
    record ClientHello(int magic, int version, int rank, int worldSize, byte[] nonce, byte[] ticket) {
        /** A hello of this protocol version for rank {@code rank}, with a fresh ticket. */
        static ClientHello of(byte[] secret, byte[] nonce, int rank, int worldSize) {
            return new ClientHello(MAGIC, VERSION, rank, worldSize, nonce, Wire.ticket(secret, nonce, rank, worldSize));
        }

        static ClientHello read(DataInputStream in) throws IOException {
            int magic = in.readInt(), version = in.readInt(), rank = in.readInt(), world = in.readInt();
            byte[] nonce = new byte[NONCE_BYTES];
            in.readFully(nonce);
            byte[] ticket = new byte[MAC_BYTES];
            in.readFully(ticket);
            return new ClientHello(magic, version, rank, world, nonce, ticket);
        }

        void write(DataOutputStream out) throws IOException {
            out.writeInt(magic);
            out.writeInt(version);
            out.writeInt(rank);
            out.writeInt(worldSize);
            out.write(nonce);
            out.write(ticket);
        }

        /** Whether the ticket is the one {@code secret} makes (says nothing about replays). */
        boolean ticketValid(byte[] secret) {
            return magic == MAGIC && version == VERSION && macEquals(ticket, Wire.ticket(secret, nonce, rank, worldSize));
        }
    }

    static byte[] clientMac(byte[] secret, byte[] serverNonce, byte[] clientNonce, int rank, int worldSize) {
        return hmac(secret, "gatun-rendezvous-client".getBytes(StandardCharsets.US_ASCII), serverNonce, clientNonce,
                ints(rank, worldSize));
    }

    static byte[] serverMac(byte[] secret, byte[] clientNonce, byte[] serverNonce) {
        return hmac(secret, "gatun-rendezvous-server".getBytes(StandardCharsets.US_ASCII), clientNonce, serverNonce);
    }

    private static byte[] ints(int a, int b) {
        return new byte[] {(byte) (a >>> 24), (byte) (a >>> 16), (byte) (a >>> 8), (byte) a,
                (byte) (b >>> 24), (byte) (b >>> 16), (byte) (b >>> 8), (byte) b};
    }

    static byte[] hmac(byte[] secret, byte[]... parts) {
        try {
            Mac mac = Mac.getInstance("HmacSHA256");
            mac.init(new SecretKeySpec(secret.length == 0 ? new byte[1] : secret, "HmacSHA256"));
            for (byte[] p : parts) mac.update(p);
            return mac.doFinal();
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("HmacSHA256 is not available", e);
        }
    }

    static boolean macEquals(byte[] a, byte[] b) { return MessageDigest.isEqual(a, b); }

    /** What a frame carries after its fixed head. */
    interface Body { void write(DataOutputStream out) throws IOException; }

    /** A request frame: {@code op, id}, then the request's fields. */
    static byte[] request(byte op, long id, Body fields) {
        return frame(o -> {
            o.writeByte(op);
            o.writeLong(id);
            fields.write(o);
        });
    }

    /** A reply frame: {@code id, status}, then the body. */
    static byte[] reply(long id, byte status, Body body) {
        return frame(o -> {
            o.writeLong(id);
            o.writeByte(status);
            body.write(o);
        });
    }

    private static byte[] frame(Body body) {
        try {
            var bytes = new java.io.ByteArrayOutputStream();
            var out = new DataOutputStream(bytes);
            body.write(out);
            out.flush();
            return bytes.toByteArray();
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e); // writing to memory does not fail
        }
    }

    /** Writes one frame: its length, then its bytes. */
    static void writeFrame(DataOutputStream out, byte[] frame, boolean flush) throws IOException {
        out.writeInt(frame.length);
        out.write(frame);
        if (flush) out.flush();
    }

    static void writeInts(DataOutputStream out, List<Integer> ints) throws IOException {
        out.writeInt(ints.size());
        for (int i : ints) out.writeInt(i);
    }

    static List<Integer> readInts(DataInputStream in) throws IOException {
        int n = in.readInt();
        if (n < 0 || n > 1 << 20) throw new IOException("bad rank list length " + n);
        List<Integer> l = new ArrayList<>(n);
        for (int i = 0; i < n; i++) l.add(in.readInt());
        return l;
    }

    static void writeString(DataOutputStream out, String s) throws IOException {
        writeBytes(out, s.getBytes(StandardCharsets.UTF_8));
    }

    static String readString(DataInputStream in, int max) throws IOException {
        return new String(readBytes(in, max), StandardCharsets.UTF_8);
    }

    static void writeBytes(DataOutputStream out, byte[] b) throws IOException {
        out.writeInt(b.length);
        out.write(b);
    }

    static byte[] readBytes(DataInputStream in, int max) throws IOException {
        int n = in.readInt();
        if (n < 0 || n > max) throw new IOException("bad length " + n + " (at most " + max + ")");
        return readExactly(in, n);
    }

    /** Below this a length is read into one array at once; above it the array grows with the bytes that arrive. */
    static final int EAGER_BYTES = 64 << 10;

    /**
     * Reads {@code n} bytes. A length prefix is only a claim: memory is taken as the bytes arrive (doubling from
     * 64 KiB), so a peer that announces 256 MiB and sends nothing makes the reader allocate nothing of it.
     */
    static byte[] readExactly(DataInputStream in, int n) throws IOException {
        if (n <= EAGER_BYTES) {
            byte[] b = new byte[n];
            in.readFully(b);
            return b;
        }
        byte[] b = new byte[EAGER_BYTES];
        int have = 0;
        while (have < n) {
            if (have == b.length) b = Arrays.copyOf(b, (int) Math.min(n, 2L * b.length));
            int got = in.read(b, have, b.length - have);
            if (got < 0) throw new EOFException("the peer announced " + n + " bytes and closed after " + have);
            have += got;
        }
        return b;
    }

    static List<byte[]> readByteList(DataInputStream in) throws IOException {
        int n = in.readInt();
        if (n < 0 || n > 1 << 20) throw new IOException("bad list length " + n);
        List<byte[]> list = new ArrayList<>(n);
        for (int i = 0; i < n; i++) list.add(readBytes(in, MAX_FRAME));
        return list;
    }

    static byte[] readFrame(DataInputStream in) throws IOException {
        int n;
        try {
            n = in.readInt();
        } catch (EOFException e) {
            return null;
        }
        if (n < 0 || n > MAX_FRAME) throw new IOException("bad frame length " + n);
        return readExactly(in, n);
    }

    /** "30 s", "1.5 s", "250 ms". */
    static String human(Duration d) {
        long ms = d.toMillis();
        if (ms < 1000) return ms + " ms";
        if (ms % 1000 == 0) return (ms / 1000) + " s";
        return String.format(java.util.Locale.ROOT, "%.1f s", ms / 1000.0);
    }

    /** {@code host:port}, with the IP literal when the address is resolved (so peers need no name lookup). */
    static String hostPort(InetSocketAddress a) {
        String host = a.getAddress() != null ? a.getAddress().getHostAddress() : a.getHostString();
        return (host.indexOf(':') >= 0 ? "[" + host + "]" : host) + ":" + a.getPort();
    }

    /** Parses {@code host:port} or {@code [v6]:port}. */
    static InetSocketAddress parseAddress(String s, String what) {
        String t = s.trim();
        int colon = t.lastIndexOf(':');
        if (colon <= 0 || colon == t.length() - 1)
            throw new RendezvousException(what + " must be host:port (for example 127.0.0.1:29500), not '" + s + "'");
        String host = t.substring(0, colon);
        if (host.startsWith("[") && host.endsWith("]")) host = host.substring(1, host.length() - 1);
        int port;
        try {
            port = Integer.parseInt(t.substring(colon + 1));
        } catch (NumberFormatException e) {
            throw new RendezvousException(what + " has a port that is not a number: '" + s + "'");
        }
        if (port < 1 || port > 65535) throw new RendezvousException(what + " has port " + port + ", outside 1..65535: '" + s + "'");
        return new InetSocketAddress(host, port);
    }

    static long longOf(byte[] b) {
        if (b.length != 8) throw new RendezvousException("a rendezvous counter has 8 bytes, not " + b.length);
        long v = 0;
        for (byte x : b) v = (v << 8) | (x & 0xff);
        return v;
    }

    static byte[] bytesOf(long v) {
        byte[] b = new byte[8];
        for (int i = 7; i >= 0; i--, v >>>= 8) b[i] = (byte) v;
        return b;
    }
}
