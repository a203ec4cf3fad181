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
 * Every field of a {@code config.json} that would change the computation is either read or refused by name, never
 * ignored: the other architectures' reference configs (written by transformers) refused naming the model type and the
 * feature missing, each feature switch refused where it is on and accepted where it is off, the rope types not
 * implemented refused, fields not known to be harmless refused, and real Llama and Mistral configs accepted with
 * transformers' defaults for their model type.
 */
class LlamaConfigRefusalTest {
    @TempDir Path dir;

    /** The shape every hand-written config here shares. */
    static final String SHAPE = "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
            + "\"num_hidden_layers\": 2, \"vocab_size\": 256";

    private Path config(String fields) throws IOException {
        Path f = dir.resolve("config.json");
        Files.writeString(f, "{" + fields + "}");
        return f;
    }

    private Path llama(String more) throws IOException { return config("\"model_type\": \"llama\", " + SHAPE + (more.isEmpty() ? "" : ", " + more)); }

    /** A neighbour still refused (every reference architecture is implemented now): named with what it lacks. */
    @Test
    void aRefusedNeighbourIsRefusedNamingWhatIsMissing() throws IOException {
        Path f = config("\"model_type\": \"gemma3_text\", \"architectures\": [\"Gemma3ForCausalLM\"], " + SHAPE);
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(CompilationException.class)
                .hasMessage(f + ": model_type 'gemma3_text' (Gemma3ForCausalLM) is not supported: Gemma 2's GeGLU-tanh, embedding scale, (1 + w) and "
                        + "pre/post norms, QK-norm and sliding-window layers are not implemented; supported: " + SUPPORTED);
    }

    /** The types implemented, as a refusal lists them. */
    static final String SUPPORTED = "gemma, gemma2, llama, mistral, mixtral, phi3, qwen2, qwen2_moe, qwen3, qwen3_moe";

    @Test
    void aTypeNotKnownAtAllIsRefusedAsNotSupported() throws IOException {
        Path f = config("\"model_type\": \"gpt2\", \"architectures\": [\"GPT2LMHeadModel\"], " + SHAPE);
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(CompilationException.class)
                .hasMessage(f + ": model_type 'gpt2' (GPT2LMHeadModel) is not supported: its architecture is not implemented; supported: " + SUPPORTED);
        Path none = config(SHAPE);
        assertThatThrownBy(() -> LlamaConfig.read(none)).isInstanceOf(GraphException.class).hasMessageContaining("field 'model_type' is missing");
    }

    @Test
    void anArchitectureOtherThanTheCausalLmIsRefused() throws IOException {
        Path f = llama("\"architectures\": [\"LlamaForSequenceClassification\"]");
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("field 'architectures' names LlamaForSequenceClassification, but model_type 'llama' is implemented as LlamaForCausalLM only");
        Path m = llama("\"architectures\": [\"MistralForCausalLM\"]");
        assertThatThrownBy(() -> LlamaConfig.read(m)).isInstanceOf(CompilationException.class).hasMessageContaining("names MistralForCausalLM");
        assertThat(LlamaConfig.read(llama("\"architectures\": [\"LlamaForCausalLM\"]")).layers()).isEqualTo(2);
    }

