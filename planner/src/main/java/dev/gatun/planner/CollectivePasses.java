package dev.gatun.planner;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.graph.CollectiveKind;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

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
 *   <li><b>joined all_to_alls</b> (with batching, at most as many parts): consecutive all_to_alls on symmetric memory
 *   (only placements between) of one group, of static shapes, none reading another's result (no path between them),
 *   become one {@link Step.JoinedAllToAll}: one starting barrier, every part's rows pushed or pulled, one ending
 *   barrier, where each alone had its own pair. Mixture-of-experts dispatch sends the rows, their row counts and each
 *   row's metadata so: three barrier pairs become one. Each part's peers may read its input and counts, and write its
 *   receive buffer, from the step's starting barrier to its ending one, so the runs are chosen on the order before
 *   the memory planner ({@link AllToAllRuns}), which places every part's buffers for the whole step; this pass joins
 *   those runs and checks again on the placed buffers that no part's result lies over another part's buffers (apart
 *   where one does: a planner bug, never a wrong value). Adjacent all_to_alls that stay apart get a plan note saying
 *   why (a path between them, another group, NCCL's path, a symbolic shape, the parts' limit or joining off).</li>
 * </ol>
 */
final class CollectivePasses {
    private CollectivePasses() {}

    /**
     * The passes; {@code runs}: the result of each all_to_all the order joins ({@link AllToAllRuns}, whose buffers the
     * memory planner placed for the joined step) to its run; {@code notes} gets why adjacent all_to_alls stayed apart.
     */
    static List<Step> apply(List<Step> steps, PlanOptions options, Map<PlanBuffer, Integer> runs, List<String> notes) {
        List<Step> out = steps;
        if (options.fuseCopyIns()) out = fuseCopyIns(out);
        if (options.batchCollectives() > 1) out = batch(out, options.batchCollectives());
        return joinAllToAlls(out, runs, notes);
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
            Run r = run(steps, i, max, (members, s) -> s instanceof Step.Collective d && batchable(d) && joins(members, d));
            if (r.members().size() == 1) {
                out.add(c);
                continue;
            }
            out.addAll(r.places());
            out.add(new Step.CollectiveBatch(r.members()));
            i = r.end() - 1;
        }
        return out;
    }

    /** A collective and the ones after it that join it; the placements passed over go before the joined step. */
    private record Run(List<Step.Collective> members, List<Step> places, int end) {}

    /**
     * From the collective at {@code i}: each later step that is not a placement joins while {@code joins} takes it, up
     * to {@code max} members; the placements between them are kept, to be moved before the joined step.
     */
    private static Run run(List<Step> steps, int i, int max, java.util.function.BiPredicate<List<Step.Collective>, Step> joins) {
        var members = new ArrayList<Step.Collective>(List.of((Step.Collective) steps.get(i)));
        var places = new ArrayList<Step>();
        int next = i + 1, end = i + 1;
        for (int j = i + 1; j < steps.size() && members.size() < max; j++) {
            Step s = steps.get(j);
            if (s instanceof Step.Place) continue;
            if (!joins.test(members, s)) break;
            for (int k = next; k < j; k++) places.add(steps.get(k));
            members.add((Step.Collective) s);
            next = end = j + 1;
        }
        return new Run(members, places, end);
    }

    /**
     * The runs of all_to_alls the order made ({@code runs}: each joined result to its run) whose placed buffers
     * {@link #joinMisfit} and {@link #earlyReceiver} admit become {@link Step.JoinedAllToAll}s, their placements moved
     * before them; where the next all_to_all (only placements between) does not join, {@code notes} says why.
     */
    static List<Step> joinAllToAlls(List<Step> steps, Map<PlanBuffer, Integer> runs, List<String> notes) {
        var out = new ArrayList<Step>(steps.size());
        int joined = 0;
        for (int i = 0; i < steps.size(); i++) {
            if (!(steps.get(i) instanceof Step.Collective c) || c.call().kind() != CollectiveKind.ALL_TO_ALL) {
                out.add(steps.get(i));
                continue;
            }
            Run r = run(steps, i, Integer.MAX_VALUE, (members, s) -> {
                if (!(s instanceof Step.Collective d) || d.call().kind() != CollectiveKind.ALL_TO_ALL) return false;
                // the run the order made (AllToAllRuns), checked again on the placed buffers: a misfit here is a
                // planner bug, and apart is always safe
                String why = joinMisfit(members, d);
                if (why == null) why = earlyReceiver(sinceBarrier(out, c.call().group()), d);
                if (why == null && (runs.get(c.output()) == null || !runs.get(c.output()).equals(runs.get(d.output()))))
                    why = "the step has its parts already (at most PlanOptions.batchCollectives(), " + PlanOptions.MAX_BATCH
                            + " by default), or joining is off (PlanOptions.withBatchCollectives(1))";
                if (why != null)
                    notes.add(d.call().opName() + "(" + d.input().name() + ") -> " + d.output().name() + " not joined with "
                            + String.join(", ", members.stream().map(m -> m.output().name()).toList()) + ": " + why);
                return why == null;
            });
            if (r.members().size() == 1) {
                out.add(c);
                continue;
            }
            out.addAll(r.places());
            out.add(new Step.JoinedAllToAll("all_to_all_" + joined++, r.members(), count(r.members().size()) + " all_to_alls of group \"" + c.call().group()
                    + "\" with no path between them: one barrier pair"));
            i = r.end() - 1;
        }
        return out;
    }

    private static String count(int n) {
        return n < 5 ? List.of("zero", "one", "two", "three", "four").get(n) : Integer.toString(n);
    }

    /**
     * Null where the all_to_all {@code d} may join the earlier {@code members} in one barrier pair; else why not. All
     * run on symmetric memory in one group, with static shapes; {@code d} reads no member's result (no path between
     * them: they are adjacent, so a path would be a direct read); and nothing one part writes (its result, which peers
     * push into or the rank pulls into) shares bytes with what another reads or writes, since in the joined step
     * every part's peers read and write until the one ending barrier.
     */
    static String joinMisfit(List<Step.Collective> members, Step.Collective d) {
        Step.Collective first = members.getFirst();
        if (!first.call().group().equals(d.call().group())) return "another group (\"" + d.call().group() + "\", not \"" + first.call().group() + "\")";
        for (Step.Collective c : List.of(first, d))
            if (!c.call().algorithm().isSymmetric()) return c.output().name() + " takes NCCL's path, which has no barrier pair to share";
        for (Step.Collective c : List.of(first, d))
            for (PlanBuffer b : c.reads())
                if (!b.shape().isStatic() || !c.output().shape().isStatic()) return c.output().name() + " has a symbolic shape";
        for (Step.Collective c : members) {
            for (PlanBuffer b : d.reads())
                if (b.storage() == c.output().storage()) return "it reads " + c.output().name() + ", the result of the one before (a path between them)";
            for (PlanBuffer b : c.reads())
                if (overlaps(d.output(), b)) return "its result " + d.output().name() + " is placed over " + b.name() + ", which peers read until the ending barrier";
            if (overlaps(d.output(), c.output())) return "its result " + d.output().name() + " is placed over " + c.output().name();
            for (PlanBuffer b : d.reads())
                if (overlaps(c.output(), b)) return c.output().name() + " is placed over " + b.name() + ", which it reads";
        }
        return null;
    }

    /** The steps of {@code out} after its last barrier of {@code group} (a collective that ends with one, or a barrier). */
    private static List<Step> sinceBarrier(List<Step> out, String group) {
        int k = out.size();
        while (k > 0) {
            Step s = out.get(k - 1);
            boolean barrier = s instanceof Step.Barrier b && b.group().equals(group)
                    || s.collectives().stream().anyMatch(x -> x.call().group().equals(group) && x.call().algorithm().endsWithBarrier());
            if (barrier) break;
            k--;
        }
        return out.subList(k, out.size());
    }

    /**
     * Null unless {@code d} pushes into a receive buffer that shares bytes with a buffer a step since the group's last
     * barrier uses: alone, {@code d}'s receive buffer was held from the barrier of the step before it, but joined, its
     * senders may write it from the group's barrier before the joined step on (the plan's rule for every receive buffer).
     */
    static String earlyReceiver(List<Step> since, Step.Collective d) {
        if (!d.uneven() || !d.output().isSymmetric()) return null;
        for (Step s : since) {
            var used = new ArrayList<PlanBuffer>(s.reads());
            used.addAll(s.writes());
            if (s instanceof Step.Place pl) used.add(pl.buffer());
            for (PlanBuffer b : used)
                if (b.storage() != d.output().storage() && overlaps(d.output(), b))
                    return "its receive buffer " + d.output().name() + " is placed over " + b.name() + ", which a step since the group's last barrier uses";
        }
        return null;
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
