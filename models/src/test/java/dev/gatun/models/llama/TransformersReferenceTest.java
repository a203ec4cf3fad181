package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensorsIndex;
import dev.gatun.runtime.Session;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The decoder against Hugging Face transformers (5.17, float32, eager attention) on the reference checkpoints of
 * {@code src/test/resources/references/decoders} (random perturbed weights, transformers 5's config spelling): read
 * with {@link LlamaCheckpoint#open}, the prefill's logits at every prompt position are transformers' within 1e-4 of
 * the largest logit, and the 16 greedy tokens of a generation are {@code generate()}'s, at tensor parallelism 1, 2 and
 * 4 on the host backend (the vocabulary-parallel head: every rank's logits the same, within float32 rounding of one
 * rank's). Each reference stresses one thing: rope_theta 50000, tied embeddings, Llama 3 and linear rotary
 * scaling, a head_dim other than hidden / heads, a sharded checkpoint, bf16 and f16 files (transformers computes in
 * float32 on the rounded weights, as this test does), biases, Qwen2, Qwen3, YaRN, Phi-3's fused tensors and partial
 * rotary embedding, dynamic NTK scaling (whose scaled steps {@link DynamicRopeTest} checks by their logits).
 */
class TransformersReferenceTest {
    static final int NEW_TOKENS = 16;

    @ParameterizedTest
    @ValueSource(strings = {"llama", "llama_tied", "llama_rope_llama3", "llama_rope_linear", "llama_head_dim", "llama_sharded", "llama_bf16", "llama_f16",
            "llama_bias", "qwen2", "qwen3", "llama_rope_yarn", "gemma", "gemma2", "phi3", "phi3_partial_rotary", "llama_rope_dynamic",
            "mixtral", "qwen2_moe", "qwen3_moe"})
    void logitsAndGreedyTokensAreTransformersAtTensorParallelOneTwoAndFour(String name) throws IOException {
        var ref = TransformersReference.load(name);
        // every greedy choice is clear by far more than float32's error: the comparison tests the model, not rounding
        for (double m : ref.margins()) assertThat(m).as("%s: a margin of transformers' greedy choice", name).isGreaterThan(1e-3);
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            float[][] single = null;
            for (int tp : new int[]{1, 2, 4}) {
                float[][] logits = assertLogits(ref, ckpt, tp, ref.prompt().length);
                if (tp == 1) single = logits;
                else assertSameAsSingleRank(ref, tp, logits, single);
                var shards = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, ckpt.weights(), tp, r, DType.F32));
                int maxLen = ref.prompt().length + NEW_TOKENS;
                try (var gen = new LlamaGenerator(c, shards, ref.prompt().length, maxLen, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
                    assertThat(gen.generate(ref.prompt(), NEW_TOKENS, false).tokens()).as("%s tp %d", name, tp).containsExactly(ref.tokens());
                }
            }
        }
    }

    /**
     * The logits at {@code tp} ranks against one rank's: the vocabulary-parallel head's gathered shards are the single
     * rank's within float32 rounding (the ranks' partial sums of the row-parallel products add in another order), 1e-5 of
     * the largest logit.
     */
    static void assertSameAsSingleRank(TransformersReference ref, int tp, float[][] logits, float[][] single) {
        double worst = 0;
        for (int t = 0; t < single.length; t++)
            for (int v = 0; v < single[t].length; v++) worst = Math.max(worst, Math.abs(logits[t][v] - single[t][v]));
        assertThat(worst / ref.scale()).as("%s tp %d: largest difference from tp 1, relative to the largest logit", ref.name(), tp).isLessThan(1e-5);
    }

    /**
     * The prefill's logits of the first {@code positions} prompt tokens against transformers' rows for them; every
     * rank's the same, bit for bit; the first rank's returned.
     */
    static float[][] assertLogits(TransformersReference ref, LlamaCheckpoint.Loaded ckpt, int tp, int positions) {
        LlamaConfig c = ckpt.config();
        int[] ids = java.util.Arrays.copyOf(ref.prompt(), positions);
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < tp; r++) inputs.add(LlamaPrefill.inputs(c, ckpt.weights(), ids, tp, r, DType.F32));
        try (var s = Session.compile(LlamaPrefill.graph(c, positions, tp, DType.F32), CompileOptions.world(tp).backend("host"))) {
            var out = s.runToHost(inputs);
            for (int r = 0; r < tp; r++) {
                NDArray logits = out.get(r).get("logits");
                double worst = 0;
                for (int t = 0; t < positions; t++)
                    for (int v = 0; v < c.vocabSize(); v++) worst = Math.max(worst, Math.abs(logits.get((long) t * c.vocabSize() + v) - ref.logits()[t][v]));
                assertThat(worst / ref.scale()).as("%s tp %d rank %d: largest difference from transformers, relative to the largest logit", ref.name(), tp, r)
                        .isLessThan(1e-4);
                assertThat(logits.toDoubleArray()).as("%s tp %d rank %d: the first rank's logits", ref.name(), tp, r)
                        .containsExactly(out.getFirst().get("logits").toDoubleArray());
            }
            float[][] first = new float[positions][c.vocabSize()];
            for (int t = 0; t < positions; t++)
                for (int v = 0; v < c.vocabSize(); v++) first[t][v] = (float) out.getFirst().get("logits").get((long) t * c.vocabSize() + v);
            return first;
        }
    }

    /**
     * Mistral with a sliding window of 8: over 8 positions the window covers every one, so the prefill of the prompt's
     * first 8 tokens is transformers' (its rows 0..7, which no window changes); a generation of 16 tokens after the
     * 12-token prompt, or a prefill of all 12, would attend past the window, and is refused naming the field and the
     * lengths.
     */
    @Test
    void mistralIsTransformersWhereTheWindowCoversEveryPositionAndRefusedWhereItDoesNot() throws IOException {
        var ref = TransformersReference.load("mistral");
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            assertThat(c.slidingWindow()).isEqualTo(8);
            for (int tp : new int[]{1, 2, 4}) assertLogits(ref, ckpt, tp, 8);
            var shards = List.of(LlamaDecoder.weights(c, ckpt.weights(), 1, 0, DType.F32));
            assertThatThrownBy(() -> new LlamaGenerator(c, shards, ref.prompt().length, ref.prompt().length + NEW_TOKENS, 1, DType.F32,
                    CompileOptions.world(1).backend("host"))).isInstanceOf(CompilationException.class)
                    .hasMessageContaining("sliding_window = 8").hasMessageContaining("built for 28 positions");
            assertThatThrownBy(() -> LlamaPrefill.graph(c, ref.prompt().length, 1, DType.F32)).isInstanceOf(CompilationException.class)
                    .hasMessageContaining("sliding_window = 8").hasMessageContaining("built for 12 positions");
        }
    }

    /** The sharded reference is read through its index: five shards, every tensor where the index puts it. */
    @Test
    void theShardedReferenceIsReadThroughItsIndex() throws IOException {
        var dir = TransformersReference.directory("llama_sharded");
        try (var weights = LlamaCheckpoint.openWeights(dir)) {
            assertThat(weights).isInstanceOf(SafeTensorsIndex.class);
            assertThat(weights.names().stream().map(weights::file).distinct()).hasSize(5);
        }
    }
}
