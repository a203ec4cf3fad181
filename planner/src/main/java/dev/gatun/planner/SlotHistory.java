package dev.gatun.planner;

import dev.gatun.lowering.Buffer;

import dev.gatun.lowering.LoweredGraph;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * The history of every pool slot, kept as part of the plan ({@link Plan#slots()}): who occupies it when, and who
 * occupied it before. The pool planners report each buffer's interval over the order of work and the occupant
 * it follows; once the steps are final, {@link #slots} turns work indices into step indices, so pictures and
 * checks read the planner's own intervals instead of reconstructing them.
 */
final class SlotHistory {
    // by lowered buffer (see ByBuffer)
    private final ByBuffer<String> reuses;
    private final ByBuffer.Set inPlace;
    /**
     * Def ({@link #NONE}: no interval, a persistent buffer), local end, cross-rank end (-1: none), in work indices, by
     * buffer id: three int arrays, not an {@code int[3]} per buffer to chase.
     */
    private final int[] defAt, localEndAt, crossEndAt;
    private static final int NONE = Integer.MIN_VALUE;

    SlotHistory(LoweredGraph graph) {
        reuses = new ByBuffer<>(graph);
        inPlace = new ByBuffer.Set(graph);
        int n = graph.buffers().size();
        defAt = new int[n];
        localEndAt = new int[n];
        crossEndAt = new int[n];
        Arrays.fill(defAt, NONE);
    }

    void interval(Buffer b, int def, int localEnd, int crossEnd) {
        defAt[b.id()] = def;
        localEndAt[b.id()] = localEnd;
        crossEndAt[b.id()] = crossEnd;
    }

    void inPlace(Buffer out, Buffer in) {
        reuses.put(out, in.name());
        inPlace.add(out);
    }

    String reuses(Buffer b) { return reuses.get(b); }

    boolean isInPlace(Buffer b) { return inPlace.contains(b); }

    /**
     * Records placements and, for each buffer, the earlier occupant of its slot if any: among the items
     * that ended by its start and share a byte with it, the one that ended last (the first of those in
     * item order on ties). A sweep over time paints each ended item's byte range into a segment map,
     * in order of end and then of falling index, so that a query reads the latest occupant of every byte.
     */
    void record(String pool, List<Buffer> bufs, List<OffsetAssigner.Item> items, OffsetAssigner.Result r, ByBuffer<PlanBuffer.Placement> placements) {
        int n = bufs.size();
        long[] off = r.offsets();
        for (int i = 0; i < n; i++) placements.put(bufs.get(i), new PlanBuffer.Placement(pool, off[i], items.get(i).size()));
        long[] lower = new long[n], upper = new long[n];
        for (int i = 0; i < n; i++) {
            lower[i] = items.get(i).lower();
            upper[i] = items.get(i).upper();
        }
        int[] byEnd = IndexSort.byKey(upper, true);
        int[] byStart = IndexSort.byKey(lower, false);   // ties in item order, as the stable sort this replaces
        var paint = new PaintMap();
        int e = 0;
        for (int q : byStart) {
            OffsetAssigner.Item it = items.get(q);
            while (e < n && items.get(byEnd[e]).upper() <= it.lower()) {
                int j = byEnd[e++];
                long a = off[j], b = off[j] + items.get(j).size();
                if (a < b) paint.paint(a, b, j);
            }
            long a = off[q], b = off[q] + it.size();
            if (a >= b || it.upper() == it.lower()) continue;
            int prev = -1;
            int lo = paint.lower(a);
            if (lo >= 0 && paint.ends[lo] > a) prev = paint.items[lo];
            for (int k = lo + 1; k < paint.size && paint.starts[k] < b; k++) prev = better(items, prev, paint.items[k]);
            if (prev >= 0) reuses.put(bufs.get(q), items.get(prev).id());
        }
    }

    private static int better(List<OffsetAssigner.Item> items, int x, int y) {
        if (x < 0) return y;
        long ux = items.get(x).upper(), uy = items.get(y).upper();
        return uy > ux || (uy == ux && y < x) ? y : x;
    }

    /**
     * The slots of the final steps, one per {@link Step.Place} in step order. A work index becomes the index of the
     * step that runs the work (found by what it writes: a batch runs several); the end of the order becomes the
     * last step, or for a cross-rank end the group's final barrier.
     */
    List<Plan.Slot> slots(List<Step> steps, Liveness live, BufferTable table) {
        var writtenAt = new StepOf(table.all().size());   // by plan buffer id
        var copiedAt = new StepOf(table.all().size());
        var finalBarrier = new java.util.HashMap<String, Integer>();   // a few groups
        for (int i = 0; i < steps.size(); i++) {
            Step step = steps.get(i);
            if (step instanceof Step.Place) continue;   // writes and copies in nothing: most steps, skipped unasked
            var copied = step.copiedIn();
            for (int k = 0; k < copied.size(); k++) copiedAt.put(copied.get(k), i);
            var writes = step.writes();
            for (int k = 0; k < writes.size(); k++) if (!copied.contains(writes.get(k))) writtenAt.put(writes.get(k), i);
            if (step instanceof Step.Barrier b) finalBarrier.put(b.group(), i);
        }
        int last = steps.size() - 1;
        int[] stepOfWork = new int[live.n];
        for (int i = 0; i < live.n; i++) {
            var writes = live.order.get(i).writes();
            stepOfWork[i] = writes.isEmpty() ? -1 : writtenAt.getOrDefault(table.of(writes.getFirst()), -1);
        }
        var out = new ArrayList<Plan.Slot>(steps.size() / 2);
        for (Step s : steps) {
            if (!(s instanceof Step.Place p)) continue;
            PlanBuffer b = p.buffer();
            int id = b.id();   // a plan buffer's id is its lowered buffer's
            int first, localEnd, cross = -1;
            if (defAt[id] == NONE) { // persistent: from its copy in (or the start) to the end
                first = copiedAt.getOrDefault(b, 0);
                localEnd = last;
            } else {
                first = stepOfWork[defAt[id]];
                localEnd = localEndAt[id] >= live.n ? last : stepOfWork[localEndAt[id]];
                int crossEnd = crossEndAt[id];
                if (crossEnd >= 0) cross = crossEnd >= live.n ? finalBarrier.getOrDefault(b.group(), last) : stepOfWork[crossEnd];
            }
            out.add(new Plan.Slot(b, p.pool(), p.offset(), p.bytes(), first, Math.max(localEnd, cross), localEnd, cross, p.reuses(), p.inPlace()));
        }
        return out;
    }

    /**
     * The painted bytes of a pool: disjoint segments [start, end) of byte offsets, each with the item painted last,
     * sorted by start in three parallel arrays (a pool's painted segments are few: at most its arena over its
     * smallest item), found by binary search. Painting splices the segments it covers out and its own (and the
     * uncovered tail of a segment it cuts) in, with no boxed keys or entries.
     */
    private static final class PaintMap {
        long[] starts = new long[16], ends = new long[16];
        int[] items = new int[16];
        int size;

        /** The index of the last segment starting before {@code a}, or -1. */
        int lower(long a) {
            int lo = 0, hi = size;   // first index with start >= a
            while (lo < hi) {
                int mid = (lo + hi) >>> 1;
                if (starts[mid] < a) lo = mid + 1;
                else hi = mid;
            }
            return lo - 1;
        }

        /** Paints [a, b) with {@code item}: what it covers is replaced, segments it cuts keep their uncovered parts. */
        void paint(long a, long b, int item) {
            int lo = lower(a);
            int hi = lo + 1;   // the segments starting in [a, b): [lo + 1, hi)
            while (hi < size && starts[hi] < b) hi++;
            long tailEnd = -1;
            int tailItem = -1;
            if (lo >= 0 && ends[lo] > a) {   // cut the segment that starts before a
                if (ends[lo] > b) { tailEnd = ends[lo]; tailItem = items[lo]; }
                ends[lo] = a;
            }
            if (hi > lo + 1 && ends[hi - 1] > b) { tailEnd = ends[hi - 1]; tailItem = items[hi - 1]; }
            int added = tailEnd >= 0 ? 2 : 1;
            splice(lo + 1, hi, added);
            starts[lo + 1] = a;
            ends[lo + 1] = b;
            items[lo + 1] = item;
            if (added == 2) {
                starts[lo + 2] = b;
                ends[lo + 2] = tailEnd;
                items[lo + 2] = tailItem;
            }
        }

        /** Replaces the segments [from, to) by {@code count} slots to fill. */
        private void splice(int from, int to, int count) {
            int newSize = size - (to - from) + count;
            if (newSize > starts.length) {
                int cap = Math.max(newSize, starts.length * 2);
                starts = Arrays.copyOf(starts, cap);
                ends = Arrays.copyOf(ends, cap);
                items = Arrays.copyOf(items, cap);
            }
            int tail = size - to;
            System.arraycopy(starts, to, starts, from + count, tail);
            System.arraycopy(ends, to, ends, from + count, tail);
            System.arraycopy(items, to, items, from + count, tail);
            size = newSize;
        }
    }

    /** The step at which each plan buffer (by id) is written or copied in; absent where none is. */
    private static final class StepOf {
        private final int[] step;

        StepOf(int buffers) {
            step = new int[buffers];
            Arrays.fill(step, -1);
        }

        void put(PlanBuffer b, int at) { step[b.id()] = at; }

        int getOrDefault(PlanBuffer b, int otherwise) { return step[b.id()] >= 0 ? step[b.id()] : otherwise; }
    }
}
