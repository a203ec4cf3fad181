package dev.gatun.planner;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Assigns offsets to buffers with known lifetimes so that no two buffers alive at the same time overlap.
 *
 * <p>Three stages, each kept only when it beats the one before:
 * <ol>
 *   <li>greedy by size (largest first), each buffer taking the best-fitting gap among the buffers it overlaps
 *       in time, as XLA's heap simulator and TFLite's arena planner do (the historical result, tried first);</li>
 *   <li>the same greedy under other orders (longest lifetime, largest area, earliest start) and first fit;</li>
 *   <li>a bounded exact search in the manner of MiniMalloc: it places buffers bottom-up, always in the
 *       time section whose floor is lowest, and prunes a branch as soon as some section's floor plus the
 *       bytes still to place there exceed the capacity tried. Capacities from max-live upwards are tried
 *       under a node budget ({@link Options#searchNodes()}), so the result is deterministic.</li>
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
            if (upper < lower) throw new IllegalArgumentException("item " + id + ": upper " + upper + " < lower " + lower);
            if (size < 0) throw new IllegalArgumentException("item " + id + ": negative size " + size);
            if (alignment < 1) throw new IllegalArgumentException("item " + id + ": alignment must be positive");
        }

        boolean overlaps(Item o) { return lower < o.upper && o.lower < upper; }
    }

    /**
     * Budgets of the assignment.
     *
     * @param searchNodes    total search nodes (placements tried) of the exact search per pool; 0 turns it off
     * @param searchMillis   wall-clock cap of the search per pool, 0 for none (a cap makes results depend on speed)
     * @param searchMaxItems pools with more buffers skip the search
     * @param quadraticLimit pools with more buffers skip the O(n^2) greedy orders for the O(n log n) allocator
     */
    public record Options(long searchNodes, long searchMillis, int searchMaxItems, int quadraticLimit) {
        public static final Options DEFAULT = new Options(100_000, 0, 2_000, 4_096);
        /** The historical behaviour: one greedy order, no search. */
        public static final Options GREEDY_ONLY = new Options(0, 0, 0, Integer.MAX_VALUE);

        public Options {
            if (searchNodes < 0 || searchMillis < 0 || searchMaxItems < 0 || quadraticLimit < 0) throw new IllegalArgumentException("budgets must not be negative");
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
                var found = new Search(items, options).run(maxLive, bestSize);
                if (found != null) {
                    found = placeDegenerate(items, found);
                    long s = extent(items, found);
                    if (s < bestSize) { best = found; bestSize = s; method = "search"; }
                }
            }
        }
        return new Result(best, bestSize, maxLive, method);
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
        Integer[] starts = new Integer[n], ends = new Integer[n];
        for (int i = 0; i < n; i++) { starts[i] = i; ends[i] = i; }
        Arrays.sort(starts, Comparator.<Integer>comparingLong(i -> items.get(i).lower()).thenComparingLong(i -> -items.get(i).size()).thenComparingInt(i -> i));
        Arrays.sort(ends, Comparator.<Integer>comparingLong(i -> items.get(i).upper()).thenComparingInt(i -> i));
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
     * Bounded search for a placement within a capacity: bottom-up, in the section with the lowest floor,
     * trying the buffers alive there; a branch dies when a section's floor plus its unplaced bytes exceed
     * the capacity.
     */
    private static final class Search {
        final List<Item> items;
        final int n, sections;
        final int[] from, to;            // section span [from, to) of each item (only items with size > 0 and time)
        final int[][][] orders;          // per candidate order, per section: the items alive there
        int[][] itemsAt;
        final long[] size, alignment;
        final long[] floor, remaining;
        final boolean[] placed;
        final long[] offsets;
        final long deadline;
        long nodesLeft;
        int toPlace;
        long capacity;

        Search(List<Item> items, Options options) {
            this.items = items;
            this.n = items.size();
            this.nodesLeft = options.searchNodes();
            this.deadline = options.searchMillis() > 0 ? System.nanoTime() + options.searchMillis() * 1_000_000 : Long.MAX_VALUE;
            var times = new TreeSet<Long>();
            for (Item it : items) if (it.size() > 0 && it.upper() > it.lower()) { times.add(it.lower()); times.add(it.upper()); }
            long[] t = times.stream().mapToLong(Long::longValue).toArray();
            sections = Math.max(0, t.length - 1);
            from = new int[n]; to = new int[n];
            size = new long[n]; alignment = new long[n];
            var lists = new ArrayList<List<Integer>>();
            for (int s = 0; s < sections; s++) lists.add(new ArrayList<>());
            for (int i = 0; i < n; i++) {
                Item it = items.get(i);
                size[i] = it.size(); alignment[i] = it.alignment();
                if (it.size() == 0 || it.upper() == it.lower()) { from[i] = to[i] = 0; continue; }
                from[i] = Arrays.binarySearch(t, it.lower());
                to[i] = Arrays.binarySearch(t, it.upper());
                for (int s = from[i]; s < to[i]; s++) lists.get(s).add(i);
            }
            var cmps = candidateOrders();
            orders = new int[cmps.size()][sections][];
            for (int c = 0; c < cmps.size(); c++)
                for (int s = 0; s < sections; s++) orders[c][s] = lists.get(s).stream().sorted(cmps.get(c)).mapToInt(Integer::intValue).toArray();
            floor = new long[sections];
            remaining = new long[sections];
            placed = new boolean[n];
            offsets = new long[n];
            tried = new long[n];
        }

        /** Candidate orders of the portfolio: no single one wins on every instance, so each gets a slice. */
        private List<Comparator<Integer>> candidateOrders() {
            Comparator<Integer> bySize = Comparator.<Integer>comparingLong(i -> -size[i]);
            Comparator<Integer> byLength = Comparator.<Integer>comparingLong(i -> -(items.get(i).upper() - items.get(i).lower()));
            Comparator<Integer> byArea = Comparator.<Integer>comparingLong(i -> -size[i] * (items.get(i).upper() - items.get(i).lower()));
            return List.of(byArea.thenComparing(bySize).thenComparingInt(i -> i),
                    byLength.thenComparing(bySize).thenComparingInt(i -> i),
                    bySize.thenComparing(byLength).thenComparingInt(i -> i));
        }

        /**
         * Tries capacities from max-live up to just below {@code known}, each under every candidate order with
         * an equal slice of the node budget (unused nodes carry over); returns the first placement found.
         */
        long[] run(long maxLive, long known) {
            double[] factors = {1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.07, 1.1, 1.15, 1.2};
            int tries = 0;
            for (double f : factors) if ((long) Math.ceil(maxLive * f) < known) tries += orders.length;
            if (tries == 0) return null;
            long perTry = Math.max(1, nodesLeft / tries);
            long carry = 0;
            for (double f : factors) {
                long cap = (long) Math.ceil(maxLive * f);
                if (cap >= known) break;
                for (int[][] order : orders) {
                    itemsAt = order;
                    long budget = Math.min(perTry + carry, nodesLeft);
                    long before = nodesLeft;
                    long[] r = tryCapacity(cap, budget);
                    carry = Math.max(0, budget - (before - nodesLeft));
                    if (r != null) return r;
                    if (nodesLeft <= 0 || System.nanoTime() > deadline) return null;
                }
            }
            return null;
        }

        private long limit, stamps;
        private long[] tried;

        long[] tryCapacity(long cap, long budget) {
            capacity = cap;
            Arrays.fill(floor, 0);
            Arrays.fill(remaining, 0);
            Arrays.fill(placed, false);
            toPlace = 0;
            for (int i = 0; i < n; i++) {
                if (to[i] > from[i]) {
                    toPlace++;
                    for (int s = from[i]; s < to[i]; s++) remaining[s] += size[i];
                } else placed[i] = true;
            }
            for (int s = 0; s < sections; s++) if (remaining[s] > cap) return null;
            limit = nodesLeft - budget;
            if (!dfs()) return null;
            long[] out = new long[n];
            for (int i = 0; i < n; i++) out[i] = to[i] > from[i] ? offsets[i] : 0;
            return out;
        }

        private boolean dfs() {
            if (toPlace == 0) return true;
            if (nodesLeft <= limit || ((nodesLeft & 1023) == 0 && System.nanoTime() > deadline)) return false;
            // the section with the lowest floor that still has bytes to place
            int sec = -1;
            for (int s = 0; s < sections; s++) if (remaining[s] > 0 && (sec < 0 || floor[s] < floor[sec])) sec = s;
            long level = floor[sec];
            int a = sec, b = sec + 1;
            while (a > 0 && floor[a - 1] == level) a--;
            while (b < sections && floor[b] == level) b++;
            long[] saved = null;
            // every unplaced item of the plateau that can rest on it, once (the stamp marks items tried at this node)
            long stamp = ++stamps;
            for (int t = a; t < b; t++) for (int i : itemsAt[t]) {
                if (placed[i] || tried[i] == stamp) continue;
                tried[i] = stamp;
                long base = 0;
                for (int s = from[i]; s < to[i]; s++) base = Math.max(base, floor[s]);
                if (base != level) continue;
                long at = align(base, alignment[i]);
                long top = at + size[i];
                if (top > capacity) continue;
                boolean ok = true;
                for (int s = from[i]; s < to[i] && ok; s++) if (top + remaining[s] - size[i] > capacity) ok = false;
                if (!ok) continue;
                nodesLeft--;
                int span = to[i] - from[i];
                if (saved == null || saved.length < span) saved = new long[Math.max(span, 8)];
                for (int s = from[i]; s < to[i]; s++) { saved[s - from[i]] = floor[s]; floor[s] = top; remaining[s] -= size[i]; }
                placed[i] = true; offsets[i] = at; toPlace--;
                if (dfs()) return true;
                placed[i] = false; toPlace++;
                for (int s = from[i]; s < to[i]; s++) { floor[s] = saved[s - from[i]]; remaining[s] += size[i]; }
                if (nodesLeft <= limit) return false;
            }
            // leave the lowest plateau empty at this level: raise it to the lower of its higher neighbours
            long raise = Long.MAX_VALUE;
            if (a > 0 && floor[a - 1] > floor[sec]) raise = floor[a - 1];
            if (b < sections && floor[b] > floor[sec]) raise = Math.min(raise, floor[b]);
            if (raise == Long.MAX_VALUE) return false;
            for (int s = a; s < b; s++) if (raise + remaining[s] > capacity) return false;
            long old = floor[sec];
            for (int s = a; s < b; s++) floor[s] = raise;
            nodesLeft--;
            if (dfs()) return true;
            for (int s = a; s < b; s++) floor[s] = old;
            return false;
        }
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
