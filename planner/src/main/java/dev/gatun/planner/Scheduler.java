package dev.gatun.planner;

import dev.gatun.ir.lower.Buffer;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

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
    private final Set<Buffer> outputs;
    private final int[][] deps, users;
    private final Map<Buffer, Integer> writer = new IdentityHashMap<>();
    private final Map<Buffer, List<Integer>> readers = new IdentityHashMap<>();

    private Scheduler(List<Work> works, Set<Buffer> outputs) {
        this.works = works;
        this.outputs = outputs;
        int n = works.size();
        for (int i = 0; i < n; i++) for (Buffer b : works.get(i).writes()) writer.put(b, i);
        var d = new ArrayList<TreeSet<Integer>>();
        var u = new ArrayList<TreeSet<Integer>>();
        for (int i = 0; i < n; i++) { d.add(new TreeSet<>()); u.add(new TreeSet<>()); }
        for (int i = 0; i < n; i++) {
            for (Buffer b : works.get(i).reads()) {
                readers.computeIfAbsent(b, k -> new ArrayList<>()).add(i);
                Integer w = writer.get(b);
                if (w != null && w != i) { d.get(i).add(w); u.get(w).add(i); }
            }
        }
        deps = new int[n][];
        users = new int[n][];
        for (int i = 0; i < n; i++) {
            deps[i] = d.get(i).stream().mapToInt(Integer::intValue).toArray();
            users[i] = u.get(i).stream().mapToInt(Integer::intValue).toArray();
        }
    }

    static Choice choose(List<Work> works, Set<Buffer> outputs, boolean reorder) {
        var s = new Scheduler(works, outputs);
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
            long peak = s.peak(order);
            if (peak < best.peak()) {
                var list = new ArrayList<Work>();
                for (int i : order) list.add(works.get(i));
                best = new Choice(list, (String) candidate[0], peak, plainPeak);
            }
        }
        return best;
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
        for (var e : writer.entrySet()) {
            Buffer b = e.getKey();
            int start = pos[e.getValue()];
            int end = start;
            if (outputs.contains(b)) end = n;
            else for (int r : readers.getOrDefault(b, List.of())) end = Math.max(end, pos[r]);
            delta[start] += bytes(b);
            if (end < n) delta[end + 1] -= bytes(b);
        }
        long live = 0, peak = 0;
        for (int i = 0; i < n; i++) { live += delta[i]; peak = Math.max(peak, live); }
        return peak;
    }

    private int[] greedy() {
        int n = works.size();
        int[] missing = new int[n];
        for (int i = 0; i < n; i++) missing[i] = deps[i].length;
        var remainingReaders = new IdentityHashMap<Buffer, Integer>();
        readers.forEach((b, r) -> remainingReaders.put(b, (int) r.stream().distinct().count()));
        var ready = new TreeSet<Integer>();
        for (int i = 0; i < n; i++) if (missing[i] == 0) ready.add(i);
        int[] order = new int[n];
        for (int k = 0; k < n; k++) {
            int pick = -1;
            long bestDelta = Long.MAX_VALUE;
            int seen = 0;
            for (int i : ready) {
                if (seen++ >= GREEDY_WINDOW) break;
                long d = 0;
                for (Buffer b : works.get(i).writes()) d += bytes(b);
                for (Buffer b : works.get(i).reads())
                    if (writer.containsKey(b) && !outputs.contains(b) && remainingReaders.getOrDefault(b, 0) == 1) d -= bytes(b);
                if (d < bestDelta) { bestDelta = d; pick = i; }
            }
            ready.remove(pick);
            order[k] = pick;
            for (Buffer b : works.get(pick).reads()) remainingReaders.merge(b, -1, Integer::sum);
            for (int u : users[pick]) if (--missing[u] == 0) ready.add(u);
        }
        return order;
    }

    private int[] breadthFirst() {
        int n = works.size();
        int[] missing = new int[n];
        for (int i = 0; i < n; i++) missing[i] = deps[i].length;
        var queue = new ArrayDeque<Integer>();
        for (int i = 0; i < n; i++) if (missing[i] == 0) queue.add(i);
        int[] order = new int[n];
        int k = 0;
        while (!queue.isEmpty()) {
            int i = queue.poll();
            order[k++] = i;
            for (int u : users[i]) if (--missing[u] == 0) queue.add(u);
        }
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
