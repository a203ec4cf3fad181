package dev.gatun.ir.ops;

import dev.gatun.ir.GraphException;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.List;

/**
 * {@code snapshot}: two outputs from one tensor, output 0 the operand itself {@link #inPlace in place} (unchanged: on
 * a version of a state, the state's next version) and output 1 a copy of its contents in a buffer of its own.
 *
 * <p>Why: a state written in place by {@code update_slice} may be read by nothing but the update, since once the update
 * has run its old contents are gone. An optimizer step reads a parameter (the forward pass, the backward pass, the
 * update's own arithmetic) and then overwrites it with the new value. Reading the parameter through the snapshot's
 * copy and writing the new value over output 0 ({@code snapshot(w)[0].updateSlice(0, next, 0)}) keeps the rule: every
 * read of the old value is a read of the copy, so no order the planner picks can read a half-written parameter, and
 * the write needs no ordering of its own beyond its data dependencies. The copy costs the parameter's bytes once per
 * call, and the update as many again; once the order is fixed the planner drops both where the kernel computing the new
 * value is the old value's last reader, element for element ({@code dev.gatun.planner.StateWrites}: the copy and the
 * new value then share the state's slot). Exact for every dtype.
 */
public final class Snapshot implements OpSpec {
    public static final Snapshot SPEC = new Snapshot();

    private Snapshot() {}

    @Override public String name() { return "snapshot"; }

    @Override public List<Attribute> attributes() { return List.of(); }

    @Override public boolean inPlace() { return true; }

    @Override public List<TensorType> infer(List<Operand> args, OpAttrs attrs) {
        if (args.size() != 1) throw new GraphException("snapshot takes one tensor, got " + args.size() + " tensors");
        Operand x = args.getFirst();
        if (!x.type().shape().isStatic())
            throw new GraphException("snapshot(" + x.describe() + "): the operand's shape " + x.type().shape() + " must be static");
        return List.of(x.type(), x.type());
    }

    /** Output 0 already holds the operand ({@link #inPlace}); output 1 gets a copy of it. */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor x = inputs.getFirst();
        x.copyTo(0, outputs.get(1), 0, x.numel());
    }
}
