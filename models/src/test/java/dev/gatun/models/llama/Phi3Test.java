package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Phi-3: its fused {@code qkv_proj} and {@code gate_up_proj} tensors split at load time and each rank's share taken
 * of every part, its partial rotary embedding, against the float64 pass of {@link LlamaPrefillTest.Reference} (which
 * splits the fused tensors by rows and rotates the first rotary_dim dimensions itself) at tensor parallelism 1, 2 and 4
 * (4 ranks over 2 key-value heads: replicas); its config read as transformers reads it, and what it does not
 * implement refused by name. TransformersReferenceTest checks the same against transformers at TP 1 and 2.
 */
class Phi3Test {
    /** head_dim 16, half of it rotating: partial_rotary_factor 0.5. */
    static final LlamaConfig C = LlamaCheckpointTest.TINY.withFused(true).withRotaryDim(8);

    @TempDir Path dir;

    @Test
    void fusedPartialRotaryLogitsAndTokensAreTheFloat64PassesAtTensorParallelOneTwoAndFour() throws IOException {
        LlamaCheckpoint.writeRandom(C, DType.F32, 51, dir);
        assertThat(LlamaConfig.read(dir.resolve(LlamaCheckpoint.CONFIG))).as("written and read back").isEqualTo(C);
        int[] prompt = LlamaPrefillTest.PROMPT;
        try (var ckpt = LlamaCheckpoint.open(dir)) {
            var w = (SafeTensors) ckpt.weights();
            double[][] want = LlamaPrefillTest.Reference.logits(C, w, prompt);
            double[][] whole = LlamaPrefillTest.Reference.logits(C.withRotaryDim(16), w, prompt);
            double scale = 0, apart = 0;
            for (int t = 0; t < prompt.length; t++)
                for (int v = 0; v < C.vocabSize(); v++) {
                    scale = Math.max(scale, Math.abs(want[t][v]));
                    apart = Math.max(apart, Math.abs(want[t][v] - whole[t][v]));
                }
            assertThat(apart / scale).as("rotating whole heads would differ").isGreaterThan(1e-3);
            int[] tokens = LlamaPrefillTest.greedy(prompt, 6, ids -> {
                double[][] l = LlamaPrefillTest.Reference.logits(C, w, ids);
                return l[l.length - 1];
            });
            for (int tp : new int[]{1, 2, 4}) {
                var inputs = new ArrayList<Map<String, NDArray>>();
                var shards = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) {
                    inputs.add(LlamaPrefill.inputs(C, w, prompt, tp, r, DType.F32));
                    shards.add(LlamaDecoder.weights(C, w, tp, r, DType.F32));
                }
                try (var s = Session.compile(LlamaPrefill.graph(C, prompt.length, tp, DType.F32), CompileOptions.world(tp).backend("host"))) {
                    var out = s.runToHost(inputs);
                    for (int r = 0; r < tp; r++) {
                        NDArray logits = out.get(r).get("logits");
                        double worst = 0;
                        for (int t = 0; t < prompt.length; t++)
                            for (int v = 0; v < C.vocabSize(); v++) worst = Math.max(worst, Math.abs(logits.get((long) t * C.vocabSize() + v) - want[t][v]));
                        assertThat(worst / scale).as("tp %d rank %d", tp, r).isLessThan(1e-4);
                    }
                }
                try (var gen = new LlamaGenerator(C, shards, prompt.length, prompt.length + 8, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
                    assertThat(gen.generate(prompt, 6, false).tokens()).as("tp %d", tp).containsExactly(tokens);
                }
            }
        }
    }

