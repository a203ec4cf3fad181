package dev.gatun.planner;

import dev.gatun.ir.CompilationException;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.stream.IntStream;

/**
 * Assigns offsets to buffers with known lifetimes so that no two buffers alive at the same time overlap.
 *
 * <p>Three stages, each kept only when it beats the one before:
 * <ol>
 *   <li>greedy by size (largest first), each buffer taking the best-fitting gap among the buffers it overlaps
 *       in time, as XLA's heap simulator and TFLite's arena planner do (the historical result, tried first);</li>
 *   <li>the same greedy under other orders (longest lifetime, largest area, earliest start) and first fit;</li>
 *   <li>a bounded exact search ({@link OffsetSearch}, after MiniMalloc): a decision procedure for a capacity,
 *       run at max-live and then at a few capacities above it under a node budget
 *       ({@link Options#searchNodes()}), so the result is deterministic.</li>
 * </ol>
 * Pools with more than {@link Options#quadraticLimit()} buffers use an O(n log n) time-ordered best-fit
 * allocator instead, so planning stays near-linear on huge graphs. Usable on its own (MiniMalloc's
 * {@code id,lower,upper,size} problems, see {@code dev.gatun.planner.tools.AssignOffsets}).
 */
public final class OffsetAssigner {
    private OffsetAssigner() {}

    /** A buffer alive during steps [lower, upper) that needs {@code size} bytes aligned to {@code alignment}. */
    public record Item(String id, long lower, long upper, long size, long alignment) {
        public Item {
            if (upper < lower) throw new CompilationException("item " + id + ": upper " + upper + " < lower " + lower);
            if (size < 0) throw new CompilationException("item " + id + ": negative size " + size);
            if (alignment < 1) throw new CompilationException("item " + id + ": alignment must be positive");
        }

        boolean overlaps(Item o) { return lower < o.upper && o.lower < upper; }
    }

    /**
     * Budgets of the assignment.
     *
     * @param searchNodes    total search nodes (placements tried) of the exact search per pool; 0 turns it off
     *                       (about 2 to 10 us each on a CI-class core)
     * @param searchMillis   wall-clock cap of the search per pool, 0 for none (a cap makes results depend on speed)
     * @param searchMaxItems pools with more buffers skip the search
     * @param quadraticLimit pools with more buffers skip the O(n^2) greedy orders for the O(n log n) allocator
     */
    public record Options(long searchNodes, long searchMillis, int searchMaxItems, int quadraticLimit) {
        /** The planner's budget: bounds the time a pool may add to planning (about 0.2 to 1 s at most here). */
        public static final Options DEFAULT = new Options(100_000, 0, 2_000, 4_096);
        /** The offset command's budget: four times more, for placements worth a few seconds of search. */
        public static final Options OFFLINE = DEFAULT.withSearchNodes(400_000);
        /** The historical behaviour: one greedy order, no search. */
        public static final Options GREEDY_ONLY = new Options(0, 0, 0, Integer.MAX_VALUE);

        public Options {
            if (searchNodes < 0 || searchMillis < 0 || searchMaxItems < 0 || quadraticLimit < 0) throw new CompilationException("budgets must not be negative");
        }

        public Options withSearchNodes(long n) { return new Options(n, searchMillis, searchMaxItems, quadraticLimit); }
        public Options withSearchMillis(long ms) { return new Options(searchNodes, ms, searchMaxItems, quadraticLimit); }
    }

    /** Offsets in the order of the items given, the pool size, the max-live lower bound, and which stage won. */
    public record Result(long[] offsets, long size, long maxLive, String method) {
        public Result(long[] offsets, long size, long maxLive) { this(offsets, size, maxLive, "greedy-size"); }
    }

    public static Result assign(List<Item> items) { return assign(items, Options.DEFAULT); }

