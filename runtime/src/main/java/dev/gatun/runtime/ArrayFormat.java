package dev.gatun.runtime;

import java.util.function.LongConsumer;

/**
 * Lays out an array's values the way NumPy prints them, so that a matrix reads as rows: nested brackets, one row a
 * line, blank lines between blocks of rank 3 and more, every value right-aligned to the widest printed one. Above
 * {@value #THRESHOLD} elements each dimension shows only its first and last {@value #EDGE} entries around
 * {@code ...} (NumPy's and PyTorch's defaults), and only the printed elements are read; rows longer than
 * {@value #LINE_WIDTH} characters wrap.
 */
final class ArrayFormat {
    static final int THRESHOLD = 1000;
    static final int EDGE = 3;
    /** Rows longer than this wrap, as in NumPy. */
    static final int LINE_WIDTH = 75;
    private static final long ELIDED = -1;

    private final NDArray a;
    private final long[] shape;
    private final long[] strides;
    private final boolean summarize;
    private int width;

    ArrayFormat(NDArray a) {
        this.a = a;
        this.shape = a.shape();
        this.strides = new long[shape.length];
        long acc = 1;
        for (int d = shape.length - 1; d >= 0; d--) {
            strides[d] = acc;
            acc *= shape[d];
        }
        this.summarize = a.numel() > THRESHOLD;
    }

    String format() {
        if (shape.length == 0) return a.formatValue(0);
        forEachShown(0, 0, i -> width = Math.max(width, a.formatValue(i).length()));
        var sb = new StringBuilder();
        block(sb, 0, 0);
        return sb.toString();
    }

    private void block(StringBuilder sb, int dim, long base) {
        sb.append('[');
        long[] idx = shown(dim);
        boolean innermost = dim == shape.length - 1;
        for (int k = 0; k < idx.length; k++) {
            if (!innermost) {
                if (k > 0) sb.append(separator(dim));
                if (idx[k] == ELIDED) sb.append("...");
                else block(sb, dim + 1, base + idx[k] * strides[dim]);
                continue;
            }
            String v = idx[k] == ELIDED ? "..." : pad(a.formatValue(base + idx[k]));
            if (k > 0) sb.append(lineLength(sb) + 2 + v.length() + 1 > LINE_WIDTH ? ",\n" + " ".repeat(dim + 1) : ", ");
            sb.append(v);
        }
        sb.append(']');
    }

    private void forEachShown(int dim, long base, LongConsumer element) {
        for (long i : shown(dim)) {
            if (i == ELIDED) continue;
            if (dim == shape.length - 1) element.accept(base + i);
            else forEachShown(dim + 1, base + i * strides[dim], element);
        }
    }

    /** The indices of {@code dim} that are printed, with {@link #ELIDED} where {@code ...} stands. */
    private long[] shown(int dim) {
        long n = shape[dim];
        if (!summarize || n <= 2 * EDGE) {
            long[] all = new long[(int) n];
            for (int i = 0; i < n; i++) all[i] = i;
            return all;
        }
        long[] out = new long[2 * EDGE + 1];
        for (int i = 0; i < EDGE; i++) {
            out[i] = i;
            out[EDGE + 1 + i] = n - EDGE + i;
        }
        out[EDGE] = ELIDED;
        return out;
    }

    /** ", " between values; between rows a newline (one more per enclosing dimension) and the brackets' indent. */
    private String separator(int dim) {
        if (dim == shape.length - 1) return ", ";
        return "," + "\n".repeat(shape.length - dim - 1) + " ".repeat(dim + 1);
    }

    private static int lineLength(StringBuilder sb) { return sb.length() - (sb.lastIndexOf("\n") + 1); }

    private String pad(String s) { return " ".repeat(width - s.length()) + s; }
}
