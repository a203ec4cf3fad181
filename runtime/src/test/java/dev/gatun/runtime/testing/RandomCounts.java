package dev.gatun.runtime.testing;

import java.util.random.RandomGenerator;

/** Random row counts of an uneven all_to_all, for the host's, the emulation's and the GPU's tests alike. */
public final class RandomCounts {
    private RandomCounts() {}

    /**
     * Every member's counts to every member ({@code [sender][receiver]}), each sender's adding up to at most {@code rows}:
     * random, everything to one member, nothing at all, or empty parts among random ones (one style for all senders).
     */
    public static long[][] of(RandomGenerator rnd, int world, long rows) {
        long[][] c = new long[world][world];
        int style = rnd.nextInt(4), to = rnd.nextInt(world);
        for (int s = 0; s < world; s++) {
            long left = rows;
            for (int d = 0; d < world; d++) {
                long n = switch (style) {
                    case 1 -> d == to ? left : 0;
                    case 2 -> 0;
                    case 3 -> rnd.nextBoolean() ? 0 : rnd.nextLong(left + 1);
                    default -> rnd.nextLong(left + 1);
                };
                c[s][d] = n;
                left -= n;
            }
        }
        return c;
    }
}
