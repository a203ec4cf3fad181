package dev.gatun.planner;

import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ExternCall;

import java.util.List;

/**
 * Which all_to_alls of the chosen order run as one step ({@link Step.JoinedAllToAll}), decided on the order itself,
 * before the memory planner, so that it places their buffers for the joined step: consecutive works that are
 * all_to_alls on symmetric memory of one group, of static shapes, none reading another's result (no path between
 * them), at most {@code max} of them. In the joined step a peer may read any part's rows and counts, and write any
 * part's receive buffer, from its starting barrier to its ending one, so {@link Liveness} holds every part's inputs to
 * the run's last work and every part's result from the run's first ({@link #first}, {@link #last}).
 */
final class AllToAllRuns {
    /** By work index: the first and the last work of its run (the work itself where it runs alone). */
    private final int[] first, last;

    private AllToAllRuns(int n) {
        first = new int[n];
        last = new int[n];
        for (int i = 0; i < n; i++) first[i] = last[i] = i;
    }

    /** The runs of {@code order}; {@code max} below 2 joins nothing. */
    static AllToAllRuns of(List<Work> order, int max) {
        var runs = new AllToAllRuns(order.size());
        if (max < 2) return runs;
        for (int i = 0; i < order.size(); ) {
            int j = i + 1;
            if (joinable(order.get(i)) != null)
                while (j < order.size() && j - i < max && joins(order, i, j)) j++;
            for (int k = i; k < j; k++) {
                runs.first[k] = i;
                runs.last[k] = j - 1;
            }
            i = j;
        }
        return runs;
    }

    int first(int work) { return first[work]; }
    int last(int work) { return last[work]; }

    /** Whether work {@code i} runs joined with others. */
    boolean isJoined(int i) { return first[i] != last[i]; }

    /** The all_to_all on symmetric memory of static shapes that {@code w} is, or null. */
    private static ExternCall.Collective joinable(Work w) {
        if (!(w instanceof Work.ExternWork e) || !(e.call().call() instanceof ExternCall.Collective c)) return null;
        if (c.kind() != CollectiveKind.ALL_TO_ALL || !c.algorithm().isSymmetric()) return null;
        if (!e.call().type().shape().isStatic()) return null;
        for (Buffer b : e.call().inputs()) if (!b.type().shape().isStatic()) return null;
        return c;
    }

    /** Whether work {@code j} joins the run of works {@code [i, j)}: of the same group, reading none of their results. */
    private static boolean joins(List<Work> order, int i, int j) {
        ExternCall.Collective c = joinable(order.get(j)), head = joinable(order.get(i));
        if (c == null || !c.group().equals(head.group())) return false;
        for (int k = i; k < j; k++)
            for (Buffer w : order.get(k).writes())
                for (Buffer r : order.get(j).reads()) if (r.storage() == w.storage() || Slices.storage(r) == Slices.storage(w)) return false;
        return true;
    }
}
