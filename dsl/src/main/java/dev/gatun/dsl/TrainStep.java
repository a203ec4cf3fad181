package dev.gatun.dsl;

import java.util.Map;

/**
 * What {@link Optimizer#step} added: the gradients as the update used them (averaged and clipped), the global norm
 * before clipping ({@code clip_grad_norm_}'s return value; null without clipping), and each parameter's new value (the
 * update written over its state: output it to read the weights after the step), all by parameter name; and every
 * state the step wrote (parameters, moments, {@code optimizer.step}) by state name, to output where a caller carries
 * them itself (the reference interpreter, which keeps no state between calls).
 */
public record TrainStep(Map<String, Tensor> gradients, Tensor gradNorm, Map<String, Tensor> updated, Map<String, Tensor> states) {
    public TrainStep {
        gradients = java.util.Collections.unmodifiableMap(new java.util.LinkedHashMap<>(gradients));
        updated = java.util.Collections.unmodifiableMap(new java.util.LinkedHashMap<>(updated));
        states = java.util.Collections.unmodifiableMap(new java.util.LinkedHashMap<>(states));
    }
}
