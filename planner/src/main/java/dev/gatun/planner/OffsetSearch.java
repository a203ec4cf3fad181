package dev.gatun.planner;

import dev.gatun.ir.CompilationException;

import java.util.Arrays;
import java.util.List;
import java.util.TreeSet;

/**
 * Exact search for offsets within a given capacity, after MiniMalloc (Moffitt, ASPLOS 2023). It decides
 * "do these buffers fit in {@code capacity} bytes?" under a deterministic node budget; {@link OffsetAssigner}
 * calls it for a few capacities.
 *
 * <p>Every feasible placement can be pushed down until each buffer rests on a buffer below it or on 0; listing
 * the buffers of such a placement by (offset, rank) gives its canonical sequence, and the search enumerates only
 * canonical sequences:
 * <ul>
 *   <li><b>canonical order</b>: each buffer goes to its lowest offset given the placed buffers it overlaps in
 *       time (its "min offset"), and (offset, rank) must grow along a branch, so no placement is built twice;</li>
 *   <li><b>dominance</b>: a buffer is never placed at or above the top that some other unplaced buffer would
 *       reach at its own min offset, since that buffer fits below it in every completion;</li>
 *   <li><b>hatless</b>: once a buffer that no unplaced buffer overlaps has been tried at a node, the other
 *       choices there are not (its placement constrained no one);</li>
 *   <li><b>twins</b>: of buffers with the same lifetime, size and alignment, the earlier is placed first;</li>
 *   <li><b>inference</b>: in every time section, the lowest offset still usable there (the top of the placed
 *       buffers, the lowest min offset of its unplaced buffers, the offset of the last placement) plus the
 *       bytes still to place there must not exceed the capacity;</li>
 *   <li><b>decomposition</b>: when no unplaced buffer crosses a section boundary any more, the two sides are
 *       solved independently (a failure on one side needs no retry of the other);</li>
 *   <li><b>restarts</b>: three static orders (ranks) take turns with a node limit that doubles, since each
 *       solves instances the others get lost in.</li>
 * </ul>
 * Section totals and min offsets are updated incrementally and undone on backtracking; each section keeps a
 * witness for the inference so that it is rescanned only when its witness stops being one.
 */
final class OffsetSearch {
    private static final int FOUND = 0, NOT_FOUND = 1, ABORTED = 2;

    private final int n, sections;
    private final long[] size, alignment, lower, upper;
    private final int[] from, to;              // section span [from, to) of each buffer
    private final int[][] inSection;           // buffers alive in each section
    private final int[][] overlaps;            // buffers sharing a section with each buffer
    private final int[] twin;                  // the previous buffer of the same lifetime, size, alignment, or -1
    private final long capacity;

    private final long[] offset, minOffset, total;
    private final int[] unplaced, witness;     // unplaced buffers per section; one of them low enough (see place)
    private final int[] cuts;                  // unplaced buffers crossing the boundary after each section
    private final long[] solution;
    private long nodesLeft;
    private long deadline;
    private Rank rank;
    private long nodesUsed;

    // undo log of min offsets: (buffer, old value) pairs
    private long[] undoValue = new long[1024];
    private int[] undoIndex = new int[1024];
    private int undoTop;
    private int stamp;
    private final int[] memberStamp;           // see firstSight

    /** Which static order ranks the buffers, largest first: letters as in MiniMalloc (W lifetime, A area, T section total). */
    enum Rank { WAT, TAW, TWA }