    /**
     * The bias flags are read, not refused: Llama's {@code attention_bias} puts a bias on the four attention projections,
     * {@code mlp_bias} on the three MLP ones; Qwen2 has query, key and value biases whatever the flags say (transformers'
     * Qwen2 takes them from the architecture), and its sliding-window fields are refused only where the window is on.
     */
    @Test
    void biasFlagsAndQwen2sFieldsAreReadAsTransformersReadsThem() throws IOException {
        assertThat(LlamaConfig.read(llama("\"attention_bias\": true")).biases()).isEqualTo(new LlamaConfig.Biases(true, true, false));
        assertThat(LlamaConfig.read(llama("\"mlp_bias\": true")).biases()).isEqualTo(new LlamaConfig.Biases(false, false, true));
        assertThat(LlamaConfig.read(llama("")).biases()).isEqualTo(LlamaConfig.Biases.NONE);
        Path qwen = config("\"model_type\": \"qwen2\", " + SHAPE + ", \"use_sliding_window\": false, \"sliding_window\": 4096, \"max_window_layers\": 28");
        assertThat(LlamaConfig.read(qwen).biases()).isEqualTo(new LlamaConfig.Biases(true, false, false));
        assertThat(LlamaConfig.read(qwen).slidingWindow()).isZero();
        Path window = config("\"model_type\": \"qwen2\", " + SHAPE + ", \"use_sliding_window\": true, \"sliding_window\": 4096");
        assertThatThrownBy(() -> LlamaConfig.read(window)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("field 'use_sliding_window' is true: Qwen's sliding-window switch");
        // max_window_layers is Qwen2's alone: for llama it is a field this loader does not know
        assertThatThrownBy(() -> LlamaConfig.read(llama("\"max_window_layers\": 28"))).hasMessageContaining("'max_window_layers' is not known");
    }

    /** YaRN read with transformers' defaults; a factor that disagrees with the positions' ratio, or mscale, refused. */
    @Test
    void yarnIsReadWithItsDefaultsAndRefusedWhereItsFactorIsUnclear() throws IOException {
        var y = LlamaConfig.read(llama("\"max_position_embeddings\": 64, \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10000.0, "
                + "\"factor\": 4.0, \"original_max_position_embeddings\": 16}")).ropeScaling();
        assertThat(y).isEqualTo(new LlamaConfig.RopeScaling.Yarn(4, 16, 32, 1, 0.1 * Math.log(4) + 1, true));
        Path unclear = llama("\"max_position_embeddings\": 64, \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 2.0, \"original_max_position_embeddings\": 16}");
        assertThatThrownBy(() -> LlamaConfig.read(unclear)).isInstanceOf(CompilationException.class).hasMessageContaining("YaRN's factor 2.0 and max_position_embeddings");
        Path mscale = llama("\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 16, \"mscale\": 1.0}");
        assertThatThrownBy(() -> LlamaConfig.read(mscale)).isInstanceOf(CompilationException.class).hasMessageContaining("'rope_parameters.mscale' is not used");
    }

    /** Qwen3: QK-norm always, biases where attention_bias says, heads 128 wide where head_dim is left out. */
    @Test
    void qwen3sQkNormBiasesAndHeadWidthAreReadAsTransformersReadsThem() throws IOException {
        Path plain = config("\"model_type\": \"qwen3\", " + SHAPE + ", \"use_sliding_window\": false, \"max_window_layers\": 28");
        var c = LlamaConfig.read(plain);
        assertThat(c.qkNorm()).isTrue();
        assertThat(c.headDim()).as("Qwen3Config's default head_dim").isEqualTo(128);
        assertThat(c.biases()).isEqualTo(LlamaConfig.Biases.NONE);
        Path biased = config("\"model_type\": \"qwen3\", " + SHAPE + ", \"head_dim\": 16, \"attention_bias\": true");
        assertThat(LlamaConfig.read(biased).biases()).isEqualTo(new LlamaConfig.Biases(true, true, false));
        assertThat(LlamaConfig.read(biased).headDim()).isEqualTo(16);
        assertThat(LlamaConfig.read(llama("")).qkNorm()).isFalse();
    }

    /** Each feature switch refused naming the field where it is on, and accepted where it is off. */
    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = '|', quoteCharacter = '`', value = {
            "\"hidden_act\": \"gelu_pytorch_tanh\"|\"silu\"|field 'hidden_act' is \"gelu_pytorch_tanh\": only \"silu\"",
            "\"hidden_activation\": \"gelu_pytorch_tanh\"|null|field 'hidden_activation' is \"gelu_pytorch_tanh\"",
            "\"partial_rotary_factor\": 0.5|1.0|field 'partial_rotary_factor' is 0.5: partial rotary embeddings",
            "\"attn_logit_softcapping\": 50.0|null|field 'attn_logit_softcapping' is 50.0: soft-capping the attention scores",
            "\"final_logit_softcapping\": 30.0|null|field 'final_logit_softcapping' is 30.0: soft-capping the final logits",
            "\"query_pre_attn_scalar\": 24|null|field 'query_pre_attn_scalar' is 24: scaling the queries",
            "\"use_qk_norm\": true|false|field 'use_qk_norm' is true: QK-norm",
            "\"num_local_experts\": 8|null|field 'num_local_experts' is 8: mixture of experts",
            "\"num_experts\": 4|null|field 'num_experts' is 4: mixture of experts",
            "\"num_experts_per_tok\": 2|null|field 'num_experts_per_tok' is 2: mixture of experts",
            "\"layer_types\": [\"sliding_attention\", \"full_attention\"]|[\"full_attention\", \"full_attention\"]|field 'layer_types' makes layer 0 \"sliding_attention\"",
            "\"sliding_window\": 4096|null|field 'sliding_window' is 4096, but transformers' llama has no sliding window",
            "\"quantization_config\": {\"quant_method\": \"awq\"}|null|field 'quantization_config' is an object of 1 field: quantized weights",
            "\"auto_map\": {\"AutoModelForCausalLM\": \"modeling.MyLlama\"}|null|field 'auto_map' is an object of 1 field: custom modeling code",
            "\"pruned_heads\": {\"0\": [1]}|{}|field 'pruned_heads' is an object of 1 field: pruned attention heads",
    })
    void eachFeatureSwitchIsRefusedWhereOnAndAcceptedWhereOff(String on, String off, String message) throws IOException {
        Path f = llama(on);
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(CompilationException.class).hasMessageStartingWith(f + ": ").hasMessageContaining(message);
        String key = on.substring(0, on.indexOf(':'));
        assertThat(LlamaConfig.read(llama(key + ": " + off)).layers()).as(key + " off").isEqualTo(2);
    }

