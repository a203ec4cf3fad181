package dev.gatun.ir;

import java.util.Locale;

/** Element types of Gatun tensors, with their byte sizes and the promotion rules binary ops follow. */
public enum DType {
    BOOL("bool", 1, Kind.BOOL, 0),
    INT8("i8", 1, Kind.INT, 1),
    INT32("i32", 4, Kind.INT, 2),
    INT64("i64", 8, Kind.INT, 3),
    FLOAT16("f16", 2, Kind.FLOAT, 4),
    BFLOAT16("bf16", 2, Kind.FLOAT, 4),
    FLOAT32("f32", 4, Kind.FLOAT, 5),
    FLOAT64("f64", 8, Kind.FLOAT, 6);

    /** Short aliases that read well in jshell and in static imports. */
    public static final DType F32 = FLOAT32, F16 = FLOAT16, BF16 = BFLOAT16, F64 = FLOAT64,
            I8 = INT8, I32 = INT32, I64 = INT64;

    public enum Kind { BOOL, INT, FLOAT }

    private final String shortName;
    private final int byteSize;
    private final Kind kind;
    private final int rank;

    DType(String shortName, int byteSize, Kind kind, int rank) {
        this.shortName = shortName;
        this.byteSize = byteSize;
        this.kind = kind;
        this.rank = rank;
    }

    public String shortName() { return shortName; }
    public int byteSize() { return byteSize; }
    public Kind kind() { return kind; }
    public boolean isFloating() { return kind == Kind.FLOAT; }
    public boolean isIntegral() { return kind == Kind.INT; }
    public boolean isHalf() { return this == FLOAT16 || this == BFLOAT16; }

    /**
     * The type two operands are promoted to, following PyTorch: the wider kind wins (bool < int < float),
     * within a kind the larger type wins, and float16 with bfloat16 promotes to float32.
     */
    public static DType promote(DType a, DType b) {
        if (a == b) return a;
        if (a.isHalf() && b.isHalf()) return FLOAT32;
        return a.rank >= b.rank ? a : b;
    }

    /** Parses a short name ("f32") or an enum name ("FLOAT32"), case-insensitively. */
    public static DType parse(String s) {
        for (DType t : values()) {
            if (t.shortName.equalsIgnoreCase(s) || t.name().equalsIgnoreCase(s)) return t;
        }
        throw new GraphException("unknown dtype '" + s + "' (expected one of f32, f16, bf16, f64, i8, i32, i64, bool)");
    }

    @Override public String toString() { return shortName; }

    String lower() { return name().toLowerCase(Locale.ROOT); }
}
