package dev.gatun.lowering;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.graph.UserOp;

/** What an {@link ExternBuffer} calls: a collective, a matrix product, a built-in or registered op, or a user op. */
public sealed interface ExternCall {
    String opName();

    /** Whether peers read input {@code input} directly (so its slot lives until a barrier frees it on every rank): none by default. */
    default boolean peerReads(int input) { return false; }

    record Collective(CollectiveKind kind, ReduceOp reduceOp, String group, int root, Algorithm algorithm) implements ExternCall {
        @Override public String opName() { return kind.opName() + "." + algorithm.opName(); }
        /** A symmetric algorithm's peers read its inputs where they lie (an uneven all_to_all's rows and row counts). */
        @Override public boolean peerReads(int input) { return algorithm.isSymmetric(); }
    }

    /**
     * Matrix product of two packed operands (batch dims broadcast); {@code transA} / {@code transB}: the operand is the
     * transposed view of packed memory (its last two dimensions swapped), read as it lies, as BLAS reads a
     * transposed operand.
     */
    record Matmul(boolean transA, boolean transB) implements ExternCall {
        public Matmul() { this(false, false); }
        @Override public String opName() { return "matmul"; }
    }

    /**
     * {@code update_slice}: input 1 written along {@code dim} of input 0 (the target, whose storage the result takes:
     * a state's slot, or a copy made for the call) from the position input 2 holds; a position where it does not fit
     * fails the call.
     */
    record UpdateSlice(int dim) implements ExternCall {
        @Override public String opName() { return "update_slice"; }
    }

    /**
     * Attention of one query position over a cache (see {@link dev.gatun.ir.graph.Op.Attention}): contiguous queries
     * [B, R, d], keys transposed [B, d, S], values [B, S, d] and the i32 or i64 position.
     */
    record Attention(double scale) implements ExternCall {
        @Override public String opName() { return "attention"; }
    }

    /**
     * A call of a registered op ({@link dev.gatun.ir.graph.OpSpec}): packed row-major inputs, each output a contiguous
     * buffer of its own (the first this call's, the others {@link ExternOutputBuffer}s).
     */
    record Registered(dev.gatun.ir.graph.OpSpec spec, dev.gatun.ir.graph.OpAttrs attrs) implements ExternCall {
        @Override public String opName() { return spec.name(); }
    }

    record UserOpCall(UserOp op, String group) implements ExternCall {
        @Override public String opName() { return op.name(); }
        /** Peers read the inputs the op declares symmetric. */
        @Override public boolean peerReads(int input) { return op.requiresSymmetric(input); }
    }
}
