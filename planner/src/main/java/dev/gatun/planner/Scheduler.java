package dev.gatun.planner;

import dev.gatun.lowering.Buffer;

import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;

/**
 * Chooses a topological order of the fused works that keeps peak memory low: it estimates the peak of a
 * few orders by liveness (the plain fusion order, a greedy "least memory first", breadth-first and
 * depth-first) and keeps the lowest, preferring the plain order on ties.
 */
final class Scheduler {
    /** How many ready works the greedy order compares at each step. */
    private static final int GREEDY_WINDOW = 64;

    record Choice(List<Work> order, String name, long peak, long plainPeak) {}

    private final List<Work> works;
    private final int[][] deps, users;
    // buffers by dense id: liveness only needs their sizes, writers and readers, looked up millions of times
    private final long[] bytes;
    private final int[] writerOf;              // last work writing each buffer, or -1
    private final boolean[] isOutput;
    private final int[][] readersOf;           // works reading each buffer, in work order, repeats kept
    private final int[] distinctReaders;
    private final int[][] readIds, writeIds;   // per work, its reads and writes as buffer ids, repeats kept

    private Scheduler(List<Work> works, ByBuffer.Set outputs, int graphBuffers) {
        this.works = works;
        int n = works.size();
        int[] ids = new int[graphBuffers];   // by Buffer.id(): the buffer's id here plus one, 0 until it has one
        var buffers = new ArrayList<Buffer>();
        readIds = new int[n][];
        writeIds = new int[n][];
        for (int i = 0; i < n; i++) {
            readIds[i] = idsOf(Slices.withWriters(works.get(i).reads()), ids, buffers);   // a concatenation waits for its parts
            writeIds[i] = idsOf(works.get(i).writes(), ids, buffers);
        }
        int m = buffers.size();
        bytes = new long[m];
        isOutput = new boolean[m];
        for (int b = 0; b < m; b++) { bytes[b] = bytes(buffers.get(b)); isOutput[b] = outputs.contains(buffers.get(b)); }
        writerOf = new int[m];
        Arrays.fill(writerOf, -1);
        for (int i = 0; i < n; i++) for (int b : writeIds[i]) writerOf[b] = i;
        int[] readCount = new int[m];
        for (int[] r : readIds) for (int b : r) readCount[b]++;
        readersOf = new int[m][];
        for (int b = 0; b < m; b++) readersOf[b] = new int[readCount[b]];
        Arrays.fill(readCount, 0);
        distinctReaders = new int[m];
        int[] lastReader = new int[m];
        Arrays.fill(lastReader, -1);
        int[] depCount = new int[n], userCount = new int[n];
        for (int i = 0; i < n; i++) {
            for (int b : readIds[i]) {
                readersOf[b][readCount[b]++] = i;
                if (lastReader[b] != i) { lastReader[b] = i; distinctReaders[b]++; }
                int w = writerOf[b];
                if (w >= 0 && w != i) { depCount[i]++; userCount[w]++; }
            }
        }
        deps = new int[n][];
        users = new int[n][];
        for (int i = 0; i < n; i++) { deps[i] = new int[depCount[i]]; users[i] = new int[userCount[i]]; }
        Arrays.fill(depCount, 0);
        Arrays.fill(userCount, 0);
        for (int i = 0; i < n; i++) {
            for (int b : readIds[i]) {
                int w = writerOf[b];
                if (w >= 0 && w != i) { deps[i][depCount[i]++] = w; users[w][userCount[w]++] = i; }
            }
        }
        // ascending and without repeats, as the sorted sets these replace
        for (int i = 0; i < n; i++) { deps[i] = sortedDistinct(deps[i]); users[i] = sortedDistinct(users[i]); }
    }

    private static int[] idsOf(List<Buffer> list, int[] ids, List<Buffer> buffers) {
        int[] out = new int[list.size()];
        for (int k = 0; k < out.length; k++) {
            Buffer b = list.get(k);
            if (ids[b.id()] == 0) { buffers.add(b); ids[b.id()] = buffers.size(); }
            out[k] = ids[b.id()] - 1;
        }
        return out;
    }

    private static int[] sortedDistinct(int[] a) {
        if (a.length < 2) return a;
        Arrays.sort(a);
        int k = 1;
        for (int i = 1; i < a.length; i++) if (a[i] != a[k - 1]) a[k++] = a[i];
        return k == a.length ? a : Arrays.copyOf(a, k);
    }

    /** A scheduler of {@code works} (for tests of its orders; {@link #choose} is the planner's way in). */
    static Scheduler of(List<Work> works, ByBuffer.Set outputs, int graphBuffers) { return new Scheduler(works, outputs, graphBuffers); }

    /** {@code graphBuffers}: how many buffers the lowered graph of the works has (their {@link Buffer#id()}s are below it). */
    static Choice choose(List<Work> works, ByBuffer.Set outputs, boolean reorder, int graphBuffers) {
        var s = new Scheduler(works, outputs, graphBuffers);
        int[] plain = new int[works.size()];
        for (int i = 0; i < plain.length; i++) plain[i] = i;
        long plainPeak = s.peak(plain);
        Choice best = new Choice(works, "plain", plainPeak, plainPeak);
        if (!reorder) return best;
        for (var candidate : List.of(
                new Object[]{"least-memory-first", s.greedy()},
                new Object[]{"breadth-first", s.breadthFirst()},
                new Object[]{"depth-first", s.depthFirst()})) {
            int[] order = (int[]) candidate[1];
            String name = (String) candidate[0];
            long peak = s.peak(order);
            int[] hoisted = s.shrinkingEarly(order);
            long hoistedPeak = s.peak(hoisted);
            if (hoistedPeak <= peak && !Arrays.equals(hoisted, order)) { order = hoisted; peak = hoistedPeak; name += ", shrinking works early"; }
            if (peak < best.peak()) {
                var list = new ArrayList<Work>();
                for (int i : order) list.add(works.get(i));
                best = new Choice(list, name, peak, plainPeak);
            }
        }
        return best;
    }

