package dev.gatun.planner;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.graph.CollectiveKind;

import java.util.ArrayList;
import java.util.List;

/**
 * The passes over the step list that change how collectives run, each switched by {@link PlanOptions} and
 * printed in the plan:
 * <ol>
 *   <li><b>fused copy-in</b>: a path-2 copy_in whose buffer the next collective reads (only placements
 *   between) becomes part of that collective, which copies the caller's tensor in before its first barrier:
 *   one launch fewer per call.</li>
 *   <li><b>batching</b>: consecutive one-shot all-reduces (only placements between) of one group, pool, dtype
 *   and operation, none reading another's result and no output overlapping another member's slots, become one
 *   {@link Step.CollectiveBatch}: one launch and one pair of barriers for all (the placements move before it).
 *   Barrier-free all-reduces batch the same way: one launch, each member with its own rotating slots.</li>
 * </ol>
 */
final class CollectivePasses {
    private CollectivePasses() {}

    static List<Step> apply(List<Step> steps, PlanOptions options) {
        List<Step> out = steps;
        if (options.fuseCopyIns()) out = fuseCopyIns(out);
        if (options.batchCollectives() > 1) out = batch(out, options.batchCollectives());
        return out;
    }

    static List<Step> fuseCopyIns(List<Step> steps) {
        var out = new ArrayList<Step>(steps.size());
        for (int i = 0; i < steps.size(); i++) {
            if (steps.get(i) instanceof Step.CopyIn copy && !copy.buffer().isDynamic()) {
                int j = i + 1;
                while (j < steps.size() && steps.get(j) instanceof Step.Place) j++;
                if (j < steps.size() && steps.get(j) instanceof Step.Collective c && c.input() == copy.buffer() && c.call().algorithm().isSymmetric()) {
                    out.addAll(steps.subList(i + 1, j));
                    out.add(c.withCopiesIn());
                    i = j;
                    continue;
                }
            }
            out.add(steps.get(i));
        }
        return out;
    }

    static List<Step> batch(List<Step> steps, int max) {
        var out = new ArrayList<Step>(steps.size());
        for (int i = 0; i < steps.size(); i++) {
            if (!(steps.get(i) instanceof Step.Collective c) || !batchable(c)) {
                out.add(steps.get(i));
                continue;
            }
            var members = new ArrayList<Step.Collective>(List.of(c));
            var places = new ArrayList<Step>();
            int next = i + 1, end = i + 1;
            for (int j = i + 1; j < steps.size() && members.size() < max; j++) {
                Step s = steps.get(j);
                if (s instanceof Step.Place) continue;
                if (!(s instanceof Step.Collective d && batchable(d) && joins(members, d))) break;
                for (int k = next; k < j; k++) places.add(steps.get(k));
                members.add(d);
                next = end = j + 1;
            }
            if (members.size() == 1) {
                out.add(c);
                continue;
            }
            out.addAll(places);
            out.add(new Step.CollectiveBatch(members));
            i = end - 1;
        }
        return out;
    }

    private static boolean batchable(Step.Collective c) {
        return c.call().kind() == CollectiveKind.ALL_REDUCE && (c.call().algorithm() == Algorithm.ONE_SHOT || c.call().algorithm() == Algorithm.BARRIER_FREE)
                && !c.copiesIn() && c.input().storage().placement() != null && c.output().storage().placement() != null;
    }

    /** Same algorithm, group, operation, dtype and input pool; reads no member's result; writes over no member's slots. */
    private static boolean joins(List<Step.Collective> members, Step.Collective d) {
        Step.Collective first = members.getFirst();
        if (first.call().algorithm() != d.call().algorithm() || !first.call().group().equals(d.call().group()) || first.call().reduceOp() != d.call().reduceOp()
                || first.input().dtype() != d.input().dtype()
                || !first.input().storage().placement().pool().equals(d.input().storage().placement().pool())) return false;
        boolean free = d.call().algorithm() == Algorithm.BARRIER_FREE;
        for (Step.Collective c : members) {
            if (d.input().storage() == c.output().storage() || !d.input().shape().isStatic()) return false;
            if (overlaps(d.output(), c.output())) return false;
            // peers read a one-shot's inputs until the batch's end; a barrier-free batch's block pushes its tile of an
            // earlier member's input before it stores its tile of a later member's result: the same bytes where both
            // start at the same place and have the same element size and count
            if (overlaps(d.output(), c.input()) && !(free && sameTiles(d.output(), c.input()))) return false;
            if (free && d.input().shape().numel() != c.input().shape().numel()) return false;
        }
        return true;
    }

    private static boolean sameTiles(PlanBuffer a, PlanBuffer b) {
        return a.storage() == a && b.storage() == b && a.placement().offset() == b.placement().offset()
                && a.dtype().byteSize() == b.dtype().byteSize() && a.shape().numel() == b.shape().numel();
    }

    /** Whether the storages of {@code x} and {@code y} share bytes of a pool (never where either is in none). */
    static boolean overlaps(PlanBuffer x, PlanBuffer y) {
        var a = x.storage().placement();
        var b = y.storage().placement();
        return a != null && b != null && a.pool().equals(b.pool()) && a.offset() < b.offset() + b.bytes() && b.offset() < a.offset() + a.bytes();
    }
}
