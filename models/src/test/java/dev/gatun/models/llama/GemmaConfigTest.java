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
 * Gemma's and Gemma 2's {@code config.json} read as transformers' GemmaConfig and Gemma2Config read them (the shipped
 * references' values; the defaults where a field is left out), and every Gemma field this decoder does not compute
 * refused by name: another activation, a layer type other than full or sliding attention, bidirectional attention,
 * MLP biases, Gemma 2's fields on a Gemma 1 file; a checkpoint with tensors the configuration does not use refused.
 */
class GemmaConfigTest {
    @TempDir Path dir;

    static final String SHAPE = "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
            + "\"num_hidden_layers\": 4, \"vocab_size\": 256";

    private Path config(String type, String more) throws IOException {
        Path f = dir.resolve("config.json");
        Files.writeString(f, "{\"model_type\": \"" + type + "\", " + SHAPE + (more.isEmpty() ? "" : ", " + more) + "}");
        return f;
    }

    @Test
    void theReferenceConfigsAreReadAsTheyAreWritten() throws IOException {
        LlamaConfig g = LlamaConfig.read(TransformersReference.directory("gemma").resolve("config.json"));
        assertThat(g.gemma()).isEqualTo(new GemmaFeatures(false, 0, 0, 32, 0, Set.of()));
        assertThat(g.headDim()).isEqualTo(32);
        assertThat(g.tieWordEmbeddings()).isTrue();
        assertThat(g.rmsNormEps()).isEqualTo(1e-5);
        LlamaConfig g2 = LlamaConfig.read(TransformersReference.directory("gemma2").resolve("config.json"));
        assertThat(g2.gemma()).isEqualTo(new GemmaFeatures(true, 5, 3, 24, 8, Set.of(0, 2)));
        assertThat(g2.gemma().attentionScale()).isEqualTo(1 / Math.sqrt(24), org.assertj.core.data.Offset.offset(1e-15));
        assertThat(g2.slidingWindow()).as("Mistral's whole-model window: none").isZero();
        assertThat(LlamaConfig.read(config("llama", "")).gemma()).isNull();
    }

    /** Gemma2Config's defaults: caps 50 and 30 (none where null), scalar 256, window 4096, the even layers sliding. */
    @Test
    void gemmaDefaultsAreTransformersConfigs() throws IOException {
        LlamaConfig d = LlamaConfig.read(config("gemma2", ""));
        assertThat(d.gemma()).isEqualTo(new GemmaFeatures(true, 50, 30, 256, 4096, Set.of(0, 2)));
        assertThat(d.headDim()).as("Gemma2Config's head_dim").isEqualTo(256);
        assertThat(d.tieWordEmbeddings()).isTrue();
        LlamaConfig off = LlamaConfig.read(config("gemma2", "\"attn_logit_softcapping\": null, \"final_logit_softcapping\": null, "
                + "\"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\", \"full_attention\"], \"sliding_window\": null, "
                + "\"cache_implementation\": \"hybrid\", \"tie_word_embeddings\": false"));
        assertThat(off.gemma()).isEqualTo(new GemmaFeatures(true, 0, 0, 256, 0, Set.of()));
        assertThat(off.tieWordEmbeddings()).isFalse();
        LlamaConfig one = LlamaConfig.read(config("gemma", "\"hidden_act\": \"gelu_pytorch_tanh\", \"use_bidirectional_attention\": false"));
        assertThat(one.gemma()).isEqualTo(GemmaFeatures.gemma(256));
        assertThat(one.headDim()).isEqualTo(256);
    }