    /**
     * @param lower, upper lifetimes [lower, upper); buffers of no size or no duration must be left out
     */
    OffsetSearch(long[] lower, long[] upper, long[] size, long[] alignment, long capacity) {
        this.n = size.length;
        this.lower = lower; this.upper = upper; this.size = size; this.alignment = alignment;
        this.capacity = capacity;
        var times = new TreeSet<Long>();
        for (int i = 0; i < n; i++) {
            if (size[i] <= 0 || upper[i] <= lower[i]) throw new CompilationException("buffer " + i + " has no size or no duration");
            times.add(lower[i]); times.add(upper[i]);
        }
        long[] t = times.stream().mapToLong(Long::longValue).toArray();
        sections = Math.max(0, t.length - 1);
        from = new int[n]; to = new int[n];
        int[] count = new int[sections];
        for (int i = 0; i < n; i++) {
            from[i] = Arrays.binarySearch(t, lower[i]);
            to[i] = Arrays.binarySearch(t, upper[i]);
            for (int s = from[i]; s < to[i]; s++) count[s]++;
        }
        inSection = new int[sections][];
        for (int s = 0; s < sections; s++) inSection[s] = new int[count[s]];
        Arrays.fill(count, 0);
        for (int i = 0; i < n; i++) for (int s = from[i]; s < to[i]; s++) inSection[s][count[s]++] = i;
        overlaps = new int[n][];
        int[] mark = new int[n];
        Arrays.fill(mark, -1);
        var list = new int[n];
        for (int i = 0; i < n; i++) {
            int k = 0;
            for (int s = from[i]; s < to[i]; s++) for (int j : inSection[s]) if (j != i && mark[j] != i) { mark[j] = i; list[k++] = j; }
            overlaps[i] = Arrays.copyOf(list, k);
        }
        twin = new int[n];
        Arrays.fill(twin, -1);
        var lastOfKind = new java.util.HashMap<List<Long>, Integer>();
        for (int i = 0; i < n; i++) {
            Integer prev = lastOfKind.put(List.of(lower[i], upper[i], size[i], alignment[i]), i);
            if (prev != null) twin[i] = prev;
        }
        offset = new long[n];
        minOffset = new long[n];
        unplaced = new int[sections];
        witness = new int[sections];
        total = new long[sections];
        cuts = new int[Math.max(0, sections - 1)];
        solution = new long[n];
        memberStamp = new int[n];
    }

    /** Nodes (placements tried) spent by the last {@link #solve}. */
    long nodesUsed() { return nodesUsed; }

    /**
     * Offsets within the capacity, or null when none was found within {@code nodeBudget} nodes (which does not
     * prove that none exists). Deterministic: the same input and budget give the same answer.
     */
    long[] solve(long nodeBudget) { return solve(nodeBudget, Long.MAX_VALUE); }

    /** As {@link #solve(long)}, also giving up at {@code deadline} ({@link System#nanoTime()}); the answer then depends on speed. */
    long[] solve(long nodeBudget, long deadline) {
        this.deadline = deadline;
        reset();
        nodesUsed = 0;
        for (int s = 0; s < sections; s++) if (total[s] > capacity) return null;
        if (n == 0) return new long[0];
        long limit = Math.max(2, n);
        while (nodesUsed < nodeBudget) {
            limit = Math.min(limit * 2, Math.max(1, nodeBudget - nodesUsed));
            for (Rank rank : Rank.values()) {
                long allowed = Math.min(limit, nodeBudget - nodesUsed);
                if (allowed <= 0) return null;
                nodesLeft = allowed;
                this.rank = rank;
                int status = solvePartitions();
                nodesUsed += allowed - nodesLeft;
                if (status == FOUND) return solution.clone();
                if (status == NOT_FOUND) return null;   // the search was complete: no placement exists
            }
        }
        return null;
    }

    private void reset() {
        Arrays.fill(offset, -1);
        Arrays.fill(minOffset, 0);
        Arrays.fill(unplaced, 0);
        Arrays.fill(total, 0);
        Arrays.fill(cuts, 0);
        for (int i = 0; i < n; i++) {
            for (int s = from[i]; s < to[i]; s++) { total[s] += size[i]; unplaced[s]++; witness[s] = i; }
            for (int s = from[i]; s < to[i] - 1; s++) cuts[s]++;
        }
        undoTop = 0;
    }

