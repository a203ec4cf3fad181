package dev.gatun.ir.graph;

import java.util.Arrays;
import java.util.List;

/**
 * The rule of an uneven all_to_all's row counts, shared by every backend and the reference interpreter so that they
 * accept and refuse the same counts with the same words. {@code counts[s][d]} is the number of rows member {@code s}
 * sends to member {@code d} (its input's counts vector, read at run time): member s's part for d is rows
 * {@code offset(counts[s], d)} to {@code offset(counts[s], d) + counts[s][d]} of its input, and member d receives the
 * parts of members 0, 1, ... packed one after another from row {@code offset(column d, s)} of its result. Counts are
 * refused, never truncated: a negative count, a sender whose counts add up to more rows than its input has, or a
 * receiver whose rows add up to more than the capacity.
 */
public final class AllToAllCounts {
    private AllToAllCounts() {}

    /** Where part {@code upTo} starts: the sum of {@code counts[0..upTo)}. */
    public static long offset(long[] counts, int upTo) {
        long at = 0;
        for (int i = 0; i < upTo; i++) at += counts[i];
        return at;
    }

    /** The rows member {@code receiver} gets from each member: column {@code receiver} of {@code counts}. */
    public static long[] received(long[][] counts, int receiver) {
        long[] out = new long[counts.length];
        for (int s = 0; s < counts.length; s++) out[s] = counts[s][receiver];
        return out;
    }

    /**
     * Why these counts are refused, or null when they are fine. {@code op} names the step or node (its first words in
     * the message); {@code members} the world ranks of the group's members, in member order; {@code rows} each
     * sender's input rows; {@code capacity} the rows of each result.
     */
    public static String refusal(String op, long[][] counts, List<Integer> members, long rows, long capacity) {
        int size = counts.length;
        for (int s = 0; s < size; s++) {
            for (int d = 0; d < size; d++)
                if (counts[s][d] < 0)
                    return op + ": rank " + members.get(s) + " sends " + counts[s][d] + " rows to rank " + members.get(d) + " (its counts "
                            + Arrays.toString(counts[s]) + "); a row count is never negative";
            if (exceeds(counts[s], rows))
                return op + ": rank " + members.get(s) + "'s counts " + Arrays.toString(counts[s]) + " add up to " + total(counts[s])
                        + " rows, but its input has " + rows + "; send at most the rows it holds";
        }
        for (int d = 0; d < size; d++) {
            long[] got = received(counts, d);
            if (exceeds(got, capacity))
                return op + ": rank " + members.get(d) + " would receive " + total(got) + " rows (" + Arrays.toString(got) + " from ranks " + members
                        + ") but the capacity is " + capacity + " rows; raise the capacity of allToAll(group, counts, capacity) to the most rows"
                        + " a rank may receive (nothing is truncated)";
        }
        return null;
    }

    /** Whether non-negative {@code counts} add up to more than {@code bound}, without overflowing. */
    private static boolean exceeds(long[] counts, long bound) {
        long left = bound;
        for (long c : counts) {
            if (c > left) return true;
            left -= c;
        }
        return false;
    }

    /** The sum as a message prints it (beyond {@code long}: "more than 9223372036854775807"). */
    private static String total(long[] counts) {
        long sum = 0;
        for (long c : counts) {
            if (c > Long.MAX_VALUE - sum) return "more than " + Long.MAX_VALUE;
            sum += c;
        }
        return Long.toString(sum);
    }
}
