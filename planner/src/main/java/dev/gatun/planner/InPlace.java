package dev.gatun.planner;

import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ConcatBuffer;
import dev.gatun.lowering.ConstantBuffer;
import dev.gatun.lowering.ExternBuffer;
import dev.gatun.lowering.ExternCall;
import dev.gatun.lowering.InputBuffer;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.lowering.ViewBuffer;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import dev.gatun.ir.SymInt;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.Map;

/**
 * Which elementwise kernels may write an output over one of their inputs (the output takes the input's slot):
 * both regular, static, of identical type, neither viewed, nor a graph input or constant, and the input not a graph
 * output (the output may be one: it then keeps the slot to the end of the call); the input dies at this kernel and
 * every load of it reads element {@code i} at index {@code i} (so no element is read after it was overwritten).
 * Each input is taken at most once.
 */
final class InPlace {
    private InPlace() {}

    /**
     * The calls that write their input 0 in place ({@link ExternCall#inPlace}: {@code update_slice}) whose target is no
     * state, each with the copy it writes into: always in place (the call writes only what it changes). A state's
     * updates take its slot in the state pool instead ({@link Pools#states}).
     */
    static Map<Buffer, Buffer> updates(LoweredGraph graph) {
        var pairs = new IdentityHashMap<Buffer, Buffer>();
        for (Buffer b : graph.buffers())
            if (b instanceof ExternBuffer e && e.call().inPlace() && !isStateVersion(e.inputs().getFirst()))
                pairs.put(e, e.inputs().getFirst());
        return pairs;
    }

    /** A state, or an update of one written into its slot. */
    static boolean isStateVersion(Buffer b) {
        while (b instanceof ExternBuffer e && e.call().inPlace()) b = e.inputs().getFirst();
        return b instanceof InputBuffer in && in.isState();
    }

    /** Output to the input whose slot it takes. */
    static Map<Buffer, Buffer> pairs(LoweredGraph graph, Liveness live, ByBuffer.Set outputs) {
        var pairs = new IdentityHashMap<Buffer, Buffer>();
        var taken = new ByBuffer.Set(graph);   // flags by buffer id: asked of every read of every elementwise kernel
        var viewed = new ByBuffer.Set(graph);
        for (Buffer b : graph.buffers()) if (b instanceof ViewBuffer v) viewed.add(v.base());
        for (int i = 0; i < live.n; i++) {
            if (!(live.order.get(i) instanceof Work.KernelWork k) || !k.elementwise()) continue;
            for (int w = 0; w < k.writes().size(); w++) {
                Buffer out = k.writes().get(w);
                if (w >= k.kernel().stores().size()) continue;   // a fold (Kernel.Fold): one value, never in place
                var store = k.kernel().stores().get(w);
                // the tests by buffer id first: the others follow each buffer's layout and type
                if (!store.isRowMajor() || store.perRow() || viewed.contains(out) || !candidate(out)) continue;   // a graph output may take a dead input's slot
                for (int inIdx = 0; inIdx < k.reads().size(); inIdx++) {
                    Buffer in = k.reads().get(inIdx);
                    if (!live.lastReadAt(in, i) || taken.contains(in) || outputs.contains(in) || viewed.contains(in) || !live.isWritten(in)
                            || !candidate(in) || !in.type().equals(out.type()) || !readsAligned(k.kernel(), inIdx, in)
                            || readsAPartOf(k, in)) continue;
                    pairs.put(out, in);
                    taken.add(in);
                    break;
                }
            }
        }
        return pairs;
    }

    /**
     * A part of a concatenation takes no part: it has no slot of its own. A concatenation's storage may be written
     * over once it dies, like any other buffer (it is never an output of a kernel). A graph output may take a slot; the
     * caller keeps outputs from giving theirs.
     */
    private static boolean candidate(Buffer b) {
        return !(b instanceof InputBuffer) && !(b instanceof ConstantBuffer) && !b.isSymmetric()
                && !(b instanceof ExternBuffer e && e.call().inPlace())
                && b.type().shape().isStatic() && !Slices.isPart(b);
    }

    /** Whether the kernel also reads a part of concatenation {@code in} directly: at other indices than the storage's own. */
    private static boolean readsAPartOf(Work.KernelWork k, Buffer in) {
        if (!(in instanceof ConcatBuffer)) return false;
        for (Buffer r : k.reads()) if (r != in && Slices.storage(r) == in) return true;
        return false;
    }

    /**
     * Every load of the input reads element i at index i of the kernel's whole loop (a row kernel's rows, then its
     * elements), where an element store of the same index writes.
     */
    static boolean readsAligned(Kernel k, int input, Buffer b) {
        var all = new ArrayList<SymInt>(k.ranges());
        all.addAll(k.reductionRanges());
        var rowMajor = new ArrayList<SymInt>();
        SymInt s = SymInt.ONE;
        for (int d = all.size() - 1; d >= 0; d--) {
            rowMajor.addFirst(s);
            s = s.times(all.get(d));
        }
        var ok = new boolean[]{true};
        for (KExpr e : k.locals()) visitLoads(e, l -> {
            if (l.input() == input && !Fusion.aligned(l.offset(), l.strides(), rowMajor, all)) ok[0] = false;
        });
        return ok[0];
    }

    private static void visitLoads(KExpr e, java.util.function.Consumer<KExpr.Load> f) {
        switch (e) {
            case KExpr.Load l -> f.accept(l);
            case KExpr.Apply a -> a.args().forEach(x -> visitLoads(x, f));
            case KExpr.Cast c -> visitLoads(c.x(), f);
            default -> { }
        }
    }
}
