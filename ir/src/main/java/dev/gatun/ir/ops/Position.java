package dev.gatun.ir.ops;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.OpSpec;

/** The run-time position update_slice and attention take: an i32 or i64 tensor of one element, checked alike. */
final class Position {
    private Position() {}

    /** Refuses, naming {@code call}, a position {@code at} that is not one i32 or i64 value. */
    static void check(String call, OpSpec.Operand at) {
        if (at.type().dtype() != DType.INT32 && at.type().dtype() != DType.INT64)
            throw new GraphException(call + ": the position " + at.label() + " is " + at.type().dtype() + "; it must be i32 or i64");
        if (!at.type().shape().isStatic() || at.type().shape().numel() != 1)
            throw new GraphException(call + ": the position " + at.label() + " must hold one value, not " + at.type().shape());
    }
}
