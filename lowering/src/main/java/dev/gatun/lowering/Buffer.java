package dev.gatun.lowering;

import dev.gatun.ir.Layout;
import dev.gatun.ir.TensorType;

import java.util.List;

/**
 * A lowered value: a named buffer with a {@link Layout}. Storage buffers own memory the planner places;
 * a {@link ViewBuffer} reinterprets another buffer's storage. Lowering may change a layout (fixing it, or
 * turning it into a communication-buffer layout); after lowering buffers do not change.
 */
public abstract sealed class Buffer permits InputBuffer, ConstantBuffer, ComputedBuffer, ExternBuffer, ExternOutputBuffer, ViewBuffer, ConcatBuffer {
    private final String name;
    private Layout layout;
    /** The layout's type, made once: a layout change keeps it, and the planner asks for it millions of times on a large graph. */
    private final TensorType type;
    private final int origin;
    private ConcatBuffer.Part slice;
    private int id = -1;

    Buffer(String name, Layout layout, int origin) {
        this.name = name;
        this.layout = layout;
        this.type = layout.type();
        this.origin = origin;
    }

    public String name() { return name; }
    public Layout layout() { return layout; }
    public TensorType type() { return type; }

    /**
     * This buffer's position in its lowered graph's {@link LoweredGraph#buffers()}: a dense id, so that the planner keeps
     * its per-buffer tables in arrays instead of hash maps keyed by buffer. -1 until the lowered graph is made.
     */
    public int id() { return id; }

    void setId(int i) {
        if (id >= 0 && id != i) throw new IllegalStateException(name + " is already buffer " + id + " of a lowered graph");
        id = i;
    }

    /** The graph node this buffer came from, or -1 for buffers lowering inserted. */
    public int origin() { return origin; }

    void setLayout(Layout layout) {
        if (!layout.type().equals(type))
            throw new IllegalStateException(name + ": a layout change may not change the type " + type + " -> " + layout.type());
        this.layout = layout;
    }

    /**
     * The part of a concatenation this buffer writes straight into, or null: such a buffer owns no memory, its
     * layout addresses its slice of the concatenation's storage (see {@link ConcatBuffer}).
     */
    public ConcatBuffer.Part slice() { return slice; }

    void setSlice(ConcatBuffer.Part part) {
        if (slice != null) throw new IllegalStateException(name + " already writes " + slice.range());
        slice = part;
    }

    /** The buffers this one reads (views: their base). */
    public abstract List<Buffer> reads();

    /** The buffer that owns this one's memory: itself, or a view's base storage. */
    public Buffer storage() { return this; }

    /** True when the buffer lives in a communication pool or symmetric allocation. */
    public boolean isSymmetric() { return layout.allocator().isSymmetric(); }

    /** One line of the lowered graph's text form. */
    public abstract String format();

    protected String head(String kind) { return name + ": " + kind + " " + layout + (slice == null ? "" : " in " + slice.range()); }

    @Override public String toString() { return name + " " + type(); }
}
