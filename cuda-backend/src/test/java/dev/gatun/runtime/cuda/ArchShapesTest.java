package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.MoeConfig;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The bandwidth table's shapes ({@link ArchShapes}) and the harness around them ({@link ArchBench}) on the host: every
 * architecture's configuration is written as a {@code config.json} of its own model type and reads back the same; each
 * one's weights and what its decode step reads are the numbers worked out by hand (from the published members' sizes
 * where the shape is one: Llama-3.2-1B's 1.236 B parameters, Qwen2.5-1.5B's 1.544 B, Qwen3-1.7B's 1.721 B, Gemma-2B's
 * 2.506 B, Gemma-2-2B's 2.614 B); and the measuring path runs a tiny mixture on the host backend and refuses, in its
 * JSON and without failing, what the decoder refuses to compile.
 */
class ArchShapesTest {
    @TempDir Path dir;

    @Test
    void everyArchitectureWritesAConfigOfItsOwnTypeThatReadsBackTheSame() throws Exception {
        for (String name : ArchShapes.NAMES) {
            LlamaConfig c = ArchShapes.shape(name);
            Path file = dir.resolve(name + ".json");
            c.write(file);
            assertThat(Files.readString(file, StandardCharsets.UTF_8)).as(name).contains("\"model_type\": \"" + name + "\"");
            assertThat(LlamaConfig.read(file)).as(name).isEqualTo(c);
        }
    }

    /**
     * Parameters (total; what a batch-1 decode step reads; what an every-expert step reads), worked out by hand: for a
     * dense model, the embedding {@code V h}, per layer two norms {@code 2h}, the projections {@code h (q + 2 kv) + q h}
     * (with their biases, QK-norm's {@code 2 d}, Gemma 2's two more norms), the MLP {@code 3 h f}; the final norm
     * {@code h}; an untied head another {@code V h}, of which the step's lookup reads one row of {@code h}. A mixture's
     * layer has the router {@code E h}, the experts {@code 3 E h f_e}, of which a step reads {@code 3 k h f_e}, and
     * Qwen2-MoE's shared expert {@code 3 h s + h}.
     */
    @Test
    void weightsAndStepReadsAreTheHandNumbers() {
        Map<String, long[]> hand = Map.of(
                // 128256*2048 + 16*(2*2048 + 2048*(2048 + 2*512) + 2048*2048 + 3*2048*8192) + 2048, tied
                "llama", new long[]{1_235_814_400L, 1_235_814_400L, 1_235_814_400L},
                // 2*32768*2048 + 16*(2*2048 + 2048*(2048 + 2*512) + 2048*2048 + 3*2048*7168) + 2048; the step reads one embedding row
                "mistral", new long[]{1_006_700_544L, 939_593_728L, 939_593_728L},
                "qwen2", new long[]{1_543_714_304L, 1_543_714_304L, 1_543_714_304L},
                "qwen3", new long[]{1_720_574_976L, 1_720_574_976L, 1_720_574_976L},
                "gemma", new long[]{2_506_172_416L, 2_506_172_416L, 2_506_172_416L},
                "gemma2", new long[]{2_614_341_888L, 2_614_341_888L, 2_614_341_888L},
                "phi3", new long[]{1_027_942_400L, 962_277_376L, 962_277_376L},
                // 16 layers of attention 2*1024 + 1024*(1024 + 512) + 1024*1024 = 2_623_488, router 8*1024 and 8 experts of
                // 3*1024*2304 (2 of them read); 2*32000*1024 + 1024
                "mixtral", new long[]{1_013_613_568L, 301_369_344L, 980_846_592L},
                "qwen2_moe", new long[]{966_288_384L, 282_224_640L, 810_706_944L},
                "qwen3_moe", new long[]{979_660_800L, 257_848_320L, 824_079_360L});
        assertThat(hand.keySet()).containsExactlyInAnyOrderElementsOf(ArchShapes.NAMES);
        for (String name : ArchShapes.NAMES) {
            var r = ArchShapes.reads(ArchShapes.shape(name));
            long[] h = hand.get(name);
            assertThat(new long[]{r.total(), r.step(), r.dense()}).as(name).containsExactly(h);
        }
        var bytes = ArchShapes.bf16Reads().get("mixtral");
        assertThat(bytes.step()).isEqualTo(2 * 301_369_344L);
    }

