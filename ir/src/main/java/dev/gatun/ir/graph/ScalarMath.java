package dev.gatun.ir.graph;

/**
 * What each {@link PointwiseFn} computes, with the semantics PyTorch users expect: the one definition the reference
 * interpreter and the host backend share. Floating operands compute in double precision ({@link #apply}); integer
 * (and bool) operands of an integer result or a comparison compute in Java {@code long} ({@link #applyLong}), so int64
 * values stay exact beyond 2^53 and overflow wraps as Java's arithmetic does.
 */
public final class ScalarMath {
    private ScalarMath() {}

    private static final double TWO_OVER_SQRT_PI = 2 / Math.sqrt(Math.PI);

    /**
     * The error function to a few ulps. For |x| < 6 it sums the series
     * {@code erf(x) = 2/sqrt(pi) * exp(-x^2) * sum 2^n x^(2n+1) / (1*3*...*(2n+1))}, whose terms are all
     * positive (no cancellation, unlike the Taylor series); beyond 6, erf is +-1 in double precision
     * (erfc(6) is about 2e-17).
     */
    public static double erf(double x) {
        if (Double.isNaN(x)) return x;
        double a = Math.abs(x);
        if (a >= 6) return Math.copySign(1.0, x);
        double x2 = a * a, term = a, sum = a;
        for (int n = 1; n < 500; n++) {
            term *= 2 * x2 / (2 * n + 1);
            sum += term;
            if (term < sum * 1e-17) break;
        }
        return Math.copySign(Math.min(1.0, TWO_OVER_SQRT_PI * Math.exp(-x2) * sum), x);
    }

    public static double sigmoid(double x) {
        // written to not overflow exp for large |x|
        if (x >= 0) return 1 / (1 + Math.exp(-x));
        double e = Math.exp(x);
        return e / (1 + e);
    }

    /** The exact (erf) form of GELU, PyTorch's default. */
    public static double gelu(double x) { return 0.5 * x * (1 + erf(x / Math.sqrt(2))); }

    public static double silu(double x) { return x * sigmoid(x); }

    /** Applies {@code fn} to one, two or three operands (where: condition, then, else). */
    public static double apply(PointwiseFn fn, double a, double b, double c) {
        return switch (fn) {
            case ADD -> a + b;
            case SUB -> a - b;
            case MUL -> a * b;
            case DIV -> a / b; // true division; integer operands were promoted to float by type inference
            case POW -> Math.pow(a, b);
            // maximum/minimum propagate NaN, as torch.maximum does (Math.max does too)
            case MAXIMUM -> Math.max(a, b);
            case MINIMUM -> Math.min(a, b);
            case EQ -> a == b ? 1 : 0;
            case NE -> a != b ? 1 : 0;
            case LT -> a < b ? 1 : 0;
            case LE -> a <= b ? 1 : 0;
            case GT -> a > b ? 1 : 0;
            case GE -> a >= b ? 1 : 0;
            case NEG -> -a;
            case ABS -> Math.abs(a);
            case EXP -> Math.exp(a);
            case LOG -> Math.log(a);
            case SQRT -> Math.sqrt(a);
            case RSQRT -> 1 / Math.sqrt(a);
            case SIN -> Math.sin(a);
            case COS -> Math.cos(a);
            case TANH -> Math.tanh(a);
            case SIGMOID -> sigmoid(a);
            case RELU -> Double.isNaN(a) ? a : Math.max(a, 0) + 0.0; // + 0.0 turns -0.0 into 0.0, as relu gives 0
            case GELU -> gelu(a);
            case SILU -> silu(a);
            case IDENTITY -> a;
            case WHERE -> a != 0 ? b : c;
        };
    }

    /**
     * Applies {@code fn} to integer operands as Java's {@code long} arithmetic does: add, sub, mul and neg wrap (so abs
     * of {@code Long.MIN_VALUE} is itself, as in PyTorch), comparisons give 1 or 0, pow is the exact integer power
     * ({@link #pow(long, long)}). The caller wraps the result to its dtype's width; since the low bits of a wrapped
     * sum, difference, product or power do not depend on the high bits of the operands, that equals int32 (or int8)
     * arithmetic wrapping at its own width. Functions that compute in floating point are refused: type inference
     * gives them a floating result.
     */
    public static long applyLong(PointwiseFn fn, long a, long b, long c) {
        return switch (fn) {
            case ADD -> a + b;
            case SUB -> a - b;
            case MUL -> a * b;
            case POW -> pow(a, b);
            case MAXIMUM -> Math.max(a, b);
            case MINIMUM -> Math.min(a, b);
            case EQ -> a == b ? 1 : 0;
            case NE -> a != b ? 1 : 0;
            case LT -> a < b ? 1 : 0;
            case LE -> a <= b ? 1 : 0;
            case GT -> a > b ? 1 : 0;
            case GE -> a >= b ? 1 : 0;
            case NEG -> -a;
            case ABS -> Math.abs(a);
            case RELU -> Math.max(a, 0);
            case IDENTITY -> a;
            case WHERE -> a != 0 ? b : c;
            case DIV, EXP, LOG, SQRT, RSQRT, SIN, COS, TANH, SIGMOID, GELU, SILU ->
                    throw new dev.gatun.ir.GatunException("ScalarMath.applyLong: " + fn.opName() + " computes in floating point, not on integers");
        };
    }

    /**
     * {@code base} to the power {@code exp} in wrapping {@code long} arithmetic (square and multiply), as PyTorch's
     * integer pow computes it; a negative exponent gives 1 for base 1, +-1 for base -1 and 0 otherwise (the integer
     * part of the true power), as PyTorch does.
     */
    public static long pow(long base, long exp) {
        if (exp < 0) return base == 1 ? 1 : base == -1 ? ((exp & 1) == 0 ? 1 : -1) : 0;
        long result = 1;
        for (long b = base, e = exp; e != 0; e >>>= 1) {
            if ((e & 1) != 0) result *= b;
            b *= b;
        }
        return result;
    }
}
