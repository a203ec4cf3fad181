package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Prefill and token-by-token decode with the KV cache, one compiled session per phase, on the host backend at TP 1,
 * 2 and 4: the greedy tokens are the float64 pass's, and every step's logits are the float64 pass's over the whole
 * sequence so far (the cache changes nothing but the work).
 */
class LlamaDecoderTest {
    static final int MAX = 24;

    @Test
    void aDecodeLayerIsFourProductsEachWithItsEpilogueOneAttentionAndNoCopy() {
        LlamaConfig c = LlamaCheckpointTest.TINY;
        try (var s = dev.gatun.runtime.Session.compile(LlamaDecoder.decode(c, MAX, 1, DType.F32), CompileOptions.world(1).backend("host").productEpilogues(true))) {
            var kernels = s.plan().kernels();
            // SwiGLU: silu of the gate half and the product with the up half, one kernel storing only the product
            assertThat(kernels).filteredOn(k -> k.ops().contains("silu")).hasSize(c.layers())
                    .allSatisfy(k -> {
                        assertThat(k.ops()).containsSubsequence("silu", "mul");
                        assertThat(k.stores()).hasSize(1);
                    });
            // with the rule of tiles on (PlanOptions.productEpilogues), every product of a layer one launch with the kernels after it:
            // q|k|v with the rotary embedding of its query and key heads, gate|up with its SwiGLU, and in this tiny model,
            // whose hidden size fits one block, o and down with the residual add and the next norm; the output projection alone
            assertThat(s.plan().steps()).filteredOn(st -> st instanceof dev.gatun.planner.Step.Matmul).hasSize(1);
            var tiled = s.plan().steps().stream().filter(st -> st instanceof dev.gatun.planner.Step.TiledProduct)
                    .map(st -> (dev.gatun.planner.Step.TiledProduct) st).toList();
            assertThat(tiled).hasSize(4 * c.layers()).allSatisfy(t -> assertThat(t.epilogues()).hasSize(1));
            assertThat(tiled).filteredOn(t -> t.epilogues().getFirst().kernel().ops().contains("silu")).hasSize(c.layers())
                    .allSatisfy(t -> assertThat(t.epilogues().getFirst().kernel().ops()).containsSubsequence("silu", "mul"));
            // the scores, mask, softmax and weighted values: one attention step a layer, over the updated caches
            // (with the new key and value written into the caches in the same launch: below)
            assertThat(s.plan().steps()).filteredOn(st -> st instanceof dev.gatun.planner.Step.UpdateAttention).hasSize(c.layers())
                    .allSatisfy(st -> assertThat(((dev.gatun.planner.Step.UpdateAttention) st).attention().position().name()).isEqualTo("position"));
            // the step's rotary angles from its position and the first norm; then per layer rope of q and k (one
            // kernel: their heads lie side by side), residual + norm twice (the next layer's or the final norm), SwiGLU:
            // the heads are views of the fused product and of rope's result, grouped-query attention reads the cache as it is
            assertThat(kernels).hasSize(2 + 4 * c.layers());
            assertThat(kernels).noneSatisfy(k -> assertThat(k.ops()).containsOnly("copy"));
            // the new key (rotated, as rope stored it) and value (a view of the product) written in place into the
            // caches, which are states: the bytes of one position, not a rewrite of the cache; both in one launch
            assertThat(s.plan().steps()).filteredOn(st -> st instanceof dev.gatun.planner.Step.UpdateAttention).hasSize(c.layers())
                    .allSatisfy(st -> assertThat(((dev.gatun.planner.Step.UpdateAttention) st).updates().members()).hasSize(2));
            // the one update apart: the step's greedy token into the history of the steps' tokens, at the position
            assertThat(s.plan().steps()).filteredOn(dev.gatun.planner.UpdateSliceCall::is).singleElement()
                    .satisfies(st -> assertThat(dev.gatun.planner.UpdateSliceCall.find(st).target().input()).isEqualTo(LlamaDecoder.HISTORY));
            assertThat(s.plan().states()).hasSize(2 * c.layers() + 1);
            assertThat(s.plan().inputs()).noneMatch(b -> b.input().startsWith("cache."));
        }
    }

