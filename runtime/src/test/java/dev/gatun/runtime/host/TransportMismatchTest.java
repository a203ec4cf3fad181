package dev.gatun.runtime.host;

import dev.gatun.runtime.ExecutionOptions.HostTransport;
import dev.gatun.runtime.RankFailedException;
import dev.gatun.runtime.distributed.LocalWorld;
import dev.gatun.runtime.distributed.Rendezvous;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.lang.foreign.Arena;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReferenceArray;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Two ranks that contribute different byte counts to one exchange are both told so, whichever of them is late: the
 * rank that sees the mismatch first stops, and the other must still read the mismatch, not "closed its connection".
 * Over TCP the late part is one rank's sender thread (its frame goes out after it already read the peer's header and
 * failed), as a loaded machine schedules it; over shared memory it is the whole rank. Each case runs
 * {@value #REPETITIONS} exchanges, each through a fresh transport of the same two ranks.
 */
@Timeout(180)
class TransportMismatchTest {
    private static final int REPETITIONS = 50;
    private static final Duration LATE = Duration.ofMillis(30), TIMEOUT = Duration.ofSeconds(30);

    @ParameterizedTest(name = "{0}, rank {1} late")
    @CsvSource({"TCP, 0", "TCP, 1", "SHARED_MEMORY, 0", "SHARED_MEMORY, 1"})
    void everyRankIsToldOfTheShapeMismatchWhicheverIsLate(HostTransport transport, int late) {
        long[] bytes = {4 * 4, 5 * 4};   // rank 0: four floats, rank 1: five
        for (int rep = 0; rep < REPETITIONS; rep++) {
            var error = new AtomicReferenceArray<Throwable>(2);
            String prefix = "mismatch-" + transport + "-" + late + "-" + rep;
            LocalWorld.run(2, rv -> {
                try (var t = open(transport, rv, prefix); var arena = Arena.ofConfined()) {
                    if (rv.rank() == late) {
                        if (t instanceof TcpTransport tcp) tcp.delaySends(LATE);
                        else Thread.sleep(LATE);
                    }
                    var x = new Transport.Exchange(rv.rank(), List.of(0, 1), "world", 3, "an all-reduce", TimeUnit.SECONDS.toNanos(30));
                    try {
                        t.allGather(x, arena.allocate(bytes[rv.rank()]));
                    } catch (RankFailedException e) {
                        error.set(rv.rank(), e);
                    }
                    rv.barrier(prefix + "/reported", TIMEOUT);
                }
            });
            for (int me = 0; me < 2; me++) {
                int peer = 1 - me;
                assertThat(error.get(me)).as("rank %d, repetition %d", me, rep).isInstanceOf(RankFailedException.class)
                        .hasMessageContaining("rank " + me + " at an all-reduce (step 3)")
                        .hasMessageContaining("rank " + peer + " contributes " + bytes[peer] + " bytes and this rank " + bytes[me]
                                + "; every rank must call with the same shapes");
            }
        }
    }

    private static Transport open(HostTransport transport, Rendezvous rv, String prefix) {
        return switch (transport) {
            case TCP -> TcpTransport.open(rv, prefix, TIMEOUT);
            case SHARED_MEMORY -> SharedMemoryTransport.open(rv, prefix, List.of("world"), 64, TIMEOUT);
            case AUTO -> throw new IllegalArgumentException("a test of one transport at a time");
        };
    }
}
