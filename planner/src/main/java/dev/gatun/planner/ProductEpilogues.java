package dev.gatun.planner;

import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ExternCall;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.List;

/**
 * Product epilogues, a pass over the scheduled order of work, before liveness and memory planning: a product of a few
 * rows (a GEMV: a decode step's projection) takes in the kernels right after it that read its output, as one
 * {@link Work.TiledWork}, which becomes one {@link Step.TiledProduct}, wherever the same-tiles rule holds: the columns
 * each epilogue item reads fall into tiles of at most {@value Step.TiledProduct#MAX_TILE_COLUMNS} columns
 * ({@link ColumnTiles}), which one block of the product computes together before it runs those items.
 *
 * <p>One rule for every epilogue: a SwiGLU or a GeGLU over the two halves of a gate|up product, the bias of a q|k|v
 * product, the rotary embedding of its query and key heads however the graph spells it, a norm over each head,
 * a residual add or a cast. What is also checked, because blocks run side by side: no epilogue writes into the
 * product's output or into what it or an earlier epilogue reads; an epilogue that reads what an earlier one stored
 * reads it in the tile that stored it ({@link ColumnTiles}). Joined before memory planning, the product and its epilogues are one point of the order, so no output is
 * placed over an input the launch may still read (the product's operands among them).
 *
 * <p>The kernels tried are those in a row right after the product that read its output or an earlier one's (a bias
 * added in one kernel and the rotary embedding of the sum in the next: the chain the tiles of the product hold, the
 * bias kernel storing its tile for the rotation to read back in the same block). Up to {@value #MAX_EPILOGUES} are
 * tried, then fewer; a kernel that reads the product right after it and stays apart says why under its launch.
 */
final class ProductEpilogues {
    private ProductEpilogues() {}

    /** The most epilogues one product takes in. */
    static final int MAX_EPILOGUES = 4;

    static List<Work> join(List<Work> order, BufferTable table) {
        var out = new ArrayList<Work>(order.size());
        boolean changed = false;
        for (int i = 0; i < order.size(); i++) {
            if (!(order.get(i) instanceof Work.ExternWork e && e.call().call() instanceof ExternCall.Matmul m)
                    || Step.TiledProduct.fewRows(table.of(e.call()), m.transA(), m.transB()) != null) {
                out.add(order.get(i));
                continue;
            }
            PlanBuffer y = table.of(e.call());
            var readers = new ArrayList<Work.KernelWork>();
            var tiled = new ArrayList<Buffer>(List.of(e.call()));   // what the launch's blocks hold in tiles: the product, the epilogues' outputs
            for (int j = i + 1; j < order.size() && readers.size() < MAX_EPILOGUES && order.get(j) instanceof Work.KernelWork k
                    && k.reads().stream().anyMatch(tiled::contains) && !k.kernel().gathers(); j++) {   // a gather reads no tile of its own
                readers.add(k);
                tiled.addAll(k.writes());
            }
            int n = readers.size();
            ColumnTiles.Analysis a = null;
            for (; n > 0; n--) {
                a = analyse(y, readers.subList(0, n));
                if (a.misfit() == null) break;
            }
            if (n > 0) {
                changed = true;
                out.add(new Work.TiledWork(e, List.copyOf(readers.subList(0, n)), a.tiles()));
            } else {
                out.add(e);
            }
            changed |= n < readers.size();
            for (int r = n; r < readers.size(); r++)
                out.add(readers.get(r).withNote("not an epilogue of the product before it: " + analyse(y, readers.subList(0, r + 1)).misfit()));
            i += readers.size();
        }
        return changed ? out : order;
    }

    /** The tiles by which the product writing {@code y} may take {@code readers} in as its epilogues, or why it may not. */
    static ColumnTiles.Analysis analyse(PlanBuffer y, List<Work.KernelWork> readers) {
        var kernels = readers.stream().map(Work.KernelWork::kernel).toList();
        var read = new ArrayList<PlanBuffer>();
        for (Kernel k : kernels) {
            read.addAll(k.inputs());
            for (PlanBuffer w : k.outputs()) {
                if (!w.shape().isStatic()) return no("an epilogue writes " + w.name() + ", of symbolic shape");
                if (w.storage() == y.storage()) return no("an epilogue writes into the product's output");
                // a later epilogue may read it (in the tile that stored it); this one or an earlier one may not
                for (PlanBuffer r : read)
                    if (r.storage() == w.storage()) return no(k.name() + " writes " + w.name() + ", which it or an epilogue before it reads");
            }
        }
        return ColumnTiles.of(y, kernels, Step.TiledProduct.MAX_TILE_COLUMNS);
    }

    private static ColumnTiles.Analysis no(String why) { return ColumnTiles.Analysis.no(why); }
}
