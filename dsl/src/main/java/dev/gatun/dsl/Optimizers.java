package dev.gatun.dsl;

/**
 * The optimizers with {@code torch.optim}'s defaults: AdamW {@code lr = 1e-3, betas = (0.9, 0.999), eps = 1e-8,
 * weight_decay = 1e-2}; SGD {@code lr = 1e-3, momentum = 0, dampening = 0, weight_decay = 0, nesterov = False}. No
 * clipping and no gradient averaging until {@link Optimizer#clipGradNorm} and {@link Optimizer#averageGradients} ask.
 *
 * <pre>{@code
 * TrainStep s = Optimizers.adamW(3e-3).clipGradNorm(1.0).averageGradients("world").step(loss, params);
 * }</pre>
 */
public final class Optimizers {
    private Optimizers() {}

    public static Optimizer.AdamW adamW() { return adamW(1e-3); }

    public static Optimizer.AdamW adamW(double lr) { return adamW(lr, 0.9, 0.999, 1e-8, 1e-2); }

    public static Optimizer.AdamW adamW(double lr, double beta1, double beta2, double eps, double weightDecay) {
        return new Optimizer.AdamW(lr, beta1, beta2, eps, weightDecay, 0, null);
    }

    public static Optimizer.Sgd sgd(double lr) { return sgd(lr, 0, 0, 0, false); }

    public static Optimizer.Sgd sgd(double lr, double momentum) { return sgd(lr, momentum, 0, 0, false); }

    public static Optimizer.Sgd sgd(double lr, double momentum, double dampening, double weightDecay, boolean nesterov) {
        return new Optimizer.Sgd(lr, momentum, dampening, weightDecay, nesterov, 0, null);
    }
}