    public static Result assign(List<Item> items, Options options) {
        int n = items.size();
        long maxLive = maxLive(items);
        if (n > options.quadraticLimit()) {
            long[] off = placeDegenerate(items, timeOrderedBestFit(items));
            return new Result(off, extent(items, off), maxLive, "time-ordered-best-fit");
        }
        Comparator<Integer> bySize = Comparator.<Integer>comparingLong(i -> -items.get(i).size())
                .thenComparingLong(i -> -len(items.get(i)))
                .thenComparingLong(i -> items.get(i).lower())
                .thenComparingInt(i -> i);
        long[] best = greedy(items, bySize, true);
        long bestSize = extent(items, best);
        String method = "greedy-size";
        if (bestSize > maxLive && options.searchNodes() > 0) {
            record Order(String name, Comparator<Integer> cmp) {}
            var orders = List.of(
                    new Order("greedy-length", Comparator.<Integer>comparingLong(i -> -len(items.get(i))).thenComparing(bySize)),
                    new Order("greedy-area", Comparator.<Integer>comparingLong(i -> -items.get(i).size() * Math.max(1, len(items.get(i)))).thenComparing(bySize)),
                    new Order("greedy-start", Comparator.<Integer>comparingLong(i -> items.get(i).lower()).thenComparing(bySize)),
                    new Order("greedy-size", bySize));
            for (var o : orders) {
                for (boolean bestFit : new boolean[]{true, false}) {
                    if (o.name().equals("greedy-size") && bestFit) continue;
                    long[] off = greedy(items, o.cmp(), bestFit);
                    long s = extent(items, off);
                    if (s < bestSize) { best = off; bestSize = s; method = o.name() + (bestFit ? "" : "-first-fit"); }
                }
            }
            if (bestSize > maxLive && n <= options.searchMaxItems()) {
                var found = search(items, maxLive, bestSize, options);
                if (found != null) {
                    found = placeDegenerate(items, found);
                    long s = extent(items, found);
                    if (s < bestSize) { best = found; bestSize = s; method = "search"; }
                }
            }
        }
        return new Result(best, bestSize, maxLive, method);
    }

    /** Capacities tried when max-live is not reached, as factors of max-live: the goal (1.05) and below first. */
    private static final double[] SLACK = {1.01, 1.02, 1.03, 1.04, 1.05, 1.055, 1.06, 1.07, 1.08, 1.10, 1.15, 1.20};

    /**
     * The exact search ({@link OffsetSearch}) at max-live with half the node budget, then at each capacity of
     * {@link #SLACK} below the best size known, in ascending order, with an equal share of what is left (unused
     * nodes carry over); the first placement found wins. Null when none is found. A search that fails is no
     * proof, so a larger capacity can succeed where a smaller one ran out of nodes, hence the ascending order.
     */
    private static long[] search(List<Item> items, long maxLive, long known, Options options) {
        int[] which = IntStream.range(0, items.size()).filter(i -> items.get(i).size() > 0 && len(items.get(i)) > 0).toArray();
        int m = which.length;
        long[] lower = new long[m], upper = new long[m], size = new long[m], alignment = new long[m];
        for (int k = 0; k < m; k++) {
            Item it = items.get(which[k]);
            lower[k] = it.lower(); upper[k] = it.upper(); size[k] = it.size(); alignment[k] = it.alignment();
        }
        long deadline = options.searchMillis() > 0 ? System.nanoTime() + options.searchMillis() * 1_000_000 : Long.MAX_VALUE;
        var caps = new ArrayList<Long>(List.of(maxLive));
        for (double f : SLACK) if ((long) Math.ceil(maxLive * f) < known) caps.add((long) Math.ceil(maxLive * f));
        long budget = options.searchNodes();
        for (int c = 0; c < caps.size() && budget > 0 && System.nanoTime() < deadline; c++) {
            long share = c == 0 ? Math.max(1, budget / 2) : budget / (caps.size() - c);
            var search = new OffsetSearch(lower, upper, size, alignment, caps.get(c));
            long[] found = onLargeStack(() -> search.solve(share, deadline));
            budget -= search.nodesUsed();
            if (found != null) {
                long[] off = new long[items.size()];
                for (int k = 0; k < m; k++) off[which[k]] = found[k];
                return off;
            }
        }
        return null;
    }

    /** The search recurses once per buffer placed: thousands of frames, more than a default thread stack. */
    private static <T> T onLargeStack(java.util.function.Supplier<T> work) {
        var result = new java.util.concurrent.atomic.AtomicReference<T>();
        var failure = new java.util.concurrent.atomic.AtomicReference<Throwable>();
        Thread t = new Thread(null, () -> {
            try { result.set(work.get()); } catch (Throwable e) { failure.set(e); }
        }, "offset-search", 256L << 20);
        t.start();
        try {
            t.join();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while searching offsets", e);
        }
        if (failure.get() instanceof RuntimeException e) throw e;
        if (failure.get() instanceof Error e) throw e;
        return result.get();
    }

