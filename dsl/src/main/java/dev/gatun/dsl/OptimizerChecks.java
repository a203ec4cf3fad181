package dev.gatun.dsl;

import dev.gatun.ir.GraphException;

/** The optimizers' argument checks ({@link Optimizer}): each refusal names the optimizer, the argument and its value. */
final class OptimizerChecks {
    private OptimizerChecks() {}

    static void positive(String opt, String what, double v, boolean zeroOk) {
        if (!Double.isFinite(v) || v < 0 || (!zeroOk && v == 0))
            throw new GraphException(opt + ": " + what + " is " + v + "; it must be a finite number of at least 0");
    }
    static double clip(double maxNorm) {
        if (!Double.isFinite(maxNorm) || maxNorm <= 0)
            throw new GraphException("clipGradNorm: the maximum norm is " + maxNorm + "; it must be a finite number above 0");
        return maxNorm;
    }
    static String group(String group) {
        if (group == null || group.isBlank()) throw new GraphException("averageGradients: give the name of the data-parallel group ('world' for every rank)");
        return group;
    }
    static LossScale scale(LossScale scale) {
        if (scale == null) throw new GraphException("scaleLoss: give a LossScale (LossScale.dynamic() for torch.amp.GradScaler's defaults)");
        return scale;
    }
}