    @Test
    void layerTypesOfAnotherLengthAreRefused() throws IOException {
        Path f = llama("\"layer_types\": [\"full_attention\"]");
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(GraphException.class).hasMessageContaining("'layer_types' has 1 entries for 2 layers");
    }

    /** A field not known to be harmless is refused, all such fields named; the caller may name one harmless. */
    @Test
    void unknownFieldsAreRefusedUnlessTheCallerNamesThemHarmless() throws IOException {
        Path f = llama("\"use_fancy_norm\": true, \"attention_temperature\": 0.7");
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(CompilationException.class).hasMessageStartingWith(f + ": 2 fields: ")
                .hasMessageContaining("'attention_temperature', 'use_fancy_norm' are not known to this loader for model_type 'llama'")
                .hasMessageContaining("LlamaConfig.read(file, Set.of(...))");
        assertThatThrownBy(() -> LlamaConfig.read(f, Set.of("use_fancy_norm"))).hasMessageContaining("field 'attention_temperature' is not known");
        assertThat(LlamaConfig.read(f, Set.of("use_fancy_norm", "attention_temperature")).layers()).isEqualTo(2);
        // naming a field harmless does not unlock one this loader refuses
        Path qk = llama("\"use_qk_norm\": true");
        assertThatThrownBy(() -> LlamaConfig.read(qk, Set.of("use_qk_norm"))).hasMessageContaining("QK-norm");
    }

