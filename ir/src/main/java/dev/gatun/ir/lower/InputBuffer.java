package dev.gatun.ir.lower;

import dev.gatun.ir.Layout;

import java.util.List;

/** A graph input. Path 2 marks its layout's allocator SYMM_MEM: the runtime copies the caller's tensor into a persistent symmetric buffer. */
public final class InputBuffer extends Buffer {
    private final String inputName;

    InputBuffer(String name, String inputName, Layout layout, int origin) {
        super(name, layout, origin);
        this.inputName = inputName;
    }

    public String inputName() { return inputName; }

    @Override public List<Buffer> reads() { return List.of(); }

    @Override public String format() { return head("InputBuffer") + " = input(\"" + inputName + "\")"; }
}
