package dev.gatun.planner;

import dev.gatun.ir.lower.Buffer;
import dev.gatun.ir.lower.ExternCall;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * Gated products, a pass over the scheduled order of work, before liveness and memory planning: a product of a few
 * rows whose only reader is the kernel right after it computing {@code silu(x[r, c]) * x[r, H + c]} over the two halves
 * of its columns (a decode layer's gate|up projection and its SwiGLU) joins that kernel as one {@link Work.GatedWork},
 * which becomes one {@link Step.GatedProduct}. The product's kernel can then compute each gate column beside its up
 * column and store the SwiGLU of the pair: one launch a layer fewer, and the product's own output is never written.
 * Joined before memory planning, the two are one point of the order: the SwiGLU's output is written while the
 * product's inputs are still read, so the planner never gives it their slot (apart, it may: the product reads x, the
 * SwiGLU then writes over it).
 *
 * <p>What is checked: the step's own rules ({@link Step.GatedProduct#misfit}: at most
 * {@value Step.GatedProduct#MAX_ROWS} rows by a weight lying transposed, a whole row-major output, a kernel that is
 * exactly that SwiGLU of it), and here that the product's buffer is no graph output and no other work reads it.
 * Anything else stays two steps, and a SwiGLU that stays apart from the product before it says why under its launch.
 * A backend whose product kernel cannot take one (another type, a misaligned address) runs the two steps it holds,
 * which compute the same values.
 */
final class GatedProducts {
    private GatedProducts() {}

    /** {@code order} with each product and its SwiGLU joined; {@code outputs}: the graph's output storages, which must stay written. */
    static List<Work> join(List<Work> order, BufferTable table, Set<Buffer> outputs) {
        var out = new ArrayList<Work>(order.size());
        int[] readers = readers(order, table.all().size());   // null where no product is a candidate
        for (int i = 0; i < order.size(); i++) {
            if (candidate(order, i) instanceof Work.ExternWork e && e.call().call() instanceof ExternCall.Matmul m
                    && order.get(i + 1) instanceof Work.KernelWork k) {
                // the kernel after it reads it: it is the one reader when no other work does
                String why = outputs.contains(e.call()) ? "the product is a graph output"
                        : readers[e.call().id()] > 1 ? "another step reads the product"
                        : Step.GatedProduct.misfit(table.of(e.call()), m.transA(), m.transB(), k.kernel());
                if (why == null) {
                    out.add(new Work.GatedWork(e, k));
                    i++;
                    continue;
                }
                // a SwiGLU after a product that stays a launch of its own says why, under its launch
                if (k.kernel().ops().contains("silu")) {
                    out.add(e);
                    out.add(k.withNote("not one launch with the product before it (a gated product): " + why));
                    i++;
                    continue;
                }
            }
            out.add(order.get(i));
        }
        return out;
    }

    /** The product at {@code i} when it is a matrix product that the kernel right after it reads, else null. */
    private static Work.ExternWork candidate(List<Work> order, int i) {
        return i + 1 < order.size() && order.get(i) instanceof Work.ExternWork e && e.call().call() instanceof ExternCall.Matmul
                && order.get(i + 1) instanceof Work.KernelWork k && k.reads().contains(e.call()) ? e : null;
    }

    /**
     * For each buffer (by id), how many works read it (a work that reads it twice counts once), or null where no product
     * is a candidate. Counted in one pass: asking every work about every candidate made this pass quadratic (a 100k-node
     * graph planned in a minute).
     */
    private static int[] readers(List<Work> order, int graphBuffers) {
        boolean any = false;
        for (int i = 0; i < order.size() && !any; i++) any = candidate(order, i) != null;
        if (!any) return null;
        int[] count = new int[graphBuffers], lastReader = new int[graphBuffers];   // by Buffer.id(); lastReader: work index + 1
        for (int i = 0; i < order.size(); i++)
            for (Buffer b : order.get(i).reads())
                if (lastReader[b.id()] != i + 1) {
                    lastReader[b.id()] = i + 1;
                    count[b.id()]++;
                }
        return count;
    }
}
