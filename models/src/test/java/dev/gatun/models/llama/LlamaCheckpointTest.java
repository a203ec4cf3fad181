package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class LlamaCheckpointTest {
    /** The tiny configuration: 2 layers, hidden 64, 4 heads, 2 KV heads, vocab 256. */
    static final LlamaConfig TINY = new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false);

    @Test
    void aConfigSurvivesAWriteAndARead(@TempDir Path dir) throws IOException {
        TINY.write(dir.resolve("config.json"));
        assertThat(LlamaConfig.read(dir.resolve("config.json"))).isEqualTo(TINY);
        assertThat(TINY.headDim()).isEqualTo(16);
        assertThat(TINY.groupSize()).isEqualTo(2);
    }

    @Test
    void aRealCheckpointsConfigReadsWithItsDefaults(@TempDir Path dir) throws IOException {
        // the fields of a Llama-3.2-1B config.json (fields this decoder has no use for, such as torch_dtype, are
        // ignored); kv heads default to heads
        Files.writeString(dir.resolve("config.json"), """
                {"architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192, "model_type": "llama",
                 "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "rms_norm_eps": 1e-05,
                 "rope_theta": 500000.0, "tie_word_embeddings": true, "hidden_act": "silu", "head_dim": 64,
                 "attention_bias": false, "mlp_bias": false, "torch_dtype": "bfloat16", "vocab_size": 128256,
                 "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                                  "original_max_position_embeddings": 8192, "rope_type": "llama3"}}
                """);
        var c = LlamaConfig.read(dir.resolve("config.json"));
        assertThat(c).isEqualTo(new LlamaConfig(2048, 16, 32, 8, 8192, 128256, 500000, 1e-5, true)
                .withRopeScaling(new LlamaConfig.RopeScaling(32, 1, 4, 8192)));
        // written and read back, the scaling survives
        c.write(dir.resolve("again.json"));
        assertThat(LlamaConfig.read(dir.resolve("again.json"))).isEqualTo(c);
        assertThat(c.headDim()).isEqualTo(64);
        Files.writeString(dir.resolve("mha.json"), """
                {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10}
                """);
        var mha = LlamaConfig.read(dir.resolve("mha.json"));
        assertThat(mha.kvHeads()).isEqualTo(4);
        assertThat(mha.ropeTheta()).isEqualTo(10000);
        assertThat(mha.tieWordEmbeddings()).isFalse();
    }

    @Test
    void badConfigsAreRefusedNamingTheFileAndTheField(@TempDir Path dir) throws IOException {
        Path f = dir.resolve("config.json");
        Files.writeString(f, "{\"hidden_size\": 64, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(IOException.class).hasMessageContaining(f.toString())
                .hasMessageContaining("'intermediate_size' is missing");
        Files.writeString(f, "{\"hidden_size\": \"64\", \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("'hidden_size' is a JSON string, not a number");
        Files.writeString(f, "{\"hidden_size\": 64.5, \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("'hidden_size' is 64.5, not a whole number");
        Files.writeString(f, "{\"hidden_size\": 60, \"intermediate_size\": 128, \"num_attention_heads\": 8, \"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("hidden_size 60 is not a multiple of num_attention_heads 8");
        Files.writeString(f, "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_key_value_heads\": 3, \"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("num_attention_heads 4 is not a multiple of num_key_value_heads 3");
        // what the decoder does not compute is refused, never read into different logits
        String ok = "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 256";
        Files.writeString(f, "{" + ok + ", \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"yarn\"}}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining(f.toString())
                .hasMessageContaining("'rope_scaling' has rope_type \"yarn\": only \"llama3\" scaling (and unscaled RoPE) is implemented");
        Files.writeString(f, "{" + ok + ", \"rope_scaling\": {\"factor\": 32.0, \"rope_type\": \"llama3\"}}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining(f.toString()).hasMessageContaining("low_freq_factor");
        Files.writeString(f, "{" + ok + ", \"rope_scaling\": {\"rope_type\": \"default\"}}");
        assertThat(LlamaConfig.read(f).headDim()).isEqualTo(16);
        Files.writeString(f, "{" + ok + ", \"head_dim\": 32}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("'head_dim' is 32, but hidden_size / num_attention_heads is 64 / 4");
        Files.writeString(f, "{" + ok + ", \"hidden_act\": \"gelu\"}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("'hidden_act' is \"gelu\": only \"silu\"");
        Files.writeString(f, "{" + ok + ", \"mlp_bias\": true}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("'mlp_bias' is true: bias terms are not implemented");
        Files.writeString(f, "[1, 2]");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("a JSON array, not an object");
        Files.writeString(f, "{\"hidden_size\": ");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("not JSON");
    }

    /** The end tokens: generation_config.json's over config.json's, one id or a list; none where neither names any. */
    @Test
    void endTokensComeFromTheGenerationConfigElseTheConfig(@TempDir Path dir) throws IOException {
        TINY.write(dir.resolve(LlamaCheckpoint.CONFIG));
        assertThat(LlamaCheckpoint.eosTokens(dir)).isEmpty();
        Files.writeString(dir.resolve(LlamaCheckpoint.CONFIG), "{\"hidden_size\": 64, \"eos_token_id\": 128001}");
        assertThat(LlamaCheckpoint.eosTokens(dir)).containsExactly(128001);
        Files.writeString(dir.resolve(LlamaCheckpoint.GENERATION_CONFIG), "{\"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009]}");
        assertThat(LlamaCheckpoint.eosTokens(dir)).containsExactlyInAnyOrder(128001, 128008, 128009);
        Files.writeString(dir.resolve(LlamaCheckpoint.GENERATION_CONFIG), "{\"eos_token_id\": null}");
        assertThat(LlamaCheckpoint.eosTokens(dir)).containsExactly(128001);
        for (String bad : new String[]{"[1, \"2\"]", "-3", "1.5", "{}"}) {
            Files.writeString(dir.resolve(LlamaCheckpoint.GENERATION_CONFIG), "{\"eos_token_id\": " + bad + "}");
            assertThatThrownBy(() -> LlamaCheckpoint.eosTokens(dir)).as(bad).isInstanceOf(IOException.class)
                    .hasMessageContaining(LlamaCheckpoint.GENERATION_CONFIG).hasMessageContaining("'eos_token_id'");
        }
    }

    @Test
    void tensorParallelDegreesMustSplitHeadsAndTheMlpEvenly() {
        TINY.checkTensorParallel(1);
        TINY.checkTensorParallel(2);
        TINY.checkTensorParallel(4);   // 2 key-value heads, each replicated on 2 ranks
        assertThatThrownBy(() -> TINY.checkTensorParallel(8)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("does not divide num_attention_heads = 4");
        var gqa = new LlamaConfig(96, 1, 6, 3, 96, 10, 10000, 1e-5, false);
        assertThatThrownBy(() -> gqa.checkTensorParallel(2)).hasMessageContaining("neither divides num_key_value_heads = 3");
        assertThatThrownBy(() -> TINY.checkTensorParallel(0)).hasMessageContaining("at least 1");
    }

    @Test
    void theLayoutIsTheHuggingFaceNamingWithLinearWeightsOutByIn() {
        var shapes = LlamaCheckpoint.shapes(TINY);
        // embeddings, 9 tensors a layer, the final norm, the output projection
        assertThat(shapes).hasSize(1 + 9 * 2 + 1 + 1);
        assertThat(shapes.get("model.embed_tokens.weight")).containsExactly(256, 64);
        assertThat(shapes.get("model.layers.1.self_attn.q_proj.weight")).containsExactly(64, 64);
        assertThat(shapes.get("model.layers.1.self_attn.k_proj.weight")).containsExactly(32, 64);
        assertThat(shapes.get("model.layers.0.self_attn.o_proj.weight")).containsExactly(64, 64);
        assertThat(shapes.get("model.layers.0.mlp.down_proj.weight")).containsExactly(64, 128);
        assertThat(shapes.get("lm_head.weight")).containsExactly(256, 64);
        var tied = new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, true);
        assertThat(LlamaCheckpoint.shapes(tied)).doesNotContainKey("lm_head.weight").hasSize(shapes.size() - 1);
    }

    @Test
    void aRandomCheckpointIsWrittenReadBackAndChecked(@TempDir Path dir) throws IOException {
        LlamaCheckpoint.writeRandom(TINY, DType.BF16, 7, dir);
        assertThat(LlamaConfig.read(dir.resolve(LlamaCheckpoint.CONFIG))).isEqualTo(TINY);
        try (var st = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            LlamaCheckpoint.check(TINY, st, dir);
            NDArray q = st.get("model.layers.0.self_attn.q_proj.weight");
            assertThat(q.dtype()).isEqualTo(DType.BF16);
            double sum = 0, sq = 0;
            for (long i = 0; i < q.numel(); i++) { sum += q.get(i); sq += q.get(i) * q.get(i); }
            // random, not zeros: mean near 0, standard deviation near 0.02
            assertThat(Math.abs(sum / q.numel())).isLessThan(0.005);
            assertThat(Math.sqrt(sq / q.numel())).isBetween(0.015, 0.025);
            NDArray norm = st.get("model.norm.weight");
            for (long i = 0; i < norm.numel(); i++) assertThat(norm.get(i)).isBetween(0.4, 1.6);
        }
        // the same seed writes the same weights
        Path again = dir.resolve("again");
        LlamaCheckpoint.writeRandom(TINY, DType.BF16, 7, again);
        assertThat(Files.mismatch(dir.resolve(LlamaCheckpoint.WEIGHTS), again.resolve(LlamaCheckpoint.WEIGHTS))).isEqualTo(-1);
    }

    @Test
    void aCheckpointThatDoesNotFitTheConfigIsRefusedNamingTheTensor(@TempDir Path dir) throws IOException {
        var tensors = new LinkedHashMap<String, NDArray>();
        LlamaCheckpoint.shapes(TINY).forEach((name, shape) -> tensors.put(name, NDArray.zeros(DType.F32, shape)));
        Path f = dir.resolve("w.safetensors");
        tensors.remove("model.layers.1.mlp.up_proj.weight");
        SafeTensors.write(f, tensors, Map.of());
        try (var st = SafeTensors.open(f)) {
            assertThatThrownBy(() -> LlamaCheckpoint.check(TINY, st, f)).hasMessageContaining("'model.layers.1.mlp.up_proj.weight' is missing");
        }
        tensors.put("model.layers.1.mlp.up_proj.weight", NDArray.zeros(DType.F32, 64, 128));
        SafeTensors.write(f, tensors, Map.of());
        try (var st = SafeTensors.open(f)) {
            assertThatThrownBy(() -> LlamaCheckpoint.check(TINY, st, f)).hasMessageContaining("'model.layers.1.mlp.up_proj.weight' has shape [64, 128]")
                    .hasMessageContaining("needs [128, 64]");
        }
        tensors.put("model.layers.1.mlp.up_proj.weight", NDArray.zeros(DType.I32, 128, 64));
        SafeTensors.write(f, tensors, Map.of());
        try (var st = SafeTensors.open(f)) {
            assertThatThrownBy(() -> LlamaCheckpoint.check(TINY, st, f)).hasMessageContaining("is i32; weights are f32, f16 or bf16");
        }
    }
}