    /** A Phi-3 config over Llama's split tensors: the fused ones are missing; split ones beside them are unused. */
    @Test
    void aCheckpointOfTheOtherLayoutIsRefused() throws IOException {
        LlamaConfig split = C.withFused(false).withRotaryDim(16);
        LlamaCheckpoint.writeRandom(split, DType.F32, 52, dir);
        C.write(dir.resolve(LlamaCheckpoint.CONFIG));
        assertThatThrownBy(() -> LlamaCheckpoint.open(dir)).isInstanceOf(GraphException.class)
                .hasMessageContaining("tensor 'model.layers.0.self_attn.qkv_proj.weight' is missing");
        // the fused tensors and a split one beside them: the split one is refused as unused
        var tensors = new LinkedHashMap<String, NDArray>();
        for (var e : LlamaCheckpoint.shapes(C).entrySet()) tensors.put(e.getKey(), NDArray.zeros(DType.F32, e.getValue()));
        tensors.put("model.layers.1.self_attn.q_proj.weight", NDArray.zeros(DType.F32, 64, 64));
        Files.delete(dir.resolve(LlamaCheckpoint.WEIGHTS));
        SafeTensors.write(dir.resolve(LlamaCheckpoint.WEIGHTS), tensors, Map.of("format", "pt"));
        assertThatThrownBy(() -> LlamaCheckpoint.open(dir)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("1 tensor the model does not use: 'model.layers.1.self_attn.q_proj.weight'");
    }

    private Path config(String fields) throws IOException {
        Path f = dir.resolve("config.json");
        Files.writeString(f, "{\"model_type\": \"phi3\", " + LlamaConfigRefusalTest.SHAPE + (fields.isEmpty() ? "" : ", " + fields) + "}");
        return f;
    }

    /**
     * Phi-3-mini-4k's config as it ships (less its auto_map, which is refused as custom code): fused, whole heads
     * rotating, a sliding window of 2047 (so a graph for more positions is refused), its dropouts and LongRoPE's
     * original_max_position_embeddings ignored.
     */
    @Test
    void phi3MinisConfigIsReadAsTransformersReadsIt() throws IOException {
        var c = LlamaConfig.read(config("""
                "architectures": ["Phi3ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000,
                "hidden_act": "silu", "initializer_range": 0.02, "max_position_embeddings": 4096, "original_max_position_embeddings": 4096,
                "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
                "sliding_window": 2047, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.40.2",
                "use_cache": true, "attention_bias": false"""));
        assertThat(c).isEqualTo(LlamaCheckpointTest.TINY.withFused(true).withSlidingWindow(2047));
        assertThat(c.rotaryDim()).isEqualTo(c.headDim());
        assertThatThrownBy(() -> c.checkPositions(2048)).isInstanceOf(CompilationException.class).hasMessageContaining("sliding_window = 2047");
        assertThat(LlamaConfig.read(config("\"partial_rotary_factor\": 0.5")).rotaryDim()).isEqualTo(8);
        assertThat(LlamaConfig.read(config("\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.25}"))
                .rotaryDim()).isEqualTo(4);
        assertThat(LlamaConfig.read(config("")).slidingWindow()).as("Phi3Config's default: no window").isZero();
    }

    @ParameterizedTest(name = "{0}")
    @CsvSource(delimiter = '|', quoteCharacter = '`', value = {
            "\"rope_scaling\": {\"type\": \"longrope\", \"long_factor\": [1], \"short_factor\": [1]}|field 'rope_scaling.rope_type' is \"longrope\": LongRoPE scaling",
            "\"rope_scaling\": {\"type\": \"su\", \"long_factor\": [1], \"short_factor\": [1]}|field 'rope_scaling.rope_type' is \"su\": LongRoPE (su) scaling",
            "\"partial_rotary_factor\": 0.5, \"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.25}|fields 'partial_rotary_factor' (0.5) and the rope object's partial_rotary_factor (0.25) disagree",
            "\"partial_rotary_factor\": 0.1|'partial_rotary_factor' 0.1 of head_dim 16 rotates 1 dimensions",
            "\"attention_bias\": true|field 'attention_bias' is true, but transformers' phi3 has no biases",
            "\"auto_map\": {\"AutoConfig\": \"configuration_phi3.Phi3Config\"}|field 'auto_map' is an object of 1 field: custom modeling code",
            "\"use_qk_norm\": true|field 'use_qk_norm' is true: QK-norm",
    })
    void whatPhi3DoesNotImplementIsRefusedByName(String fields, String message) throws IOException {
        Path f = config(fields);
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(CompilationException.class).hasMessageStartingWith(f + ": ").hasMessageContaining(message);
    }

    @Test
    void aPartialRotaryFactorOutsideZeroToOneIsRefused() throws IOException {
        Path f = config("\"partial_rotary_factor\": 1.5");
        assertThatThrownBy(() -> LlamaConfig.read(f)).isInstanceOf(GraphException.class).hasMessageContaining("'partial_rotary_factor' is 1.5");
    }
}
