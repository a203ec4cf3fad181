package dev.gatun.runtime;

import java.util.Locale;

/**
 * How far reading a checkpoint's tensors has got: the bytes of the tensors read so far of {@code totalBytes}, and
 * their count of {@code totalTensors}; {@code tensor} is the one just read (null before the first). A loader reports
 * one at the start (nothing read) and one after each tensor, so a listener sees the bytes grow to {@code totalBytes}
 * and the tensors to {@code totalTensors}, never back; {@link #line()} is what a command-line tool prints:
 *
 * <pre>{@code
 * files.forEachTensor((name, view) -> session.bind(name, view), p -> System.err.print("\r" + p.line()));
 * }</pre>
 *
 * ({@link TensorFiles#forEachTensor}; the models' loaders take the same listener, e.g. {@code LlamaDecoder.weights}).
 * A loader that reads only part of each tensor (one rank's shard) counts the tensor's bytes in the file once its part
 * is made: the page cache then holds what the other ranks need too.
 */
public record LoadProgress(long bytes, long totalBytes, int tensors, int totalTensors, String tensor) {
    public LoadProgress {
        if (totalBytes < 0 || bytes < 0 || bytes > totalBytes || totalTensors < 0 || tensors < 0 || tensors > totalTensors)
            throw new GatunRuntimeException("load progress: " + bytes + " of " + totalBytes + " bytes, " + tensors + " of " + totalTensors
                    + " tensors is not a point between none and all");
    }

    /** Nothing read yet of {@code totalTensors} tensors holding {@code totalBytes} bytes. */
    public static LoadProgress start(long totalBytes, int totalTensors) { return new LoadProgress(0, totalBytes, 0, totalTensors, null); }

    /** The progress once tensor {@code name}, of {@code tensorBytes} bytes, is read too. */
    public LoadProgress next(String name, long tensorBytes) {
        return new LoadProgress(bytes + tensorBytes, totalBytes, tensors + 1, totalTensors, name);
    }

    /** Whether every tensor is read. */
    public boolean done() { return tensors == totalTensors; }

    /** The share of the bytes read, 0 to 1 (1 where there are none to read). */
    public double fraction() { return totalBytes == 0 ? 1 : (double) bytes / totalBytes; }

    /** {@code loading weights: 1.21 GiB of 4.53 GiB (27%), 40 of 147 tensors}. */
    public String line() {
        return String.format(Locale.ROOT, "loading weights: %s of %s (%.0f%%), %d of %d tensors", size(bytes, totalBytes), size(totalBytes, totalBytes),
                100 * fraction(), tensors, totalTensors);
    }

    /** {@code bytes} in the unit that suits {@code scale}: bytes, KiB, MiB or GiB. */
    private static String size(long bytes, long scale) {
        if (scale < 1L << 10) return bytes + " bytes";
        String[] units = {"KiB", "MiB", "GiB"};
        int u = scale < 1L << 20 ? 0 : scale < 1L << 30 ? 1 : 2;
        return String.format(Locale.ROOT, u == 0 ? "%.0f %s" : "%.2f %s", bytes / (double) (1L << (10 * (u + 1))), units[u]);
    }
}
