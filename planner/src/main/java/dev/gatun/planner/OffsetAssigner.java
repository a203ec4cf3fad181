package dev.gatun.planner;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;

/**
 * Assigns offsets to buffers with known lifetimes so that no two buffers alive at the same time overlap:
 * greedy by size (largest first), each taking the best-fitting gap among the buffers it overlaps in time,
 * as XLA's heap simulator and TFLite's arena planner do. Usable on its own (MiniMalloc's
 * {@code id,lower,upper,size} problems), the planner uses it for every pool.
 */
public final class OffsetAssigner {
    private OffsetAssigner() {}

    /** A buffer alive during steps [lower, upper) that needs {@code size} bytes aligned to {@code alignment}. */
    public record Item(String id, long lower, long upper, long size, long alignment) {
        public Item {
            if (upper < lower) throw new IllegalArgumentException("item " + id + ": upper " + upper + " < lower " + lower);
            if (size < 0) throw new IllegalArgumentException("item " + id + ": negative size " + size);
            if (alignment < 1) throw new IllegalArgumentException("item " + id + ": alignment must be positive");
        }

        boolean overlaps(Item o) { return lower < o.upper && o.lower < upper; }
    }

    /** Offsets in the order of the items given, the pool size, and the max-live lower bound. */
    public record Result(long[] offsets, long size, long maxLive) {}

    public static Result assign(List<Item> items) {
        int n = items.size();
        long[] offsets = new long[n];
        Integer[] order = new Integer[n];
        for (int i = 0; i < n; i++) order[i] = i;
        Arrays.sort(order, Comparator.<Integer>comparingLong(i -> -items.get(i).size())
                .thenComparingLong(i -> -(items.get(i).upper() - items.get(i).lower()))
                .thenComparingLong(i -> items.get(i).lower())
                .thenComparingInt(i -> i));
        var placed = new ArrayList<Integer>();
        long size = 0;
        for (int idx : order) {
            Item it = items.get(idx);
            if (it.size() == 0) { offsets[idx] = 0; continue; }
            var busy = new ArrayList<long[]>();
            for (int p : placed) {
                Item o = items.get(p);
                if (o.size() > 0 && o.overlaps(it)) busy.add(new long[]{offsets[p], offsets[p] + o.size()});
            }
            busy.sort(Comparator.comparingLong(a -> a[0]));
            long best = -1, bestGap = Long.MAX_VALUE, cursor = 0;
            for (long[] b : busy) {
                long start = align(cursor, it.alignment());
                long gap = b[0] - start;
                if (gap >= it.size() && gap < bestGap) { best = start; bestGap = gap; }
                cursor = Math.max(cursor, b[1]);
            }
            if (best < 0) best = align(cursor, it.alignment());
            offsets[idx] = best;
            size = Math.max(size, best + it.size());
            placed.add(idx);
        }
        return new Result(offsets, size, maxLive(items));
    }

    /** The peak over time of the summed sizes of live items: no assignment can use less. */
    public static long maxLive(List<Item> items) {
        var events = new ArrayList<long[]>(items.size() * 2);
        for (Item it : items) {
            if (it.size() == 0 || it.upper() == it.lower()) continue;
            events.add(new long[]{it.lower(), it.size()});
            events.add(new long[]{it.upper(), -it.size()});
        }
        // at equal times, frees come first: [a, t) and [t, b) do not overlap
        events.sort(Comparator.<long[]>comparingLong(e -> e[0]).thenComparingLong(e -> e[1]));
        long live = 0, peak = 0;
        for (long[] e : events) {
            live += e[1];
            peak = Math.max(peak, live);
        }
        return peak;
    }

    static long align(long v, long a) { return a <= 1 ? v : Math.ceilDiv(v, a) * a; }
}
