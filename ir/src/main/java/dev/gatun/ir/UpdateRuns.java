package dev.gatun.ir;

import java.util.ArrayList;
import java.util.List;

/**
 * How {@code update_slice} reads its update where it lies. The update's elements from the updated dimension on
 * are runs of packed row-major memory (size-1 dimensions aside), one run a place in the target, and the runs follow
 * one another at strides that fold into at most two levels: the dimensions before the updated one, size-1 ones
 * ignored, innermost first, a dimension joining a level where its stride is the level's stride times its size. Run
 * {@code o} (row-major over those dimensions) then starts {@code (o / inner) * outerStride + (o % inner) * innerStride}
 * elements after the update's first element.
 *
 * <p>A layout fact shared by lowering (which reads an update in place where its runs fold) and the backends (which
 * read it so). A packed update is one level ({@code inner} = every run, {@code innerStride} = a run's length). A value head
 * taken out of a fused product at a batch of several ({@code [b, kv_heads, 1, d]}, batch rows apart) is two. Where
 * the runs do not fold so, lowering copies the update first (a kernel of its own).
 *
 * @param inner       the runs of the inner level
 * @param innerStride elements between consecutive runs of the inner level
 * @param outerStride elements between consecutive groups of {@code inner} runs
 */
public record UpdateRuns(long inner, long innerStride, long outerStride) {

    /** The runs of an update of {@code shape} at {@code strides} (elements), updated along {@code dim}; null where they do not fold so. */
    public static UpdateRuns of(long[] shape, long[] strides, int dim) {
        long run = 1;
        for (int d = shape.length - 1; d >= dim; d--) {
            if (shape[d] != 1 && strides[d] != run) return null;
            run *= shape[d];
        }
        List<long[]> levels = new ArrayList<>();   // {size, stride}, innermost first
        for (int d = dim - 1; d >= 0; d--) {
            if (shape[d] == 1) continue;
            if (!levels.isEmpty()) {
                long[] last = levels.getLast();
                if (strides[d] == last[0] * last[1]) {
                    last[0] *= shape[d];
                    continue;
                }
            }
            levels.add(new long[]{shape[d], strides[d]});
        }
        return switch (levels.size()) {
            case 0 -> new UpdateRuns(1, run, run);
            case 1 -> new UpdateRuns(levels.getFirst()[0], levels.getFirst()[1], levels.getFirst()[0] * levels.getFirst()[1]);
            case 2 -> new UpdateRuns(levels.getFirst()[0], levels.getFirst()[1], levels.get(1)[1]);
            default -> null;
        };
    }

    /** Where run {@code o} starts, in elements from the update's first element. */
    public long offset(long o) { return (o / inner) * outerStride + (o % inner) * innerStride; }
}