    /** Solves each independent time range in turn. */
    private int solvePartitions() {
        int start = 0;
        for (int s = 0; s < sections; s++) {
            if (s == sections - 1 || cuts[s] == 0) {
                int status = subSolve(start, s + 1);
                if (status != FOUND) return status;
                start = s + 1;
            }
        }
        return FOUND;
    }

    /** The unplaced buffers alive in sections [lo, hi), ranked, then searched. */
    private int subSolve(int lo, int hi) {
        int count = 0;
        int[] members = new int[n];
        stamp++;
        for (int s = lo; s < hi; s++) for (int i : inSection[s]) if (offset[i] < 0 && firstSight(i)) members[count++] = i;
        if (count == 0) return FOUND;
        long[][] keys = new long[count][];
        for (int k = 0; k < count; k++) {
            int i = members[k];
            long sectionTotal = 0;
            for (int s = from[i]; s < to[i]; s++) sectionTotal = Math.max(sectionTotal, total[s]);
            long width = upper[i] - lower[i], area = size[i] * width;
            keys[k] = switch (rank) {
                case WAT -> new long[]{width, area, sectionTotal, i};
                case TAW -> new long[]{sectionTotal, area, width, i};
                case TWA -> new long[]{sectionTotal, width, area, i};
            };
        }
        // larger first on every criterion, then the lower index
        Arrays.sort(keys, (a, b) -> {
            for (int c = 0; c < 3; c++) if (a[c] != b[c]) return Long.compare(b[c], a[c]);
            return Long.compare(a[3], b[3]);
        });
        int[] byRank = new int[count];
        for (int k = 0; k < count; k++) byRank[k] = (int) keys[k][3];
        long[] ordering = new long[count];
        for (int k = 0; k < count; k++) ordering[k] = k;   // min offsets are encoded on the fly
        return search(lo, hi, byRank, ordering, count, 0, -1);
    }

    /** True the first time buffer i is seen under the current stamp (a buffer spans several sections). */
    private boolean firstSight(int i) {
        if (memberStamp[i] == stamp) return false;
        memberStamp[i] = stamp;
        return true;
    }

    /**
     * Depth-first search in sections [lo, hi). {@code parent} holds the ranks of the buffers unplaced at the
     * parent node (low 20 bits of each entry); {@code lastOffset, lastRank} are those of the last placement.
     */
    private int search(int lo, int hi, int[] byRank, long[] parent, int parentCount, long lastOffset, int lastRank) {
        if (nodesLeft <= 0) return ABORTED;
        if ((--nodesLeft & 1023) == 0 && deadline != Long.MAX_VALUE && System.nanoTime() > deadline) { nodesLeft = 0; return ABORTED; }
        // unplaced buffers by (min offset, rank); the min offset must stay below 2^43 for this packing
        long[] ordering = new long[parentCount];
        int m = 0;
        long minTop = Long.MAX_VALUE;
        for (int k = 0; k < parentCount; k++) {
            int r = (int) (parent[k] & 0xFFFFF);
            int i = byRank[r];
            if (offset[i] >= 0) continue;
            ordering[m++] = (minOffset[i] << 20) | r;
            minTop = Math.min(minTop, minOffset[i] + size[i]);
        }
        if (m == 0) return FOUND;   // placements record themselves in the solution as the success unwinds
        Arrays.sort(ordering, 0, m);
        for (int k = 0; k < m; k++) {
            int r = (int) (ordering[k] & 0xFFFFF);
            int i = byRank[r];
            long at = minOffset[i];
            if (at >= minTop) break;                                        // dominance; later ones are higher still
            if (at < lastOffset || (at == lastOffset && r < lastRank)) continue;   // canonical order
            if (twin[i] >= 0 && offset[twin[i]] < 0) continue;             // its twin goes first
            int mark = undoTop;
            int status = place(i, at) && feasible(lo, hi, at) ? decompose(lo, hi, byRank, ordering, m, at, r, i) : NOT_FOUND;
            if (status == FOUND) solution[i] = at;
            boolean hatless = hatless(i);
            undo(mark, i);
            if (status != NOT_FOUND) return status;
            // nothing unplaced overlaps i: its placement constrained no one, so no other choice here does better
            if (hatless) return NOT_FOUND;
        }
        return NOT_FOUND;
    }

