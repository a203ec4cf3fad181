package dev.gatun.planner;

import dev.gatun.ir.Layout;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.lower.Buffer;
import dev.gatun.ir.lower.ConstantBuffer;
import dev.gatun.ir.lower.InputBuffer;
import dev.gatun.ir.lower.LoweredGraph;
import dev.gatun.ir.lower.ViewBuffer;

import java.util.ArrayList;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * The first pass: one {@link PlanBuffer} per lowered buffer, in the lowered graph's order (so ids follow
 * it), and the way back from the compiler's buffers to them for the passes that follow. Views get their
 * storage, offset and strides; symmetric storages (and views of them) their group.
 */
final class BufferTable {
    private final List<PlanBuffer> all = new ArrayList<>();
    private final Map<Buffer, PlanBuffer> of = new IdentityHashMap<>();
    private final List<Buffer> lowered;

    private BufferTable(LoweredGraph graph) {
        this.lowered = graph.buffers();
        for (Buffer b : graph.buffers()) {
            // a flexible layout is row-major from offset 0: its strides are made only if someone asks (fix() multiplies symbols)
            Layout.Fixed l = b.layout() instanceof Layout.Flexible ? null : b.layout().fix();
            PlanBuffer base = b instanceof ViewBuffer v ? of(v.base()) : null;
            PlanBuffer.Kind kind = switch (b) {
                case InputBuffer i -> PlanBuffer.Kind.INPUT;
                case ConstantBuffer c -> PlanBuffer.Kind.CONSTANT;
                case ViewBuffer v -> PlanBuffer.Kind.VIEW;
                default -> PlanBuffer.Kind.COMPUTED;
            };
            String group = b.isSymmetric() ? b.storage().layout().allocator().group() : null;
            String input = b instanceof InputBuffer in ? in.inputName() : null;
            var pb = new PlanBuffer(all.size(), b.name(), b.type(), kind, base, base == null || l == null ? SymInt.ZERO : l.offset(),
                    l == null ? null : l.strides(), group, input);
            all.add(pb);
            of.put(b, pb);
        }
    }

    static BufferTable of(LoweredGraph graph) { return new BufferTable(graph); }

    PlanBuffer of(Buffer b) {
        PlanBuffer pb = of.get(b);
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
}