    /**
     * {@code order} with each work that frees more than it writes (the last reader of large inputs, with a small result:
     * a loss's gather from the logits) moved to just after its last dependency and its inputs' other readers: its
     * inputs die there instead of where the order had put it. Between the two places the live bytes fall by
     * the difference; only at the work's new place do they rise, by its small result, so the caller keeps whichever of
     * the two orders peaks lower (the moved one on a tie: its other bytes die sooner).
     */
    int[] shrinkingEarly(int[] order) {
        int n = order.length;
        int[] o = order.clone(), pos = new int[n];
        for (int i = 0; i < n; i++) pos[o[i]] = i;
        for (int k = 0; k < n; k++) {
            int w = o[k];
            // just after its dependencies and its inputs' other readers: there it is the last reader of each input
            int to = 0;
            long written = 0, freed = 0;
            for (int d : deps[w]) to = Math.max(to, pos[d] + 1);
            for (int b : writeIds[w]) written += bytes[b];
            for (int b : sortedDistinct(readIds[w].clone())) {
                if (writerOf[b] < 0 || isOutput[b]) continue;
                for (int r : readersOf[b]) if (r != w) to = Math.max(to, pos[r] + 1);
                freed += bytes[b];
            }
            if (to >= k || freed <= written) continue;
            System.arraycopy(o, to, o, to + 1, k - to);
            o[to] = w;
            for (int i = to; i <= k; i++) pos[o[i]] = i;
        }
        return o;
    }

    private static long bytes(Buffer b) {
        var t = b.type();
        return t.shape().isStatic() ? t.byteSize() : t.dtype().byteSize();
    }

    /** Peak of live bytes: a buffer lives from its writer until its last reader (outputs to the end). */
    long peak(int[] order) {
        int n = order.length;
        int[] pos = new int[n];
        for (int i = 0; i < n; i++) pos[order[i]] = i;
        long[] delta = new long[n + 1];
        for (int b = 0; b < bytes.length; b++) {
            if (writerOf[b] < 0) continue;
            int start = pos[writerOf[b]];
            int end = start;
            if (isOutput[b]) end = n;
            else for (int r : readersOf[b]) end = Math.max(end, pos[r]);
            delta[start] += bytes[b];
            if (end < n) delta[end + 1] -= bytes[b];
        }
        long live = 0, peak = 0;
        for (int i = 0; i < n; i++) { live += delta[i]; peak = Math.max(peak, live); }
        return peak;
    }

    private int[] greedy() {
        int n = works.size();
        int[] missing = new int[n];
        for (int i = 0; i < n; i++) missing[i] = deps[i].length;
        int[] remainingReaders = distinctReaders.clone();
        long[] writeBytes = new long[n];
        for (int i = 0; i < n; i++) for (int b : writeIds[i]) writeBytes[i] += bytes[b];
        var ready = new BitSet(n);   // looked at in ascending order from the lowest, as a sorted set of boxed ints was
        for (int i = 0; i < n; i++) if (missing[i] == 0) ready.set(i);
        int lowest = ready.nextSetBit(0);
        int[] order = new int[n];
        for (int k = 0; k < n; k++) {
            int pick = -1;
            long bestDelta = Long.MAX_VALUE;
            int seen = 0;
            for (int i = lowest; i >= 0 && seen++ < GREEDY_WINDOW; i = ready.nextSetBit(i + 1)) {
                long d = writeBytes[i];
                for (int b : readIds[i])
                    if (writerOf[b] >= 0 && !isOutput[b] && remainingReaders[b] == 1) d -= bytes[b];
                if (d < bestDelta) { bestDelta = d; pick = i; }
            }
            order[k] = pick;
            for (int b : readIds[pick]) remainingReaders[b]--;
            for (int u : users[pick]) if (--missing[u] == 0) { ready.set(u); lowest = Math.min(lowest, u); }
            ready.clear(pick);   // after its users are set: a BitSet that loses its highest bit looks down for the next one
            if (pick == lowest) lowest = ready.nextSetBit(lowest);
        }
        return order;
    }

    private int[] breadthFirst() {
        int n = works.size();
        int[] missing = new int[n];
        for (int i = 0; i < n; i++) missing[i] = deps[i].length;
        int[] order = new int[n];   // also the queue: the works before head are placed, those from head to tail wait
        int tail = 0;
        for (int i = 0; i < n; i++) if (missing[i] == 0) order[tail++] = i;
        for (int head = 0; head < tail; head++)
            for (int u : users[order[head]]) if (--missing[u] == 0) order[tail++] = u;
        return order;
    }

    /** Post-order from the last work backwards, so each value is consumed soon after it is made. */
    private int[] depthFirst() {
        int n = works.size();
        boolean[] done = new boolean[n];
        int[] order = new int[n];
        int[] k = {0};
        for (int root = n - 1; root >= 0; root--) {
            if (done[root]) continue;
            // iterative post-order over dependencies
            var stack = new ArrayDeque<int[]>();
            stack.push(new int[]{root, 0});
            while (!stack.isEmpty()) {
                int[] top = stack.peek();
                int node = top[0];
                if (done[node]) { stack.pop(); continue; }
                if (top[1] < deps[node].length) {
                    int d = deps[node][top[1]++];
                    if (!done[d]) stack.push(new int[]{d, 0});
                } else {
                    stack.pop();
                    done[node] = true;
                    order[k[0]++] = node;
                }
            }
        }
        // roots were visited last-first; the post-order is still topological
        return order;
    }
}
