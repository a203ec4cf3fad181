package dev.gatun.lowering;

import dev.gatun.ir.Layout;

import java.util.List;

/** A view (reshape, permute, slice, expand) of another buffer's storage: no copy, its own strides and offset. */
public final class ViewBuffer extends Buffer {
    private final Buffer base;
    private final String viewOp;

    ViewBuffer(String name, Layout.Fixed layout, Buffer base, String viewOp, int origin) {
        super(name, layout, origin);
        if (base instanceof ViewBuffer) throw new IllegalArgumentException("views are taken of storage");
        this.base = base;
        this.viewOp = viewOp;
    }

    public Buffer base() { return base; }

    public String viewOp() { return viewOp; }

    /** The view's strides and offset, with the allocator of the storage it views (which path 2 may change later). */
    @Override public Layout.Fixed layout() { return ((Layout.Fixed) super.layout()).withAllocator(base.layout().allocator()); }

    @Override public Buffer storage() { return base; }

    @Override public boolean isSymmetric() { return base.isSymmetric(); }

    @Override public List<Buffer> reads() { return List.of(base); }

    @Override public String format() { return head("View") + " = " + viewOp + "(" + base.name() + ")"; }
}
