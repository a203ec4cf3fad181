package dev.gatun.lowering;

import dev.gatun.ir.Layout;

import java.util.List;

/** Output {@code index} (1 and up) of a multi-output extern call. */
public final class ExternOutputBuffer extends Buffer {
    private final ExternBuffer call;
    private final int index;

    ExternOutputBuffer(String name, Layout layout, ExternBuffer call, int index, int origin) {
        super(name, layout, origin);
        this.call = call;
        this.index = index;
    }

    public ExternBuffer call() { return call; }
    public int index() { return index; }

    @Override public List<Buffer> reads() { return List.of(call); }

    @Override public String format() { return head("ExternOutput") + " = " + call.name() + "[" + index + "]"; }
}
