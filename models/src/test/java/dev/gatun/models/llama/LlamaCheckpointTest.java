package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
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

    /**
     * Biases and QK-norm are written as the model type that says them (qwen2, qwen3, llama's attention_bias and
     * mlp_bias) and read back equal; a configuration no file says exactly is refused, leaving no file behind.
     */
    @Test
    void biasesAndQkNormSurviveAWriteAndWhatNoFileSaysIsRefused(@TempDir Path dir) throws IOException {
        Path file = dir.resolve("config.json");
        var qkv = new LlamaConfig.Biases(true, false, false);
        var attention = new LlamaConfig.Biases(true, true, false);
        var everything = new LlamaConfig.Biases(true, true, true);
        for (var c : java.util.List.of(TINY.withBiases(qkv), TINY.withBiases(attention), TINY.withBiases(everything),
                TINY.withQkNorm(true), TINY.withQkNorm(true).withBiases(attention))) {
            c.write(file);
            assertThat(LlamaConfig.read(file)).as(Files.readString(file)).isEqualTo(c);
        }
        assertThat(Files.readString(file)).contains("\"model_type\": \"qwen3\"", "\"attention_bias\": true");
        Files.delete(file);
        // an output-projection bias without the query's: no model type says that
        var odd = TINY.withBiases(new LlamaConfig.Biases(false, true, false));
        assertThatThrownBy(() -> odd.write(file)).isInstanceOf(dev.gatun.ir.CompilationException.class)
                .hasMessageContaining("LlamaConfig.write").hasMessageContaining("nothing written");
        assertThat(file).doesNotExist();
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
                .withRopeScaling(new LlamaConfig.RopeScaling.Llama3(32, 1, 4, 8192)));
        // written and read back, the scaling survives
        c.write(dir.resolve("again.json"));
        assertThat(LlamaConfig.read(dir.resolve("again.json"))).isEqualTo(c);
        assertThat(c.headDim()).isEqualTo(64);
        Files.writeString(dir.resolve("mha.json"), """
                {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_hidden_layers": 1, "vocab_size": 10}
                """);
        var mha = LlamaConfig.read(dir.resolve("mha.json"));
        assertThat(mha.kvHeads()).isEqualTo(4);
        assertThat(mha.ropeTheta()).isEqualTo(10000);
        assertThat(mha.tieWordEmbeddings()).isFalse();
    }

    @Test
    void badConfigsAreRefusedNamingTheFileAndTheField(@TempDir Path dir) throws IOException {
        Path f = dir.resolve("config.json");
        String llama = "\"model_type\": \"llama\", ";
        Files.writeString(f, "{" + llama + "\"hidden_size\": 64, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(GraphException.class).hasMessageContaining(f.toString())
                .hasMessageContaining("'intermediate_size' is missing");
        Files.writeString(f, "{" + llama + "\"hidden_size\": \"64\", \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("'hidden_size' is a JSON string, not a number");
        Files.writeString(f, "{" + llama + "\"hidden_size\": 64.5, \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("'hidden_size' is 64.5, not a whole number");
        Files.writeString(f, "{" + llama + "\"hidden_size\": 60, \"intermediate_size\": 128, \"num_attention_heads\": 8, \"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining(f.toString()).hasMessageContaining("hidden_size 60 is not a multiple of num_attention_heads 8");
        Files.writeString(f, "{" + llama + "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_key_value_heads\": 3, \"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("num_attention_heads 4 is not a multiple of num_key_value_heads 3");
        String ok = llama + "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_hidden_layers\": 2, \"vocab_size\": 256";
        Files.writeString(f, "{" + ok + ", \"rope_scaling\": {\"factor\": 32.0, \"rope_type\": \"llama3\"}}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(GraphException.class).hasMessageContaining(f.toString())
                .hasMessageContaining("'rope_scaling.").hasMessageContaining("is missing");
        Files.writeString(f, "{" + ok + ", \"rope_scaling\": {\"rope_type\": \"default\"}}");
        assertThat(LlamaConfig.read(f).headDim()).isEqualTo(16);
        Files.writeString(f, "{" + ok + ", \"head_dim\": 7}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining(f.toString()).hasMessageContaining("head_dim 7 is odd");
        Files.writeString(f, "{" + ok + ", \"head_dim\": 0}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).hasMessageContaining("head_dim must be at least 1");
        Files.writeString(f, "[1, 2]");
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(GraphException.class).hasMessageContaining("a JSON array, not an object");
        Files.writeString(f, "{\"hidden_size\": ");
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(GraphException.class).hasMessageContaining("not JSON");
    }

    /** A separate head width (head_dim, as Mistral Nemo and Qwen 3 have it) shapes the attention's projections, not the residual stream. */
    @Test
    void aHeadDimOtherThanHiddenOverHeadsShapesTheAttentionProjections(@TempDir Path dir) throws IOException {
        Path f = dir.resolve("config.json");
        Files.writeString(f, "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
                + "\"num_key_value_heads\": 2, \"num_hidden_layers\": 2, \"vocab_size\": 256, \"head_dim\": 32}");
        var c = LlamaConfig.read(f);
        assertThat(c.headDim()).isEqualTo(32);
        assertThat(c.ropeFrequencies()).hasSize(16);
        var shapes = LlamaCheckpoint.shapes(c);
        assertThat(shapes.get("model.layers.0.self_attn.q_proj.weight")).containsExactly(128, 64);
        assertThat(shapes.get("model.layers.0.self_attn.k_proj.weight")).containsExactly(64, 64);
        assertThat(shapes.get("model.layers.0.self_attn.o_proj.weight")).containsExactly(64, 128);
        c.write(dir.resolve("again.json"));
        assertThat(LlamaConfig.read(dir.resolve("again.json"))).isEqualTo(c);
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
            assertThatThrownBy(() -> LlamaCheckpoint.eosTokens(dir)).as(bad).isInstanceOf(GraphException.class)
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
            assertThatThrownBy(() -> LlamaCheckpoint.check(TINY, st, dir)).hasMessageContaining("'model.layers.1.mlp.up_proj.weight' is missing");
        }
        tensors.put("model.layers.1.mlp.up_proj.weight", NDArray.zeros(DType.F32, 64, 128));
        SafeTensors.write(f, tensors, Map.of());
        try (var st = SafeTensors.open(f)) {
            assertThatThrownBy(() -> LlamaCheckpoint.check(TINY, st, dir)).hasMessageContaining("'model.layers.1.mlp.up_proj.weight' has shape [64, 128]")
                    .hasMessageContaining("needs [128, 64]");
        }
        tensors.put("model.layers.1.mlp.up_proj.weight", NDArray.zeros(DType.I32, 128, 64));
        SafeTensors.write(f, tensors, Map.of());
        try (var st = SafeTensors.open(f)) {
            assertThatThrownBy(() -> LlamaCheckpoint.check(TINY, st, dir)).hasMessageContaining("is i32; weights are f32, f16 or bf16");
        }
    }

    /** TINY's tensors (zeros, f32) with {@code extra} ones, written to {@code file}. */
    private static void writeWith(LlamaConfig c, Path file, Map<String, NDArray> extra) throws IOException {
        var tensors = new LinkedHashMap<String, NDArray>();
        LlamaCheckpoint.shapes(c).forEach((name, shape) -> tensors.put(name, NDArray.zeros(DType.F32, shape)));
        tensors.putAll(extra);
        SafeTensors.write(file, tensors, Map.of());
    }

    /**
     * A tensor the model would not use is refused, named with its file and the count (a checkpoint with biases, norms
     * or experts this decoder lacks would otherwise load with those weights ignored); old checkpoints' rotary caches
     * are not refused.
     */
    @Test
    void tensorsTheModelDoesNotUseAreRefusedNamingThemAndTheirCount(@TempDir Path dir) throws IOException {
        Path f = dir.resolve("w.safetensors");
        writeWith(TINY, f, Map.of("model.layers.0.self_attn.q_proj.bias", NDArray.zeros(DType.F32, 64)));
        try (var st = SafeTensors.open(f)) {
            assertThatThrownBy(() -> LlamaCheckpoint.check(TINY, st, dir)).isInstanceOf(CompilationException.class)
                    .hasMessageStartingWith(f + ": 1 tensor the model does not use: 'model.layers.0.self_attn.q_proj.bias': a llama checkpoint");
        }
        var six = new LinkedHashMap<String, NDArray>();
        for (int l = 0; l < 2; l++)
            for (String n : new String[]{"q_norm", "k_norm", "sinks"}) six.put("model.layers." + l + ".self_attn." + n + ".weight", NDArray.zeros(DType.F32, 16));
        writeWith(TINY, f, six);
        try (var st = SafeTensors.open(f)) {
            assertThatThrownBy(() -> LlamaCheckpoint.check(TINY, st, dir)).hasMessageContaining("6 tensors the model does not use: ")
                    .hasMessageContaining("'model.layers.0.self_attn.q_norm.weight'").hasMessageContaining(" and 2 more");
        }
        writeWith(TINY, f, Map.of("model.layers.0.self_attn.rotary_emb.inv_freq", NDArray.zeros(DType.F32, 8),
                "model.layers.1.self_attn.rotary_emb.inv_freq", NDArray.zeros(DType.F32, 8)));
        try (var st = SafeTensors.open(f)) {
            LlamaCheckpoint.check(TINY, st, dir);
        }
    }

    /** With tied embeddings an lm_head.weight is accepted only where it is the embedding, byte for byte. */
    @Test
    void aTiedCheckpointsLmHeadMustBeTheEmbedding(@TempDir Path dir) throws IOException {
        var tied = new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, true);
        Path f = dir.resolve("w.safetensors");
        NDArray embed = NDArray.zeros(DType.F32, 256, 64);
        embed.set(5, 0.25);
        var same = new LinkedHashMap<String, NDArray>();
        same.put("model.embed_tokens.weight", embed);
        same.put("lm_head.weight", embed);
        writeWith(tied, f, same);
        try (var st = SafeTensors.open(f)) {
            LlamaCheckpoint.check(tied, st, dir);
        }
        same.put("lm_head.weight", NDArray.zeros(DType.F32, 256, 64));
        writeWith(tied, f, same);
        try (var st = SafeTensors.open(f)) {
            assertThatThrownBy(() -> LlamaCheckpoint.check(tied, st, dir)).isInstanceOf(CompilationException.class).hasMessageContaining("'lm_head.weight'")
                    .hasMessageContaining("lm_head.weight differs from model.embed_tokens.weight, but tie_word_embeddings is true");
        }
    }

    /** A directory's weights: model.safetensors, else the shards of model.safetensors.index.json, else refused naming both. */
    @Test
    void aDirectorysWeightsAreTheOneFileElseTheShardsItsIndexLists(@TempDir Path dir) throws IOException {
        assertThatThrownBy(() -> LlamaCheckpoint.openWeights(dir)).isInstanceOf(GraphException.class)
                .hasMessageContaining("neither model.safetensors nor model.safetensors.index.json");
        // two shards, the index listing every tensor; an extra tensor in a shard, listed too, is refused by the check
        var shapes = LlamaCheckpoint.shapes(TINY);
        var first = new LinkedHashMap<String, NDArray>();
        var second = new LinkedHashMap<String, NDArray>();
        var map = new StringBuilder();
        int i = 0;
        for (var e : shapes.entrySet()) {
            (i++ % 2 == 0 ? first : second).put(e.getKey(), NDArray.zeros(DType.BF16, e.getValue()));
            map.append(map.isEmpty() ? "" : ", ").append('"').append(e.getKey()).append("\": \"").append(i % 2 == 1 ? "a.safetensors" : "b.safetensors").append('"');
        }
        SafeTensors.write(dir.resolve("a.safetensors"), first, Map.of());
        second.put("model.layers.0.mlp.gate_proj.bias", NDArray.zeros(DType.BF16, 128));
        SafeTensors.write(dir.resolve("b.safetensors"), second, Map.of());
        Files.writeString(dir.resolve(LlamaCheckpoint.WEIGHTS_INDEX), "{\"weight_map\": {" + map + ", \"model.layers.0.mlp.gate_proj.bias\": \"b.safetensors\"}}");
        TINY.write(dir.resolve(LlamaCheckpoint.CONFIG));
        assertThatThrownBy(() -> LlamaCheckpoint.open(dir)).isInstanceOf(CompilationException.class)
                .hasMessageStartingWith(dir.resolve("b.safetensors") + " (of " + dir.resolve(LlamaCheckpoint.WEIGHTS_INDEX) + "): 1 tensor the model does not use: "
                        + "'model.layers.0.mlp.gate_proj.bias'");
        second.remove("model.layers.0.mlp.gate_proj.bias");
        SafeTensors.write(dir.resolve("b.safetensors"), second, Map.of());
        Files.writeString(dir.resolve(LlamaCheckpoint.WEIGHTS_INDEX), "{\"weight_map\": {" + map + "}}");
        try (var ckpt = LlamaCheckpoint.open(dir)) {
            assertThat(ckpt.config()).isEqualTo(TINY);
            assertThat(ckpt.weights().file("model.layers.0.input_layernorm.weight")).isEqualTo(dir.resolve("b.safetensors"));
        }
        // the one file is read where it is there, as transformers reads it
        writeWith(TINY, dir.resolve(LlamaCheckpoint.WEIGHTS), Map.of());
        try (var w = LlamaCheckpoint.openWeights(dir)) {
            assertThat(w.source()).isEqualTo(dir.resolve(LlamaCheckpoint.WEIGHTS));
        }
    }
}
