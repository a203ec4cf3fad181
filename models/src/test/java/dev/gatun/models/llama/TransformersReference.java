package dev.gatun.models.llama;

import dev.gatun.ir.json.Json;

import java.io.IOException;
import java.net.URISyntaxException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * One of the reference checkpoints under {@code src/test/resources/references/decoders/NAME/} that Hugging Face
 * transformers made (see the README there): its directory, the prompt, transformers' float32 logits at every prompt
 * position ({@code logits.npy}), the 16 greedy tokens {@code generate()} gave and each step's top-1 minus top-2 margin.
 * The expected values come from transformers, never from Gatun.
 */
record TransformersReference(String name, Path dir, int[] prompt, float[][] logits, int[] tokens, double[] margins) {

    /** The reference {@code name}; its logits and tokens where the directory holds them (a config-only one has none). */
    static TransformersReference load(String name) throws IOException {
        Path dir = directory(name);
        Path ref = dir.resolve("reference.json");
        if (!Files.exists(ref)) return new TransformersReference(name, dir, null, null, null, null);
        var o = (Json.Obj) Json.parse(Files.readString(ref, StandardCharsets.UTF_8));
        return new TransformersReference(name, dir, ints(o.get("prompt")), npy(dir.resolve("logits.npy")), ints(o.get("tokens")),
                doubles(o.get("margins")));
    }

    /** The directory of reference {@code name} in the test resources. */
    static Path directory(String name) {
        var url = TransformersReference.class.getResource("/references/decoders/" + name + "/config.json");
        if (url == null) throw new IllegalStateException("no reference '" + name + "' in the test resources");
        try {
            return Path.of(url.toURI()).getParent();
        } catch (URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    private static int[] ints(Json v) {
        List<Json> items = ((Json.Arr) v).items();
        int[] out = new int[items.size()];
        for (int i = 0; i < out.length; i++) out[i] = Integer.parseInt(((Json.Num) items.get(i)).text());
        return out;
    }

    private static double[] doubles(Json v) {
        List<Json> items = ((Json.Arr) v).items();
        double[] out = new double[items.size()];
        for (int i = 0; i < out.length; i++) out[i] = ((Json.Num) items.get(i)).doubleValue();
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
        String shape = header.substring(header.indexOf("'shape': (") + 10, header.indexOf(')'));
        String[] dims = shape.split(",");
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
