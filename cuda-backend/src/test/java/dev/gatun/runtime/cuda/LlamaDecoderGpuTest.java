package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.ir.DType;
import dev.gatun.models.llama.Generation;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.models.llama.LlamaGenerator;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.distributed.LocalWorld;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.List;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The Llama decoder on one GPU (TP 1) and with two ranks sharing it (TP 2): the same 8 greedy tokens as the host
 * backend, and every step's logits within 1e-3 of the host's.
 */
@RequiresGpu
class LlamaDecoderGpuTest {
    static final int MAX = 24;
    static final LlamaConfig TINY = new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false);
    static final int[] PROMPT = {1, 17, 255, 3, 42, 42, 0, 128};

    static LlamaGenerator.Result generate(SafeTensors weights, int tp, int rank, CompileOptions options) {
        try (var gen = new LlamaGenerator(TINY, List.of(LlamaDecoder.weights(TINY, weights, tp, rank, DType.F32)), PROMPT.length, MAX, tp, DType.F32, options)) {
            return gen.generate(PROMPT, 8);
        }
    }

    /** A generator of TP 1 for {@code batch} prompts of {@code promptLength} tokens on {@code backend}. */
    static LlamaGenerator generator(SafeTensors weights, int batch, int promptLength, int maxLen, String backend) {
        return new LlamaGenerator(TINY, List.of(LlamaDecoder.weights(TINY, weights, 1, 0, DType.F32)), batch, promptLength, maxLen, 1, DType.F32,
                CompileOptions.world(1).backend(backend));
    }

    static void assertSame(LlamaGenerator.Result want, LlamaGenerator.Result got, String what) {
        assertThat(got.tokens()).as(what).containsExactly(want.tokens());
        for (int k = 0; k < 8; k++) {
            double worst = 0, scale = 0;
            for (int v = 0; v < want.logits().get(k).length; v++) {
                scale = Math.max(scale, Math.abs(want.logits().get(k)[v]));
                worst = Math.max(worst, Math.abs(got.logits().get(k)[v] - want.logits().get(k)[v]));
            }
            assertThat(worst / scale).as("%s step %d", what, k).isLessThan(1e-3);
        }
    }

    @Test
    void theGpuDecodesAsTheHostDoesAtTensorParallelOneAndTwoOnOneGpu(@TempDir Path dir) throws Exception {
        LlamaCheckpoint.writeRandom(TINY, DType.F32, 12, dir);
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            LlamaGenerator.Result host = generate(weights, 1, 0, CompileOptions.world(1).backend("host"));
            assertSame(host, generate(weights, 1, 0, CompileOptions.world(1).backend("cuda")), "cuda tp 1");
            var runs = new LlamaGenerator.Result[2];
            LocalWorld.run(2, rv -> runs[rv.rank()] = generate(weights, 2, rv.rank(),
                    CompileOptions.world(2).rank(rv).ranksPerGpu(2).timeout(java.time.Duration.ofSeconds(30))));
            for (int r = 0; r < 2; r++) assertSame(host, runs[r], "cuda tp 2 rank " + r);
        }
    }

    /**
     * A batch of three prompts and a cache long enough that the attention step merges several slices (80 positions: 3
     * slices of 32): every sequence's tokens as the host's, the first sequence's logits within float32's sums' order.
     */
    @Test
    void aBatchDecodesAsTheHostDoesWithSeveralSlicesOfTheCache(@TempDir Path dir) throws Exception {
        LlamaCheckpoint.writeRandom(TINY, DType.F32, 13, dir);
        int[][] prompts = new int[3][70];
        for (int b = 0; b < 3; b++) for (int i = 0; i < 70; i++) prompts[b][i] = (i * 31 + b * 7 + 5) % TINY.vocabSize();
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            var results = new java.util.ArrayList<LlamaGenerator.Result>();
            for (String backend : List.of("host", "cuda"))
                try (var gen = generator(weights, 3, 70, 80, backend)) {
                    results.add(gen.generate(prompts, 8, true));
                }
            LlamaGenerator.Result host = results.get(0), gpu = results.get(1);
            for (int b = 0; b < 3; b++) assertThat(gpu.sequences()[b]).as("sequence %d", b).containsExactly(host.sequences()[b]);
            assertSame(host, gpu, "batch of 3, cache of 80");
        }
    }

    /**
     * A batch generation that stops at each sequence's end token, queued (its tokens read every 3 steps) and step by
     * step, on one GPU at TP 1 and with two ranks sharing it at TP 2: each sequence is the host's unstopped one, cut after
     * the first stop token it holds, and the listener hears every step of it.
     */
    @Test
    void aGenerationStopsAtEachSequencesEndTokenAsTheHostsTokensSay(@TempDir Path dir) throws Exception {
        LlamaCheckpoint.writeRandom(TINY, DType.F32, 14, dir);
        int[][] prompts = new int[3][8];
        for (int b = 0; b < 3; b++) for (int i = 0; i < 8; i++) prompts[b][i] = (i * 37 + b * 11 + 2) % TINY.vocabSize();
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            int[][] host;
            try (var gen = generator(weights, 3, 8, MAX, "host")) {
                host = gen.generate(prompts, 8, false, false).sequences();
            }
            var stops = Set.of(host[0][2], host[1][4], host[2][1]);
            int[][] want = new int[3][];
            for (int b = 0; b < 3; b++) {
                int end = 0;
                while (!stops.contains(host[b][end])) end++;
                want[b] = java.util.Arrays.copyOf(host[b], end + 1);
            }
            for (var how : List.of(Generation.of(8).stopAt(stops).queued(3), Generation.of(8).stopAt(stops).stepwise())) {
                String what = how.queued() ? "queued" : "step by step";
                try (var gen = generator(weights, 3, 8, MAX, "cuda")) {
                    var heard = new java.util.ArrayList<int[]>();
                    int[][] got = gen.generate(prompts, how.onTokens((step, tokens) -> heard.add(tokens.clone()))).sequences();
                    for (int b = 0; b < 3; b++) {
                        assertThat(got[b]).as("cuda tp 1 %s sequence %d", what, b).containsExactly(want[b]);
                        for (int k = 0; k < want[b].length; k++) assertThat(heard.get(k)[b]).as("heard step %d sequence %d", k, b).isEqualTo(want[b][k]);
                    }
                }
                var runs = new int[2][][];
                LocalWorld.run(2, rv -> {
                    try (var gen = new LlamaGenerator(TINY, List.of(LlamaDecoder.weights(TINY, weights, 2, rv.rank(), DType.F32)), 3, 8, MAX, 2, DType.F32,
                            CompileOptions.world(2).rank(rv).ranksPerGpu(2).timeout(java.time.Duration.ofSeconds(30)))) {
                        runs[rv.rank()] = gen.generate(prompts, how).sequences();
                    }
                });
                for (int r = 0; r < 2; r++)
                    for (int b = 0; b < 3; b++) assertThat(runs[r][b]).as("cuda tp 2 rank %d %s sequence %d", r, what, b).containsExactly(want[b]);
            }
        }
    }
}
