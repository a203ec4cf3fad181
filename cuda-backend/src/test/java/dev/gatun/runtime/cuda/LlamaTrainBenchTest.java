package dev.gatun.runtime.cuda;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** The training benchmark's harness on the host backend (no GPU): its JSON, and its FLOP count against the published size of Llama-3.2-1B. */
class LlamaTrainBenchTest {
    @Test
    void theHarnessRunsAnFsdpStepOnTheHostAndWritesItsReport(@TempDir Path dir) throws Exception {
        Path out = dir.resolve("train.json");
        LlamaTrainBench.main(new String[]{"--backend", "host", "--config", "tiny", "--seq", "8", "--world", "2", "--steps", "2", "--warmup", "1",
                "--lr", "1e-2", "--out", out.toString()});
        String json = Files.readString(out);
        assertThat(json).contains("\"world\": 2", "\"mode\": \"fully_sharded\"", "\"compute\": \"bf16\"", "\"step_ms\"", "\"pool_bytes\"");
        String losses = json.replaceAll("(?s).*\"losses\": \\[([^]]*)].*", "$1");
        double[] l = java.util.Arrays.stream(losses.split(",")).mapToDouble(s -> Double.parseDouble(s.trim())).toArray();
        assertThat(l).hasSize(3);
        // the first loss is about ln(vocab): small random weights predict nearly uniformly
        assertThat(l[0]).isCloseTo(Math.log(256), org.assertj.core.data.Offset.offset(0.2));
    }

    /** Llama-3.2-1B has 1,235,814,400 parameters; all but its 16 * 2 + 1 norms of 2048 are read by a matmul (the tied head once). */
    @Test
    void theMatmulParametersOfTheOneBillionShapeAreTheModelsLessItsNorms() {
        var c = LlamaTrainBench.config(Map.of("config", "1b"));
        assertThat(LlamaTrainBench.matmulParameters(c)).isEqualTo(1_235_814_400L - 33L * 2048);
        assertThat(LlamaTrainBench.flopsPerToken(c, 2048)).isEqualTo(6.0 * (1_235_814_400L - 33L * 2048) + 12.0 * 16 * 2048 * 2048);
    }
}
