package dev.gatun.runtime;

import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class SafeTensorsTest {
    @TempDir Path dir;

    /** A file as the format describes it, built byte by byte: length, JSON header padded with spaces, data. */
    static byte[] file(String header, int padTo, byte[] data) {
        byte[] h = header.getBytes(StandardCharsets.UTF_8);
        int n = Math.max(h.length, padTo);
        var b = ByteBuffer.allocate(8 + n + data.length).order(ByteOrder.LITTLE_ENDIAN);
        b.putLong(n).put(h);
        for (int i = h.length; i < n; i++) b.put((byte) ' ');
        return b.put(data).array();
    }

    static byte[] floats(float... v) {
        var b = ByteBuffer.allocate(4 * v.length).order(ByteOrder.LITTLE_ENDIAN);
        for (float f : v) b.putFloat(f);
        return b.array();
    }

    Path write(byte[] bytes) throws IOException {
        Path p = dir.resolve("t" + System.nanoTime() + ".safetensors");
        Files.write(p, bytes);
        return p;
    }

    @Test
    void readsAFileBuiltFromTheFormatsDescription() throws IOException {
        byte[] data = new byte[8 + 2 * 3];
        ByteBuffer.wrap(data).order(ByteOrder.LITTLE_ENDIAN).putFloat(1.5f).putFloat(-2f).put((byte) 1).put((byte) -3).put((byte) 0).put((byte) 1).put((byte) 7).put((byte) 9);
        String header = "{\"__metadata__\":{\"format\":\"pt\"},\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                + "\"ids\":{\"dtype\":\"I8\",\"shape\":[2,3],\"data_offsets\":[8,14]}}";
        try (var f = SafeTensors.open(write(file(header, 160, data)))) {
            assertThat(f.names()).containsExactly("w", "ids");
            assertThat(f.metadata()).containsEntry("format", "pt");
            NDArray w = f.get("w");
            assertThat(w.dtype()).isEqualTo(DType.F32);
            assertThat(w.shape()).containsExactly(2);
            assertThat(w.get(0)).isEqualTo(1.5);
            assertThat(w.get(1)).isEqualTo(-2.0);
            NDArray ids = f.get("ids");
            assertThat(ids.shape()).containsExactly(2, 3);
            assertThat(new double[]{ids.get(0), ids.get(1), ids.get(5)}).containsExactly(1, -3, 9);
        }
    }

    @Test
    void writesTheBytesTheFormatDescribes() throws IOException {
        Path p = dir.resolve("one.safetensors");
        SafeTensors.write(p, Map.of("a", NDArray.of(new float[]{1, 2}, 2)), Map.of());
        String header = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
        assertThat(Files.readAllBytes(p)).isEqualTo(file(header, (header.length() + 7) / 8 * 8, floats(1, 2)));
    }

    @Test
    void everyDtypeRoundTrips() throws IOException {
        var tensors = new LinkedHashMap<String, NDArray>();
        long seed = 1;
        for (DType t : DType.values()) tensors.put("model.layers.0." + t.name().toLowerCase(), NDArray.random(t, seed++, 3, 5));
        tensors.put("scalar", NDArray.scalar(DType.F32, 4.25));
        tensors.put("empty", NDArray.zeros(DType.BF16, 0, 7));
        Path p = dir.resolve("all.safetensors");
        SafeTensors.write(p, tensors, Map.of("who", "test"));
        try (var f = SafeTensors.open(p)) {
            assertThat(f.names()).containsExactlyInAnyOrderElementsOf(tensors.keySet());
            assertThat(f.metadata()).isEqualTo(Map.of("who", "test"));
            for (var e : tensors.entrySet()) {
                NDArray got = f.get(e.getKey());
                assertThat(got.dtype()).isEqualTo(e.getValue().dtype());
                assertThat(got.shape()).isEqualTo(e.getValue().shape());
                assertThat(got.segment().mismatch(e.getValue().segment())).as(e.getKey()).isEqualTo(-1);
            }
        }
    }

    @Test
    void viewsDieWithTheFile() throws IOException {
        Path p = dir.resolve("v.safetensors");
        SafeTensors.write(p, Map.of("x", NDArray.of(new float[]{3, 4}, 2)), Map.of());
        var f = SafeTensors.open(p);
        NDArray x = f.get("x");
        f.close();
        f.close();
        assertThatThrownBy(() -> x.get(0)).isInstanceOf(IllegalStateException.class);
        assertThatThrownBy(() -> f.get("x")).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("closed");
    }

    @Test
    void badFilesAreRefusedNamingTheTensor() throws IOException {
        String ok = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
        // truncated: the header says more than the file has, then the data is short
        byte[] full = file(ok, 0, floats(1, 2));
        assertThatThrownBy(() -> SafeTensors.open(write(java.util.Arrays.copyOf(full, 20)))).hasMessageContaining("runs past the end");
        assertThatThrownBy(() -> SafeTensors.open(write(java.util.Arrays.copyOf(full, full.length - 2)))).hasMessageContaining("tensor 'x'").hasMessageContaining("truncated");
        // a header length no real file has
        var huge = ByteBuffer.allocate(16).order(ByteOrder.LITTLE_ENDIAN).putLong(1L << 40).array();
        assertThatThrownBy(() -> SafeTensors.open(write(huge))).hasMessageContaining("limit");
        assertThatThrownBy(() -> SafeTensors.open(write(new byte[3]))).hasMessageContaining("too short");
        assertThatThrownBy(() -> SafeTensors.open(write(file("[1,2]", 0, new byte[0])))).hasMessageContaining("not an object");
        assertThatThrownBy(() -> SafeTensors.open(write(file("{\"x\":", 0, new byte[0])))).hasMessageContaining("not valid JSON");
        assertThatThrownBy(() -> SafeTensors.open(write(file(ok.replace("F32", "U8"), 0, floats(1, 2)))))
                .hasMessageContaining("tensor 'x'").hasMessageContaining("dtype U8");
        assertThatThrownBy(() -> SafeTensors.open(write(file(ok.replace("[2]", "[3]"), 0, floats(1, 2)))))
                .hasMessageContaining("tensor 'x'").hasMessageContaining("needs 12");
        String two = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
        assertThatThrownBy(() -> SafeTensors.open(write(file(two, 0, floats(1, 2)))))
                .hasMessageContaining("overlaps");
        String hole = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}";
        assertThatThrownBy(() -> SafeTensors.open(write(file(hole, 0, floats(1, 2))))).hasMessageContaining("belong to no tensor");
        assertThatThrownBy(() -> SafeTensors.open(write(file(ok.replace("[0,8]", "[8,0]"), 0, floats(1, 2))))).hasMessageContaining("tensor 'x'");
        assertThatThrownBy(() -> SafeTensors.open(write(file(ok.replace("\"shape\"", "\"shpae\""), 0, floats(1, 2))))).hasMessageContaining("no \"shape\"");
        try (var f = SafeTensors.open(write(file(ok, 0, floats(1, 2))))) {
            assertThatThrownBy(() -> f.get("model.x")).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("no tensor 'model.x'").hasMessageContaining("close: [x]");
        }
    }
}
