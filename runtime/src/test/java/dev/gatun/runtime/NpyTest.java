package dev.gatun.runtime;

import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** NumPy's .npy format: byte-exact writing, round trips of every dtype, and clear refusals of what Gatun cannot read. */
class NpyTest {
    @TempDir Path dir;

    /** What np.save(f, np.arange(1, 7, dtype='<f4').reshape(2, 3)) writes with NumPy 2.x, spelled out. */
    @Test
    void writesWhatNumPyWritesByteForByte() throws IOException {
        var bytes = new ByteArrayOutputStream();
        bytes.writeBytes(new byte[]{(byte) 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0}); // magic, v1.0, header length 118
        String dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
        bytes.writeBytes((dict + " ".repeat(118 - dict.length() - 1) + "\n").getBytes(StandardCharsets.US_ASCII));
        var data = ByteBuffer.allocate(24).order(ByteOrder.LITTLE_ENDIAN);
        for (int v = 1; v <= 6; v++) data.putFloat(v);
        bytes.writeBytes(data.array());
        byte[] expected = bytes.toByteArray();
        assertThat(expected).hasSize(128 + 24);

        Path f = dir.resolve("a.npy");
        NDArray.of(new float[]{1, 2, 3, 4, 5, 6}, 2, 3).saveNpy(f);
        assertThat(Files.readAllBytes(f)).isEqualTo(expected);
    }

    /** An older writer's file: version 2.0, no trailing comma, data not 64-aligned, double quotes. */
    @Test
    void readsAHandWrittenVersion2File() throws IOException {
        String header = "{\"descr\": \"<i8\", \"shape\": (2L,), \"fortran_order\": False}\n";
        var b = ByteBuffer.allocate(12 + header.length() + 16).order(ByteOrder.LITTLE_ENDIAN);
        b.put(new byte[]{(byte) 0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0}).putInt(header.length());
        b.put(header.getBytes(StandardCharsets.US_ASCII)).putLong(-3).putLong(Long.MAX_VALUE);
        Path f = Files.write(dir.resolve("old.npy"), b.array());

        NDArray a = NDArray.loadNpy(f);
        assertThat(a.dtype()).isEqualTo(DType.INT64);
        assertThat(a.shape()).containsExactly(2);
        assertThat(a.toLongArray()).containsExactly(-3, Long.MAX_VALUE);
    }

    @ParameterizedTest
    @EnumSource(value = DType.class, names = "BFLOAT16", mode = EnumSource.Mode.EXCLUDE)
    void everyDTypeRoundTrips(DType t) throws IOException {
        for (long[] shape : new long[][]{{3, 4, 5}, {7}, {}, {0, 3}}) {
            NDArray a = NDArray.random(t, 11, shape);
            Path f = dir.resolve(t + "-" + shape.length + ".npy");
            a.saveNpy(f);
            NDArray back = NDArray.loadNpy(f);
            assertThat(back).as("%s%s", t, java.util.Arrays.toString(shape)).isEqualTo(a);
            assertThat(Files.size(f) % 64).as("data size %s", Files.size(f)).isEqualTo(a.byteSize() % 64);
        }
    }

    @Test
    void bfloat16IsRefusedWithTheCastThatSavesIt() {
        var a = NDArray.full(DType.BFLOAT16, 1.5, 2);
        assertThatThrownBy(() -> a.saveNpy(dir.resolve("b.npy")))
                .isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class)
                .hasMessageContaining("NumPy has no bfloat16").hasMessageContaining("a.to(DType.F32).saveNpy(file)");
    }

    @Test
    void refusesWhatItCannotReadNamingTheFileAndTheReason() throws IOException {
        assertRefused(file("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", 16), "Fortran (column-major) order");
        assertRefused(file("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", 16), "big-endian data ('>f4')");
        assertRefused(file("{'descr': '<u2', 'fortran_order': False, 'shape': (2, 2), }", 8), "dtype '<u2' is not one Gatun has");
        assertRefused(file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 12), "truncated: f32[2, 2] needs 16 bytes of data but the file has 12");
        assertRefused(file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", 20), "has 4 bytes after its data");
        assertRefused(file("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", 16), "bad .npy header");
        assertRefused(file("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8), "structured dtypes are not supported");

        var huge = ByteBuffer.allocate(12).order(ByteOrder.LITTLE_ENDIAN);
        huge.put(new byte[]{(byte) 0x93, 'N', 'U', 'M', 'P', 'Y', 2, 0}).putInt(1 << 30);
        assertRefused(Files.write(dir.resolve("huge.npy"), huge.array()), "header claims 1073741824 bytes, more than the 10000");
        assertRefused(Files.write(dir.resolve("text.npy"), "hello, world".getBytes(StandardCharsets.US_ASCII)), "not a .npy file");
        assertRefused(Files.write(dir.resolve("short.npy"), new byte[]{(byte) 0x93, 'N'}), "truncated: the file ends inside its magic");
    }

    private int files;

    /** A version 1.0 file with the given header text and {@code dataBytes} zero bytes of data. */
    private Path file(String dict, int dataBytes) throws IOException {
        String header = dict + "\n";
        var b = ByteBuffer.allocate(10 + header.length() + dataBytes).order(ByteOrder.LITTLE_ENDIAN);
        b.put(new byte[]{(byte) 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0}).putShort((short) header.length());
        b.put(header.getBytes(StandardCharsets.US_ASCII));
        return Files.write(dir.resolve("bad" + files++ + ".npy"), b.array());
    }

    private static void assertRefused(Path f, String reason) {
        assertThatThrownBy(() -> NDArray.loadNpy(f)).isInstanceOf(IOException.class)
                .hasMessageContaining(f.toString()).hasMessageContaining(reason);
    }
}
