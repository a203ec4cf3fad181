package dev.gatun.runtime.distributed;

import java.net.Inet6Address;
import java.net.InetAddress;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * Bounds the connections of a {@link RendezvousStore} that have not yet shown they know the secret: at most
 * {@code perPeer} from one peer and {@code total} in all.
 *
 * <p>Why pushing out rather than turning away: a store that closes newcomers once its places are taken is locked
 * by whoever holds the places (64 idle sockets kept ranks out for the whole handshake deadline). Here a newcomer
 * always gets a place: over its peer's bound it pushes out that peer's oldest connection, over the total bound the
 * oldest of the peer holding the most. A flood from one peer so displaces only itself, and a rank, which finishes its
 * handshake in one round trip, is not starved by connections that only wait. Ranks whose ticket arrived with the
 * connection never take a place at all (see {@code Wire}).
 *
 * <p>A peer is an IPv4 address, or the /64 prefix of an IPv6 address (one host commonly holds a whole /64).
 * Thread-safe; the caller closes the connections of the places pushed out.
 */
final class HandshakeGate<C> {
    /** One unauthenticated connection holding a place; its flags are guarded by the gate. */
    static final class Place<C> {
        final Object peer;
        final C connection;
        private boolean pushedOut;
        private boolean released;

        private Place(Object peer, C connection) { this.peer = peer; this.connection = connection; }
    }

    /** The place given to a newcomer, and the places it pushed out (their connections are for the caller to close). */
    record Admission<C>(Place<C> place, List<Place<C>> pushedOut) {}

    private final int perPeer;
    private final int total;
    private final Map<Object, ArrayDeque<Place<C>>> byPeer = new HashMap<>();
    private int held;

    HandshakeGate(int perPeer, int total) {
        if (perPeer < 1 || total < perPeer)
            throw new RendezvousException("handshake gate bounds need 1 <= perPeer <= total, not perPeer " + perPeer + ", total " + total);
        this.perPeer = perPeer;
        this.total = total;
    }

    /** Gives {@code connection} from {@code peer} a place, pushing out older ones where a bound is reached. */
    synchronized Admission<C> admit(InetAddress peer, C connection) {
        Object key = peerKey(peer);
        List<Place<C>> out = new ArrayList<>(1);
        ArrayDeque<Place<C>> mine = byPeer.get(key);
        if (mine != null && mine.size() >= perPeer) out.add(pushOut(mine));
        else if (held >= total) out.add(pushOut(heaviest()));
        var place = new Place<>(key, connection);
        byPeer.computeIfAbsent(key, k -> new ArrayDeque<>()).addLast(place);
        held++;
        return new Admission<>(place, out);
    }

    /**
     * Gives the place back (the handshake ended, or the connection proved itself): true if it held its place until
     * now, false if it had been pushed out or was given back already.
     */
    synchronized boolean release(Place<C> place) {
        if (place.pushedOut || place.released) return false;
        place.released = true;
        ArrayDeque<Place<C>> q = byPeer.get(place.peer);
        q.remove(place);
        if (q.isEmpty()) byPeer.remove(place.peer);
        held--;
        return true;
    }

    /** Whether a newer connection took this place (its connection is closed, or about to be, by the caller). */
    synchronized boolean pushedOut(Place<C> place) { return place.pushedOut; }

    /** Places held now. */
    synchronized int held() { return held; }

    /** Places held now by {@code peer}. */
    synchronized int held(InetAddress peer) {
        var q = byPeer.get(peerKey(peer));
        return q == null ? 0 : q.size();
    }

    private Place<C> pushOut(ArrayDeque<Place<C>> q) {
        Place<C> oldest = q.removeFirst();
        oldest.pushedOut = true;
        if (q.isEmpty()) byPeer.remove(oldest.peer);
        held--;
        return oldest;
    }

    private ArrayDeque<Place<C>> heaviest() {
        ArrayDeque<Place<C>> most = null;
        for (var q : byPeer.values()) if (most == null || q.size() > most.size()) most = q;
        return most;
    }

    /** The peer a connection counts against: its IPv4 address, or its IPv6 address's /64 prefix. */
    static Object peerKey(InetAddress a) {
        if (a instanceof Inet6Address v6) return Arrays.toString(Arrays.copyOf(v6.getAddress(), 8)) + "/64";
        return a;
    }
}
