package dev.gatun.lowering;

import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/** The chunk a whole reduction's row results are summed in before its fold ({@link Lowering#chunkOf}). */
class ChunkOfTest {
    @Test
    void theChunkIsTheDivisorNearestTheSquareRootThatLeavesFewEnoughChunks() {
        // the plain search, independently: every divisor from 32 to n / 2, the one nearest sqrt(n) leaving at most 16384 chunks
        for (long n : new long[]{128256, 20000, 16385 * 4, 1L << 24, 16411, 16384, 100, 3 * 16411}) {
            long best = 0, root = (long) Math.sqrt((double) n);
            if (n > 16384)
                for (long c = 32; c <= n / 2; c++)
                    if (n % c == 0 && n / c <= 16384 && (best == 0 || Math.abs(c - root) < Math.abs(best - root))) best = c;
            assertThat(Lowering.chunkOf(n)).as("rows %d", n).isEqualTo(best);
        }
        assertThat(Lowering.chunkOf(128256)).as("a Llama-3 vocabulary's rows: 384 chunks of 334").isEqualTo(334);
        assertThat(Lowering.chunkOf(16411)).as("a prime count has no chunk").isZero();
    }
}
