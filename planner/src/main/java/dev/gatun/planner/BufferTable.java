package dev.gatun.planner;

import dev.gatun.ir.Layout;
import dev.gatun.ir.SymInt;
import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ConcatBuffer;
import dev.gatun.lowering.ConstantBuffer;
import dev.gatun.lowering.InputBuffer;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.lowering.ViewBuffer;

import java.util.ArrayList;
import java.util.List;

/**
 * The first pass: one {@link PlanBuffer} per lowered buffer, in the lowered graph's order (so ids follow
 * it), and the way back from the compiler's buffers to them for the passes that follow. Views get their
 * storage, offset and strides; so does a buffer written straight into its slice of a concatenation (its storage is
 * the concatenation's, nested ones resolved), which also gets its {@link PlanBuffer.Part}; symmetric storages (and
 * views of them) their group.
 */
final class BufferTable {
    private final List<PlanBuffer> all;
    private final List<Buffer> lowered;
    private final boolean anyDynamic;

    private BufferTable(LoweredGraph graph) {
        this.lowered = graph.buffers();
        int n = lowered.size();
        var made = new PlanBuffer[n];   // by Buffer.id(), which is the buffer's position in the lowered graph
        boolean dynamic = false;
        // storages first: a view or a part of a concatenation refers to its storage, which may come later (a
        // concatenation comes after the parts that write into it)
        for (int pass = 0; pass < 2; pass++) {
            for (int i = 0; i < n; i++) {
                Buffer b = lowered.get(i);
                boolean storage = !(b instanceof ViewBuffer) && b.slice() == null;
                if (storage != (pass == 0)) continue;
                // a flexible layout is row-major from offset 0: its strides are made only if someone asks (fix() multiplies symbols)
                Layout.Fixed l = b.layout() instanceof Layout.Flexible ? null : b.layout().fix();
                Located at = storage ? null : locate(b);
                PlanBuffer base = at == null ? null : made[at.storage.id()];
                PlanBuffer.Kind kind = switch (b) {
                    case InputBuffer in -> in.isState() ? PlanBuffer.Kind.STATE : PlanBuffer.Kind.INPUT;
                    case ConstantBuffer c -> PlanBuffer.Kind.CONSTANT;
                    case ViewBuffer v -> PlanBuffer.Kind.VIEW;
                    default -> PlanBuffer.Kind.COMPUTED;
                };
                String group = b.isSymmetric() ? b.storage().layout().allocator().group() : null;
                String input = b instanceof InputBuffer in ? in.inputName() : null;
                made[i] = new PlanBuffer(i, b.name(), b.type(), kind, base, at == null ? SymInt.ZERO : at.offset, l == null ? null : l.strides(),
                        group, input, b.slice() == null ? null : part(b.slice()),
                        b instanceof ConcatBuffer c ? c.parts().stream().map(BufferTable::part).toList() : List.of());
                dynamic |= made[i].isDynamic();
            }
        }
        all = java.util.Arrays.asList(made);
        anyDynamic = dynamic;
    }

    /** A buffer's storage and its element offset there: a view's base, a concatenation's part's concatenation (nested ones too). */
    private record Located(Buffer storage, SymInt offset) {}

    private static Located locate(Buffer b) {
        if (b instanceof ViewBuffer v) {
            // a view is taken of a storage or of a part of a concatenation, and addresses it from its element 0
            Located base = v.base().slice() == null ? new Located(v.base(), SymInt.ZERO) : locate(v.base());
            return new Located(base.storage, base.offset.plus(v.layout().offset()));
        }
        if (b.slice() != null) {
            ConcatBuffer.Part p = b.slice();
            Located cat = p.cat().slice() == null ? new Located(p.cat(), SymInt.ZERO) : locate(p.cat());
            return new Located(cat.storage, cat.offset.plus(p.offset()));
        }
        return new Located(b, SymInt.ZERO);
    }

    private static PlanBuffer.Part part(ConcatBuffer.Part p) {
        return new PlanBuffer.Part(p.cat().name(), p.writer().name(), p.cat().type().rank(), p.cat().dim(), p.start(), p.end(), p.copied());
    }

    static BufferTable of(LoweredGraph graph) { return new BufferTable(graph); }

    PlanBuffer of(Buffer b) {
        int i = b.id();
        PlanBuffer pb = i >= 0 && i < lowered.size() && lowered.get(i) == b ? all.get(i) : null;
        if (pb == null) throw new IllegalStateException("buffer " + b.name() + " is not in the lowered graph's buffer list");
        return pb;
    }

    List<PlanBuffer> of(List<? extends Buffer> bs) {
        var out = new ArrayList<PlanBuffer>(bs.size());
        for (Buffer b : bs) out.add(of(b));
        return out;
    }

    /** The lowered buffer a plan buffer was made from. */
    Buffer lowered(PlanBuffer b) { return lowered.get(b.id()); }

    List<PlanBuffer> all() { return all; }

    /** Whether any buffer has a symbolic shape (found while the table is made: a walk of every buffer less). */
    boolean anyDynamic() { return anyDynamic; }
}
