package dev.gatun.planner;

import org.junit.jupiter.api.Test;

import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

class OffsetSearchTest {

    /** Whether some offsets in [0, capacity - size] place every buffer without an overlap (exhaustive). */
    static boolean bruteFits(long[] lo, long[] hi, long[] size, long[] align, long capacity) {
        return bruteFits(lo, hi, size, align, capacity, new long[size.length], 0);
    }

    private static boolean bruteFits(long[] lo, long[] hi, long[] size, long[] align, long cap, long[] off, int k) {
        if (k == size.length) return true;
        for (long o = 0; o + size[k] <= cap; o += align[k]) {
            boolean ok = true;
            for (int j = 0; j < k && ok; j++)
                if (lo[k] < hi[j] && lo[j] < hi[k] && o < off[j] + size[j] && off[j] < o + size[k]) ok = false;
            if (!ok) continue;
            off[k] = o;
            if (bruteFits(lo, hi, size, align, cap, off, k + 1)) return true;
        }
        return false;
    }

    static void assertValid(long[] lo, long[] hi, long[] size, long[] align, long cap, long[] off) {
        for (int i = 0; i < size.length; i++) {
            assertThat(off[i]).isGreaterThanOrEqualTo(0);
            assertThat(off[i] + size[i]).isLessThanOrEqualTo(cap);
            assertThat(off[i] % align[i]).isZero();
            for (int j = i + 1; j < size.length; j++) {
                boolean time = lo[i] < hi[j] && lo[j] < hi[i];
                boolean mem = off[i] < off[j] + size[j] && off[j] < off[i] + size[i];
                assertThat(time && mem).as("buffers %d and %d overlap", i, j).isFalse();
            }
        }
    }

    @Test
    void agreesWithExhaustiveEnumerationOnSmallInstances() {
        var rnd = new Random(7);
        int feasible = 0, infeasible = 0;
        for (int trial = 0; trial < 400; trial++) {
            int n = 2 + rnd.nextInt(5);
            long[] lo = new long[n], hi = new long[n], size = new long[n], align = new long[n];
            for (int i = 0; i < n; i++) {
                lo[i] = rnd.nextInt(6);
                hi[i] = lo[i] + 1 + rnd.nextInt(4);
                size[i] = 1 + rnd.nextInt(4);
                align[i] = rnd.nextInt(4) == 0 ? 2 : 1;
            }
            long live = OffsetAssigner.maxLive(items(lo, hi, size, align));
            for (long cap = live; cap <= live + 2; cap++) {
                long[] off = new OffsetSearch(lo, hi, size, align, cap).solve(1_000_000);
                boolean expected = bruteFits(lo, hi, size, align, cap);
                assertThat(off != null).as("trial %d at capacity %d", trial, cap).isEqualTo(expected);
                if (off != null) { assertValid(lo, hi, size, align, cap, off); feasible++; } else infeasible++;
            }
        }
        // both answers occur, so the comparison means something
        assertThat(feasible).isPositive();
        assertThat(infeasible).isPositive();
    }

    @Test
    void anExhaustedBudgetIsNoAnswerAndTheSameBudgetGivesTheSameAnswer() {
        var rnd = new Random(3);
        int n = 60;
        long[] lo = new long[n], hi = new long[n], size = new long[n], align = new long[n];
        for (int i = 0; i < n; i++) {
            lo[i] = rnd.nextInt(50);
            hi[i] = lo[i] + 1 + rnd.nextInt(20);
            size[i] = 1 + rnd.nextInt(1000);
            align[i] = 1;
        }
        long live = OffsetAssigner.maxLive(items(lo, hi, size, align));
        var search = new OffsetSearch(lo, hi, size, align, live);
        long[] first = search.solve(5_000);
        long used = search.nodesUsed();
        assertThat(used).isLessThanOrEqualTo(5_000);
        long[] again = search.solve(5_000);
        assertThat(search.nodesUsed()).isEqualTo(used);
        assertThat(again).isEqualTo(first);
        if (first != null) assertValid(lo, hi, size, align, live, first);
    }

    private static java.util.List<OffsetAssigner.Item> items(long[] lo, long[] hi, long[] size, long[] align) {
        var items = new java.util.ArrayList<OffsetAssigner.Item>();
        for (int i = 0; i < size.length; i++) items.add(new OffsetAssigner.Item("b" + i, lo[i], hi[i], size[i], align[i]));
        return items;
    }
}
