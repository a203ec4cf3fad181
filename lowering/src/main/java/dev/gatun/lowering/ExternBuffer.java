package dev.gatun.lowering;

import dev.gatun.ir.Layout;

import java.util.ArrayList;
import java.util.List;
import java.util.StringJoiner;

/** A buffer written by a call lowering does not generate a loop for (collective, matmul, user op). Its layout is fixed. */
public final class ExternBuffer extends Buffer {
    private final ExternCall call;
    private final List<Buffer> inputs;
    private final List<ExternOutputBuffer> extraOutputs = new ArrayList<>();

    ExternBuffer(String name, Layout layout, ExternCall call, List<Buffer> inputs, int origin) {
        super(name, layout, origin);
        this.call = call;
        this.inputs = List.copyOf(inputs);
    }

    public ExternCall call() { return call; }

    public List<Buffer> inputs() { return inputs; }

    /** Outputs after the first (user ops with several outputs). */
    public List<ExternOutputBuffer> extraOutputs() { return List.copyOf(extraOutputs); }

    void addExtraOutput(ExternOutputBuffer b) { extraOutputs.add(b); }

    @Override public List<Buffer> reads() { return inputs; }

    @Override public String format() {
        var j = new StringJoiner(", ");
        inputs.forEach(b -> j.add(b.name()));
        String attrs = switch (call) {
            case ExternCall.Collective c -> (c.reduceOp() != null ? ", " + c.reduceOp().opName() : "")
                    + (c.kind() == dev.gatun.ir.graph.CollectiveKind.BROADCAST ? ", root=" + c.root() : "") + ", \"" + c.group() + "\"";
            default -> "";
        };
        return head("ExternBuffer") + " = " + call.opName() + "(" + j + attrs + ")";
    }
}
