package dev.gatun.runtime.cuda;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.regex.Pattern;

/**
 * The reference checkpoints transformers made ({@code models/src/test/resources/references/decoders/NAME}), found by
 * walking up from the working directory: the models module's test resources are not on this module's class path (and
 * not in the GPU bundle's), the repository is. The expected values (prompt, float32 logits of every prompt position,
 * 16 greedy tokens) come from transformers, never from Gatun.
 */
record DecoderReferences(String name, Path dir, int[] prompt, float[][] logits, int[] tokens) {
    static final String WHERE = "models/src/test/resources/references/decoders";

    /** The directory of reference {@code name}: under the first directory up from the working directory that holds {@link #WHERE}. */
    static Path directory(String name) {
        for (Path p = Path.of("").toAbsolutePath(); p != null; p = p.getParent()) {
            Path d = p.resolve(WHERE).resolve(name);
            if (Files.isRegularFile(d.resolve("config.json"))) return d;
        }
        throw new IllegalStateException("no " + WHERE + "/" + name + " above " + Path.of("").toAbsolutePath() + ": run from inside the repository");
    }

    static DecoderReferences load(String name) throws IOException {
        Path dir = directory(name);
        String json = Files.readString(dir.resolve("reference.json"), StandardCharsets.UTF_8);
        return new DecoderReferences(name, dir, ints(json, "prompt"), npy(dir.resolve("logits.npy")), ints(json, "tokens"));
    }

    /** The array of integers under {@code key} (the file is a flat object of arrays and strings, as the README's script writes it). */
    static int[] ints(String json, String key) {
        var m = Pattern.compile("\"" + key + "\"\\s*:\\s*\\[([^\\]]*)\\]").matcher(json);
        if (!m.find()) throw new IllegalStateException("reference.json has no array \"" + key + "\"");
        String[] items = m.group(1).split(",");
        int[] out = new int[items.length];
        for (int i = 0; i < out.length; i++) out[i] = Integer.parseInt(items[i].strip());
        return out;
    }

    /** A float32 little-endian C-order 2-D {@code .npy} file (format version 1): [rows][cols]. */
    static float[][] npy(Path file) throws IOException {
        byte[] all = Files.readAllBytes(file);
        if (all[0] != (byte) 0x93 || !new String(all, 1, 5, StandardCharsets.US_ASCII).equals("NUMPY") || all[6] != 1)
            throw new IOException(file + ": not a version-1 .npy file");
        int headerLength = (all[8] & 0xff) | (all[9] & 0xff) << 8;
        String header = new String(all, 10, headerLength, StandardCharsets.US_ASCII);
        if (!header.contains("'descr': '<f4'") || !header.contains("'fortran_order': False"))
            throw new IOException(file + ": not little-endian float32 in C order: " + header);
        String[] dims = header.substring(header.indexOf("'shape': (") + 10, header.indexOf(')')).split(",");
        int rows = Integer.parseInt(dims[0].strip()), cols = Integer.parseInt(dims[1].strip());
        var data = ByteBuffer.wrap(all, 10 + headerLength, all.length - 10 - headerLength).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
        if (data.remaining() != (long) rows * cols) throw new IOException(file + ": " + data.remaining() + " floats, not " + rows + " x " + cols);
        float[][] out = new float[rows][cols];
        for (float[] row : out) data.get(row);
        return out;
    }

    /** The largest absolute logit: the scale differences are measured against. */
    double scale() {
        double s = 0;
        for (float[] row : logits) for (float v : row) s = Math.max(s, Math.abs(v));
        return s;
    }
}
