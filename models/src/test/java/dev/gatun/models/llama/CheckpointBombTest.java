package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.ir.GatunException;
import dev.gatun.runtime.SafeTensors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

/**
 * Hostile checkpoint directories, small on disk: a {@code config.json} that declares a model far larger than its
 * weights, or far larger than any model, is refused from the numbers, before anything of that size is allocated or
 * built, with an error of Gatun's family naming the file and the field. The time bounds are guards against an
 * unbounded read, not measurements.
 */
class CheckpointBombTest {
    static final Duration BOUND = Duration.ofSeconds(20);

    /** A small real checkpoint (TINY's weights) with the config's {@code field} set to {@code value}. */
    private static Path bomb(Path dir, String field, String value) throws IOException {
        LlamaCheckpoint.writeRandom(LlamaCheckpointTest.TINY, DType.BF16, 1, dir);
        Path config = dir.resolve(LlamaCheckpoint.CONFIG);
        String text = Files.readString(config);
        Files.writeString(config, text.replaceFirst("\"" + field + "\": [0-9]+", "\"" + field + "\": " + value));
        return config;
    }

    /** The config read and the weights checked against it, as a caller loads a checkpoint. */
    private static void load(Path dir) throws IOException {
        LlamaConfig c = LlamaConfig.read(dir.resolve(LlamaCheckpoint.CONFIG));
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            LlamaCheckpoint.check(c, weights, dir);
        }
    }

    @Test
    void twoBillionLayersAreRefusedNamingTheField(@TempDir Path dir) throws IOException {
        Path config = bomb(dir, "num_hidden_layers", "2000000000");
        assertTimeoutPreemptively(BOUND, () -> assertThatThrownBy(() -> load(dir)).isInstanceOf(GatunException.class)
                .hasMessageContaining(config.toString()).hasMessageContaining("num_hidden_layers"));
    }

    /** Fewer layers than the bound, but more than the weights' bytes hold: refused before the tensor list is made. */
    @Test
    void moreLayersThanTheWeightsHoldAreRefusedNamingTheFieldAndTheBytes(@TempDir Path dir) throws IOException {
        Path config = bomb(dir, "num_hidden_layers", "60000");
        assertTimeoutPreemptively(BOUND, () -> assertThatThrownBy(() -> load(dir)).isInstanceOf(GatunException.class)
                .hasMessageContaining(config.toString()).hasMessageContaining("num_hidden_layers").hasMessageContaining("bytes"));
    }

    /** Widths far past any model's: refused naming the field, nothing allocated. */
    @Test
    void widthsFarPastAnyModelsAreRefusedNamingTheField(@TempDir Path dir) throws IOException {
        for (String field : new String[]{"vocab_size", "hidden_size", "intermediate_size"}) {
            Path d = Files.createDirectories(dir.resolve(field));
            Path config = bomb(d, field, "2000000000");
            assertTimeoutPreemptively(BOUND, () -> assertThatThrownBy(() -> load(d)).as(field).isInstanceOf(GatunException.class)
                    .hasMessageContaining(config.toString()).hasMessageContaining(field));
        }
    }

    /** A config.json far larger than any real one is refused before it is read into memory. */
    @Test
    void aHugeConfigFileIsRefusedBeforeItIsRead(@TempDir Path dir) throws IOException {
        Path config = dir.resolve(LlamaCheckpoint.CONFIG);
        try (var ch = java.nio.channels.FileChannel.open(config, java.nio.file.StandardOpenOption.CREATE_NEW, java.nio.file.StandardOpenOption.WRITE)) {
            ch.write(java.nio.ByteBuffer.wrap("{\"a\": \"".getBytes()), 0);
            ch.write(java.nio.ByteBuffer.wrap("\"}".getBytes()), 3L << 30);   // sparse: 3 GB long, a few bytes on disk
        }
        assertTimeoutPreemptively(BOUND, () -> assertThatThrownBy(() -> LlamaConfig.read(config)).isInstanceOf(GatunException.class)
                .hasMessageContaining(config.toString()).hasMessageContaining("bytes"));
    }
}