    private boolean hatless(int i) {
        for (int j : overlaps[i]) if (offset[j] < 0) return false;
        return true;
    }

    /** After placing buffer i: splits the range where no unplaced buffer crosses a boundary any more. */
    private int decompose(int lo, int hi, int[] byRank, long[] ordering, int m, long at, int r, int i) {
        int cutsFound = 0;
        for (int s = from[i]; s < to[i] - 1; s++) if (--cuts[s] == 0) cutsFound++;
        int status;
        if (cutsFound == 0) {
            status = search(lo, hi, byRank, ordering, m, at, r);
        } else {
            // both sides were checked with i placed; each is solved (and undone) on its own
            status = FOUND;
            int start = lo;
            for (int s = lo; s < hi && status == FOUND; s++) {
                if (s == hi - 1 || cuts[s] == 0) {
                    status = subSolve(start, s + 1);
                    start = s + 1;
                }
            }
        }
        for (int s = from[i]; s < to[i] - 1; s++) cuts[s]++;
        return status;
    }

    /**
     * Places buffer i at {@code at} and raises the min offsets of the unplaced buffers it overlaps. False when
     * some section it affects can no longer hold its remaining bytes: in a section, no unplaced buffer can go
     * below the lowest min offset of its unplaced buffers, so that offset plus the bytes still to place there
     * must fit. A section keeps a witness, an unplaced buffer low enough; only when the witness is placed or
     * raised too high is the section scanned for another (a witness is a hint and is never undone).
     */
    private boolean place(int i, long at) {
        offset[i] = at;
        long top = at + size[i];
        if (top > capacity) return false;
        for (int s = from[i]; s < to[i]; s++) { total[s] -= size[i]; unplaced[s]--; }
        int lo = from[i], hi = to[i];
        boolean fits = true;
        for (int j : overlaps[i]) {
            if (offset[j] >= 0 || minOffset[j] >= top) continue;
            log(j, minOffset[j]);
            minOffset[j] = OffsetAssigner.align(top, alignment[j]);
            if (minOffset[j] + size[j] > capacity) fits = false;   // j no longer fits under the capacity
            lo = Math.min(lo, from[j]);
            hi = Math.max(hi, to[j]);
        }
        if (!fits) return false;
        // the raised buffers all overlap i, so the sections they touch form one range around i's
        for (int s = lo; s < hi; s++) {
            if (unplaced[s] == 0) continue;
            long room = capacity - total[s];
            int w = witness[s];
            if (!(offset[w] < 0 && minOffset[w] <= room)) {
                w = -1;
                for (int j : inSection[s]) if (offset[j] < 0 && minOffset[j] <= room) { w = j; break; }
                if (w < 0) return false;
                witness[s] = w;
            }
        }
        return true;
    }

    /** Monotonic floor: no later placement goes below {@code at}, so every section of [lo, hi) must hold its rest above it. */
    private boolean feasible(int lo, int hi, long at) {
        long room = capacity - at;
        for (int s = lo; s < hi; s++) if (total[s] > room) return false;
        return true;
    }

    private void log(int index, long value) {
        if (undoTop == undoIndex.length) {
            undoIndex = Arrays.copyOf(undoIndex, undoTop * 2);
            undoValue = Arrays.copyOf(undoValue, undoTop * 2);
        }
        undoIndex[undoTop] = index;
        undoValue[undoTop++] = value;
    }

    private void undo(int mark, int i) {
        while (undoTop > mark) {
            undoTop--;
            minOffset[undoIndex[undoTop]] = undoValue[undoTop];
        }
        if (offset[i] + size[i] <= capacity) for (int s = from[i]; s < to[i]; s++) { total[s] += size[i]; unplaced[s]++; }
        offset[i] = -1;
    }
}
