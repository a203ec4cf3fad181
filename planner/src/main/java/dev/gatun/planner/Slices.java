package dev.gatun.planner;

import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.ConcatBuffer;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.List;

/**
 * Where a buffer's data goes: its own slot, or its slice of a concatenation's storage. A concatenation
 * ({@link ConcatBuffer}) is written by no work of its own: each part's writer (a kernel's store, a matrix product)
 * writes straight into its slice, so the passes see
 * <ul>
 *   <li>the storage (the outermost concatenation, for one placed inside another) as the buffer that takes a slot,
 *   from the first write of any of its parts to the last read of it or of any part ({@link Liveness});</li>
 *   <li>a read of the concatenation as a read of every part's writer, so it is scheduled after all of them
 *   ({@link Scheduler});</li>
 *   <li>a part's writer as a buffer with no slot of its own: never placed, never in place of another
 *   ({@link InPlace}), stored by its kernel at its slice's place ({@link #store}).</li>
 * </ul>
 */
final class Slices {
    private Slices() {}

    /** Whether {@code b} writes a part of a concatenation instead of a slot of its own. */
    static boolean isPart(Buffer b) { return b.slice() != null; }

    /** The buffer whose slot holds {@code b}'s data: the outermost concatenation it is written into, or {@code b}. */
    static Buffer storage(Buffer b) {
        Buffer s = b;
        while (s.slice() != null) s = s.slice().cat();
        return s;
    }

    /** The writers of a concatenation's parts, those of concatenations placed inside it included; empty for any other buffer. */
    static List<Buffer> writers(Buffer b) {
        if (!(b instanceof ConcatBuffer c)) return List.of();
        var out = new ArrayList<Buffer>();
        for (ConcatBuffer.Part p : c.parts()) {
            if (p.writer() instanceof ConcatBuffer) out.addAll(writers(p.writer()));
            else out.add(p.writer());
        }
        return out;
    }

    /** {@code reads} with every concatenation followed by its parts' writers (for dependencies), or {@code reads} itself. */
    static List<Buffer> withWriters(List<Buffer> reads) {
        List<Buffer> out = null;
        for (int i = 0; i < reads.size(); i++) {
            if (!(reads.get(i) instanceof ConcatBuffer c)) continue;
            if (out == null) out = new ArrayList<>(reads);
            out.addAll(writers(c));
        }
        return out == null ? reads : out;
    }

    /**
     * The store of local {@code local} of a kernel into {@code b} (of plan buffer {@code pb}): at the row-major place,
     * or, for a part whose slice is strided, at its strides (offset 0: a part's buffer is addressed from its slice's
     * first element).
     */
    static Kernel.Store store(Buffer b, PlanBuffer pb, int local, boolean perRow) {
        Kernel.Store s = perRow ? Kernel.Store.perRow(pb, local) : new Kernel.Store(pb, local);
        if (!isPart(b) || pb.strides().equals(pb.shape().contiguousStrides())) return s;
        return s.at(dev.gatun.ir.SymInt.ZERO, pb.strides());
    }
}
