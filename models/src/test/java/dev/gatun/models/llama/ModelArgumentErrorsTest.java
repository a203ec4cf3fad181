package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.runtime.GatunRuntimeException;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A bad argument to the models' public calls is a member of Gatun's exception family whose message names the call and
 * the argument: the sampling and generation settings and the decoder's inputs at call time
 * ({@link GatunRuntimeException}), a decoder graph that cannot be built as asked ({@link GraphException}), and
 * {@code gatun-generate}'s bad options, which exit with status 2 and the message, never a stack trace.
 */
class ModelArgumentErrorsTest {
    static final LlamaConfig TINY = LlamaCheckpointTest.TINY;

    @Test
    void samplingSettingsOutOfRangeNameTheSetting() {
        assertThatThrownBy(() -> Sampling.temperature(-1)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("Sampling: temperature -1.0");
        assertThatThrownBy(() -> Sampling.temperature(Double.POSITIVE_INFINITY)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("temperature Infinity");
        assertThatThrownBy(() -> Sampling.temperature(1).topK(-3)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("top-k -3");
        assertThatThrownBy(() -> Sampling.temperature(1).topP(1.5)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("top-p 1.5");
        assertThatThrownBy(() -> Sampling.temperature(1).minP(-0.1)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("min-p -0.1");
        assertThatThrownBy(() -> Sampling.temperature(1).repetitionPenalty(0)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("repetition penalty 0.0");
    }

    @Test
    void generationSettingsOutOfRangeNameTheSetting() {
        assertThatThrownBy(() -> Generation.of(0)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("Generation: maxNew 0");
        assertThatThrownBy(() -> Generation.of(4).queued(0)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("checkEvery 0");
        assertThatThrownBy(() -> Generation.of(4).keepingLogits().queued(4)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("a queued generation keeps no logits");
        assertThatThrownBy(() -> Generation.of(4).stopAt(-2)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("stop token -2");
        var three = Generation.of(2).sampling(Sampling.GREEDY, Sampling.GREEDY, Sampling.GREEDY);
        assertThatThrownBy(() -> three.samplingOf(2)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("3 samplings for a batch of 2");
    }

    @Test
    void decoderGraphsThatCannotBeBuiltAreGraphErrors() {
        assertThatThrownBy(() -> LlamaDecoder.prefill(TINY, 1, 9, 8, 1, DType.F32)).isInstanceOf(GraphException.class)
                .hasMessageContaining("LlamaDecoder.prefill: tokens 9").hasMessageContaining("maxLen (8)");
        assertThatThrownBy(() -> LlamaDecoder.prefill(TINY, 1, 0, 8, 1, DType.F32)).isInstanceOf(GraphException.class).hasMessageContaining("tokens 0");
        assertThatThrownBy(() -> LlamaDecoder.decode(TINY, 0, 8, 1, DType.F32)).isInstanceOf(GraphException.class).hasMessageContaining("batch 0");
    }

    @Test
    void decoderInputsOutOfRangeAreRuntimeErrors() {
        assertThatThrownBy(() -> LlamaDecoder.step(new int[]{1}, 8, 8)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("LlamaDecoder.step: position 8 is outside the cache of 8 positions");
        assertThatThrownBy(() -> LlamaDecoder.step(new int[]{1}, -1, 8)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("position -1");
        assertThatThrownBy(() -> LlamaDecoder.raggedPrompts(new int[][]{{1, 2}, {1, 2, 3, 4, 5}}, 4, false)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("LlamaDecoder.raggedPrompts: prompt 1 has 5 tokens");
    }

    /** Status and standard error of {@code gatun-generate} with these arguments. */
    static String[] generate(String... args) {
        var out = new ByteArrayOutputStream();
        var err = new ByteArrayOutputStream();
        int status = GenerateCommand.run(args, new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8));
        return new String[]{Integer.toString(status), err.toString(StandardCharsets.UTF_8)};
    }

    @Test
    void generateCommandBadOptionsAreUsageErrorsWithStatusTwo() {
        String[][] cases = {
                {"--max-new-tokens 99999999999", "--max-new-tokens 99999999999: not a whole number"},
                {"--max-new-tokens 0", "--max-new-tokens 0: at least 1"},
                {"--top-k 2.5", "--top-k 2.5: not a whole number"},
                {"--top-p 0", "the sampling options: Sampling: top-p 0.0"},
                {"--repetition-penalty -1", "the sampling options: Sampling: repetition penalty -1.0"},
                {"--seed x", "--seed x: not a whole number"},
                {"--dtype f64", "--dtype f64: f32, bf16 or f16"},
                {"--backend tpu", "--backend tpu: auto, host or cuda"},
        };
        for (String[] c : cases) {
            String[] option = c[0].split(" ");
            var r = generate("--model", "m", "--prompt", "x", option[0], option[1]);
            assertThat(r[0]).as(c[0]).isEqualTo("2");
            assertThat(r[1]).as(c[0]).contains("gatun-generate: " + c[1]).contains("usage: gatun-generate").doesNotContain("\tat ");
        }
        var badPath = generate("--model", "m\0x", "--prompt", "x");
        assertThat(badPath[0]).isEqualTo("2");
        assertThat(badPath[1]).contains("--model ").contains("not a path");
    }
}
