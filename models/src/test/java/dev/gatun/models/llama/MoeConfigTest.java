package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.GraphException;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The mixture-of-experts fields of a {@code config.json}: transformers' reference configs read as they state them,
 * which layers are mixtures as transformers' Qwen decoder layers decide it, and every field this decoder would read
 * differently from transformers refused by name.
 */
class MoeConfigTest {
    @TempDir Path dir;

    /** The shape every hand-written config here shares (4 experts of 32, 2 a token). */
    static final String SHAPE = "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
            + "\"num_hidden_layers\": 2, \"vocab_size\": 256, \"num_experts_per_tok\": 2";

    private Path config(String type, String fields) throws IOException {
        Path f = dir.resolve("config.json");
        Files.writeString(f, "{\"model_type\": \"" + type + "\", " + SHAPE + (fields.isEmpty() ? "" : ", " + fields) + "}");
        return f;
    }

    @Test
    void theReferenceConfigsAreReadAsTheyStateThem() throws IOException {
        var mixtral = LlamaConfig.read(TransformersReference.directory("mixtral").resolve("config.json"));
        assertThat(mixtral.moe()).isEqualTo(new MoeConfig(MoeConfig.Naming.MIXTRAL, 4, 2, 128, true, 0, 1, Set.of()));
        assertThat(mixtral.biases()).isEqualTo(LlamaConfig.Biases.NONE);
        assertThat(mixtral.slidingWindow()).as("sliding_window null").isZero();
        assertThat(mixtral.qkNorm()).isFalse();
        var qwen2 = LlamaConfig.read(TransformersReference.directory("qwen2_moe").resolve("config.json"));
        assertThat(qwen2.moe()).isEqualTo(new MoeConfig(MoeConfig.Naming.QWEN, 4, 2, 32, false, 48, 1, Set.of()));
        assertThat(qwen2.biases()).as("qkv_bias").isEqualTo(new LlamaConfig.Biases(true, false, false));
        assertThat(qwen2.headDim()).isEqualTo(16);
        var qwen3 = LlamaConfig.read(TransformersReference.directory("qwen3_moe").resolve("config.json"));
        assertThat(qwen3.moe()).isEqualTo(new MoeConfig(MoeConfig.Naming.QWEN, 4, 2, 32, true, 0, 1, Set.of()));
        assertThat(qwen3.qkNorm()).isTrue();
        assertThat(qwen3.headDim()).isEqualTo(32);
        assertThat(LlamaConfig.read(TransformersReference.directory("qwen3").resolve("config.json")).moe()).isNull();
    }

    /** Qwen3-MoE's head_dim where left out is hidden / heads (Qwen3's own is 128); its experts under either name. */
    @Test
    void qwen3MoesDefaultsAndExpertCountAreTransformers() throws IOException {
        var c = LlamaConfig.read(config("qwen3_moe", "\"num_experts\": 4, \"moe_intermediate_size\": 32"));
        assertThat(c.headDim()).isEqualTo(16);
        assertThat(c.moe().experts()).isEqualTo(4);
        assertThat(c.moe().normTopK()).as("norm_topk_prob left out").isFalse();
        assertThat(LlamaConfig.read(config("qwen3_moe", "\"num_experts\": 4, \"num_local_experts\": 4, \"moe_intermediate_size\": 32")).moe().experts()).isEqualTo(4);
    }

    /** Layer L is a mixture where it is not in mlp_only_layers and (L + 1) % decoder_sparse_step == 0, as transformers decides. */
    @Test
    void whichLayersAreMixturesIsTransformersRule() {
        var m = new MoeConfig(MoeConfig.Naming.QWEN, 4, 2, 32, false, 0, 2, Set.of(3));
        boolean[] expected = {false, true, false, false, false, true};
        for (int l = 0; l < expected.length; l++) assertThat(m.sparse(l)).as("layer %d", l).isEqualTo(expected[l]);
        assertThat(new MoeConfig(MoeConfig.Naming.QWEN, 4, 2, 32, false, 0, 1, Set.of()).sparse(0)).isTrue();
    }

    @ParameterizedTest(name = "{0}: {1}")
    @CsvSource(delimiter = '|', quoteCharacter = '`', value = {
            "mixtral|\"num_local_experts\": 4, \"norm_topk_prob\": false|field 'norm_topk_prob' is not known to this loader for model_type 'mixtral'",
            "mixtral|\"num_local_experts\": 4, \"attention_bias\": true|field 'attention_bias' is true, but transformers' mixtral has no such biases",
            "qwen2_moe|\"num_experts\": 4, \"moe_intermediate_size\": 32, \"shared_expert_intermediate_size\": 48, \"mlp_bias\": true|field 'mlp_bias' is true",
            "qwen3_moe|\"num_experts\": 8, \"num_local_experts\": 4, \"moe_intermediate_size\": 32|fields 'num_local_experts' (4) and 'num_experts' (8) disagree",
            "qwen3_moe|\"num_experts\": 4, \"moe_intermediate_size\": 32, \"shared_expert_intermediate_size\": 48|field 'shared_expert_intermediate_size' is not known",
            "qwen2_moe|\"num_experts\": 4, \"moe_intermediate_size\": 32, \"shared_expert_intermediate_size\": 48, \"use_sliding_window\": true|field 'use_sliding_window' is true",
            "llama|\"num_experts\": 4|field 'num_experts' is 4: mixture of experts (a router and expert MLPs) is implemented for model_type mixtral, qwen2_moe and qwen3_moe only",
    })
    void whatWouldBeReadDifferentlyIsRefusedByName(String type, String fields, String message) throws IOException {
        Path f = config(type, fields);
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(CompilationException.class).hasMessageStartingWith(f + ": ").hasMessageContaining(message);
    }

