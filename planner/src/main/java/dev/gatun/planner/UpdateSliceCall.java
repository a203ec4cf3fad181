package dev.gatun.planner;

import dev.gatun.ir.DType;
import dev.gatun.ir.UpdateRuns;
import dev.gatun.ir.ops.UpdateSlice;

import java.util.Map;

/**
 * A typed view of an {@code update_slice} step ({@link Step.OpCall} of {@link UpdateSlice#SPEC}), for the passes and
 * backends that read its fields: {@code update} written along {@code dim} (counted from the front) of {@code target}
 * from the position {@code start} holds (i32 or i64), in place: {@code output} is placed over {@code target} (a state's
 * slot, or a copy made for the call). The update may be a view, read where it lies ({@link UpdateRuns}). The batching
 * pass ({@link UpdateBatching}), the attention's update joining ({@link AttentionUpdates}) and the CUDA backend's kernel
 * use it; the step itself is the generic call, and prints as it did before the op was registered ({@link #format}).
 */
public record UpdateSliceCall(Step.OpCall call, PlanBuffer output, PlanBuffer target, PlanBuffer update, PlanBuffer start, int dim) {

    /** Whether {@code s} is an update_slice call. */
    public static boolean is(Step s) { return s instanceof Step.OpCall o && o.spec() == UpdateSlice.SPEC; }

    /** The view of {@code o}, an update_slice call. */
    public static UpdateSliceCall of(Step.OpCall o) {
        if (o.spec() != UpdateSlice.SPEC) throw new IllegalArgumentException(o.format() + " is no update_slice");
        return new UpdateSliceCall(o, o.output(), o.input(0), o.input(1), o.input(2), UpdateSlice.dim(o.attrs(), o.input(0).shape().rank()));
    }

    /** The view of {@code s} where it is an update_slice call, else null. */
    public static UpdateSliceCall find(Step s) { return is(s) ? of((Step.OpCall) s) : null; }

    /**
     * What the step copies, for this call's shapes: {@code count} runs (the target's elements before {@code dim}),
     * each {@code len} of the target's {@code size} positions along it, a position {@code innerBytes} long; in the
     * update, run {@code o} starts at {@code from.offset(o)} elements from its first (see {@link UpdateRuns}).
     */
    public record Runs(long count, long size, long len, long innerBytes, UpdateRuns from) {
        /** Where run {@code o} starts in the update, in bytes. */
        public long fromByte(long o, DType t) { return from.offset(o) * t.byteSize(); }
    }

    public Runs runs(Map<String, Long> env) {
        long[] shape = target.shape().sizes(env), u = update.shape().sizes(env), strides = new long[u.length];
        long inner = target.dtype().byteSize(), count = 1;
        for (int d = dim + 1; d < shape.length; d++) inner *= shape[d];
        for (int d = 0; d < dim; d++) count *= shape[d];
        for (int d = 0; d < u.length; d++) strides[d] = update.strides().get(d).eval(env);
        UpdateRuns from = UpdateRuns.of(u, strides, dim);
        if (from == null)
            throw new IllegalStateException(format() + ": the update's runs do not fold into two strides, which lowering should have copied");
        return new Runs(count, shape[dim], u[dim], inner, from);
    }

    /** The step's label for pictures: the target and the update. */
    public String label() { return "update_slice(" + target.name() + ", " + update.name() + ")"; }

    /** The step's line: the call, then where the update is read and written (an update that is a view is read where it lies). */
    public String format() {
        String from = update.isView() ? update.name() + " (read where it lies in " + update.storage().name() + ": offset " + update.offset()
                + ", strides " + update.strides() + ")" : update.name();
        return output.name() + " = update_slice(" + target.name() + ", " + update.name() + ", " + start.name() + ", dim=" + dim + ")   # in place: "
                + from + " into " + target.name() + "'s slot along dim " + dim + " from position " + start.name() + " (run time)";
    }
}
