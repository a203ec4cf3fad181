package dev.gatun.runtime.distributed;

import dev.gatun.runtime.RankFailedException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReferenceArray;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

@Timeout(30)
class FingerprintsAndLocalWorldTest {
    static final Duration T = Duration.ofSeconds(10);

    @Test
    void equalFingerprintsPass() {
        var passed = new AtomicInteger();
        LocalWorld.run(3, r -> {
            Fingerprints.check(r, "seeds", "9c41e0", T);
            Fingerprints.check(r, "seeds", "9c41e0", T); // a second round of the same plan
            passed.incrementAndGet();
        });
        assertThat(passed).hasValue(3);
    }

    @Test
    void differingFingerprintsFailOnEveryRankNamingBoth() {
        var messages = new AtomicReferenceArray<String>(3);
        LocalWorld.run(3, r -> {
            String fp = r.rank() == 1 ? "9c41e0" : "7a02bb";
            try {
                Fingerprints.check(r, "seeds", fp, T);
            } catch (FingerprintMismatchException e) {
                assertThat(e.fingerprints()).containsExactly("7a02bb", "9c41e0", "7a02bb");
                assertThat(e.planName()).isEqualTo("seeds");
                messages.set(r.rank(), e.getMessage());
            }
        });
        String expected = "plan 'seeds': rank 1 has fingerprint 9c41e0 but rank 0 has 7a02bb; every rank must compile the same graph with the same options";
        for (int r = 0; r < 3; r++) assertThat(messages.get(r)).isEqualTo(expected);
    }

    @Test
    void manyDifferingFingerprintsAreGrouped() {
        assertThatThrownBy(() -> Fingerprints.compare("p", List.of("a", "a", "b", "b")))
                .hasMessage("plan 'p': rank 2 has fingerprint b but rank 0 has a; every rank must compile the same graph with the same options"
                        + " (ranks by fingerprint: a [0, 1] b [2, 3])");
        assertThatThrownBy(() -> Fingerprints.compare("p", List.of("a", "b", "c")))
                .hasMessageContaining("rank 1 has fingerprint b but rank 0 has a").hasMessageContaining("a [0] b [1] c [2]");
        Fingerprints.compare("p", List.of("a", "a"));
        Fingerprints.compare("p", List.of());
    }

    @Test
    void theFirstFailureIsPropagatedAndTheOthersStop() {
        var stopped = new AtomicInteger();
        long t0 = System.nanoTime();
        assertThatThrownBy(() -> LocalWorld.run(3, r -> {
            if (r.rank() == 1) {
                r.barrier("start", T);
                throw new IllegalStateException("boom on rank one");
            }
            try {
                r.barrier("start", T);
                r.barrier("never", Duration.ofSeconds(60)); // rank 1 never comes: stopped by LocalWorld, not by the timeout
            } catch (RendezvousException e) {
                stopped.incrementAndGet();
                throw e;
            }
        }))
                .isInstanceOf(RankFailedException.class)
                .hasMessageStartingWith("rank 1 failed: java.lang.IllegalStateException: boom on rank one")
                .satisfies(e -> assertThat(((RankFailedException) e).rank()).isEqualTo(1))
                .cause().isInstanceOf(IllegalStateException.class);
        assertThat(Duration.ofNanos(System.nanoTime() - t0)).isLessThan(Duration.ofSeconds(10));
        assertThat(stopped).hasValue(2);

        // a rank busy outside the rendezvous is interrupted
        assertThatThrownBy(() -> LocalWorld.run(2, r -> {
            if (r.rank() == 0) Thread.sleep(60_000);
            else throw new AssertionError("rank one says no");
        })).isInstanceOf(RankFailedException.class).hasMessageContaining("rank 1 failed").hasMessageContaining("rank one says no");
    }
}
