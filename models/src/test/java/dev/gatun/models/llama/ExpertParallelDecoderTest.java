package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The decoder with expert parallelism ({@link Parallelism}: each mixture of experts split over the "ep" axis by
 * {@link ExpertParallel}'s all_to_all dispatch and combine) against Hugging Face transformers on the three MoE
 * reference checkpoints ({@code mixtral}, {@code qwen2_moe}, {@code qwen3_moe}: 4 experts, top-2), on the host
 * backend's simulated ranks at ep 2, ep 4 and ep 2 x tp 2: the prefill's logits at every prompt position within 1e-4 of
 * the largest logit on every rank, and the 16 greedy tokens of a generation (prefill, then decode steps, each also
 * dispatched) exactly transformers' {@code generate()}, the tolerance of {@link TransformersReferenceTest}. The expected
 * values are transformers' shipped ones, never Gatun's.
 */
class ExpertParallelDecoderTest {
    private static final int[][] MESHES = {{2, 1}, {4, 1}, {2, 2}};

    @ParameterizedTest
    @ValueSource(strings = {"mixtral", "qwen2_moe", "qwen3_moe"})
    void logitsAndGreedyTokensAreTransformersAtEveryExpertParallelMesh(String name) throws IOException {
        var ref = TransformersReference.load(name);
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            for (int[] mesh : MESHES) {
                var parallel = Parallelism.experts(mesh[0], mesh[1]);
                assertLogits(ref, ckpt, parallel);
                var shards = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < parallel.world(); r++) shards.add(LlamaDecoder.weights(c, ckpt.weights(), parallel, r, DType.F32));
                int maxLen = ref.prompt().length + TransformersReferenceTest.NEW_TOKENS;
                try (var gen = new LlamaGenerator(c, shards, 1, ref.prompt().length, maxLen, parallel, DType.F32,
                        CompileOptions.world(parallel.world()).backend("host").randomDelays(mesh[0] * 31L + mesh[1]), false)) {
                    assertThat(gen.generate(ref.prompt(), TransformersReferenceTest.NEW_TOKENS, false).tokens()).as("%s %s", name, parallel)
                            .containsExactly(ref.tokens());
                }
            }
        }
    }

    /** Every rank's prefill logits against transformers', and the plan dispatches by all_to_all (two a layer, uneven). */
    private static void assertLogits(TransformersReference ref, LlamaCheckpoint.Loaded ckpt, Parallelism parallel) {
        LlamaConfig c = ckpt.config();
        int positions = ref.prompt().length;
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < parallel.world(); r++) inputs.add(LlamaPrefill.inputs(c, ckpt.weights(), ref.prompt(), parallel, r, DType.F32));
        // each rank holds its ep member's experts only: E / ep of them
        int local = c.moe().experts() / parallel.ep();
        assertThat(inputs.getFirst().get("model.layers.0." + MixtureOfExperts.DOWN).shape()[0]).isEqualTo(local);
        try (var s = Session.compile(LlamaPrefill.graph(c, positions, parallel, DType.F32), CompileOptions.world(parallel.world()).backend("host"))) {
            assertThat(s.plan().toString()).contains("capacity=");
            var out = s.runToHost(inputs);
            for (int r = 0; r < parallel.world(); r++) {
                NDArray logits = out.get(r).get("logits");
                double worst = 0;
                for (int t = 0; t < positions; t++)
                    for (int v = 0; v < c.vocabSize(); v++) worst = Math.max(worst, Math.abs(logits.get((long) t * c.vocabSize() + v) - ref.logits()[t][v]));
                assertThat(worst / ref.scale()).as("%s %s rank %d: largest difference from transformers, relative to the largest logit", ref.name(), parallel, r)
                        .isLessThan(1e-4);
            }
        }
    }

    /**
     * The prefill and decode plans at every mesh pass the planner's independent checks (PlanChecks: receive buffers in
     * the communication pool of "ep" at the capacity's rows, never sharing a slot a peer may still find in use), and
     * each MoE layer dispatches (the rows and their experts' ids) and combines by three uneven all_to_alls whose senders
     * write into the receivers' buffers.
     */
    @Test
    void theExpertParallelPlansPassThePlannersIndependentChecks() throws IOException {
        var ref = TransformersReference.load("qwen2_moe");
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            for (int[] mesh : MESHES) {
                var parallel = Parallelism.experts(mesh[0], mesh[1]);
                for (var g : List.of(LlamaDecoder.decode(c, 2, 16, parallel, DType.F32, LlamaDecoder.Form.GREEDY),
                        LlamaDecoder.prefill(c, 1, 12, 16, parallel, DType.F32, new LlamaDecoder.Form(false, true)))) {
                    var options = CompileOptions.world(parallel.world()).backend("host");
                    var plan = dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(g, options.lowering()), options.planning());
                    assertThat(dev.gatun.planner.testing.PlanChecksAccess.all(plan)).as(g.name() + " " + parallel + ":\n" + plan).isEmpty();
                    assertThat(plan.toString().split("senders write into receive buffer", -1)).as(g.name() + " " + parallel).hasSize(3 * c.layers() + 1);
                }
            }
        }
    }

    /** A rank's progress line counts the tensors it reads, its member's experts only, and ends done. */
    @Test
    void aRanksProgressEndsDoneAtItsOwnExperts() throws IOException {
        var ref = TransformersReference.load("mixtral");
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            var seen = new ArrayList<dev.gatun.runtime.LoadProgress>();
            ckpt.shard(Parallelism.experts(2, 1), 1, DType.F32, seen::add);
            int all = LlamaCheckpoint.shapes(c).size(), others = c.layers() * 3 * c.moe().experts() / 2;   // the other member's experts
            assertThat(seen.getLast().done()).isTrue();
            assertThat(seen.getLast().totalTensors()).isEqualTo(all - others);
            assertThat(seen).noneMatch(p -> p.tensor() != null && p.tensor().matches(".*experts\\.[01]\\..*"));
        }
    }

    @Test
    void refusesADegreeThatDoesNotDivideTheExpertsAndADenseModelByName() throws IOException {
        var ref = TransformersReference.load("mixtral");
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            assertThatThrownBy(() -> LlamaPrefill.graph(c, 4, Parallelism.experts(3, 1), DType.F32)).isInstanceOf(CompilationException.class)
                    .hasMessageContaining("expert-parallel degree of 3 does not divide the 4 experts");
            assertThatThrownBy(() -> LlamaDecoder.weights(c, ckpt.weights(), Parallelism.experts(3, 1), 0, DType.F32))
                    .hasMessageContaining("expert-parallel degree of 3");
            assertThatThrownBy(() -> LlamaDecoder.weights(c, ckpt.weights(), Parallelism.experts(2, 2), 4, DType.F32))
                    .isInstanceOf(CompilationException.class).hasMessageContaining("rank 4 is outside the 4 ranks");
            // the tensor-parallel checks still apply along "tp": 4 heads over 8 do not split
            assertThatThrownBy(() -> LlamaPrefill.graph(c, 4, Parallelism.experts(2, 8), DType.F32)).isInstanceOf(CompilationException.class)
                    .hasMessageContaining("tensor-parallel degree of 8");
        }
        var dense = TransformersReference.load("llama");
        try (var ckpt = LlamaCheckpoint.open(dense.dir())) {
            assertThatThrownBy(() -> LlamaDecoder.decode(ckpt.config(), 1, 8, Parallelism.experts(2, 1), DType.F32, LlamaDecoder.Form.GREEDY))
                    .isInstanceOf(CompilationException.class).hasMessageContaining("no mixture of experts").hasMessageContaining("Parallelism.tensor(2)");
        }
        assertThatThrownBy(() -> Parallelism.experts(0, 1)).isInstanceOf(CompilationException.class).hasMessageContaining("expert-parallel degree of 0");
    }

    /** At ep 1 the graphs are the tensor-parallel ones: the same plan text as the int-tp methods give. */
    @Test
    void expertParallelOfOneIsTensorParallelism() throws IOException {
        var ref = TransformersReference.load("qwen2_moe");
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            assertThat(LlamaPrefill.graph(c, 6, Parallelism.experts(1, 2), DType.F32).toString()).isEqualTo(LlamaPrefill.graph(c, 6, 2, DType.F32).toString());
            assertThat(List.of(LlamaDecoder.weights(c, ckpt.weights(), Parallelism.tensor(2), 1, DType.F32).keySet()))
                    .isEqualTo(List.of(LlamaDecoder.weights(c, ckpt.weights(), 2, 1, DType.F32).keySet()));
        }
    }
}
