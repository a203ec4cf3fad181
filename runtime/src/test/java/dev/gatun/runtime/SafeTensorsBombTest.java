package dev.gatun.runtime;

import dev.gatun.ir.GatunException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

/**
 * Hostile {@code .safetensors} files, small on disk: each is refused (or read) quickly, with an error of Gatun's
 * family naming the file, the tensor and the field, and without allocating what the header claims. The time bounds
 * are generous guards against a quadratic or unbounded read, not measurements.
 */
class SafeTensorsBombTest {
    static final Duration BOUND = Duration.ofSeconds(20);
    /**
     * The bound of the 12 MB headers: a few seconds on a loaded machine; the quadratic read took minutes (each key's
     * line and column counted from the start of the one-line header).
     */
    static final Duration LONG_BOUND = Duration.ofSeconds(60);

    @TempDir Path dir;

    /** A header of {@code n} one-float tensors, each at its place in the data. */
    static String manyTensors(int n) {
        var sb = new StringBuilder("{");
        for (int i = 0; i < n; i++)
            sb.append(i == 0 ? "" : ",").append("\"model.layers.").append(i).append(".w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[")
                    .append(4L * i).append(',').append(4L * i + 4).append("]}");
        return sb.append('}').toString();
    }

    /** 200,000 tensors in one header (12 MB of JSON): read in linear time, every tensor there. */
    @Test
    void aHeaderOfTwoHundredThousandTensorsIsReadInLinearTime() throws IOException {
        int n = 200_000;
        Path f = dir.resolve("many.safetensors");
        Files.write(f, SafeTensorsTest.file(manyTensors(n), 0, new byte[4 * n]));
        assertTimeoutPreemptively(LONG_BOUND, () -> {
            try (var st = SafeTensors.open(f)) {
                assertThat(st.names()).hasSize(n);
                assertThat(st.entry("model.layers.199999.w").begin()).isEqualTo(4L * (n - 1));
            }
        });
    }

    /** The same header over a file without the data: refused, quickly, naming the file and a tensor. */
    @Test
    void twoHundredThousandTensorsWithoutTheirDataAreRefusedQuickly() throws IOException {
        Path f = dir.resolve("nodata.safetensors");
        Files.write(f, SafeTensorsTest.file(manyTensors(200_000), 0, new byte[0]));
        assertTimeoutPreemptively(LONG_BOUND, () -> assertThatThrownBy(() -> SafeTensors.open(f)).isInstanceOf(GatunException.class)
                .hasMessageContaining(f.toString()).hasMessageContaining("tensor 'model.layers."));
    }

    /** A shape whose element count overflows a long: refused naming the tensor and its shape, no ArithmeticException. */
    @Test
    void aShapeWhoseSizeOverflowsIsRefusedNamingTheTensorAndTheField() throws IOException {
        Path f = dir.resolve("overflow.safetensors");
        String h = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}";
        Files.write(f, SafeTensorsTest.file(h, 0, new byte[8]));
        assertTimeoutPreemptively(BOUND, () -> assertThatThrownBy(() -> SafeTensors.open(f)).isInstanceOf(GatunException.class)
                .hasMessageContaining(f.toString()).hasMessageContaining("tensor 'w'").hasMessageContaining("shape"));
        // an element count that fits a long, but whose bytes do not: the same
        String bytes = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}";
        Files.write(f, SafeTensorsTest.file(bytes, 0, new byte[8]));
        assertTimeoutPreemptively(BOUND, () -> assertThatThrownBy(() -> SafeTensors.open(f)).isInstanceOf(GatunException.class)
                .hasMessageContaining("tensor 'w'").hasMessageContaining("shape"));
    }

    /** A shape and offsets that agree, but far past the file's bytes: refused from the header, nothing mapped for it. */
    @Test
    void aTensorLargerThanTheFileIsRefusedFromTheHeader() throws IOException {
        Path f = dir.resolve("large.safetensors");
        String h = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[1048576,1048576],\"data_offsets\":[0,2199023255552]}}";
        Files.write(f, SafeTensorsTest.file(h, 0, new byte[8]));
        assertTimeoutPreemptively(BOUND, () -> assertThatThrownBy(() -> SafeTensors.open(f)).isInstanceOf(GatunException.class)
                .hasMessageContaining(f.toString()).hasMessageContaining("tensor 'w'").hasMessageContaining("8"));
    }

    /** Other malformed headers are of Gatun's family too (the format's errors, not I/O ones). */
    @Test
    void malformedHeadersAreGatunErrorsNamingTheFile() throws IOException {
        Path f = dir.resolve("bad.safetensors");
        String deep = "[".repeat(100_000) + "]".repeat(100_000);
        for (String header : new String[]{deep, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,0]}}",
                "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,99999999999999999999]}}", "{\"w\":"}) {
            Files.write(f, SafeTensorsTest.file(header, 0, new byte[0]));
            assertTimeoutPreemptively(BOUND, () -> assertThatThrownBy(() -> SafeTensors.open(f)).as(header.substring(0, Math.min(40, header.length())))
                    .isInstanceOf(GatunException.class).hasMessageContaining(f.toString()));
        }
    }
}
