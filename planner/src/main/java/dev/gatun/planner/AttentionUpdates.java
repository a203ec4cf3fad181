package dev.gatun.planner;

import java.util.ArrayList;
import java.util.List;

/**
 * Attention updates, a pass over the step list after {@link UpdateBatching}: the update of an attention's two caches
 * at its position, right before it (only placements between), joins it as one {@link Step.UpdateAttention}. A decode
 * layer writes its new key and value into the caches, then attends over them: one launch a layer fewer, and the
 * attention's kernel takes the new key and value from where the update reads them instead of waiting for them to
 * land in the caches.
 *
 * <p>What makes one launch compute what the two would is the step's own rule ({@link Step.UpdateAttention#misfit}):
 * the batch is two updates, one of the keys' cache (transposed: positions last) and one of the values' (positions
 * second to last), each the storage the attention reads, of rank 3 or 4 (a batch, heads where there are, then the head
 * and the positions), each of one position at the attention's position; the updates write nothing else the attention
 * reads (its queries, its position). Any other update stays a launch of its own. The memory planner is told
 * beforehand ({@link #widenReads}): the attention's output never takes the slot of the new key or value, which the one
 * launch reads.
 */
final class AttentionUpdates {
    private AttentionUpdates() {}

    /**
     * Before liveness: each attention in {@code order} right after updates (the works this pass may join to it) is taken
     * to read what they read as well. Joined, the one launch reads the new key and value while its blocks write the
     * attention's output, in any order, so the output must not be given their slot; apart it may be (the update has
     * read them by then), and the memory planner would do it. An update this pass then leaves apart only keeps its
     * sources one step longer.
     */
    static List<Work> widenReads(List<Work> order) {
        var out = new ArrayList<Work>(order);
        for (int i = 0; i < order.size(); i++) {
            if (!(order.get(i) instanceof Work.ExternWork a) || !calls(a, dev.gatun.ir.ops.Attention.SPEC)) continue;
            var reads = new ArrayList<>(a.reads());
            for (int j = i - 1; j >= 0 && order.get(j) instanceof Work.ExternWork u && calls(u, dev.gatun.ir.ops.UpdateSlice.SPEC); j--)
                for (var b : u.reads()) if (!reads.contains(b)) reads.add(b);
            if (reads.size() > a.reads().size()) out.set(i, new Work.ExternWork(a.call(), a.writes(), reads));
        }
        return out;
    }

    /** Whether {@code w} is a call of the registered op {@code spec}. */
    private static boolean calls(Work.ExternWork w, dev.gatun.ir.graph.OpSpec spec) {
        return w.call().call() instanceof dev.gatun.lowering.ExternCall.Registered r && r.spec() == spec;
    }

    static List<Step> apply(List<Step> input) {
        var out = new ArrayList<Step>(input.size());
        int made = 0;
        for (int i = 0; i < input.size(); i++) {
            if (!(input.get(i) instanceof Step.UpdateSlices u)) {
                out.add(input.get(i));
                continue;
            }
            int after = i + 1;
            while (after < input.size() && input.get(after) instanceof Step.Place) after++;
            AttentionCall a = after < input.size() ? AttentionCall.find(input.get(after)) : null;
            if (a != null && Step.UpdateAttention.misfit(u, a) == null) {
                out.addAll(input.subList(i + 1, after));   // the attention's placements move before the launch
                out.add(new Step.UpdateAttention("attend_" + made++, u, a));
                i = after;
                continue;
            }
            out.add(u);
        }
        return out;
    }
}
