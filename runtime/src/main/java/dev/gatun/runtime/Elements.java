package dev.gatun.runtime;

import dev.gatun.ir.DType;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * Reads and writes one element of any dtype in a segment: as a double ({@link #get}/{@link #set}, exact for every
 * floating dtype and for integers up to 2^53) or as a long ({@link #getLong}/{@link #setLong}, exact for every integer
 * dtype and bool). Writes round to the dtype as {@link DTypes} says; {@link #copy} and {@link #convert} move an
 * element without passing an integer through a double.
 */
public final class Elements {
    private Elements() {}

    private static final ValueLayout.OfFloat F32 = ValueLayout.JAVA_FLOAT_UNALIGNED;
    private static final ValueLayout.OfDouble F64 = ValueLayout.JAVA_DOUBLE_UNALIGNED;
    private static final ValueLayout.OfShort I16 = ValueLayout.JAVA_SHORT_UNALIGNED;
    private static final ValueLayout.OfInt I32 = ValueLayout.JAVA_INT_UNALIGNED;
    private static final ValueLayout.OfLong I64 = ValueLayout.JAVA_LONG_UNALIGNED;

    /** The element as a double (an int64 beyond 2^53 rounds to the nearest double: use {@link #getLong} for those). */
    public static double get(MemorySegment s, DType t, long index) {
        return switch (t) {
            case FLOAT32 -> s.getAtIndex(F32, index);
            case FLOAT64 -> s.getAtIndex(F64, index);
            case FLOAT16 -> Float.float16ToFloat(s.getAtIndex(I16, index));
            case BFLOAT16 -> DTypes.bf16ToFloat(s.getAtIndex(I16, index));
            case INT8, BOOL, INT32, INT64 -> getLong(s, t, index);
        };
    }

    /** Writes a double rounded to the dtype ({@link DTypes#round}). */
    public static void set(MemorySegment s, DType t, long index, double value) {
        switch (t) {
            case FLOAT32 -> s.setAtIndex(F32, index, (float) value);
            case FLOAT64 -> s.setAtIndex(F64, index, value);
            case FLOAT16 -> s.setAtIndex(I16, index, Float.floatToFloat16((float) value));
            case BFLOAT16 -> s.setAtIndex(I16, index, DTypes.floatToBf16((float) value));
            case INT8, BOOL, INT32, INT64 -> setLong(s, t, index, DTypes.toLong(value, t));
        }
    }

    /** The element as a long: exact for the integer dtypes and bool; a floating one truncates as a cast to int64 does. */
    public static long getLong(MemorySegment s, DType t, long index) {
        return switch (t) {
            case INT8, BOOL -> s.get(ValueLayout.JAVA_BYTE, index);
            case INT32 -> s.getAtIndex(I32, index);
            case INT64 -> s.getAtIndex(I64, index);
            case FLOAT16, BFLOAT16, FLOAT32, FLOAT64 -> DTypes.toLong(get(s, t, index), DType.INT64);
        };
    }

    /** Writes an integer: wrapped to an integer dtype's width, "non-zero" for bool, rounded once to a floating dtype. */
    public static void setLong(MemorySegment s, DType t, long index, long value) {
        switch (t) {
            case INT8 -> s.set(ValueLayout.JAVA_BYTE, index, (byte) value);
            case BOOL -> s.set(ValueLayout.JAVA_BYTE, index, (byte) (value != 0 ? 1 : 0));
            case INT32 -> s.setAtIndex(I32, index, (int) value);
            case INT64 -> s.setAtIndex(I64, index, value);
            case FLOAT16, BFLOAT16, FLOAT32, FLOAT64 -> set(s, t, index, DTypes.fromLong(value, t));
        }
    }

    /** Element {@code from} of {@code src} to element {@code to} of {@code dst}, both of dtype {@code t}: its bytes. */
    public static void copy(MemorySegment src, long from, MemorySegment dst, long to, DType t) {
        int b = t.byteSize();
        MemorySegment.copy(src, from * b, dst, to * b, b);
    }

    /** Element {@code from} of {@code src} (dtype {@code st}) as a cast to {@code dt} gives it, into element {@code to} of {@code dst}. */
    public static void convert(MemorySegment src, DType st, long from, MemorySegment dst, DType dt, long to) {
        if (DTypes.isExact(st)) setLong(dst, dt, to, getLong(src, st, from));
        else set(dst, dt, to, get(src, st, from));
    }
}
