package dev.gatun.runtime;

import dev.gatun.ir.DType;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** Reads and writes one element of any dtype in a segment, as a double (writes round to the dtype). */
public final class Elements {
    private Elements() {}

    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED;
    private static final ValueLayout.OfDouble F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED;
    private static final ValueLayout.OfShort I16 = ValueLayout.JAVA_SHORT_UNALIGNED;
    private static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT_UNALIGNED;
    private static final ValueLayout.OfLong I64 = ValueLayout.JAVA_LONG_UNALIGNED;

    public static double get(MemorySegment s, DType t, long index) {
        return switch (t) {
            case FLOAT32 -> s.getAtIndex(F32, index);
            case FLOAT64 -> s.getAtIndex(F64, index);
            case FLOAT16 -> Float.float16ToFloat(s.getAtIndex(I16, index));
            case BFLOAT16 -> DTypes.bf16ToFloat(s.getAtIndex(I16, index));
            case INT8, BOOL -> s.get(ValueLayout.JAVA_BYTE, index);
            case INT32 -> s.getAtIndex(I32, index);
            case INT64 -> s.getAtIndex(I64, index);
        };
    }

    public static void set(MemorySegment s, DType t, long index, double value) {
        double v = DTypes.round(value, t);
        switch (t) {
            case FLOAT32 -> s.setAtIndex(F32, index, (float) v);
            case FLOAT64 -> s.setAtIndex(F64, index, v);
            case FLOAT16 -> s.setAtIndex(I16, index, Float.floatToFloat16((float) v));
            case BFLOAT16 -> s.setAtIndex(I16, index, DTypes.floatToBf16((float) v));
            case INT8, BOOL -> s.set(ValueLayout.JAVA_BYTE, index, (byte) v);
            case INT32 -> s.setAtIndex(I32, index, (int) v);
            case INT64 -> s.setAtIndex(I64, index, (long) v);
        }
    }
}
