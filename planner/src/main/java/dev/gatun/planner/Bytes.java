package dev.gatun.planner;

final class Bytes {
    private Bytes() {}

    static String format(long b) {
        if (b >= 1L << 30 && b % (1L << 30) == 0) return (b >> 30) + " GiB";
        if (b >= 1L << 20 && b % (1L << 20) == 0) return (b >> 20) + " MiB";
        if (b >= 1L << 10 && b % (1L << 10) == 0) return (b >> 10) + " KiB";
        return b + " B";
    }

    static long roundUp(long v, long to) { return to <= 1 ? v : Math.ceilDiv(v, to) * to; }
}
