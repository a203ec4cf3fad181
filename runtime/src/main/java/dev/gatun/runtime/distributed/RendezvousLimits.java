package dev.gatun.runtime.distributed;

import java.time.Duration;
import java.util.Map;
import java.util.Objects;

/**
 * What a connection that has not (yet) proved it knows the secret may cost a {@link RendezvousStore}: the store binds
 * {@code MASTER_ADDR} under torchrun, srun and mpirun, so anyone who reaches that address can open connections to it.
 * A rank proves itself in one round trip, so the defaults are far from anything a rank needs and tight for a flood.
 *
 * <table>
 * <caption>The limits, their defaults and the variables {@link #fromEnvironment} reads</caption>
 * <tr><th>limit</th><th>default</th><th>variable</th></tr>
 * <tr><td>{@code handshakeDeadline}: time from accepting a connection to its proof, in all</td><td>3 s</td>
 *     <td>GATUN_RENDEZVOUS_HANDSHAKE_TIMEOUT (seconds)</td></tr>
 * <tr><td>{@code maxPending}: unauthenticated connections held at once</td><td>64</td><td>GATUN_RENDEZVOUS_MAX_PENDING</td></tr>
 * <tr><td>{@code maxPendingPerPeer}: of them from one peer address (IPv6: one /64)</td><td>16</td>
 *     <td>GATUN_RENDEZVOUS_MAX_PENDING_PER_PEER</td></tr>
 * <tr><td>{@code backlog}: connections the kernel queues before the store accepts them (capped by
 *     {@code net.core.somaxconn})</td><td>1024</td><td>GATUN_RENDEZVOUS_BACKLOG</td></tr>
 * </table>
 *
 * A newcomer beyond a bound pushes out an older unauthenticated connection (see {@code HandshakeGate}); a rank whose
 * ticket arrived with its connection takes no place at all. Authenticated connections are not limited.
 */
public record RendezvousLimits(Duration handshakeDeadline, int maxPending, int maxPendingPerPeer, int backlog) {
    public static final String HANDSHAKE_TIMEOUT = "GATUN_RENDEZVOUS_HANDSHAKE_TIMEOUT", MAX_PENDING = "GATUN_RENDEZVOUS_MAX_PENDING",
            MAX_PENDING_PER_PEER = "GATUN_RENDEZVOUS_MAX_PENDING_PER_PEER", BACKLOG = "GATUN_RENDEZVOUS_BACKLOG";

    /** 3 s, 64, 16 per peer, a backlog of 1024. */
    public static final RendezvousLimits DEFAULT = new RendezvousLimits(Duration.ofSeconds(3), 64, 16, 1024);

    public RendezvousLimits {
        Objects.requireNonNull(handshakeDeadline, "handshakeDeadline");
        if (handshakeDeadline.toMillis() < 1)
            throw new RendezvousException("rendezvous handshake deadline must be at least 1 ms, not " + handshakeDeadline);
        if (maxPending < 1) throw new RendezvousException("rendezvous maxPending must be at least 1, not " + maxPending);
        if (maxPendingPerPeer < 1 || maxPendingPerPeer > maxPending)
            throw new RendezvousException("rendezvous maxPendingPerPeer must be in 1..maxPending (" + maxPending + "), not " + maxPendingPerPeer);
        if (backlog < 1) throw new RendezvousException("rendezvous backlog must be at least 1, not " + backlog);
    }

    public RendezvousLimits withHandshakeDeadline(Duration d) { return new RendezvousLimits(d, maxPending, maxPendingPerPeer, backlog); }

    /** Both bounds on unauthenticated connections at once. */
    public RendezvousLimits withMaxPending(int total, int perPeer) { return new RendezvousLimits(handshakeDeadline, total, perPeer, backlog); }

    public RendezvousLimits withBacklog(int b) { return new RendezvousLimits(handshakeDeadline, maxPending, maxPendingPerPeer, b); }

    /**
     * The defaults, with each limit whose variable {@code env} sets replaced by it. Where only GATUN_RENDEZVOUS_MAX_PENDING
     * is set below the default per-peer bound, the per-peer bound follows it down.
     */
    public static RendezvousLimits fromEnvironment(Map<String, String> env) {
        var d = DEFAULT;
        Duration deadline = d.handshakeDeadline();
        String t = env.get(HANDSHAKE_TIMEOUT);
        if (t != null && !t.isBlank()) {
            double seconds = Numbers.decimal(t);
            if (!(seconds > 0) || Double.isInfinite(seconds))
                throw new RendezvousException(HANDSHAKE_TIMEOUT + " must be a positive number of seconds, not '" + t + "'");
            deadline = Duration.ofMillis((long) Math.ceil(seconds * 1000));
        }
        int total = positive(env, MAX_PENDING, d.maxPending());
        int perPeer = positive(env, MAX_PENDING_PER_PEER, Math.min(d.maxPendingPerPeer(), total));
        if (perPeer > total)
            throw new RendezvousException(MAX_PENDING_PER_PEER + "=" + perPeer + " must not exceed " + MAX_PENDING + " (" + total + ")");
        return new RendezvousLimits(deadline, total, perPeer, positive(env, BACKLOG, d.backlog()));
    }

    private static int positive(Map<String, String> env, String name, int otherwise) {
        String v = env.get(name);
        if (v == null || v.isBlank()) return otherwise;
        Integer i = Numbers.whole(v);
        if (i == null || i < 1)
            throw new RendezvousException("environment variable " + name + " must be a whole number of at least 1, not '" + v + "'");
        return i;
    }
}
