package dev.gatun.planner;

import dev.gatun.ir.ops.Attention;

import java.util.List;

/**
 * A typed view of an {@code attention} step ({@link Step.OpCall} of {@link Attention#SPEC}), for the passes and backends
 * that read its fields: {@code softmax(scale * q kT) v} over the positions 0 to the one {@code position} holds, into
 * {@code output} (q's shape). The attention's update joining ({@link AttentionUpdates}), the early cache load
 * ({@link LaunchChoices}) and the CUDA backend's kernels use it; the step itself is the generic call, and prints as it
 * did before the op was registered ({@link #format}).
 */
public record AttentionCall(Step.OpCall call, PlanBuffer output, PlanBuffer q, PlanBuffer keysT, PlanBuffer values, PlanBuffer position, double scale) {

    /** Whether {@code s} is an attention call. */
    public static boolean is(Step s) { return s instanceof Step.OpCall o && o.spec() == Attention.SPEC; }

    /** The view of {@code o}, an attention call. */
    public static AttentionCall of(Step.OpCall o) {
        if (o.spec() != Attention.SPEC) throw new IllegalArgumentException(o.format() + " is no attention");
        return new AttentionCall(o, o.output(), o.input(0), o.input(1), o.input(2), o.input(3), o.attrs().real("scale"));
    }

    /** The view of {@code s} where it is an attention call, else null. */
    public static AttentionCall find(Step s) { return is(s) ? of((Step.OpCall) s) : null; }

    /** The step's label for pictures: the queries, keys and values. */
    public String label() { return "attention(" + q.name() + ", " + keysT.name() + ", " + values.name() + ")"; }

    /** The step's line: the call with its position and scale (as a float, the kernels'), and what the launch does. */
    public String format() {
        return output.name() + " = attention(" + q.name() + ", " + keysT.name() + ", " + values.name() + ", up to " + position.name()
                + ", scale=" + (float) scale + ")   # scores, mask, softmax and weighted values in one launch" + Step.partNotes(List.of(output));
    }
}
