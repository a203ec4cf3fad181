package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.ir.DType;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.models.llama.LlamaGenerator;
import dev.gatun.models.llama.LlamaPrefill;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The mixture-of-experts reference checkpoints (Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE) on one GPU at
 * TP 1 against transformers, as the host backend's TransformersReferenceTest checks them: the prefill's float32 logits
 * at every prompt position within 1e-4 of the largest logit, and the 16 greedy tokens of a generation. Their routers'
 * {@code topk} runs on the GPU ({@link CudaTopK}).
 */
@RequiresGpu
class MoeDecodersGpuTest {
    static final int NEW_TOKENS = 16;

    @ParameterizedTest
    @ValueSource(strings = {"mixtral", "qwen2_moe", "qwen3_moe"})
    void logitsAndGreedyTokensAreTransformersOnOneGpu(String name) throws IOException {
        var ref = DecoderReferences.load(name);
        var cuda = CompileOptions.world(1).backend("cuda");
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            int n = ref.prompt().length;
            try (var s = Session.compile(LlamaPrefill.graph(c, n, 1, DType.F32), cuda)) {
                NDArray logits = s.runToHost(LlamaPrefill.inputs(c, ckpt.weights(), ref.prompt(), 1, 0, DType.F32)).get("logits");
                double worst = 0;
                for (int t = 0; t < n; t++)
                    for (int v = 0; v < c.vocabSize(); v++) worst = Math.max(worst, Math.abs(logits.get((long) t * c.vocabSize() + v) - ref.logits()[t][v]));
                assertThat(worst / ref.scale()).as("%s: largest difference from transformers, relative to the largest logit", name).isLessThan(1e-4);
            }
            var shards = List.of(LlamaDecoder.weights(c, ckpt.weights(), 1, 0, DType.F32));
            try (var gen = new LlamaGenerator(c, shards, n, n + NEW_TOKENS, 1, DType.F32, cuda)) {
                assertThat(gen.generate(ref.prompt(), NEW_TOKENS, false).tokens()).as("%s: greedy tokens", name).containsExactly(ref.tokens());
            }
        }
    }
}
