package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.function.IntUnaryOperator;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Dynamic NTK rotary scaling past {@code max_position_embeddings} (8 here, factor 2), against the float64 pass of
 * {@link LlamaPrefillTest.Reference} with transformers' formula written there: a prompt longer than 8 rotated at its
 * own length; a generation whose steps go past 8, each step's query and key rotated at its own length (position + 1)
 * and the prompt's keys kept as the prefill rotated them, every step's logits compared; in a batch of prompts of
 * different lengths, every sequence at the batch's longest length (transformers' batch-wide maximum position); and a
 * generator whose padded prompts could pass 8 refused. (The transformers reference of {@code llama_rope_dynamic}
 * covers the short prompt; its greedy tokens happen not to change where the scaling starts, so these logits are the
 * test that does.)
 */
class DynamicRopeTest {
    static final int MAX_POSITIONS = 8;
    /** rope_theta 10 and factor 4: every pair turns fast, and the scaling moves it far (the weights' attention is weak). */
    static final LlamaConfig C = new LlamaConfig(64, 2, 4, 2, 128, 256, 10, 1e-5, false, new LlamaConfig.RopeScaling.Dynamic(4, MAX_POSITIONS));

    @TempDir Path dir;

    private static double relative(double[] got, double[] want) {
        double worst = 0, scale = 0;
        for (int v = 0; v < want.length; v++) {
            worst = Math.max(worst, Math.abs(got[v] - want[v]));
            scale = Math.max(scale, Math.abs(want[v]));
        }
        return worst / scale;
    }

    private static List<Map<String, NDArray>> shards(SafeTensors w, int tp) {
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < tp; r++) out.add(LlamaDecoder.weights(C, w, tp, r, DType.F32));
        return out;
    }

    @Test
    void aPromptPastMaxPositionsIsRotatedAtItsLength() throws IOException {
        LlamaCheckpoint.writeRandom(C, DType.F32, 41, dir);
        int[] prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
        try (var w = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            double[][] want = LlamaPrefillTest.Reference.logits(C, w, prompt);
            double[][] unscaled = LlamaPrefillTest.Reference.logits(C.withRopeScaling(null), w, prompt);
            assertThat(relative(unscaled[prompt.length - 1], want[prompt.length - 1])).as("the scaling changes the logits").isGreaterThan(1e-3);
            for (int tp : new int[]{1, 2}) {
                var inputs = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) inputs.add(LlamaPrefill.inputs(C, w, prompt, tp, r, DType.F32));
                try (var s = Session.compile(LlamaPrefill.graph(C, prompt.length, tp, DType.F32), CompileOptions.world(tp).backend("host"))) {
                    NDArray logits = s.runToHost(inputs).get(tp - 1).get("logits");
                    for (int t = 0; t < prompt.length; t++) {
                        double[] row = new double[C.vocabSize()];
                        for (int v = 0; v < row.length; v++) row[v] = logits.get((long) t * C.vocabSize() + v);
                        assertThat(relative(row, want[t])).as("tp %d position %d", tp, t).isLessThan(1e-4);
                    }
                }
            }
        }
    }

    /**
     * A prompt of 5 and 10 steps (positions up to 14): the steps past 8 positions are scaled at their own lengths, in
     * the decode graph, and each step's logits are the float64 pass's where position i is rotated at length
     * max(5, i + 1); with every position at the sequence's full length instead, they would differ.
     */
    @Test
    void eachStepPastMaxPositionsIsRotatedAtItsOwnLength() throws IOException {
        LlamaCheckpoint.writeRandom(C, DType.F32, 42, dir);
        int[] prompt = {7, 7, 200, 31, 5};
        int n = 10;
        try (var w = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            for (int tp : new int[]{1, 2})
                try (var gen = new LlamaGenerator(C, shards(w, tp), 1, prompt.length, prompt.length + n, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
                    var result = gen.generate(new int[][]{prompt}, Generation.of(n).keepingLogits());
                    int[] tokens = result.tokens();
                    double apart = 0;
                    for (int k = 0; k < n; k++) {
                        int[] seq = Arrays.copyOf(prompt, prompt.length + k);
                        System.arraycopy(tokens, 0, seq, prompt.length, k);
                        double[] want = last(LlamaPrefillTest.Reference.logits(C, w, seq, i -> Math.max(prompt.length, i + 1)));
                        assertThat(relative(result.logits().get(k), want)).as("tp %d step %d", tp, k).isLessThan(1e-4);
                        apart = Math.max(apart, relative(last(LlamaPrefillTest.Reference.logits(C, w, seq)), want));
                    }
                    assertThat(apart).as("rotating every position at the full length would differ").isGreaterThan(1e-3);
                }
        }
    }

    /**
     * A batch of a 3-token and a 5-token prompt: transformers scales a step at the batch's largest position, so the
     * short sequence's steps are rotated at the long one's length (its own position + 1 + 2), both on the ragged
     * decode graph; the first (short) sequence's logits are the float64 pass's so, at every step.
     */
    @Test
    void aRaggedBatchIsScaledAtItsLongestSequence() throws IOException {
        LlamaCheckpoint.writeRandom(C, DType.F32, 43, dir);
        int[][] prompts = {{9, 8, 7}, {1, 2, 3, 4, 5}};
        int n = 8, gap = prompts[1].length - prompts[0].length;
        try (var w = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            for (int tp : new int[]{1, 2})
                try (var gen = new LlamaGenerator(C, shards(w, tp), 2, 5, 5 + n, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
                    var result = gen.generate(prompts, Generation.of(n).keepingLogits());
                    int[] tokens = result.sequences()[0];
                    IntUnaryOperator batchLength = i -> i < prompts[0].length ? prompts[0].length : i + 1 + gap;
                    double apart = 0;
                    for (int k = 0; k < n; k++) {
                        int[] seq = Arrays.copyOf(prompts[0], prompts[0].length + k);
                        System.arraycopy(tokens, 0, seq, prompts[0].length, k);
                        double[] want = last(LlamaPrefillTest.Reference.logits(C, w, seq, batchLength));
                        assertThat(relative(result.logits().get(k), want)).as("tp %d step %d", tp, k).isLessThan(1e-4);
                        apart = Math.max(apart, relative(last(LlamaPrefillTest.Reference.logits(C, w, seq, i -> Math.max(prompts[0].length, i + 1))), want));
                    }
                    assertThat(apart).as("rotating the short sequence at its own length would differ").isGreaterThan(1e-3);
                }
        }
    }

    /** A generator whose prompts are padded to more than max_position_embeddings is refused, naming why. */
    @Test
    void promptsPaddedPastMaxPositionsAreRefused() throws IOException {
        LlamaCheckpoint.writeRandom(C, DType.F32, 44, dir);
        try (var w = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            assertThatThrownBy(() -> new LlamaGenerator(C, shards(w, 1), 1, 9, 16, 1, DType.F32, CompileOptions.world(1).backend("host")))
                    .isInstanceOf(CompilationException.class).hasMessageContaining("rope_type \"dynamic\"")
                    .hasMessageContaining("prompts of up to 9 tokens").hasMessageContaining("at most 8 tokens");
        }
    }

    /** Written and read back, the scaling and its max_position_embeddings survive. */
    @Test
    void aDynamicConfigSurvivesAWriteAndARead() throws IOException {
        C.write(dir.resolve("config.json"));
        assertThat(LlamaConfig.read(dir.resolve("config.json"))).isEqualTo(C);
    }

    private static double[] last(double[][] logits) { return logits[logits.length - 1]; }
}
