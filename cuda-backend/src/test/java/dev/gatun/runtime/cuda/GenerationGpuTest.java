package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.ir.DType;
import dev.gatun.models.llama.Generation;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.models.llama.LlamaGenerator;
import dev.gatun.models.llama.Sampling;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.ir.ops.TokenSampling;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The generator's padded prefill, its ragged decode (a batch of prompts of different lengths) and its draws on one GPU:
 * greedy, the host backend's tokens; drawn, each token the draw's rule applied to the step's logits as the GPU computed
 * them (temperature and Gumbel noise of the seed and the token's position, computed here), queued and step by step alike.
 */
@RequiresGpu
class GenerationGpuTest {
    static final int LONGEST = 12;
    static final int[][] PROMPTS = {{1, 17, 255, 3, 42}, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 11, 12}, {200, 3, 3, 9, 77, 140, 2, 61}};

    static LlamaGenerator generator(SafeTensors weights, String backend, boolean sampling) {
        var c = LlamaDecoderGpuTest.TINY;
        return new LlamaGenerator(c, List.of(LlamaDecoder.weights(c, weights, 1, 0, DType.F32)), PROMPTS.length, LONGEST, LlamaDecoderGpuTest.MAX, 1,
                DType.F32, CompileOptions.world(1).backend(backend), sampling);
    }

    @Test
    void raggedGreedyAndDrawnGenerationsOnTheGpu(@TempDir Path dir) throws Exception {
        LlamaCheckpoint.writeRandom(LlamaDecoderGpuTest.TINY, DType.F32, 31, dir);
        int n = 8;
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS));
             var host = generator(weights, "host", false);
             var gpu = generator(weights, "cuda", true)) {
            assertThat(gpu.device()).startsWith("cuda");
            int[][] want = host.generate(PROMPTS, n, false).sequences();
            for (var how : List.of(Generation.of(n), Generation.of(n).stepwise(), Generation.of(n).sampling(Sampling.GREEDY)))
                assertThat(gpu.generate(PROMPTS, how).sequences()).isDeepEqualTo(want);
            // a batch of one length, shorter than compiled for: the one-step attention
            int[][] even = {Arrays.copyOf(PROMPTS[0], 4), Arrays.copyOf(PROMPTS[1], 4), Arrays.copyOf(PROMPTS[2], 4)};
            assertThat(gpu.generate(even, n, false).sequences()).isDeepEqualTo(host.generate(even, n, false).sequences());
            var hot = Sampling.temperature(1.3).seed(5);
            var drawn = gpu.generate(PROMPTS, Generation.of(n).keepingLogits().sampling(hot));
            for (int k = 0; k < n; k++) {
                double[] l = drawn.logits().get(k);
                double top = Arrays.stream(l).max().orElseThrow();
                int best = -1;
                double most = 0;
                for (int v = 0; v < l.length; v++) {
                    double s = (l[v] - top) / (double) (float) 1.3 + TokenSampling.gumbel(5, PROMPTS[0].length - 1 + k, v);
                    if (best < 0 || s > most) { best = v; most = s; }
                }
                assertThat(drawn.tokens()[k]).as("step %d", k).isEqualTo(best);
            }
            assertThat(gpu.generate(PROMPTS, Generation.of(n).sampling(hot)).sequences()).isDeepEqualTo(drawn.sequences());
        }
    }
}
