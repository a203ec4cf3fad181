package dev.gatun.runtime;

import dev.gatun.ir.DType;

/**
 * Rounding a value to what a dtype can hold, the rules every host computation ends with. Values of the integer
 * dtypes and bool travel as Java {@code long}s (exact to all 64 bits), floating ones as doubles; see
 * {@link #isExact}.
 *
 * <ul>
 * <li>Floating types round to nearest even; an integer becomes a float by one rounding ({@link #fromLong}).</li>
 * <li>Integers wrap to their width as Java's narrowing does ({@link #wrap}: int32 as {@code (int)}, int8 as
 *     {@code (byte)}); bool is "non-zero".</li>
 * <li>A floating value becomes an integer truncated toward zero, as a cast in PyTorch does; out of range (undefined in
 *     PyTorch) it saturates to the {@code long} range, NaN gives 0, then it wraps to the width: Java's
 *     {@code (int) (long) v}, which is also what the CUDA backend's kernels do ({@link #toLong}).</li>
 * </ul>
 */
public final class DTypes {
    private DTypes() {}

    /** Whether {@code t}'s values travel as exact {@code long}s (integers and bool) rather than doubles. */
    public static boolean isExact(DType t) { return !t.isFloating(); }

    /** A double rounded to {@code t}: floats round to nearest even; integers and bool as {@link #toLong}. */
    public static double round(double v, DType t) {
        return switch (t) {
            case FLOAT64 -> v;
            case FLOAT32 -> (float) v;
            // double -> float -> half is correctly rounded: float keeps 24 >= 2*11 + 2 bits, so the first
            // rounding can never create a false tie for the second (Figueroa's double-rounding condition).
            case FLOAT16 -> Float.float16ToFloat(Float.floatToFloat16((float) v));
            case BFLOAT16 -> bf16ToFloat(floatToBf16((float) v));
            case INT8, INT32, INT64, BOOL -> toLong(v, t);
        };
    }

    /**
     * A double as a value of {@code t}: truncated toward zero, saturated to the {@code long} range (NaN is 0), then
     * wrapped to the width; bool is "non-zero" (NaN is true, as in PyTorch). A floating {@code t} is refused.
     */
    public static long toLong(double v, DType t) {
        return switch (t) {
            case INT8 -> (byte) (long) v;
            case INT32 -> (int) (long) v;
            case INT64 -> (long) v;
            case BOOL -> v != 0 ? 1 : 0;
            case FLOAT16, BFLOAT16, FLOAT32, FLOAT64 -> throw new GatunRuntimeException("DTypes.toLong: " + t + " is not an integer dtype; round(v, " + t + ") rounds to it");
        };
    }

    /** An integer as a value of {@code t}: wrapped to its width as Java's narrowing does; bool is "non-zero". */
    public static long wrap(long v, DType t) {
        return switch (t) {
            case INT8 -> (byte) v;
            case INT32 -> (int) v;
            case INT64 -> v;
            case BOOL -> v != 0 ? 1 : 0;
            case FLOAT16, BFLOAT16, FLOAT32, FLOAT64 -> throw new GatunRuntimeException("DTypes.wrap: " + t + " is not an integer dtype; fromLong(v, " + t + ") rounds to it");
        };
    }

    /**
     * An integer as a value of floating {@code t}, rounded once to nearest even (a {@code long} straight to float, as
     * C++ and so PyTorch convert; to a half type through float, as PyTorch's half types do). An integer {@code t} is
     * refused: a double cannot hold every int64 ({@link #wrap} is the exact conversion).
     */
    public static double fromLong(long v, DType t) {
        return switch (t) {
            case FLOAT64 -> (double) v;
            case FLOAT32 -> (float) v;
            case FLOAT16 -> Float.float16ToFloat(Float.floatToFloat16((float) v));
            case BFLOAT16 -> bf16ToFloat(floatToBf16((float) v));
            case INT8, INT32, INT64, BOOL -> throw new GatunRuntimeException("DTypes.fromLong: " + t + " is not a floating dtype; wrap(v, " + t + ") is the exact conversion");
        };
    }

    /** float -> bfloat16 bits, round to nearest even; NaN stays a (quiet) NaN. */
    public static short floatToBf16(float f) {
        int bits = Float.floatToRawIntBits(f);
        if (Float.isNaN(f)) return (short) ((bits >>> 16) | 0x0040);
        int rounding = 0x7FFF + ((bits >>> 16) & 1);
        return (short) ((bits + rounding) >>> 16);
    }

    public static float bf16ToFloat(short b) { return Float.intBitsToFloat((b & 0xFFFF) << 16); }
}
