package dev.gatun.ir.graph;

/** Elementwise functions. Arity 1, 2 or 3 (where); comparisons produce bool. */
public enum PointwiseFn {
    ADD(2), SUB(2), MUL(2), DIV(2), POW(2), MAXIMUM(2), MINIMUM(2),
    EQ(2), NE(2), LT(2), LE(2), GT(2), GE(2),
    NEG(1), ABS(1), EXP(1), LOG(1), SQRT(1), RSQRT(1), SIN(1), COS(1), TANH(1), SIGMOID(1), RELU(1), GELU(1), SILU(1),
    /** Identity: materializes its input (a copy kernel). */
    IDENTITY(1),
    WHERE(3);

    private final int arity;
    /** Made once: lowering and fusion ask for it for every op of a graph. */
    private final String opName = name().toLowerCase(java.util.Locale.ROOT);

    PointwiseFn(int arity) { this.arity = arity; }

    public int arity() { return arity; }

    public boolean isComparison() { return this == EQ || this == NE || this == LT || this == LE || this == GT || this == GE; }

    /** Transcendental functions compute in floating point: integer inputs promote to float32, as in PyTorch. */
    public boolean needsFloat() {
        return switch (this) {
            case DIV, EXP, LOG, SQRT, RSQRT, SIN, COS, TANH, SIGMOID, GELU, SILU -> true;
            default -> false;
        };
    }

    public String opName() { return opName; }
}
