package dev.gatun.dsl;

import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.PointwiseFn;

/**
 * The derivative of every {@link PointwiseFn}, as PyTorch defines it where a function has a kink: relu's and abs's
 * derivative at 0 is 0; maximum and minimum split the gradient evenly between equal operands; {@code pow(a, b)}'s
 * derivative in a is 0 where b is 0, and in b is 0 where a is 0 and b is at least 0. Comparisons give bool, which carries
 * no gradient; where's condition likewise. GELU is the exact (erf) form, whose derivative {@code Phi(x) + x phi(x)} takes
 * {@code Phi(x)} as {@code gelu(x) / x} (0.5 at 0): Gatun has no erf op, and the quotient is exact to rounding. A
 * gradient of a broadcast operand is summed back to its shape ({@link GradientRules#unbroadcast}).
 */
final class PointwiseGradients {
    private PointwiseGradients() {}

    private static final double INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);

    /** Writes into {@code out} the gradient of each input {@code want} asks for, given {@code g}, the gradient of {@code n}. */
    static void vjp(GraphBuilder graph, PointwiseFn fn, Node n, Tensor g, boolean[] want, Tensor[] out) {
        Tensor y = graph.wrap(n), a = graph.wrap(n.input(0)), b = n.inputs().size() > 1 ? graph.wrap(n.input(1)) : null;
        java.util.function.Supplier<Tensor> zeros = () -> graph.scalar(0, g.dtype());
        switch (fn) {
            case ADD -> { out[0] = g; if (want[1]) out[1] = g; }
            case SUB -> { out[0] = g; if (want[1]) out[1] = g.neg(); }
            case MUL -> { if (want[0]) out[0] = g.mul(b); if (want[1]) out[1] = g.mul(a); }
            case DIV -> { if (want[0]) out[0] = g.div(b); if (want[1]) out[1] = g.mul(y).div(b).neg(); }
            case POW -> {
                if (want[0]) out[0] = b.eq(0).where(zeros.get(), g.mul(b).mul(a.pow(b.sub(1))));
                if (want[1]) out[1] = a.eq(0).where(b.ge(0).where(zeros.get(), g.mul(y).mul(a.log())), g.mul(y).mul(a.log()));
            }
            case MAXIMUM, MINIMUM -> {
                Tensor wins = fn == PointwiseFn.MAXIMUM ? a.gt(b) : a.lt(b);
                Tensor share = wins.where(graph.scalar(1, g.dtype()), a.eq(b).where(graph.scalar(0.5, g.dtype()), zeros.get()));
                if (want[0]) out[0] = g.mul(share);
                if (want[1]) out[1] = g.mul(share.neg().add(1));
            }
            case NEG -> out[0] = g.neg();
            case ABS -> out[0] = a.gt(0).where(g, a.lt(0).where(g.neg(), zeros.get()));
            case EXP -> out[0] = g.mul(y);
            case LOG -> out[0] = g.div(a);
            case SQRT -> out[0] = g.div(y.mul(2));
            case RSQRT -> out[0] = g.mul(y.mul(y).mul(y)).mul(-0.5);
            case SIN -> out[0] = g.mul(a.cos());
            case COS -> out[0] = g.mul(a.sin()).neg();
            case TANH -> out[0] = g.mul(y.mul(y).neg().add(1));
            case SIGMOID -> out[0] = g.mul(y).mul(y.neg().add(1));
            case RELU -> out[0] = a.gt(0).where(g, zeros.get());
            case GELU -> {
                Tensor cdf = a.eq(0).where(graph.scalar(0.5, g.dtype()), y.div(a));
                Tensor pdf = a.mul(a).mul(-0.5).exp().mul(INV_SQRT_2PI);
                out[0] = g.mul(cdf.add(a.mul(pdf)));
            }
            case SILU -> {
                Tensor s = a.sigmoid();
                out[0] = g.mul(s).mul(a.mul(s.neg().add(1)).add(1));
            }
            case IDENTITY -> out[0] = g;
            case WHERE -> {
                Tensor c = a;
                if (want[1]) out[1] = c.where(g, zeros.get());
                if (want[2]) out[2] = c.where(zeros.get(), g);
            }
            case EQ, NE, LT, LE, GT, GE -> { }   // bool results are never active
        }
        for (int k = 0; k < out.length; k++)
            if (want[k] && out[k] != null) out[k] = GradientRules.unbroadcast(graph, out[k], n.input(k).type().shape());
    }
}
