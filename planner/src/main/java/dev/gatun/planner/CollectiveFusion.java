package dev.gatun.planner;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.List;

/**
 * Collective fusion, the last pass over the step list: a one-shot or barrier-free all-reduce, or a batch of either,
 * takes in the kernel just before it that writes its inputs (the <em>prologue</em>) and the kernel just after it
 * that reads its results (the <em>epilogue</em>), as one {@link Step.FusedCollective}: one launch where there were
 * three. The seeds' graph ({@code x + 1, x + 2, x + 3}, three all-reduces, their sum, a last all-reduce) is two
 * launches; an all-reduce followed by a residual add and an RMSNorm is one.
 *
 * <p>The launch is a sequence of phases on <em>tiles</em>: block b computes the prologue's elements of its tile,
 * reduces that tile and runs the epilogue on it. Tiles are whole rows where the epilogue is a row kernel, else runs of
 * elements; every phase and every rank uses the same tiles, so the per-block barrier of a one-shot (block b waits
 * for block b of each peer) covers exactly what block b reads. What makes that sound, and is checked here:
 * <ul>
 *   <li>the prologue is pointwise, stores row-major, and has as many elements as the collective;</li>
 *   <li>the epilogue has no folds, stores row-major (or once per row), has as many elements (rows times row length)
 *   as the collective, and reads the collective's results, and the prologue's outputs, only element for element
 *   (the tile its own block wrote);</li>
 *   <li>an epilogue output that shares memory with a collective's input or result, or with a prologue's output, starts
 *   where it does and has the same element size, so its tile is the same bytes (a one-shot's epilogue runs after the
 *   trailing barrier, when every peer has read those bytes of this tile);</li>
 *   <li>no result of the collective or the epilogue shares memory with a prologue's input, which another block may
 *   still be reading, unless it is the same tiles of the same bytes and the prologue reads that input element for
 *   element.</li>
 * </ul>
 * A neighbour that writes the collective's inputs or reads its results but fails a rule stays a launch of its own, with
 * a note saying which rule ("not the epilogue of all_reduce.one_shot(buf4): it reads buf5 other than element for
 * element ..."). Two-shot, NCCL and the other collectives take nothing in.
 */
final class CollectiveFusion {
    private CollectiveFusion() {}

    static List<Step> apply(List<Step> input) {
        var steps = new ArrayList<Step>(input); // a neighbour left out gets a note saying why
        var out = new ArrayList<Step>(steps.size());
        int fused = 0;
        for (int i = 0; i < steps.size(); i++) {
            Step s = steps.get(i);
            if (!fusible(s)) {
                out.add(s);
                continue;
            }
            List<Step.Collective> members = s.collectives();
            int before = out.size() - 1;
            while (before >= 0 && out.get(before) instanceof Step.Place) before--;
            boolean copiesIn = members.stream().anyMatch(Step.Collective::copiesIn);
            Step.Launch prologue = null, epilogue = null;
            if (!copiesIn && before >= 0 && out.get(before) instanceof Step.Launch l && !l.kernel().gathers()) {   // a gather's reads are not element for element
                String why = prologueMisfit(l.kernel(), members);
                if (why == null) prologue = l;
                else if (!why.isEmpty()) out.set(before, noted(l, s, "prologue", why));
            }
            int after = i + 1;
            while (after < steps.size() && steps.get(after) instanceof Step.Place) after++;
            if (after < steps.size() && steps.get(after) instanceof Step.Launch l && !l.kernel().gathers()) {
                String why = epilogueMisfit(l.kernel(), members, prologue == null ? null : prologue.kernel());
                if (why == null) epilogue = l;
                else if (!why.isEmpty()) steps.set(after, noted(l, s, "epilogue", why));
            }
            if (prologue == null && epilogue == null) {
                out.add(s);
                continue;
            }
            if (prologue != null) out.remove(before);
            if (epilogue != null) {
                out.addAll(steps.subList(i + 1, after)); // the epilogue's placements move before the launch
                i = after;
            }
            out.add(new Step.FusedCollective("collective_" + fused++, prologue, s, epilogue));
        }
        return out;
    }

    /**
     * One-shot and barrier-free all-reduces of static shape, and batches of either (of equal sizes). A one-shot that
     * copies a caller's tensor in (path 2, fused) copies its tile in instead of computing a prologue.
     */
    private static boolean fusible(Step s) {
        return switch (s) {
            case Step.Collective c -> c.call().kind() == CollectiveKind.ALL_REDUCE && !c.input().isDynamic()
                    && (c.call().algorithm() == Algorithm.ONE_SHOT || c.call().algorithm() == Algorithm.BARRIER_FREE);
            case Step.CollectiveBatch b -> b.members().stream().allMatch(c -> !c.input().isDynamic() && numel(c.input()) == numel(b.first().input()));
            default -> false;
        };
    }

    /** The elements of each member's input (the same for every member of a fusible batch). */
    static long elements(List<Step.Collective> members) { return numel(members.getFirst().input()); }

    /** The launch {@code l} with a note: why the collective {@code c} did not take it in as its {@code role}. */
    private static Step.Launch noted(Step.Launch l, Step c, String role, String why) {
        var notes = new ArrayList<>(l.notes());
        var first = c.collectives().getFirst();
        notes.add("not the " + role + " of " + first.call().opName() + "(" + first.input().name() + "): " + why);
        return new Step.Launch(l.kernel(), notes);
    }

