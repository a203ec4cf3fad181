package dev.gatun.runtime;

import dev.gatun.ir.DType;

/**
 * Rounding a double to what a dtype can hold, the one rule every host computation ends with. Floating types
 * round to nearest even; integers truncate toward zero (as a cast in PyTorch does) and wrap to their width;
 * bool is "non-zero".
 */
public final class DTypes {
    private DTypes() {}

    public static double round(double v, DType t) {
        return switch (t) {
            case FLOAT64 -> v;
            case FLOAT32 -> (float) v;
            // double -> float -> half is correctly rounded: float keeps 24 >= 2*11 + 2 bits, so the first
            // rounding can never create a false tie for the second (Figueroa's double-rounding condition).
            case FLOAT16 -> Float.float16ToFloat(Float.floatToFloat16((float) v));
            case BFLOAT16 -> bf16ToFloat(floatToBf16((float) v));
            case INT8 -> (byte) (long) v;
            case INT32 -> (int) (long) v;
            case INT64 -> (long) v;
            case BOOL -> v != 0 ? 1 : 0; // NaN is non-zero, so true, as in PyTorch
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