    @ParameterizedTest(name = "{0}: {1}")
    @CsvSource(delimiter = '|', quoteCharacter = '`', value = {
            "qwen2_moe|\"num_experts\": 4, \"moe_intermediate_size\": 32|field 'shared_expert_intermediate_size' is missing",
            "qwen3_moe|\"num_experts\": 4|field 'moe_intermediate_size' is missing",
            "mixtral|\"hidden_act\": \"silu\"|field 'num_local_experts' is missing",
            "mixtral|\"num_local_experts\": 1|num_experts_per_tok must be 1 to the number of experts (1), not 2",
            "qwen3_moe|\"num_experts\": 4, \"moe_intermediate_size\": 32, \"mlp_only_layers\": [\"0\"]|field 'mlp_only_layers' holds \"0\", not a layer index",
            "qwen3_moe|\"num_experts\": 4, \"moe_intermediate_size\": 32, \"decoder_sparse_step\": 0|decoder_sparse_step must be at least 1",
    })
    void malformedExpertFieldsAreRefusedByName(String type, String fields, String message) throws IOException {
        Path f = config(type, fields);
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(GraphException.class).hasMessageStartingWith(f + ": ").hasMessageContaining(message);
    }

    /** The mixtures' key-value heads are required (their config classes' defaults are one model's each). */
    @Test
    void theKeyValueHeadsAreRequired() throws IOException {
        Path f = dir.resolve("kv.json");
        Files.writeString(f, "{\"model_type\": \"mixtral\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
                + "\"num_hidden_layers\": 2, \"vocab_size\": 256, \"num_experts_per_tok\": 2, \"num_local_experts\": 4}");
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(GraphException.class).hasMessageContaining("field 'num_key_value_heads' is missing");
    }

    /**
     * Tensor parallelism splits each expert's width (and the shared expert's): a degree that does not divide them is
     * refused naming the field; intermediate_size matters only where some layer is dense.
     */
    @Test
    void tensorParallelismMustDivideTheExpertsWidths() throws IOException {
        var experts = LlamaConfig.read(config("qwen2_moe", "\"num_experts\": 4, \"moe_intermediate_size\": 30, \"shared_expert_intermediate_size\": 48"));
        experts.checkTensorParallel(2);
        assertThatThrownBy(() -> experts.checkTensorParallel(4)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("does not divide moe_intermediate_size = 30");
        var shared = LlamaConfig.read(config("qwen2_moe", "\"num_experts\": 4, \"moe_intermediate_size\": 32, \"shared_expert_intermediate_size\": 50"));
        assertThatThrownBy(() -> shared.checkTensorParallel(4)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("does not divide shared_expert_intermediate_size = 50");
        Path odd = dir.resolve("odd.json");
        Files.writeString(odd, Files.readString(config("qwen3_moe", "\"num_experts\": 4, \"moe_intermediate_size\": 32")).replace("\"intermediate_size\": 128", "\"intermediate_size\": 130"));
        LlamaConfig.read(odd).checkTensorParallel(4);   // every layer a mixture: intermediate_size 130 is not split
        Path dense = dir.resolve("dense.json");
        Files.writeString(dense, Files.readString(odd).replace("\"moe_intermediate_size\": 32", "\"moe_intermediate_size\": 32, \"mlp_only_layers\": [1]"));
        assertThatThrownBy(() -> LlamaConfig.read(dense).checkTensorParallel(4)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("does not divide intermediate_size = 130");
    }

    /** A mixture is written as a mixture (never as a dense llama file), with its mlp_only_layers; it reads back the same. */
    @Test
    void aMixtureIsWrittenAsAMixture() throws IOException {
        var c = LlamaConfig.read(TransformersReference.directory("mixtral").resolve("config.json"));
        c.write(dir.resolve("w.json"));
        assertThat(Files.readString(dir.resolve("w.json"))).contains("\"model_type\": \"mixtral\"", "\"num_local_experts\": 4");
        var q = LlamaConfig.read(config("qwen3_moe", "\"num_experts\": 4, \"moe_intermediate_size\": 32, \"mlp_only_layers\": [1]"));
        q.write(dir.resolve("q.json"));
        assertThat(Files.readString(dir.resolve("q.json"))).contains("\"mlp_only_layers\": [1]");
        assertThat(LlamaConfig.read(dir.resolve("q.json")).moe().mlpOnlyLayers()).containsExactly(1);
    }
}
