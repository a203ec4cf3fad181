package dev.gatun.dsl;

import dev.gatun.ir.GraphException;

/**
 * An optimizer step written into the graph, with {@code torch.optim}'s update formulas and defaults
 * ({@link Optimizers} makes them): {@link #step} adds the backward pass of a loss, the gradients' average over a
 * data-parallel group, clipping by global norm ({@code torch.nn.utils.clip_grad_norm_}) and the update of every
 * parameter, whose new value, like each moment and the step count, is written in place over its state. One call of the
 * compiled graph is one training step.
 *
 * <p>Options shared by both: {@code maxGradNorm} (0: no clipping) and {@code gradGroup} (null: the gradients are used as
 * they are; a group name: each is {@code all_reduce(avg)}-ed over that group first, data parallelism where each rank
 * computes its loss on its own part of the batch). A parameter declared {@link Parameters#fullyShardedOver} (FSDP) is
 * reduce-scattered over its group instead ({@code reduce_scatter(avg)} where that group is {@code gradGroup}, sum
 * without one; another group is refused), one {@link Parameters#tiedOver} has its copies' gradients summed first.
 * {@code lossScale} (null: none) is a {@link LossScale}, {@code torch.amp.GradScaler}'s dynamic loss scaling.
 */
public sealed interface Optimizer {

    /**
     * {@code torch.optim.AdamW} (amsgrad off): {@code p *= 1 - lr * wd; m = lerp(m, g, 1 - beta1);
     * v = beta2 v + (1 - beta2) g^2; p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)}.
     */
    record AdamW(double lr, double beta1, double beta2, double eps, double weightDecay, double maxGradNorm, String gradGroup, LossScale lossScale) implements Optimizer {
        /** Without a loss scale. */
        public AdamW(double lr, double beta1, double beta2, double eps, double weightDecay, double maxGradNorm, String gradGroup) {
            this(lr, beta1, beta2, eps, weightDecay, maxGradNorm, gradGroup, null);
        }
        public AdamW {
            OptimizerChecks.positive("AdamW", "lr", lr, true);
            if (!(beta1 >= 0 && beta1 < 1) || !(beta2 >= 0 && beta2 < 1))
                throw new GraphException("AdamW: betas (" + beta1 + ", " + beta2 + ") must each be in [0, 1)");
            OptimizerChecks.positive("AdamW", "eps", eps, true);
            OptimizerChecks.positive("AdamW", "weightDecay", weightDecay, true);
            OptimizerChecks.positive("AdamW", "maxGradNorm", maxGradNorm, true);
        }
        @Override public AdamW clipGradNorm(double maxNorm) { return new AdamW(lr, beta1, beta2, eps, weightDecay, OptimizerChecks.clip(maxNorm), gradGroup, lossScale); }
        @Override public AdamW averageGradients(String group) { return new AdamW(lr, beta1, beta2, eps, weightDecay, maxGradNorm, OptimizerChecks.group(group), lossScale); }
        @Override public AdamW scaleLoss(LossScale scale) { return new AdamW(lr, beta1, beta2, eps, weightDecay, maxGradNorm, gradGroup, OptimizerChecks.scale(scale)); }
    }

    /**
     * {@code torch.optim.SGD}: {@code d = g + wd p}; with momentum {@code b = d} at the first step, then
     * {@code b = momentum b + (1 - dampening) d}, and {@code d = b} (Nesterov: {@code d + momentum b}); {@code p -= lr d}.
     */
    record Sgd(double lr, double momentum, double dampening, double weightDecay, boolean nesterov, double maxGradNorm, String gradGroup, LossScale lossScale) implements Optimizer {
        /** Without a loss scale. */
        public Sgd(double lr, double momentum, double dampening, double weightDecay, boolean nesterov, double maxGradNorm, String gradGroup) {
            this(lr, momentum, dampening, weightDecay, nesterov, maxGradNorm, gradGroup, null);
        }
        public Sgd {
            OptimizerChecks.positive("SGD", "lr", lr, true);
            OptimizerChecks.positive("SGD", "momentum", momentum, true);
            OptimizerChecks.positive("SGD", "dampening", dampening, true);
            OptimizerChecks.positive("SGD", "weightDecay", weightDecay, true);
            OptimizerChecks.positive("SGD", "maxGradNorm", maxGradNorm, true);
            if (nesterov && (momentum <= 0 || dampening != 0))
                throw new GraphException("SGD: Nesterov momentum requires a momentum above 0 and zero dampening (momentum " + momentum + ", dampening " + dampening + ")");
        }
        @Override public Sgd clipGradNorm(double maxNorm) { return new Sgd(lr, momentum, dampening, weightDecay, nesterov, OptimizerChecks.clip(maxNorm), gradGroup, lossScale); }
        @Override public Sgd averageGradients(String group) { return new Sgd(lr, momentum, dampening, weightDecay, nesterov, maxGradNorm, OptimizerChecks.group(group), lossScale); }
        @Override public Sgd scaleLoss(LossScale scale) { return new Sgd(lr, momentum, dampening, weightDecay, nesterov, maxGradNorm, gradGroup, OptimizerChecks.scale(scale)); }
    }

    /** The global 2-norm the gradients are clipped to (0: no clipping). */
    double maxGradNorm();

    /** The group each gradient is averaged over before the update, or null. */
    String gradGroup();

    /** The dynamic loss scale ({@code torch.amp.GradScaler}), or null: the loss is differentiated as it is. */
    LossScale lossScale();

    /**
     * This optimizer with dynamic loss scaling ({@link LossScale}: {@code LossScale.dynamic()} for GradScaler's
     * defaults): the loss scaled before the backward pass, the gradients unscaled before clipping, a step with an inf or
     * a NaN gradient skipped and the scale backed off, grown after a run of good steps.
     */
    Optimizer scaleLoss(LossScale scale);

    /** This optimizer with the gradients clipped to a global 2-norm of at most {@code maxNorm} before the update. */
    Optimizer clipGradNorm(double maxNorm);

    /** This optimizer with each gradient averaged over {@code group} ({@code all_reduce(avg)}) before clipping and update. */
    Optimizer averageGradients(String group);

    /**
     * Adds one training step to the graph {@code loss} belongs to: the gradients of {@code loss} with respect to every
     * parameter's master copy, then the average, clipping and update, each state written in place. The parameters' new
     * values, the moments and the step count are states: they are kept from call to call.
     */
    default TrainStep step(Tensor loss, Parameters params) { return OptimizerStep.add(this, loss, params); }
}