    /** Both spellings of the rotary embedding: transformers 4's rope_theta / rope_scaling and transformers 5's rope_parameters. */
    @Test
    void bothRopeSpellingsAreReadAndMustAgree() throws IOException {
        var llama3 = new LlamaConfig.RopeScaling.Llama3(8, 1, 4, 8192);
        String scaling = "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192";
        var v4 = LlamaConfig.read(llama("\"rope_theta\": 500000.0, \"rope_scaling\": {\"rope_type\": \"llama3\", " + scaling + "}"));
        var v5 = LlamaConfig.read(llama("\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", " + scaling + "}"));
        var both = LlamaConfig.read(llama("\"rope_theta\": 500000.0, \"rope_scaling\": {\"type\": \"llama3\", " + scaling + "}, "
                + "\"rope_parameters\": {\"rope_theta\": 500000.0, \"rope_type\": \"llama3\", " + scaling + "}"));
        for (var c : new LlamaConfig[]{v4, v5, both}) {
            assertThat(c.ropeTheta()).isEqualTo(500000);
            assertThat(c.ropeScaling()).isEqualTo(llama3);
        }
        var linear = LlamaConfig.read(llama("\"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"linear\", \"factor\": 2.0}"));
        assertThat(linear.ropeScaling()).isEqualTo(new LlamaConfig.RopeScaling.Linear(2));
        assertThat(linear.ropeFrequencies()[1]).isCloseTo(Math.pow(10000, -2.0 / 16) / 2, org.assertj.core.api.Assertions.within(1e-15));
        assertThat(LlamaConfig.read(llama("\"rope_parameters\": {\"rope_theta\": 50000.0, \"rope_type\": \"default\"}")).ropeTheta()).isEqualTo(50000);
        assertThat(LlamaConfig.read(llama("\"rope_parameters\": {\"rope_theta\": 50000.0}")).ropeScaling()).isNull();
        // disagreeing spellings
        Path theta = llama("\"rope_theta\": 10000.0, \"rope_parameters\": {\"rope_theta\": 50000.0, \"rope_type\": \"default\"}");
        assertThatThrownBy(() -> LlamaConfig.read(theta)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("fields 'rope_theta' (10000.0) and 'rope_parameters.rope_theta' (50000.0) disagree");
        Path kind = llama("\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2.0}, \"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}");
        assertThatThrownBy(() -> LlamaConfig.read(kind)).isInstanceOf(CompilationException.class).hasMessageContaining("fields 'rope_scaling' (");
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = '|', quoteCharacter = '`', value = {
            "\"rope_scaling\": {\"rope_type\": \"longrope\", \"long_factor\": [1], \"short_factor\": [1]}|field 'rope_scaling.rope_type' is \"longrope\": LongRoPE",
            "\"rope_scaling\": {\"type\": \"su\", \"long_factor\": [1], \"short_factor\": [1]}|field 'rope_scaling.rope_type' is \"su\"",
            "\"rope_scaling\": {\"rope_type\": \"mrope\"}|field 'rope_scaling.rope_type' is \"mrope\": this scaling is not implemented; implemented: default, linear, llama3, yarn, dynamic",
            "\"rope_scaling\": {\"factor\": 2.0}|field 'rope_scaling.factor' is not used by rope_type default (none given)",
            "\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, \"beta_fast\": 32}|field 'rope_parameters.beta_fast' is not used by rope_type \"llama3\"",
            "\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.5}|field 'rope_parameters.partial_rotary_factor' is 0.5: partial rotary",
    })
    void ropeTypesAndFieldsNotImplementedAreRefusedByName(String rope, String message) throws IOException {
        Path f = llama(rope);
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(CompilationException.class).hasMessageStartingWith(f + ": ").hasMessageContaining(message);
    }

    /**
     * Real configs, as their checkpoints ship them, read with transformers' defaults for their model type: Llama 2
     * (a full dump of every config field, generation defaults among them), Llama 3.2, Mistral 7B v0.1 (a sliding
     * window of 4096, given) and Mistral Nemo (head_dim 128, not 5120 / 32; no sliding window).
     */
    @Test
    void realLlamaAndMistralConfigsAreAccepted() throws IOException {
        var llama2 = LlamaConfig.read(config("""
                "_name_or_path": "meta-llama/Llama-2-7b-hf", "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
                "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 4096,
                "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "pad_token_id": 0,
                "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "tie_word_embeddings": false, "torch_dtype": "float16",
                "transformers_version": "4.31.0.dev0", "use_cache": true, "vocab_size": 32000, "temperature": 0.6, "top_p": 0.9,
                "do_sample": true, "max_length": 4096, "return_dict": true, "output_hidden_states": false, "id2label": {"0": "LABEL_0"},
                "label2id": {"LABEL_0": 0}, "is_decoder": false, "tokenizer_class": null, "attention_dropout": 0.0"""));
        assertThat(llama2).isEqualTo(new LlamaConfig(4096, 32, 32, 32, 11008, 32000, 10000, 1e-5, false));
        var llama32 = LlamaConfig.read(config("""
                "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 128000,
                "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
                "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
                "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
                "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192,
                "rope_type": "llama3"}, "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
                "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256"""));
        assertThat(llama32).isEqualTo(new LlamaConfig(2048, 16, 32, 8, 8192, 128256, 500000, 1e-5, true, new LlamaConfig.RopeScaling.Llama3(32, 1, 4, 8192)));
        var mistral = LlamaConfig.read(config("""
                "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096,
                "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
                "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
                "sliding_window": 4096, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.34.0.dev0",
                "use_cache": true, "vocab_size": 32000"""));
        assertThat(mistral).isEqualTo(new LlamaConfig(4096, 32, 32, 8, 14336, 32000, 10000, 1e-5, false).withSlidingWindow(4096));
        var nemo = LlamaConfig.read(config("""
                "_name_or_path": "mistralai/Mistral-Nemo-Base-2407", "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0,
                "bos_token_id": 1, "eos_token_id": 2, "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120, "initializer_range": 0.02,
                "intermediate_size": 14336, "max_position_embeddings": 128000, "model_type": "mistral", "num_attention_heads": 32,
                "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
                "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.43.3", "use_cache": true, "vocab_size": 131072"""));
        assertThat(nemo).isEqualTo(new LlamaConfig(5120, 40, 32, 8, 14336, 131072, 1e6, 1e-5, false).withHeadDim(128));
    }

    /** Mistral's defaults are its own: 8 key-value heads and a window of 4096 where the file leaves them out. */
    @Test
    void mistralsDefaultsAreTransformersMistralConfigs() throws IOException {
        var c = LlamaConfig.read(config("\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 16, "
                + "\"num_hidden_layers\": 2, \"vocab_size\": 256"));
        assertThat(c.kvHeads()).isEqualTo(8);
        assertThat(c.slidingWindow()).isEqualTo(4096);
        assertThat(c.headDim()).isEqualTo(4);
        assertThat(c.rmsNormEps()).isEqualTo(1e-6);
        // llama's: key-value heads as many as the query heads, no window
        var l = LlamaConfig.read(config("\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_attention_heads\": 16, "
                + "\"num_hidden_layers\": 2, \"vocab_size\": 256"));
        assertThat(l.kvHeads()).isEqualTo(16);
        assertThat(l.slidingWindow()).isZero();
        // a window that covers every position changes nothing; one that does not is refused where a graph is built
        c.checkPositions(4096);
        assertThatThrownBy(() -> c.checkPositions(4097)).isInstanceOf(CompilationException.class).hasMessageContaining("sliding_window = 4096")
                .hasMessageContaining("built for 4097 positions");
        Path zero = config("\"model_type\": \"mistral\", " + SHAPE + ", \"sliding_window\": 0");
        assertThatThrownBy(() -> LlamaConfig.read(zero)).isInstanceOf(GraphException.class).hasMessageContaining("'sliding_window' is 0");
        // written and read back, a Mistral shape stays one
        var w = new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false).withSlidingWindow(8);
        w.write(dir.resolve("w.json"));
        assertThat(LlamaConfig.read(dir.resolve("w.json"))).isEqualTo(w);
        var lin = new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false, new LlamaConfig.RopeScaling.Linear(4));
        lin.write(dir.resolve("lin.json"));
        assertThat(LlamaConfig.read(dir.resolve("lin.json"))).isEqualTo(lin);
    }
}
