package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.runtime.LoadProgress;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Making a rank's shard of a checkpoint reports how far reading has got: the start, then one report a tensor, the
 * bytes never falling and ending at the bytes of every tensor the model reads (counted here from the configuration's
 * shapes: elements times 2 bytes of bf16), and the shard is the one made without a listener.
 */
class CheckpointProgressTest {

    @Test
    void theListenerSeesTheBytesGrowToTheWholeCheckpoint(@TempDir Path dir) throws IOException {
        for (boolean tied : new boolean[]{false, true}) {
            var c = new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, tied);
            Path ckpt = dir.resolve(tied ? "tied" : "untied");
            LlamaCheckpoint.writeRandom(c, DType.BF16, 7, ckpt);
            long expected = 0;
            int tensors = 0;
            for (long[] shape : LlamaCheckpoint.shapes(c).values()) {
                long n = 2;
                for (long s : shape) n *= s;
                expected += n;
                tensors++;
            }
            var seen = new ArrayList<LoadProgress>();
            try (var loaded = LlamaCheckpoint.open(ckpt)) {
                for (int rank = 0; rank < 2; rank++) {
                    seen.clear();
                    var shard = loaded.shard(2, rank, DType.F32, seen::add);
                    assertThat(seen).as("tied %s rank %d", tied, rank).hasSize(tensors + 1);
                    assertThat(seen.getFirst().bytes()).isZero();
                    for (int i = 1; i < seen.size(); i++) {
                        assertThat(seen.get(i).bytes()).isGreaterThan(seen.get(i - 1).bytes());
                        assertThat(seen.get(i).tensors()).isEqualTo(i);
                    }
                    assertThat(seen.getLast().bytes()).isEqualTo(seen.getLast().totalBytes()).isEqualTo(expected);
                    assertThat(seen.getLast().tensors()).isEqualTo(tensors);
                    assertThat(seen.stream().skip(1).map(LoadProgress::tensor).toList()).containsExactlyInAnyOrderElementsOf(LlamaCheckpoint.shapes(c).keySet());
                    assertThat(shard).isEqualTo(LlamaDecoder.weights(c, loaded.weights(), 2, rank, DType.F32));
                }
            }
        }
    }
}
