package dev.gatun.dsl;

import dev.gatun.ir.GraphException;

/**
 * Dynamic loss scaling, {@code torch.amp.GradScaler}'s, for training with f16 activations whose small gradients would
 * underflow: the step differentiates {@code loss * scale}, unscales every gradient by {@code 1 / scale} (computed in
 * float64, rounded to float32, as GradScaler's {@code inv_scale}) after the data-parallel reduction and before clipping,
 * and, when any gradient holds an inf or a NaN (on any rank: a sharded gradient's check is summed over its groups),
 * skips the update (no parameter, moment or step count changes) and multiplies the scale by {@code backoffFactor};
 * after {@code growthInterval} good steps in a row it multiplies it by {@code growthFactor} (where that stays finite).
 * The scale and the count of good steps are states ({@value #SCALE}, float32, and {@value #TRACKER}, int32, shape [1]):
 * a scale state of 0, as every state is when a session starts, reads as {@code initScale}.
 *
 * @param initScale      the first scale (GradScaler: 2^16)
 * @param growthFactor   the factor after {@code growthInterval} good steps (2.0)
 * @param backoffFactor  the factor after a step with an inf or a NaN (0.5)
 * @param growthInterval good steps in a row before the scale grows (2000)
 */
public record LossScale(double initScale, double growthFactor, double backoffFactor, int growthInterval) {
    /** The state holding the current scale. */
    public static final String SCALE = "optimizer.loss_scale";
    /** The state counting the good steps since the scale last changed. */
    public static final String TRACKER = "optimizer.growth_tracker";

    public LossScale {
        if (!(initScale > 0) || !Double.isFinite(initScale) || (float) initScale == Float.POSITIVE_INFINITY)
            throw new GraphException("LossScale: initScale is " + initScale + "; it must be a finite float32 above 0");
        if (!(growthFactor > 1) || !Double.isFinite(growthFactor))
            throw new GraphException("LossScale: growthFactor is " + growthFactor + "; it must be a finite number above 1");
        if (!(backoffFactor > 0 && backoffFactor < 1))
            throw new GraphException("LossScale: backoffFactor is " + backoffFactor + "; it must be in (0, 1)");
        if (growthInterval < 1) throw new GraphException("LossScale: growthInterval is " + growthInterval + "; it must be at least 1");
    }

    /** GradScaler's defaults: init 2^16, growth 2, backoff 0.5, interval 2000. */
    public static LossScale dynamic() { return new LossScale(65536, 2, 0.5, 2000); }
}