    /**
     * At a batch of several the value heads are strided by the batch in the fused product; the cache write reads them
     * where they lie, so no copy kernel stands before it (the rotary kernel is one for q and one for k there).
     */
    @Test
    void aBatchOfSeveralWritesTheValueHeadsWithoutACopy() {
        LlamaConfig c = LlamaCheckpointTest.TINY;
        var plan = dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(LlamaDecoder.decode(c, 2, MAX, 1, DType.BF16),
                dev.gatun.lowering.LoweringOptions.world(1)), dev.gatun.planner.PlanOptions.DEFAULT.withProductEpilogues(true));
        assertThat(plan.kernels()).as(plan.toString()).noneSatisfy(k -> assertThat(k.ops()).containsOnly("copy"));
        // the angles and the first norm; rope of q and of k, two residual + norms and SwiGLU a layer
        assertThat(plan.kernels()).hasSize(2 + 5 * c.layers());
        assertThat(plan.steps()).filteredOn(st -> st instanceof dev.gatun.planner.Step.UpdateAttention).hasSize(c.layers());
        assertThat(plan.steps()).filteredOn(st -> st instanceof dev.gatun.planner.Step.Matmul).hasSize(1);
        // both rotary kernels (of q and of k) in the q|k|v product's launch
        assertThat(plan.steps()).filteredOn(st -> st instanceof dev.gatun.planner.Step.TiledProduct t && t.epilogues().size() == 2).hasSize(c.layers());
        assertThat(plan.steps()).noneMatch(st -> st instanceof dev.gatun.planner.Step.UpdateSlices || dev.gatun.planner.AttentionCall.is(st));
    }

    /**
     * Tensor-parallel at 2 and 4 ranks, decode and prefill: each layer's two all-reduces (after the attention's and the
     * MLP's row-parallel products) are one launch with the residual add and the next RMSNorm after them (prefill's last:
     * the residual add only), and the copy of the product into symmetric memory is in the all-reduce's launch or, where
     * the product has a few rows, in the product's. (The vocabulary-parallel head's two all-gathers, of the logits and of
     * the greedy pairs, are {@link #theTensorParallelHeadReadsItsShareOfTheVocabulary}'s.)
     */
    @Test
    void everyAllReduceTakesItsCopyInAndTheResidualAddAndRmsNormAfterIt() {
        LlamaConfig c = LlamaCheckpointTest.TINY;
        for (int tp : new int[]{2, 4})
            for (var g : List.of(LlamaDecoder.decode(c, MAX, tp, DType.BF16), LlamaDecoder.prefill(c, 8, MAX, tp, DType.BF16))) {
                var options = CompileOptions.world(tp).backend("host");
                var plan = dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(g, options.lowering()), options.planning());
                var collectives = plan.steps().stream().flatMap(s -> s.collectives().stream())
                        .filter(k -> k.call().kind() == dev.gatun.ir.graph.CollectiveKind.ALL_REDUCE).toList();
                var fused = plan.steps().stream().filter(s -> s instanceof dev.gatun.planner.Step.FusedCollective).map(s -> (dev.gatun.planner.Step.FusedCollective) s).toList();
                assertThat(collectives).as(plan.toString()).hasSize(2 * c.layers());
                assertThat(fused).as(plan.toString()).hasSize(collectives.size())
                        .allSatisfy(f -> assertThat(f.epilogue().kernel().ops()).contains("add"));
                // in prefill the norm after the last layer's residual takes only the last position (a launch of its own), and
                // at 4 ranks the last all-reduce's result is placed half over the product its copy reads: not the same tiles, no prologue
                boolean prefill = g.name().contains("prefill");
                var inner = prefill ? fused.subList(0, fused.size() - 1) : fused;
                assertThat(inner).as(plan.toString()).allSatisfy(f -> assertThat(f.epilogue().kernel().ops()).contains("mean", "rsqrt"));
                // the copy into symmetric memory is no launch of its own: the all-reduce's prologue, or (a few-row product)
                // the product's epilogue; a barrier-free all-reduce (the default for these sizes at two ranks) has none:
                // it pushes its input from where it lies into the members' rotating slots
                assertThat(inner).as(plan.toString()).allSatisfy(f -> assertThat(f.prologue() != null
                        || f.collective().collectives().getFirst().call().algorithm() == dev.gatun.ir.Algorithm.BARRIER_FREE || plan.steps().stream()
                        .anyMatch(s -> s instanceof dev.gatun.planner.Step.TiledProduct t && t.epilogues().stream()
                                .anyMatch(e -> e.kernel().outputs().contains(f.collective().collectives().getFirst().input())))).isTrue());
            }
    }

    /**
     * The decoder's plans (prefill and decode, batch 1 and 3, TP 1, 2 and 4, head_dim 16 and 24) pass the planner's
     * independent checks (PlanChecks: lifetimes recomputed from the steps, no two live buffers sharing bytes, the order of writes and
     * reads, the caches' states updated in place only after their last read, symmetric rules, fused tiles).
     */
    @Test
    void thePlansPassThePlannersIndependentChecks() {
        // heads of hidden / heads, and wider ones (head_dim 24: projections 96 and 48 wide against a stream of 64)
        for (LlamaConfig c : List.of(LlamaCheckpointTest.TINY, LlamaCheckpointTest.TINY.withHeadDim(24))) {
            for (int tp : new int[]{1, 2, 4})
                for (int batch : new int[]{1, 3})
                    for (var g : List.of(LlamaDecoder.decode(c, batch, MAX, tp, DType.BF16), LlamaDecoder.prefill(c, batch, 8, MAX, tp, DType.BF16))) {
                        var options = CompileOptions.world(tp).backend("host");
                        var plan = dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(g, options.lowering()), options.planning());
                        assertThat(dev.gatun.planner.testing.PlanChecksAccess.all(plan)).as(g.name() + " head_dim " + c.headDim() + " batch " + batch + " tp " + tp + ":\n" + plan)
                                .isEmpty();
                    }
        }
    }

    @Test
    void prefillThenEightStepsGiveTheFloat64PassesTokensAndLogits(@TempDir Path dir) throws IOException {
        prefillThenEightSteps(LlamaCheckpointTest.TINY, dir, 1, 2, 4);
    }

    /**
     * A head the fused attention kernels do not take (float32 heads of 128; Gemma's 256) is written from matmul and
     * softmax in the decode step, on every backend, and decodes as the float64 pass does.
     */
    @Test
    void headsTheFusedKernelsDoNotTakeAreWrittenOutAndDecodeRight(@TempDir Path dir) throws IOException {
        var wide = new LlamaConfig(64, 2, 2, 1, 128, 256, 10000, 1e-5, false, null, 128, 0);
        for (DType t : List.of(DType.F32, DType.BF16)) {
            boolean fused = dev.gatun.ir.ops.Attention.fusedKernelTakes(t, 128);
            assertThat(fused).as("%s heads of 128", t).isEqualTo(t == DType.BF16);
            try (var s = dev.gatun.runtime.Session.compile(LlamaDecoder.decode(wide, MAX, 1, t), CompileOptions.world(1).backend("host"))) {
                assertThat(s.plan().steps()).filteredOn(st -> st instanceof dev.gatun.planner.Step.UpdateAttention
                        || st instanceof dev.gatun.planner.Step.OpCall o && o.spec().name().equals("attention")).hasSize(fused ? wide.layers() : 0);
            }
        }
        assertThat(dev.gatun.ir.ops.Attention.fusedKernelTakes(DType.BF16, 256)).isFalse();
        prefillThenEightSteps(wide, dir, 1, 2);
    }

    private static void prefillThenEightSteps(LlamaConfig c, Path dir, int... tps) throws IOException {
        LlamaCheckpoint.writeRandom(c, DType.F32, 12, dir);
        int[] prompt = LlamaPrefillTest.PROMPT;
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            int[] want = LlamaPrefillTest.greedy(prompt, 8, ids -> {
                double[][] l = LlamaPrefillTest.Reference.logits(c, weights, ids);
                return l[l.length - 1];
            });
            // each step's float64 logits over the sequence so far (the prompt, then the expected tokens)
            var ref = new ArrayList<double[]>();
            for (int k = 0; k < 8; k++) {
                int[] seq = java.util.Arrays.copyOf(prompt, prompt.length + k);
                System.arraycopy(want, 0, seq, prompt.length, k);
                ref.add(LlamaPrefillTest.Reference.logits(c, weights, seq)[seq.length - 1]);
            }
            for (int tp : tps) {
                var shards = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, weights, tp, r, DType.F32));
                try (var gen = new LlamaGenerator(c, shards, prompt.length, MAX, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
                    var result = gen.generate(prompt, 8);
                    assertThat(result.tokens()).as("tp %d", tp).containsExactly(want);
                    // every step's logits against float64 over the sequence so far
                    for (int k = 0; k < 8; k++) {
                        double[] got = result.logits().get(k), r = ref.get(k);
                        double worst = 0, scale = 0;
                        for (int v = 0; v < c.vocabSize(); v++) {
                            scale = Math.max(scale, Math.abs(r[v]));
                            worst = Math.max(worst, Math.abs(got[v] - r[v]));
                        }
                        assertThat(worst / scale).as("tp %d step %d", tp, k).isLessThan(1e-4);
                    }
                }
            }
        }
    }
    /**
     * Every sequence of a batch decodes as alone, at TP 1, 2 and 4 (a key-value head replica), untied and tied; queued and
     * step by step.
     */
    @Test
    void aBatchDecodesEachSequenceAsTheFloat64PassDoesAlone(@TempDir Path dir) throws IOException {
        var t = LlamaCheckpointTest.TINY;
        var tied = new LlamaConfig(t.hiddenSize(), t.layers(), t.heads(), t.kvHeads(), t.intermediateSize(), t.vocabSize(), t.ropeTheta(), t.rmsNormEps(), true);
        for (LlamaConfig c : List.of(t, tied)) batchOfThree(c, Files.createDirectories(dir.resolve(c.tieWordEmbeddings() ? "tied" : "untied")));
    }

    private static void batchOfThree(LlamaConfig c, Path dir) throws IOException {
        LlamaCheckpoint.writeRandom(c, DType.F32, 5, dir);
        int[][] prompts = {LlamaPrefillTest.PROMPT, {200, 3, 3, 9, 77, 140, 2, 61}, {5, 5, 5, 5, 5, 5, 5, 5}};
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            // each sequence's greedy continuation by the float64 pass over it alone
            int[][] want = new int[prompts.length][];
            for (int b = 0; b < prompts.length; b++)
                want[b] = LlamaPrefillTest.greedy(prompts[b], 6, ids -> {
                    double[][] l = LlamaPrefillTest.Reference.logits(c, weights, ids);
                    return l[l.length - 1];
                });
            for (int tp : new int[]{1, 2, 4}) {
                var shards = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, weights, tp, r, DType.F32));
                try (var gen = new LlamaGenerator(c, shards, prompts.length, prompts[0].length, MAX, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
                    // queued (each step fed the token the step before left on the device), then step by step, twice each:
                    // the history of the steps' tokens is kept across generations, and a generation writes all it reads
                    assertThatThrownBy(() -> gen.generate(prompts, 6, true, true)).isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class)
                            .hasMessageContaining("a queued generation keeps no logits");
                    for (boolean queued : new boolean[]{true, false, true, false}) {
                        var got = gen.generate(prompts, 6, false, queued).sequences();
                        for (int b = 0; b < prompts.length; b++)
                            assertThat(got[b]).as("%s tp %d sequence %d%s", c.tieWordEmbeddings() ? "tied" : "untied", tp, b, queued ? " queued" : "")
                                    .containsExactly(want[b]);
                    }
                }
            }
        }
    }

    /**
     * Each sequence of a batch ends at the first stop token it generates (kept), the generation once all have; queued
     * (a read every 2 steps, or every 16) and step by step, at TP 1 and 2; the listener hears every step, an ended
     * sequence as {@link Generation#ENDED}. The tokens are the float64 pass's, cut where the rule says.
     */
    @Test
    void eachSequenceEndsAtItsFirstStopTokenQueuedOrStepByStep(@TempDir Path dir) throws IOException {
        LlamaConfig c = LlamaCheckpointTest.TINY;
        LlamaCheckpoint.writeRandom(c, DType.F32, 5, dir);
        int[][] prompts = {LlamaPrefillTest.PROMPT, {200, 3, 3, 9, 77, 140, 2, 61}, {5, 5, 5, 5, 5, 5, 5, 5}};
        int n = 8;
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            int[][] want = new int[prompts.length][];
            for (int b = 0; b < prompts.length; b++)
                want[b] = LlamaPrefillTest.greedy(prompts[b], n, ids -> {
                    double[][] l = LlamaPrefillTest.Reference.logits(c, weights, ids);
                    return l[l.length - 1];
                });
            // a token of each sequence's own, so every one ends before n
            var stops = java.util.Set.of(want[0][3], want[1][1], want[2][5]);
            int[][] expect = new int[prompts.length][];
            int longest = 0;
            for (int b = 0; b < prompts.length; b++) {
                int len = 0;
                while (len < n && !stops.contains(want[b][len])) len++;
                expect[b] = java.util.Arrays.copyOf(want[b], len + 1);
                longest = Math.max(longest, expect[b].length);
            }
            assertThat(longest).isLessThan(n);
            for (int tp : new int[]{1, 2}) {
                var shards = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, weights, tp, r, DType.F32));
                try (var gen = new LlamaGenerator(c, shards, prompts.length, prompts[0].length, MAX, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
                    var base = Generation.of(n).stopAt(stops);
                    for (var how : List.of(base.queued(2), base.queued(16), base.stepwise(), base.keepingLogits())) {
                        var heard = new ArrayList<int[]>();
                        var got = gen.generate(prompts, how.onTokens((step, tokens) -> {
                            assertThat(step).isEqualTo(heard.size());
                            heard.add(tokens.clone());
                        }));
                        String as = "tp " + tp + (how.queued() ? " queued every " + how.checkEvery() : " step by step");
                        for (int b = 0; b < prompts.length; b++) assertThat(got.sequences()[b]).as(as + " sequence " + b).containsExactly(expect[b]);
                        assertThat(heard).as(as).hasSize(longest);
                        for (int k = 0; k < longest; k++)
                            for (int b = 0; b < prompts.length; b++)
                                assertThat(heard.get(k)[b]).as(as + " step " + k + " sequence " + b)
                                        .isEqualTo(k < expect[b].length ? expect[b][k] : Generation.ENDED);
                        // step by step, no decode call runs past the last stop; queued, at most a chunk's worth
                        if (how.queued()) assertThat(got.stepMillis().length).as(as).isBetween(longest - 1, longest - 2 + how.checkEvery());
                        else assertThat(got.stepMillis()).as(as).hasSize(longest - 1);
                        assertThat(got.logits()).as(as).hasSize(how.keepLogits() ? longest : 0);
                    }
                    // every sequence stopping at its first token: no decode call runs, queued or not
                    var firsts = Generation.of(n).stopAt(want[0][0], want[1][0], want[2][0]);
                    for (var how : List.of(firsts, firsts.stepwise())) {
                        var got = gen.generate(prompts, how);
                        for (int b = 0; b < prompts.length; b++) assertThat(got.sequences()[b]).containsExactly(want[b][0]);
                        assertThat(got.stepMillis()).isEmpty();
                    }
                    assertThatThrownBy(() -> gen.generate(prompts, Generation.of(n).stopAt(c.vocabSize())))
                            .isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class).hasMessageContaining("stop token 256 is not in the vocabulary of 256 tokens");
                }
            }
        }
        assertThatThrownBy(() -> Generation.of(4).keepingLogits().queued(4)).isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class)
                .hasMessageContaining("a queued generation keeps no logits");
        assertThatThrownBy(() -> Generation.of(0)).isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class).hasMessageContaining("at least 1");
        assertThatThrownBy(() -> Generation.of(4).stopAt(-2)).isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class).hasMessageContaining("stop token -2");
    }

    /** A shard in the checkpoint's dtype is copied in bulk; converted element by element it holds the same values. */
    @Test
    void bulkCopiedShardsHoldWhatElementwiseConversionGives(@TempDir Path dir) throws IOException {
        LlamaConfig c = LlamaCheckpointTest.TINY;
        LlamaCheckpoint.writeRandom(c, DType.F32, 9, dir);
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            for (int tp : new int[]{1, 2, 4})
                for (int r = 0; r < tp; r++) {
                    var bulk = LlamaDecoder.weights(c, weights, tp, r, DType.F32);
                    var wide = LlamaDecoder.weights(c, weights, tp, r, DType.F64);   // element by element, exact
                    assertThat(bulk.keySet()).isEqualTo(wide.keySet());
                    for (var e : bulk.entrySet())
                        assertThat(e.getValue().toDoubleArray()).as("tp %d rank %d %s", tp, r, e.getKey()).containsExactly(wide.get(e.getKey()).toDoubleArray());
                }
        }
    }
}