    /** Null where {@code k} can be the collective's prologue; else why not ("" where it writes none of its inputs). */
    private static String prologueMisfit(Kernel k, List<Step.Collective> members) {
        boolean writesAnInput = false;
        for (var st : k.stores()) for (var c : members) writesAnInput |= st.buffer() == c.input();
        if (!writesAnInput) return "";
        if (k.isReduction()) return "a row kernel's rows are not the collective's tiles";
        if (!constant(k.ranges())) return "its shape is symbolic";
        long n = SymInt.product(k.ranges()).constant();
        if (n != elements(members)) return "it loops over " + n + " elements, the collective over " + elements(members);
        for (var st : k.stores()) if (!st.isRowMajor()) return "it stores " + st.buffer().name() + " at strides, not row-major";
        // another block may still read the prologue's inputs while this one stores its tile of the results
        for (var c : members)
            for (PlanBuffer in : k.inputs())
                if (!safeOver(c.output(), k, in))
                    return "the result " + c.output().name() + " is placed over " + in.name() + ", which it reads, on other tiles";
        return null;
    }

    /** Whether {@code k} reads a result of the collectives (asked of every kernel after one: loops, not streams). */
    private static boolean readsAnyResult(Kernel k, List<Step.Collective> members) {
        for (PlanBuffer b : k.inputs())
            for (Step.Collective c : members) if (c.output() == b) return true;
        return false;
    }

    /** Null where {@code k} can be the collective's epilogue; else why not ("" where it reads none of its results). */
    private static String epilogueMisfit(Kernel k, List<Step.Collective> members, Kernel prologue) {
        if (!readsAnyResult(k, members)) return "";
        if (!k.folds().isEmpty()) return "it folds its rows over the whole grid";
        if (!constant(k.ranges()) || !constant(k.reductionRanges())) return "its shape is symbolic";
        long n = SymInt.product(k.ranges()).constant() * SymInt.product(k.reductionRanges()).constant();
        if (n != elements(members)) return "it loops over " + n + " elements, the collective over " + elements(members);
        for (var st : k.stores()) if (!st.perRow() && !st.isRowMajor()) return "it stores " + st.buffer().name() + " at strides, not row-major";
        // what this block wrote in the launch's earlier phases is read element for element, nothing else of it
        var written = new ArrayList<PlanBuffer>();
        members.forEach(c -> written.add(c.output()));
        if (prologue != null) written.addAll(prologue.outputs());
        for (int in = 0; in < k.inputs().size(); in++) {
            PlanBuffer b = k.inputs().get(in);
            if (written.stream().noneMatch(w -> w.storage() == b.storage())) continue;
            if (!b.isContiguous() || !elementwise(k, in))
                return "it reads " + b.name() + " other than element for element: other blocks reduce or write those elements";
        }
        for (PlanBuffer o : k.outputs()) {
            for (var c : members)
                for (PlanBuffer x : List.of(c.input(), c.output()))
                    if (!sameTiles(o, x)) return "its output " + o.name() + " is placed over " + x.name() + " on other tiles";
            if (prologue != null) {
                // another block may still be in the prologue, reading its inputs and writing its tile of its outputs
                for (PlanBuffer in : prologue.inputs())
                    if (!safeOver(o, prologue, in)) return "its output " + o.name() + " is placed over " + in.name() + ", which the prologue reads, on other tiles";
                for (PlanBuffer w : prologue.outputs())
                    if (!sameTiles(o, w)) return "its output " + o.name() + " is placed over " + w.name() + " on other tiles";
            }
        }
        return null;
    }

    /** Every load of input {@code in} reads the element at the kernel's own row-major position (rows then the row's elements). */
    private static boolean elementwise(Kernel k, int in) {
        var extents = new ArrayList<SymInt>(k.ranges());
        extents.addAll(k.reductionRanges());
        for (KExpr.Load l : loads(k))
            if (l.input() == in) {
                if (!l.offset().equals(SymInt.ZERO)) return false;
                long rowMajor = 1;
                for (int d = extents.size() - 1; d >= 0; d--) {
                    long n = extents.get(d).constant();
                    SymInt s = d < l.strides().size() ? l.strides().get(d) : SymInt.ZERO;
                    if (n != 1 && !(s.isConstant() && s.constant() == rowMajor)) return false;
                    rowMajor *= n;
                }
            }
        return true;
    }

    /**
     * Whether a later phase may write {@code out} while other blocks may still be in the prologue {@code k} reading its
     * input {@code in}: they share no memory, or {@code out} is the same tiles of the same bytes and {@code k} reads
     * {@code in} element for element (each block only its own tile).
     */
    private static boolean safeOver(PlanBuffer out, Kernel k, PlanBuffer in) {
        if (!CollectivePasses.overlaps(out, in)) return true;
        if (!sameTiles(out, in) || !in.isContiguous()) return false;
        for (int i = 0; i < k.inputs().size(); i++)
            if (k.inputs().get(i).storage() == in.storage() && !elementwise(k, i)) return false;
        return true;
    }

    /** Whether {@code a} and {@code b} share no memory, or start at the same place with elements of the same size. */
    private static boolean sameTiles(PlanBuffer a, PlanBuffer b) {
        return !CollectivePasses.overlaps(a, b) || (a.storage().placement().offset() == b.storage().placement().offset()
                && a.offset().equals(SymInt.ZERO) && b.offset().equals(SymInt.ZERO) && a.dtype().byteSize() == b.dtype().byteSize());
    }

    private static List<KExpr.Load> loads(Kernel k) {
        var out = new ArrayList<KExpr.Load>();
        for (KExpr e : k.locals()) KExpr.loads(e, out);
        return out;
    }

    private static boolean constant(List<SymInt> xs) { return xs.stream().allMatch(SymInt::isConstant); }

    private static long numel(PlanBuffer b) { return b.shape().isStatic() ? b.shape().numel() : -1; }
}