    /**
     * Items of no duration but some size ({@code lower == upper}) conflict, by {@link Item#overlaps}, with the
     * items alive across their instant; the search and the time-ordered allocator leave them out, so they
     * take the lowest gap here.
     */
    private static long[] placeDegenerate(List<Item> items, long[] off) {
        for (int k = 0; k < items.size(); k++) {
            Item it = items.get(k);
            if (it.size() == 0 || it.upper() != it.lower()) continue;
            var busy = new ArrayList<long[]>();
            for (int p = 0; p < items.size(); p++) {
                Item o = items.get(p);
                if (p == k || o.size() == 0 || !o.overlaps(it)) continue;
                if (o.upper() == o.lower() && p > k) continue;   // a later degenerate item is placed after this one
                busy.add(new long[]{off[p], off[p] + o.size()});
            }
            busy.sort(Comparator.comparingLong(a -> a[0]));
            long cursor = 0, at = -1;
            for (long[] b : busy) {
                long start = align(cursor, it.alignment());
                if (b[0] - start >= it.size()) { at = start; break; }
                cursor = Math.max(cursor, b[1]);
            }
            off[k] = at >= 0 ? at : align(cursor, it.alignment());
        }
        return off;
    }

    private static long len(Item it) { return it.upper() - it.lower(); }

    private static long extent(List<Item> items, long[] off) {
        long s = 0;
        for (int i = 0; i < off.length; i++) if (items.get(i).size() > 0) s = Math.max(s, off[i] + items.get(i).size());
        return s;
    }

    /** Greedy in the given order; each item takes the best-fitting (or lowest) gap among placed items overlapping it in time. */
    private static long[] greedy(List<Item> items, Comparator<Integer> cmp, boolean bestFit) {
        int n = items.size();
        long[] offsets = new long[n];
        Integer[] order = new Integer[n];
        for (int i = 0; i < n; i++) order[i] = i;
        Arrays.sort(order, cmp);
        int[] placed = new int[n];
        int np = 0;
        long[] bs = new long[n], be = new long[n];
        Integer[] idx = new Integer[n];
        for (int k : order) {
            Item it = items.get(k);
            if (it.size() == 0) { offsets[k] = 0; continue; }
            int nb = 0;
            for (int q = 0; q < np; q++) {
                int p = placed[q];
                Item o = items.get(p);
                if (o.overlaps(it)) { bs[nb] = offsets[p]; be[nb] = offsets[p] + o.size(); nb++; }
            }
            sortPairs(bs, be, nb, idx);
            long best = -1, bestGap = Long.MAX_VALUE, cursor = 0;
            for (int q = 0; q < nb; q++) {
                long start = align(cursor, it.alignment());
                long gap = bs[q] - start;
                if (gap >= it.size() && gap < bestGap) {
                    best = start; bestGap = gap;
                    if (!bestFit) break;
                }
                cursor = Math.max(cursor, be[q]);
            }
            if (best < 0) best = align(cursor, it.alignment());
            offsets[k] = best;
            placed[np++] = k;
        }
        return offsets;
    }

    /** Sorts the first n (start, end) pairs by start (stable, as the historical list sort). */
    private static void sortPairs(long[] s, long[] e, int n, Integer[] idx) {
        for (int i = 0; i < n; i++) idx[i] = i;
        Arrays.sort(idx, 0, n, Comparator.comparingLong(i -> s[i]));
        long[] s2 = new long[n], e2 = new long[n];
        for (int i = 0; i < n; i++) { s2[i] = s[idx[i]]; e2[i] = e[idx[i]]; }
        System.arraycopy(s2, 0, s, 0, n);
        System.arraycopy(e2, 0, e, 0, n);
    }

