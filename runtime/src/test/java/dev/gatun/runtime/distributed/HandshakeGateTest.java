package dev.gatun.runtime.distributed;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.Size;

import java.net.InetAddress;
import java.net.UnknownHostException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** The gate's bounds hold whatever arrives and leaves, and it pushes out only the oldest of the heaviest peer. */
class HandshakeGateTest {

    /**
     * Ops: a value v in 0..3 admits a connection from peer 127.0.0.(v+1); 4..5 releases the oldest connection still
     * held (a finished handshake), 6 releases one already pushed out (must be refused). Checked against a plain model:
     * per peer, the list of connections held in arrival order.
     */
    @Property(tries = 300)
    void boundsHoldAndOnlyTheOldestOfTheHeaviestIsPushedOut(@ForAll @Size(max = 200) List<@IntRange(min = 0, max = 6) Integer> ops,
                                                           @ForAll @IntRange(min = 1, max = 5) int perPeer,
                                                           @ForAll @IntRange(min = 0, max = 6) int extra) throws UnknownHostException {
        int total = perPeer + extra;
        var gate = new HandshakeGate<Integer>(perPeer, total);
        Map<Integer, List<HandshakeGate.Place<Integer>>> model = new HashMap<>(); // peer -> held, oldest first
        List<HandshakeGate.Place<Integer>> gone = new ArrayList<>();
        int next = 0;
        for (int op : ops) {
            if (op <= 3) {
                InetAddress peer = InetAddress.getByAddress(new byte[]{127, 0, 0, (byte) (op + 1)});
                int heaviest = model.values().stream().mapToInt(List::size).max().orElse(0);
                int heldBefore = model.values().stream().mapToInt(List::size).sum();
                int mineBefore = model.getOrDefault(op, List.of()).size();
                var a = gate.admit(peer, next++);
                if (mineBefore >= perPeer) {
                    assertThat(a.pushedOut()).as("over the per-peer bound: its own oldest").containsExactly(model.get(op).getFirst());
                } else if (heldBefore >= total) {
                    assertThat(a.pushedOut()).hasSize(1);
                    var out = a.pushedOut().getFirst();
                    var from = model.entrySet().stream().filter(e -> e.getValue().contains(out)).findFirst().orElseThrow();
                    assertThat(from.getValue().size()).as("pushed out from a heaviest peer").isEqualTo(heaviest);
                    assertThat(from.getValue().getFirst()).as("its oldest").isSameAs(out);
                } else {
                    assertThat(a.pushedOut()).as("room left: nobody pushed out").isEmpty();
                }
                for (var out : a.pushedOut()) {
                    model.values().forEach(l -> l.remove(out));
                    gone.add(out);
                    assertThat(gate.pushedOut(out)).isTrue();
                }
                model.computeIfAbsent(op, k -> new ArrayList<>()).add(a.place());
                assertThat(a.place().connection).isEqualTo(next - 1);
            } else if (op <= 5) {
                var oldest = model.values().stream().filter(l -> !l.isEmpty()).map(List::getFirst)
                        .min((x, y) -> Integer.compare(x.connection, y.connection));
                if (oldest.isPresent()) {
                    assertThat(gate.release(oldest.get())).isTrue();
                    assertThat(gate.release(oldest.get())).as("given back twice").isFalse();
                    model.values().forEach(l -> l.remove(oldest.get()));
                }
            } else if (!gone.isEmpty()) {
                assertThat(gate.release(gone.getLast())).as("a place pushed out cannot be given back").isFalse();
            }
            int held = model.values().stream().mapToInt(List::size).sum();
            assertThat(gate.held()).isEqualTo(held).isLessThanOrEqualTo(total);
            for (int p = 0; p < 4; p++) {
                int mine = model.getOrDefault(p, List.of()).size();
                assertThat(gate.held(InetAddress.getByAddress(new byte[]{127, 0, 0, (byte) (p + 1)}))).isEqualTo(mine).isLessThanOrEqualTo(perPeer);
            }
        }
    }

    @Property(tries = 50)
    void ipv6PeersCountPerSlash64(@ForAll byte low) throws UnknownHostException {
        var gate = new HandshakeGate<Integer>(2, 10);
        byte[] a = new byte[16];
        a[0] = 0x20; a[1] = 0x01; a[15] = 1;
        byte[] b = a.clone();
        b[15] = low; b[9] = 7; // same /64, another host part
        gate.admit(InetAddress.getByAddress(a), 1);
        gate.admit(InetAddress.getByAddress(b), 2);
        var third = gate.admit(InetAddress.getByAddress(a), 3);
        assertThat(third.pushedOut()).as("the /64 holds two already").hasSize(1);
        assertThat(third.pushedOut().getFirst().connection).isEqualTo(1);
        byte[] c = a.clone();
        c[7] = 9; // another /64
        assertThat(gate.admit(InetAddress.getByAddress(c), 4).pushedOut()).isEmpty();
    }
}