    /**
     * The mixtures' decode step at batch 1 reads the experts' bytes {@link ArchShapes.StepReads#step} counts: the routed
     * form's products ({@code expert_matmul}: each of its N * k pairs reads one [out, in] expert matrix), summed over the
     * decode graph, are k/E of every expert's weights, which is {@code (dense - step) * k / (E - k)}; and no other node
     * reads an expert's weights.
     */
    @Test
    void theRoutedDecodeStepReadsWhatStepReadsCounts() {
        for (String name : java.util.List.of("mixtral", "qwen2_moe", "qwen3_moe")) {
            LlamaConfig c = ArchShapes.shape(name);
            var graph = dev.gatun.models.llama.LlamaDecoder.decode(c, 64, 1, DType.BF16);
            long routed = 0;
            for (var n : graph.nodes())
                if (n.op() instanceof dev.gatun.ir.graph.Op.Registered r && r.spec() == dev.gatun.ir.ops.ExpertMatmul.SPEC) {
                    long[] ids = n.input(2).type().shape().sizes(), w = n.input(1).type().shape().sizes();
                    routed += ids[0] * ids[1] * w[1] * w[2];
                }
            var reads = ArchShapes.reads(c);
            int e = c.moe().experts(), k = c.moe().topK();
            assertThat(routed).as(name).isPositive().isEqualTo((reads.dense() - reads.step()) * k / (e - k));
        }
    }

    /** A tiny Qwen3-MoE checkpoint measured on the host backend: the row's JSON holds the reads, the tokens and the times. */
    @Test
    void aTinyMixtureIsMeasuredOnTheHostBackend() throws Exception {
        LlamaConfig c = new LlamaConfig(32, 2, 4, 2, 64, 96, 10000, 1e-6, false, null, 8, 0, LlamaConfig.Biases.NONE, true)
                .withMoe(new MoeConfig(MoeConfig.Naming.QWEN, 4, 2, 16, true, 0, 1, Set.of()));
        Path ckpt = dir.resolve("tiny");
        LlamaCheckpoint.writeRandom(c, DType.BF16, 5, ckpt);
        String json = ArchBench.measure("qwen3_moe", ckpt, 5, 3, 2, 1, "host", 0);
        assertThat(json).doesNotContain("refused").contains("\"arch\": \"qwen3_moe\"");
        // embedding 96*32 (one row read) + head 96*32 + final norm 32 + 2 layers of: norms 64, q 32*32, k and v 2*32*16,
        // o 32*32, QK-norm 16, router 4*32, experts 4*3*32*16 (2 of them read): 2*(64 + 3072 + 16 + 128) = 6560
        long totalElements = 2 * 96 * 32 + 32 + 2 * (64 + 3072 + 16 + 128 + 4 * 3 * 32 * 16);
        long stepElements = 32 + 96 * 32 + 32 + 2 * (64 + 3072 + 16 + 128 + 2 * 3 * 32 * 16);
        assertThat(field(json, "total_weight_bytes")).isEqualTo(Long.toString(2 * totalElements));
        assertThat(field(json, "step_weight_bytes")).isEqualTo(Long.toString(2 * stepElements));
        assertThat(field(json, "tokens")).matches("\\[\\d+, \\d+, \\d+]");
        assertThat(Double.parseDouble(field(json, "decode_ms"))).isPositive();
    }

    /** An unknown architecture is refused by name before any checkpoint is written. */
    @Test
    void anUnknownArchitectureIsRefusedBeforeAnythingIsWritten() throws Exception {
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> ArchBench.write(dir, java.util.List.of("mixtral", "gpt2"), 2))
                .isInstanceOf(dev.gatun.ir.CompilationException.class).hasMessageContaining("no shape for architecture 'gpt2'")
                .hasMessageContaining("llama, mistral, qwen2");
        try (var files = Files.list(dir)) {
            assertThat(files).isEmpty();
        }
    }

    /** What the decoder refuses to compile (Mistral's window shorter than the positions) is a row that says so, not a failure. */
    @Test
    void aRefusalIsARowNotAFailure() throws Exception {
        LlamaConfig c = new LlamaConfig(32, 1, 4, 2, 64, 96, 10000, 1e-6, false, null, 8, 4);
        Path ckpt = dir.resolve("windowed");
        LlamaCheckpoint.writeRandom(c, DType.BF16, 6, ckpt);
        String json = ArchBench.measure("mistral", ckpt, 5, 3, 2, 1, "host", 0);
        assertThat(field(json, "refused")).startsWith("\"CompilationException: ").contains("sliding_window = 4");
        assertThat(json).doesNotContain("decode_ms");
        assertThat(field(json, "step_weight_bytes")).isNotNull();
        // any other error is a "failed" row with its words (here: a backend that does not exist)
        String failed = ArchBench.measure("mistral", ckpt, 1, 2, 2, 1, "no-such-backend", 0);
        assertThat(field(failed, "failed")).startsWith("\"GatunRuntimeException: unknown backend 'no-such-backend'");
        assertThat(failed).doesNotContain("refused", "decode_ms");
    }

    /** The value of {@code "name": value} in a row's JSON (a number, a list or a quoted string), or null. */
    private static String field(String json, String name) {
        var m = java.util.regex.Pattern.compile("\"" + name + "\": (\"(?:[^\"\\\\]|\\\\.)*\"|\\[[^\\]]*]|[-0-9.eE]+)").matcher(json);
        return m.find() ? m.group(1) : null;
    }
}