    /**
     * O(n log n) allocator for huge pools: items in order of start time, frees before allocations at equal
     * times; each allocation takes the smallest free block that fits (ties: lowest offset), else the top.
     */
    static long[] timeOrderedBestFit(List<Item> items) {
        int n = items.size();
        long[] offsets = new long[n];
        long[] lower = new long[n], upper = new long[n];
        for (int i = 0; i < n; i++) {
            lower[i] = items.get(i).lower();
            upper[i] = items.get(i).upper();
        }
        int[] starts = largestFirstAtEqualStarts(items, lower, IndexSort.byKey(lower, false));
        int[] ends = IndexSort.byKey(upper, false);
        var freeByOffset = new TreeMap<Long, Long>();           // offset -> length
        var freeBySize = new TreeSet<long[]>((a, b) -> a[0] != b[0] ? Long.compare(a[0], b[0]) : Long.compare(a[1], b[1])); // (length, offset)
        long top = 0;
        int e = 0;
        boolean[] live = new boolean[n];
        for (int s = 0; s < n; s++) {
            int k = starts[s];
            Item it = items.get(k);
            while (e < n && items.get(ends[e]).upper() <= it.lower()) {
                int f = ends[e++];
                if (!live[f]) continue;
                live[f] = false;
                long off = offsets[f], size = items.get(f).size();
                // coalesce with neighbours
                var lo = freeByOffset.floorEntry(off);
                if (lo != null && lo.getKey() + lo.getValue() == off) {
                    freeByOffset.remove(lo.getKey()); freeBySize.remove(new long[]{lo.getValue(), lo.getKey()});
                    off = lo.getKey(); size += lo.getValue();
                }
                var hi = freeByOffset.get(off + size);
                if (hi != null) {
                    freeByOffset.remove(off + size); freeBySize.remove(new long[]{hi, off + size});
                    size += hi;
                }
                if (off + size == top) { top = off; continue; }
                freeByOffset.put(off, size); freeBySize.add(new long[]{size, off});
            }
            if (it.size() == 0 || it.upper() == it.lower()) { offsets[k] = 0; continue; }
            long need = it.size() + it.alignment() - 1;
            long[] block = freeBySize.ceiling(new long[]{it.size(), Long.MIN_VALUE});
            // a block at least size long may still not fit after alignment: look for the first that does
            while (block != null && align(block[1], it.alignment()) + it.size() > block[1] + block[0]) {
                block = block[0] >= need ? freeBySize.ceiling(new long[]{need, Long.MIN_VALUE}) : freeBySize.higher(block);
            }
            if (block == null) {
                // grow from the top, absorbing a free block that ends there
                var last = freeByOffset.lastEntry();
                long base = top;
                if (last != null && last.getKey() + last.getValue() == top && align(last.getKey(), it.alignment()) <= top) {
                    freeByOffset.remove(last.getKey()); freeBySize.remove(new long[]{last.getValue(), last.getKey()});
                    base = last.getKey();
                    top = base;
                }
                long at = align(base, it.alignment());
                if (at > top) { freeByOffset.put(top, at - top); freeBySize.add(new long[]{at - top, top}); }
                offsets[k] = at;
                top = at + it.size();
            } else {
                freeBySize.remove(block);
                freeByOffset.remove(block[1]);
                long at = align(block[1], it.alignment());
                if (at > block[1]) { freeByOffset.put(block[1], at - block[1]); freeBySize.add(new long[]{at - block[1], block[1]}); }
                long rest = block[1] + block[0] - (at + it.size());
                if (rest > 0) { freeByOffset.put(at + it.size(), rest); freeBySize.add(new long[]{rest, at + it.size()}); }
                offsets[k] = at;
            }
            live[k] = true;
        }
        return offsets;
    }

    /**
     * Items in order of start ({@code byStart}: by start, then index), the larger first among those that start
     * together (then by index). Items starting together are few (what one work writes), so each such run is put in
     * order by insertion; a run too long for that sorts all of them by comparator.
     */
    private static int[] largestFirstAtEqualStarts(List<Item> items, long[] lower, int[] byStart) {
        int n = byStart.length;
        for (int lo = 0, hi; lo < n; lo = hi) {
            for (hi = lo + 1; hi < n && lower[byStart[hi]] == lower[byStart[lo]]; hi++) { }
            if (hi - lo > 64) return IndexSort.sorted(n, (i, j) -> {
                int c = Long.compare(lower[i], lower[j]);
                if (c == 0) c = Long.compare(items.get(j).size(), items.get(i).size());
                return c != 0 ? c : Integer.compare(i, j);
            });
            for (int k = lo + 1; k < hi; k++) {   // indices ascend within the run: move each past the smaller ones
                int x = byStart[k], m = k;
                long size = items.get(x).size();
                while (m > lo && items.get(byStart[m - 1]).size() < size) { byStart[m] = byStart[m - 1]; m--; }
                byStart[m] = x;
            }
        }
        return byStart;
    }

    /** The peak over time of the summed sizes of live items: no assignment can use less. */
    public static long maxLive(List<Item> items) {
        int n = items.size();
        long[] lower = new long[n], upper = new long[n];
        for (int i = 0; i < n; i++) {
            Item it = items.get(i);
            boolean counts = it.size() != 0 && it.upper() != it.lower();
            lower[i] = counts ? it.lower() : 0;
            upper[i] = counts ? it.upper() : 0;
        }
        int[] byStart = IndexSort.byKey(lower, false), byEnd = IndexSort.byKey(upper, false);
        long live = 0, peak = 0;
        int e = 0;
        for (int s : byStart) {
            Item it = items.get(s);
            if (it.size() == 0 || it.upper() == it.lower()) continue;
            // at equal times, frees come first: [a, t) and [t, b) do not overlap
            for (; e < n && upper[byEnd[e]] <= it.lower(); e++) {
                Item f = items.get(byEnd[e]);
                if (f.size() != 0 && f.upper() != f.lower()) live -= f.size();
            }
            live += it.size();
            peak = Math.max(peak, live);
        }
        return peak;
    }

    static long align(long v, long a) { return a <= 1 ? v : Math.ceilDiv(v, a) * a; }
}
