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
import dev.gatun.runtime.distributed.LocalWorld;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The decoder family on the CUDA backend against Hugging Face transformers: the reference checkpoints that
 * transformers 5.17 made ({@code models/src/test/resources/references/decoders}, float32 eager logits of every prompt
 * position and 16 greedy tokens) at tensor parallelism 1 and 2 (two ranks sharing the GPU), the mixtures of experts
 * included. The prefill's logits are
 * transformers' within 1e-4 of the largest logit and the generation's tokens are {@code generate()}'s. The expected
 * values come from transformers, never from Gatun; the host backend's run of the same references is
 * {@code TransformersReferenceTest}.
 */
@RequiresGpu
class DecoderReferencesGpuTest {
    static final int NEW_TOKENS = 16;

    @ParameterizedTest
    @ValueSource(strings = {"llama", "llama_tied", "llama_rope_llama3", "llama_rope_linear", "llama_head_dim", "llama_sharded", "llama_bf16",
            "llama_f16", "llama_bias", "qwen2", "qwen3", "llama_rope_yarn", "gemma", "gemma2", "phi3", "phi3_partial_rotary", "llama_rope_dynamic"})
    void logitsAndGreedyTokensAreTransformersOnTheGpuAtTensorParallelOneAndTwo(String name) throws Exception {
        for (int tp : new int[]{1, 2}) assertTransformers(name, tp);
    }

    /**
     * The mixtures of experts (Mixtral; Qwen2-MoE with its shared expert; Qwen3-MoE), their routers' {@code topk} a
     * kernel of its own ({@link CudaTopK}): at TP 1, and at TP 2 as cases of their own.
     */
    @ParameterizedTest
    @CsvSource({"mixtral, 1", "qwen2_moe, 1", "qwen3_moe, 1", "mixtral, 2", "qwen2_moe, 2", "qwen3_moe, 2"})
    void theMixturesOfExpertsAreTransformersOnTheGpu(String name, int tp) throws Exception {
        assertTransformers(name, tp);
    }

