package dev.gatun.lowering;

import dev.gatun.ir.Layout;
import dev.gatun.ir.SymInt;

import java.util.ArrayList;
import java.util.List;
import java.util.StringJoiner;

/**
 * The storage of a concatenation ({@code cat}): row-major, and written by no loop of its own. Each part is written
 * straight into its slice by the buffer that computes it (a kernel, a matrix product), or, where that buffer cannot
 * (a graph input, a constant, a view, a buffer already read in a way its slice would break, ...), by a copy loop
 * lowering adds; {@link Part#copied} says why. The writer of a part owns no memory: its layout addresses its slice
 * (offset 0 at the slice's first element, the concatenation's strides where the slice is not contiguous), and
 * {@link Buffer#slice()} leads to the part.
 */
public final class ConcatBuffer extends Buffer {
    private final int dim;
    private final List<Part> parts;

    /**
     * Elements {@code [start, end)} of dimension {@code dim} of {@code cat}, at element {@code offset} of its storage:
     * written by {@code writer}, which computes {@code source}'s value (the writer is the source itself, or a copy of it).
     *
     * @param copied null when the source writes its slice itself; otherwise why a copy does
     */
    public record Part(ConcatBuffer cat, Buffer writer, Buffer source, long start, long end, SymInt offset, String copied) {
        /** Whether the source's producer writes the slice (no copy). */
        public boolean inPlace() { return copied == null; }

        /** The slice as an index of the concatenation, as Python writes it: {@code buf9[4:12]}, {@code buf9[:, 4:12]}. */
        public String range() { return range(cat.name(), cat.dim, start, end); }

        /** {@code name[:, start:end]}, the range in dimension {@code dim}. */
        public static String range(String name, int dim, long start, long end) {
            var j = new StringJoiner(", ", name + "[", "]");
            for (int k = 0; k < dim; k++) j.add(":");
            return j.add(start + ":" + end).toString();
        }
    }

    /** A part before the concatenation exists; {@link ConcatBuffer}'s constructor makes the real ones and links writers to them. */
    record Pending(Buffer writer, Buffer source, long start, long end, SymInt offset, String copied) {}

    ConcatBuffer(String name, Layout.Fixed layout, int dim, List<Pending> pending, int origin) {
        super(name, layout, origin);
        this.dim = dim;
        var ps = new ArrayList<Part>(pending.size());
        for (Pending p : pending) {
            var part = new Part(this, p.writer(), p.source(), p.start(), p.end(), p.offset(), p.copied());
            p.writer().setSlice(part);
            ps.add(part);
        }
        this.parts = List.copyOf(ps);
    }

    /** The dimension the parts are joined along (not negative). */
    public int dim() { return dim; }

    public List<Part> parts() { return parts; }

    /** The buffers that write its parts: its data comes from them. */
    @Override public List<Buffer> reads() { return parts.stream().map(Part::writer).toList(); }

    @Override public String format() {
        var j = new StringJoiner(", ");
        for (Part p : parts)
            j.add(p.writer().name() + " -> [" + p.start() + ":" + p.end() + "]" + (p.inPlace() ? "" : " (copy of " + p.source().name() + ")"));
        return head("ConcatBuffer") + " = cat(dim=" + dim + ": " + j + ")";
    }
}
