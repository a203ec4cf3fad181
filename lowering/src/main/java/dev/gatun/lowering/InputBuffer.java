package dev.gatun.lowering;

import dev.gatun.ir.Layout;

import java.util.List;

/**
 * A graph input. Path 2 marks its layout's allocator SYMM_MEM: the runtime copies the caller's tensor into a persistent
 * symmetric buffer. A state ({@link #isState}) is never passed: the plan keeps it in a persistent slot of its own.
 */
public final class InputBuffer extends Buffer {
    private final String inputName;
    private final boolean state;

    InputBuffer(String name, String inputName, Layout layout, int origin, boolean state) {
        super(name, layout, origin);
        this.inputName = inputName;
        this.state = state;
    }

    public String inputName() { return inputName; }

    /** A state of the graph: kept by the session between calls, updated in place by {@code update_slice}. */
    public boolean isState() { return state; }

    @Override public List<Buffer> reads() { return List.of(); }

    @Override public String format() { return head("InputBuffer") + " = " + (state ? "state" : "input") + "(\"" + inputName + "\")"; }
}
