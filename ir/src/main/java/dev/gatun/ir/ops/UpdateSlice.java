package dev.gatun.ir.ops;

import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.UpdateRuns;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;

import java.util.List;

/**
 * {@code update_slice} ({@code dynamic_update_slice}): input 0 (the operand) with input 1 (the update: the operand's
 * dtype and rank, the operand's sizes outside {@code dim}, at most its size along it, every size static) written along
 * {@code dim} (negative counts from the end) from the position input 2 holds at run time (an i32 or i64 tensor of one
 * element). A position where the update does not fit, below 0 or past {@code size(dim) - update.size(dim)}, is an error
 * at run time ({@link #refusal}), never a write elsewhere.
 *
 * <p>The op writes {@link #inPlace in place}: on a version of a state it writes the state's slot (the state holds the
 * result after the call), on anything else a copy of the operand made for the call; a call moves only the update's
 * bytes, not the operand's. It reads its update {@link #readsStrided where it lies} when the update's runs fold into
 * two strides ({@link UpdateRuns}: a key transposed to {@code [.., head_dim, 1]}, a value head of a fused product),
 * else lowering copies it first. The JSON form is {@code "op": "update_slice"} with the field {@code dim}, as before the
 * op was registered. The planner batches updates at one position and joins an attention's cache updates to it through
 * its typed view of the step ({@code dev.gatun.planner.UpdateSliceCall}).
 */
public final class UpdateSlice implements OpSpec {
    public static final UpdateSlice SPEC = new UpdateSlice();

    private UpdateSlice() {}

    @Override public String name() { return "update_slice"; }

    @Override public List<Attribute> attributes() { return List.of(new Attribute("dim", Attribute.Kind.INT)); }

    @Override public boolean inPlace() { return true; }

    @Override public boolean checksValues() { return true; }

    /** The updated dimension of an operand of {@code rank} dimensions, counted from the front. */
    public static int dim(OpAttrs attrs, int rank) {
        long d = attrs.integer("dim");
        return (int) (d < 0 ? d + rank : d);
    }

    @Override public List<TensorType> infer(List<Operand> args, OpAttrs attrs) {
        if (args.size() != 3) throw new GraphException("update_slice takes an operand, an update and a position, got " + args.size() + " tensors");
        Operand x = args.get(0), upd = args.get(1), at = args.get(2);
        long given = attrs.integer("dim");
        String call = "update_slice(" + x.describe() + ", " + upd.describe() + ", " + at.describe() + ", dim=" + given + ")";
        int rank = x.type().rank();
        if (rank < 1) throw new GraphException(call + ": the operand " + x.label() + " is a scalar; it has no dimension to update along");
        if (given < -rank || given >= rank) throw new GraphException(call + ": dim " + given + " is outside the operand's " + rank + " dimensions");
        int dim = dim(attrs, rank);
        if (upd.type().dtype() != x.type().dtype())
            throw new GraphException(call + ": the update " + upd.label() + " is " + upd.type().dtype() + " but the operand is " + x.type().dtype() + "; cast it first");
        if (upd.type().rank() != rank)
            throw new GraphException(call + ": the update " + upd.label() + " has " + upd.type().rank() + " dimensions, the operand " + rank + "; reshape it to match");
        for (int d = 0; d < rank; d++) {
            Dim a = x.type().shape().dim(d), b = upd.type().shape().dim(d);
            if (!a.isStatic() || !b.isStatic())
                throw new GraphException(call + ": dimension " + d + " must be static in both (" + a + ", " + b + ")");
            if (d == dim ? b.size() > a.size() : b.size() != a.size())
                throw new GraphException(call + ": the update's dimension " + d + " is " + b.size() + (d == dim ? ", longer than the operand's " : ", the operand's is ")
                        + a.size() + (d == dim ? "" : "; only dimension " + dim + " may differ"));
        }
        Position.check(call, at);
        return List.of(x.type());
    }

    /** The update (input 1) where its runs fold into two strides ({@link UpdateRuns}); the position is read packed. */
    @Override public boolean readsStrided(int input, long[] shape, long[] strides, OpAttrs attrs) {
        return input == 1 && UpdateRuns.of(shape, strides, dim(attrs, shape.length)) != null;
    }

    /** A position where the update does not fit along the dimension, with the positions that are valid. */
    @Override public String refusal(List<HostTensor> inputs, OpAttrs attrs) {
        HostTensor x = inputs.get(0), update = inputs.get(1);
        int dim = dim(attrs, x.shape().length);
        long size = x.shape()[dim], len = update.shape()[dim], start = inputs.get(2).getLong(0);
        if (start >= 0 && start <= size - len) return null;
        return "position " + start + " puts the " + len + " elements of the update along dimension " + dim + " outside the " + size
                + " of the operand; it must be 0 to " + (size - len);
    }

    /**
     * The update's elements copied to their places along the dimension; output 0 already holds the operand's values
     * ({@link #inPlace}), so nothing else is written. Exact for every dtype.
     */
    @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
        HostTensor update = inputs.get(1), out = outputs.getFirst();
        long[] shape = out.shape();
        int dim = dim(attrs, shape.length);
        long size = shape[dim], len = update.shape()[dim], start = inputs.get(2).getLong(0), inner = 1;
        for (int d = dim + 1; d < shape.length; d++) inner *= shape[d];
        long outer = size * inner == 0 ? 0 : out.numel() / (size * inner);
        for (long o = 0; o < outer; o++)
            for (long j = 0; j < len; j++) update.copyTo((o * len + j) * inner, out, (o * size + start + j) * inner, inner);
    }
}