    @ParameterizedTest(name = "{0}: {1}")
    @CsvSource(delimiter = '|', quoteCharacter = '`', value = {
            "gemma|\"hidden_activation\": \"gelu\"|field 'hidden_activation' is \"gelu\": only \"gelu_pytorch_tanh\"",
            "gemma|\"hidden_act\": \"gelu\", \"hidden_activation\": \"gelu_pytorch_tanh\"|field 'hidden_act' is \"gelu\": only \"gelu_pytorch_tanh\"",
            "gemma2|\"hidden_activation\": \"silu\"|field 'hidden_activation' is \"silu\"",
            "gemma2|\"layer_types\": [\"sliding_attention\", \"full_attention\", \"chunked_attention\", \"full_attention\"]|field 'layer_types' makes layer 2 \"chunked_attention\"",
            "gemma2|\"use_bidirectional_attention\": true|field 'use_bidirectional_attention' is true: bidirectional attention",
            "gemma2|\"mlp_bias\": true|field 'mlp_bias' is true, but transformers' gemma2 MLP has no biases",
            "gemma2|\"rope_scaling\": {\"rope_type\": \"longrope\", \"factor\": 2.0}|field 'rope_scaling.rope_type' is \"longrope\"",
            "gemma2|\"use_fancy_norm\": true|field 'use_fancy_norm' is not known to this loader for model_type 'gemma2'",
            "gemma|\"query_pre_attn_scalar\": 24|field 'query_pre_attn_scalar' is 24: scaling the queries by query_pre_attn_scalar^-1/2 instead of head_dim^-1/2 is implemented for gemma2 only",
            "gemma|\"attn_logit_softcapping\": 50.0|field 'attn_logit_softcapping' is 50.0: soft-capping the attention scores (tanh) is implemented for gemma2 only",
            "gemma|\"final_logit_softcapping\": 30.0|field 'final_logit_softcapping' is 30.0: soft-capping the final logits (tanh) is implemented for gemma2 only",
            "gemma|\"sliding_window\": 4096|field 'sliding_window' is 4096",
            "gemma|\"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\", \"full_attention\"]|field 'layer_types' makes layer 0 \"sliding_attention\"",
            "gemma|\"cache_implementation\": \"hybrid\"|field 'cache_implementation' is not known to this loader for model_type 'gemma'",
    })
    void whatIsNotImplementedIsRefusedByName(String type, String field, String message) throws IOException {
        Path f = config(type, field);
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(CompilationException.class).hasMessageStartingWith(f + ": ").hasMessageContaining(message);
    }

    @Test
    void malformedGemmaFieldsAreRefused() throws IOException {
        Path kv = dir.resolve("config.json");
        Files.writeString(kv, "{\"model_type\": \"gemma\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, "
                + "\"num_hidden_layers\": 2, \"vocab_size\": 256}");
        assertThatThrownBy(() -> LlamaConfig.read(kv)).isInstanceOf(GraphException.class).hasMessageContaining("field 'num_key_value_heads' is missing");
        Path scalar = config("gemma2", "\"query_pre_attn_scalar\": null");
        assertThatThrownBy(() -> LlamaConfig.read(scalar)).isInstanceOf(GraphException.class).hasMessageContaining("field 'query_pre_attn_scalar' is null");
        Path window = config("gemma2", "\"sliding_window\": null");
        assertThatThrownBy(() -> LlamaConfig.read(window)).isInstanceOf(GraphException.class)
                .hasMessageContaining("field 'sliding_window' is null, but layer_types makes layers [0, 2] sliding");
        Path types = config("gemma2", "\"layer_types\": [\"full_attention\"]");
        assertThatThrownBy(() -> LlamaConfig.read(types)).isInstanceOf(GraphException.class).hasMessageContaining("'layer_types' has 1 entries for 4 layers");
        Path cap = config("gemma2", "\"attn_logit_softcapping\": -1.0");
        assertThatThrownBy(() -> LlamaConfig.read(cap)).isInstanceOf(GraphException.class).hasMessageContaining("attn_logit_softcapping must be a positive");
    }

    /**
     * The Gemma 2 reference's weights under a Gemma 1 configuration: its norms around the MLP are tensors the model would
     * not use, refused by name; and a Gemma 2 configuration is written as a gemma2 one, which reads back the same.
     */
    @Test
    void gemma2WeightsUnderAGemmaConfigAreRefusedAndGemmaConfigsAreWrittenAsGemma() throws IOException {
        Path src = TransformersReference.directory("gemma2");
        Files.copy(src.resolve("model.safetensors"), dir.resolve("model.safetensors"));
        Files.writeString(dir.resolve("config.json"), "{\"model_type\": \"gemma\", " + SHAPE + ", \"head_dim\": 32, \"rms_norm_eps\": 1e-05}");
        assertThatThrownBy(() -> LlamaCheckpoint.open(dir)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("8 tensors the model does not use: 'model.layers.0.post_feedforward_layernorm.weight'");
        LlamaConfig g = LlamaConfig.read(src.resolve("config.json"));
        g.write(dir.resolve("out.json"));
        assertThat(Files.readString(dir.resolve("out.json"))).contains("\"model_type\": \"gemma2\"");
        assertThat(LlamaConfig.read(dir.resolve("out.json"))).isEqualTo(g);
    }
}
