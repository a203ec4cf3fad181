package dev.gatun.planner;

import dev.gatun.ir.lower.ExternCall;
import dev.gatun.planner.kernel.RotaryKernel;

import java.util.ArrayList;
import java.util.List;

/**
 * Rotary products, a pass over the scheduled order of work, before liveness and memory planning: a product of a few
 * rows followed by one or two kernels that are the rotary embedding of runs of its heads ({@link RotaryKernel}: a
 * decode layer's q|k|v projection, then its query and key heads rotated) joins them as one {@link Work.RotaryWork},
 * which becomes one {@link Step.RotaryProduct}. The product's kernel can then store each head's rotated halves beside
 * its plain output: one or two launches a layer fewer. Joined before memory planning, the product and the rotations
 * are one point of the order, so no rotated output is given the slot of the product's input, which the one launch may
 * still read while it writes them.
 *
 * <p>What is checked: the step's own rules ({@link Step.RotaryProduct#misfit}). The product's output stays written
 * (the value heads are read from it); other work may read it. A rotary kernel that stays apart from the product right
 * before it says why under its launch. A backend whose product kernel cannot take one runs the steps it holds, which
 * compute the same values.
 */
final class RotaryProducts {
    private RotaryProducts() {}

    /** The most rotary kernels one product takes in: a query's and a key's. */
    static final int MAX_ROTARIES = 2;

    static List<Work> join(List<Work> order, BufferTable table) {
        var out = new ArrayList<Work>(order.size());
        for (int i = 0; i < order.size(); i++) {
            if (!(order.get(i) instanceof Work.ExternWork e && e.call().call() instanceof ExternCall.Matmul m)) {
                out.add(order.get(i));
                continue;
            }
            PlanBuffer y = table.of(e.call());
            // the kernels right after the product that read it and are rotations of its heads
            var rotaries = new ArrayList<Work.KernelWork>();
            int j = i + 1;
            for (; j < order.size() && rotaries.size() < MAX_ROTARIES && order.get(j) instanceof Work.KernelWork k && k.reads().contains(e.call())
                    && RotaryKernel.misfit(y, k.kernel()) == null; j++)
                rotaries.add(k);
            if (rotaries.isEmpty()) {
                out.add(e);
                continue;
            }
            String why = Step.RotaryProduct.misfit(y, m.transA(), m.transB(), rotaries.stream().map(Work.KernelWork::kernel).toList());
            if (why == null) {
                out.add(new Work.RotaryWork(e, rotaries));
            } else {
                // rotations after a product that stay launches of their own say why, under their launches
                out.add(e);
                for (var k : rotaries) out.add(k.withNote("not one launch with the product before it (a rotary product): " + why));
            }
            i = j - 1;
        }
        return out;
    }
}
