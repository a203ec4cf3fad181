package dev.gatun.ir;

/** Byte counts as people read them (192 B, 256 KiB, 2 MiB), and rounding up to a granularity. */
public final class ByteSize {
    private ByteSize() {}

    public static String format(long b) {
        if (b >= 1L << 30 && b % (1L << 30) == 0) return (b >> 30) + " GiB";
        if (b >= 1L << 20 && b % (1L << 20) == 0) return (b >> 20) + " MiB";
        if (b >= 1L << 10 && b % (1L << 10) == 0) return (b >> 10) + " KiB";
        return b + " B";
    }

    public static long roundUp(long v, long to) { return to <= 1 ? v : Math.ceilDiv(v, to) * to; }
}