    /**
     * Mixtral at expert parallelism 2, the ranks sharing one GPU: each layer's dispatch and combine are uneven all_to_alls
     * on symmetric memory ({@link SymmetricAllToAll}: row counts read on the device, pushed into receive buffers). The
     * prefill's logits within 1e-4 of transformers' on both ranks, and its 16 greedy tokens (prefill, then decode steps,
     * each dispatched), in captured CUDA graphs.
     */
    @org.junit.jupiter.api.Test
    void mixtralAtExpertParallelTwoOnOneGpuIsTransformers() throws Exception {
        Reference ref = Reference.load("mixtral");
        var ep = dev.gatun.models.llama.Parallelism.experts(2, 1);
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            int positions = ref.prompt().length;
            var logits = perRank(2, (rank, o) -> {
                try (var s = Session.compile(LlamaPrefill.graph(c, positions, ep, DType.F32), o)) {
                    assertThat(s.plan().toString()).contains("all_to_all.symm_mem(", "push: after a starting barrier").doesNotContain("all_to_all.nccl(");
                    return s.runToHost(LlamaPrefill.inputs(c, ckpt.weights(), ref.prompt(), ep, rank, DType.F32)).get("logits");
                }
            });
            assertLogits("mixtral ep 2", 2, logits, ref, positions, c.vocabSize());
            var tokens = perRank(2, (rank, o) -> {
                var shard = List.of(LlamaDecoder.weights(c, ckpt.weights(), ep, rank, DType.F32));
                try (var gen = new LlamaGenerator(c, shard, 1, positions, positions + NEW_TOKENS, ep, DType.F32, o, false)) {
                    return gen.generate(ref.prompt(), NEW_TOKENS, false).tokens();
                }
            });
            for (int r = 0; r < 2; r++) assertThat(tokens.get(r)).as("mixtral ep 2 rank %d: greedy tokens", r).containsExactly(ref.tokens());
        }
    }

    /** The prefill's logits of the whole prompt and the 16 greedy tokens of reference {@code name} at tensor parallelism {@code tp}. */
    private static void assertTransformers(String name, int tp) throws Exception {
        Reference ref = Reference.load(name);
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            int positions = ref.prompt().length;
            var logits = perRank(tp, (rank, o) -> prefillLogits(ckpt, Arrays.copyOf(ref.prompt(), positions), tp, rank, o));
            assertLogits(name, tp, logits, ref, positions, c.vocabSize());
            var tokens = perRank(tp, (rank, o) -> {
                var shard = List.of(LlamaDecoder.weights(c, ckpt.weights(), tp, rank, DType.F32));
                try (var gen = new LlamaGenerator(c, shard, positions, positions + NEW_TOKENS, tp, DType.F32, o)) {
                    return gen.generate(ref.prompt(), NEW_TOKENS, false).tokens();
                }
            });
            for (int r = 0; r < tp; r++) assertThat(tokens.get(r)).as("%s tp %d rank %d: greedy tokens", name, tp, r).containsExactly(ref.tokens());
        }
    }

    /** Mistral's window of 8 covers every one of the prompt's first 8 positions: those rows are transformers'. */
    @org.junit.jupiter.api.Test
    void mistralsFirstEightPositionsAreTransformersOnTheGpu() throws Exception {
        Reference ref = Reference.load("mistral");
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            for (int tp : new int[]{1, 2})
                assertLogits("mistral", tp, perRank(tp, (rank, o) -> prefillLogits(ckpt, Arrays.copyOf(ref.prompt(), 8), tp, rank, o)), ref, 8,
                        ckpt.config().vocabSize());
        }
    }

    private static void assertLogits(String name, int tp, List<NDArray> logits, Reference ref, int positions, int vocab) {
        for (int r = 0; r < tp; r++) {
            double worst = 0;
            for (int t = 0; t < positions; t++)
                for (int v = 0; v < vocab; v++) worst = Math.max(worst, Math.abs(logits.get(r).get((long) t * vocab + v) - ref.logits()[t][v]));
            assertThat(worst / ref.scale()).as("%s tp %d rank %d: largest difference from transformers' logits, relative to the largest", name, tp, r)
                    .isLessThan(1e-4);
        }
    }

    private interface RankCall<T> { T call(int rank, CompileOptions options) throws Exception; }

    /** {@code call} for each rank: in this thread at TP 1, else one thread a rank, the ranks sharing the GPU. */
    private static <T> List<T> perRank(int tp, RankCall<T> call) throws Exception {
        if (tp == 1) return List.of(call.call(0, CompileOptions.world(1).backend("cuda")));
        var out = new ArrayList<T>(java.util.Collections.nCopies(tp, null));
        LocalWorld.run(tp, rv -> out.set(rv.rank(), call.call(rv.rank(), CompileOptions.world(tp).rank(rv).ranksPerGpu(tp).timeout(Duration.ofSeconds(60)))));
        return out;
    }

    private static NDArray prefillLogits(LlamaCheckpoint.Loaded ckpt, int[] ids, int tp, int rank, CompileOptions o) {
        LlamaConfig c = ckpt.config();
        try (var s = Session.compile(LlamaPrefill.graph(c, ids.length, tp, DType.F32), o)) {
            return s.runToHost(LlamaPrefill.inputs(c, ckpt.weights(), ids, tp, rank, DType.F32)).get("logits");
        }
    }

    /** A reference directory: the prompt, transformers' greedy tokens and its float32 logits [prompt][vocab]. */
    record Reference(Path dir, int[] prompt, int[] tokens, float[][] logits) {
        static Reference load(String name) throws IOException {
            Path dir = decoders().resolve(name);
            String json = Files.readString(dir.resolve("reference.json"), StandardCharsets.UTF_8);
            return new Reference(dir, ints(json, "prompt"), ints(json, "tokens"), npy(dir.resolve("logits.npy")));
        }

        /** The references in the test resources, or (on a GPU machine whose bundle leaves them out) in the source tree. */
        static Path decoders() throws IOException {
            var url = DecoderReferencesGpuTest.class.getResource("/references/decoders/llama/config.json");
            if (url != null && "file".equals(url.getProtocol())) return Path.of(url.getPath()).getParent().getParent();
            for (Path p = Path.of("").toAbsolutePath(); p != null; p = p.getParent()) {
                Path d = p.resolve("models/src/test/resources/references/decoders");
                if (Files.isDirectory(d)) return d;
            }
            throw new IOException("the decoder references are neither on the class path nor under models/src/test/resources above "
                    + Path.of("").toAbsolutePath());
        }

        double scale() {
            double s = 0;
            for (float[] row : logits) for (float v : row) s = Math.max(s, Math.abs(v));
            return s;
        }

        private static int[] ints(String json, String key) throws IOException {
            var m = Pattern.compile("\"" + key + "\"\\s*:\\s*\\[([^\\]]*)]").matcher(json);
            if (!m.find()) throw new IOException("reference.json has no '" + key + "'");
            return Arrays.stream(m.group(1).split(",")).map(String::strip).mapToInt(Integer::parseInt).toArray();
        }

        private static float[][] npy(Path file) throws IOException {
            byte[] all = Files.readAllBytes(file);
            int headerLength = (all[8] & 0xff) | (all[9] & 0xff) << 8;
            String header = new String(all, 10, headerLength, StandardCharsets.US_ASCII);
            if (!header.contains("'descr': '<f4'") || !header.contains("'fortran_order': False")) throw new IOException(file + ": " + header);
            String[] dims = header.substring(header.indexOf("'shape': (") + 10, header.indexOf(')')).split(",");
            int rows = Integer.parseInt(dims[0].strip()), cols = Integer.parseInt(dims[1].strip());
            var data = ByteBuffer.wrap(all, 10 + headerLength, all.length - 10 - headerLength).order(ByteOrder.LITTLE_ENDIAN).asFloatBuffer();
            float[][] out = new float[rows][cols];
            for (float[] row : out) data.get(row);
            return out;
        }
    }
}
