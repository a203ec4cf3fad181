package dev.gatun.runtime.cuda;

import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.cuda.KernelScope.RowAccess;

import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.function.Predicate;

import static dev.gatun.runtime.cuda.KernelScope.loadsOf;

/**
 * What each phase of a row kernel evaluates ({@link RowBody}): phase {@code q < phases} folds reduction {@code q},
 * the last one stores the row's elements. Per phase: the row values (once per row, before its loop over the
 * elements), the element values (in the loop), and, for a row held in registers, the element values an earlier phase
 * computed and kept (exp(x - max) for softmax's last phase) instead of computing them again: at most
 * {@link #MAX_KEPT}, each a transcendental function or a division ({@link #costly}).
 */
final class PhasePlan {
    /** Most element values a thread keeps in registers for later phases, beyond the row's inputs. */
    static final int MAX_KEPT = 3;

    private final KernelScope scope;
    private final Kernel k;
    /** Which locals are one value per element (not per row). */
    final boolean[] element;
    /** Which element values are kept in registers for later phases. */
    final boolean[] kept;
    /** The phase that first computes each element value (-1: none). */
    final int[] first;
    /** Which locals each phase computes, and which it reads from the registers an earlier phase kept them in. */
    final boolean[][] compute, fromKept;

    PhasePlan(KernelScope scope, boolean held) {
        this.scope = scope;
        k = scope.k;
        element = k.perElement();
        kept = new boolean[k.locals().size()];
        first = new int[k.locals().size()];
        int phases = k.reductions().size(), n = k.locals().size(), keptCount = 0;
        Arrays.fill(first, -1);
        compute = new boolean[phases + 1][n];
        fromKept = new boolean[phases + 1][n];
        for (int q = 0; q <= phases; q++) {
            var stack = new ArrayDeque<Integer>();
            if (q < phases) stack.push(k.reductions().get(q).local());
            else for (var st : k.stores()) if (!st.perRow()) stack.push(st.local());
            while (!stack.isEmpty()) {
                int i = stack.pop();
                if (compute[q][i] || fromKept[q][i]) continue;
                if (held && element[i] && first[i] >= 0 && first[i] < q && costly(k.locals().get(i)) && (kept[i] || keptCount < MAX_KEPT)) {
                    if (!kept[i]) keptCount++;
                    kept[i] = fromKept[q][i] = true;
                    continue;
                }
                compute[q][i] = true;
                boolean[] deps = new boolean[n];
                Kernel.markReads(k.locals().get(i), deps);
                for (int d = 0; d < n; d++) if (deps[d]) stack.push(d);
            }
            for (int i = 0; i < n; i++) if (compute[q][i] && element[i] && first[i] < 0) first[i] = q;
        }
    }

    /** Worth a register array rather than computing again: a transcendental function or a division. */
    static boolean costly(KExpr e) {
        return switch (e) {
            case KExpr.Apply a -> switch (a.fn()) {
                case EXP, LOG, SIN, COS, TANH, SIGMOID, GELU, SILU, POW, DIV, SQRT, RSQRT -> true;
                default -> a.args().stream().anyMatch(PhasePlan::costly);
            };
            case KExpr.Cast c -> costly(c.x());
            default -> false;
        };
    }

    /** Whether phase q indexes by the element's digits: a load indexed in general, or (last phase) a store through strides. */
    boolean usesDigits(int q, boolean last) {
        if (reads(q, l -> scope.rowAccess(l) == RowAccess.GENERAL)) return true;
        if (last) for (var st : k.stores()) if (!st.perRow() && st.strides() != null && scope.digitsAlongRow()) return true;
        return false;
    }

    /** Whether an element value phase q computes reads through a load {@code which} accepts. */
    boolean reads(int q, Predicate<KExpr.Load> which) {
        for (int i = 0; i < element.length; i++)
            if (compute[q][i] && element[i] && loadsOf(k.locals().get(i)).stream().anyMatch(which)) return true;
        return false;
    }
}
