package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.TensorFiles;
import dev.gatun.ir.ops.TokenSampling;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A generator compiled once takes prompts of any length up to the one it was compiled for, alone or in a batch of
 * different lengths, and draws tokens on the device as a {@link Sampling} says, on the host backend: the tokens are those
 * of a generator compiled for exactly the prompt's length, of the float64 pass over each sequence alone, and of
 * transformers; the drawn tokens are the draw's rule applied to the logits the generation computed, at the token's
 * position, with the prompt and the tokens so far as the context.
 */
class LlamaGenerationTest {
    static final LlamaConfig C = LlamaCheckpointTest.TINY;
    static final int LONGEST = 12, MAX = 24;

    static List<Map<String, NDArray>> shards(LlamaConfig c, TensorFiles w, int tp) {
        var shards = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, w, tp, r, DType.F32));
        return shards;
    }

    static CompileOptions host(int tp) { return CompileOptions.world(tp).backend("host"); }

    static int[] prompt(int length, int salt) {
        int[] p = new int[length];
        for (int i = 0; i < length; i++) p[i] = (i * 37 + salt * 11 + 5) % C.vocabSize();
        return p;
    }

    /** The float64 pass's greedy continuation of {@code prompt} alone. */
    static int[] float64Greedy(SafeTensors w, int[] prompt, int n) {
        return LlamaPrefillTest.greedy(prompt, n, ids -> {
            double[][] l = LlamaPrefillTest.Reference.logits(C, w, ids);
            return l[l.length - 1];
        });
    }

    /**
     * One generator compiled for prompts of up to 12 tokens, at TP 1 and 2: a prompt of 1, 5 or 12 tokens gives the
     * tokens of a generator compiled for exactly its length and of the float64 pass, step by step (with every step's
     * logits those of the exact generator, within float32's error) and queued.
     */
    @Test
    void aPromptOfAnyLengthGivesTheTokensOfAGeneratorCompiledForIt(@TempDir Path dir) throws IOException {
        LlamaCheckpoint.writeRandom(C, DType.F32, 21, dir);
        int n = 6;
        try (var w = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            for (int tp : new int[]{1, 2})
                try (var once = new LlamaGenerator(C, shards(C, w, tp), LONGEST, MAX, tp, DType.F32, host(tp))) {
                    for (int len : new int[]{1, 5, LONGEST}) {
                        int[] prompt = prompt(len, len);
                        int[] want = float64Greedy(w, prompt, n);
                        var got = once.generate(prompt, n);
                        assertThat(got.tokens()).as("tp %d, a prompt of %d", tp, len).containsExactly(want);
                        assertThat(once.generate(new int[][]{prompt}, n, false, true).tokens()).as("tp %d, %d, queued", tp, len).containsExactly(want);
                        try (var exact = new LlamaGenerator(C, shards(C, w, tp), len, MAX, tp, DType.F32, host(tp))) {
                            var ref = exact.generate(prompt, n);
                            assertThat(ref.tokens()).containsExactly(want);
                            for (int k = 0; k < n; k++) {
                                double[] a = got.logits().get(k), b = ref.logits().get(k);
                                double worst = 0, scale = 0;
                                for (int v = 0; v < a.length; v++) {
                                    worst = Math.max(worst, Math.abs(a[v] - b[v]));
                                    scale = Math.max(scale, Math.abs(b[v]));
                                }
                                assertThat(worst / scale).as("tp %d, a prompt of %d, step %d", tp, len, k).isLessThan(1e-5);
                            }
                        }
                    }
                }
        }
    }

    /**
     * Against transformers: one generator compiled for 20 tokens gives the reference's 16 greedy tokens after its
     * 12-token prompt, and after each shorter prefix of it the first token is transformers' argmax at that position
     * (its logits there are shipped: {@code logits.npy}), with the prefill's logits within 1e-4 of them.
     */
    @Test
    void aPaddedPrefillIsTransformersAtEveryPromptLength() throws IOException {
        var ref = TransformersReference.load("llama");
        try (var ckpt = LlamaCheckpoint.open(ref.dir())) {
            LlamaConfig c = ckpt.config();
            int longest = 20, maxLen = longest + TransformersReferenceTest.NEW_TOKENS;
            try (var gen = new LlamaGenerator(c, shards(c, ckpt.weights(), 1), longest, maxLen, 1, DType.F32, host(1))) {
                assertThat(gen.generate(ref.prompt(), TransformersReferenceTest.NEW_TOKENS, false).tokens()).containsExactly(ref.tokens());
                for (int len = 1; len <= ref.prompt().length; len++) {
                    var got = gen.generate(Arrays.copyOf(ref.prompt(), len), 1);
                    float[] row = ref.logits()[len - 1];
                    int best = 0;
                    for (int v = 1; v < row.length; v++) if (row[v] > row[best]) best = v;
                    double worst = 0;
                    for (int v = 0; v < row.length; v++) worst = Math.max(worst, Math.abs(got.logits().getFirst()[v] - row[v]));
                    assertThat(worst / ref.scale()).as("a prefix of %d", len).isLessThan(1e-4);
                    assertThat(got.tokens()).as("a prefix of %d", len).containsExactly(best);
                }
            }
        }
    }

    /**
     * A batch of prompts of 3, 12 and 8 tokens: each sequence's tokens are the float64 pass's over it alone, queued and
     * step by step, at TP 1 and 2, greedy, and the first one's logits at every step are the float64 pass's over it so
     * far (its positions are its own, not the batch's slots); and a batch of one length shorter than compiled for.
     */
    @Test
    void aBatchOfDifferentLengthsDecodesEachAsAlone(@TempDir Path dir) throws IOException {
        LlamaCheckpoint.writeRandom(C, DType.F32, 22, dir);
        int n = 6;
        int[][] ragged = {prompt(3, 2), prompt(LONGEST, 1), prompt(8, 3)}, even = {prompt(4, 4), prompt(4, 5), prompt(4, 6)};
        try (var w = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            for (int[][] prompts : List.of(ragged, even)) {
                int[][] want = new int[prompts.length][];
                for (int b = 0; b < prompts.length; b++) want[b] = float64Greedy(w, prompts[b], n);
                for (int tp : new int[]{1, 2})
                    try (var gen = new LlamaGenerator(C, shards(C, w, tp), prompts.length, LONGEST, MAX, tp, DType.F32, host(tp))) {
                        for (boolean queued : new boolean[]{true, false, true}) {
                            var got = gen.generate(prompts, n, false, queued).sequences();
                            for (int b = 0; b < prompts.length; b++)
                                assertThat(got[b]).as("tp %d sequence %d of %d tokens%s", tp, b, prompts[b].length, queued ? " queued" : "").containsExactly(want[b]);
                        }
                        var logits = gen.generate(prompts, Generation.of(n).keepingLogits()).logits();
                        for (int k = 0; k < n; k++) {
                            int[] seq = Arrays.copyOf(prompts[0], prompts[0].length + k);
                            System.arraycopy(want[0], 0, seq, prompts[0].length, k);
                            double[] r = LlamaPrefillTest.Reference.logits(C, w, seq)[seq.length - 1], a = logits.get(k);
                            double worst = 0, scale = 0;
                            for (int v = 0; v < r.length; v++) {
                                worst = Math.max(worst, Math.abs(a[v] - r[v]));
                                scale = Math.max(scale, Math.abs(r[v]));
                            }
                            assertThat(worst / scale).as("tp %d step %d: the first sequence's logits", tp, k).isLessThan(1e-4);
                        }
                        // the longest prompt and the tokens after it must fit the cache: 12 + 13 - 1 = 24 do, 12 + 14 - 1 do not
                        assertThat(gen.generate(ragged, MAX - LONGEST + 1, false, true).sequences()[1]).hasSize(MAX - LONGEST + 1);
                        assertThatThrownBy(() -> gen.generate(ragged, MAX - LONGEST + 2, false, true)).isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class)
                                .hasMessageContaining("14 new tokens after 12 (the longest prompt) do not fit the cache of 24");
                    }
            }
        }
    }

    /**
     * Drawn tokens, at TP 1 and 2, a batch of prompts of two lengths: each token is the argmax of its step's logits
     * (of the first sequence, kept) scaled by the temperature plus the Gumbel noise of (seed, the position of the token
     * the logits are of, column), computed here; temperature 0 with a penalty is the argmax of the logits with the
     * prompt's and generated tokens penalized (computed here, transformers' rule); the same seed draws the same tokens
     * again, queued or step by step, and two sequences of one prompt and seed draw alike.
     */
    @Test
    void drawnTokensFollowTheirLogitsPositionsAndContext(@TempDir Path dir) throws IOException {
        LlamaCheckpoint.writeRandom(C, DType.F32, 23, dir);
        int n = 8;
        int[][] prompts = {prompt(7, 1), prompt(LONGEST, 2), prompt(7, 1)};
        try (var w = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            for (int tp : new int[]{1, 2})
                try (var gen = new LlamaGenerator(C, shards(C, w, tp), prompts.length, LONGEST, MAX, tp, DType.F32, host(tp), true)) {
                    var hot = Sampling.temperature(1.7).seed(99);
                    var drawn = gen.generate(prompts, Generation.of(n).keepingLogits().sampling(hot));
                    int[] first = drawn.sequences()[0];
                    for (int k = 0; k < n; k++) {
                        double[] l = drawn.logits().get(k);
                        double top = Arrays.stream(l).max().orElseThrow();
                        int best = -1;
                        double most = 0;
                        for (int v = 0; v < l.length; v++) {
                            double s = (l[v] - top) / (double) (float) 1.7 + TokenSampling.gumbel(99, prompts[0].length - 1 + k, v);
                            if (best < 0 || s > most) { best = v; most = s; }
                        }
                        assertThat(first[k]).as("tp %d step %d", tp, k).isEqualTo(best);
                    }
                    assertThat(Arrays.stream(first).distinct().count()).as("a hot draw varies").isGreaterThan(3);
                    assertThat(drawn.sequences()[2]).as("the same prompt and seed in another row").containsExactly(first);
                    for (var how : List.of(Generation.of(n).sampling(hot), Generation.of(n).sampling(hot).stepwise()))
                        assertThat(gen.generate(prompts, how).sequences()).as("tp %d again, %s", tp, how.queued() ? "queued" : "step by step")
                                .isDeepEqualTo(drawn.sequences());
                    var other = gen.generate(prompts, Generation.of(n).sampling(hot.seed(100), hot, hot)).sequences();
                    assertThat(other[0]).as("another seed").isNotEqualTo(first);
                    assertThat(other[2]).containsExactly(first);
                    // greedy with a penalty of 3: the penalized argmax of each step's logits over the prompt and the tokens so far
                    var penalized = gen.generate(prompts, Generation.of(n).keepingLogits().sampling(Sampling.GREEDY.repetitionPenalty(3)));
                    int[] got = penalized.sequences()[0];
                    var seen = new java.util.TreeSet<Integer>();
                    for (int id : prompts[0]) seen.add(id);
                    for (int k = 0; k < n; k++) {
                        double[] l = penalized.logits().get(k).clone();
                        for (int id : seen) l[id] = l[id] > 0 ? l[id] / 3 : l[id] * 3;
                        int best = 0;
                        for (int v = 1; v < l.length; v++) if (l[v] > l[best]) best = v;
                        assertThat(got[k]).as("tp %d step %d, penalized", tp, k).isEqualTo(best);
                        seen.add(got[k]);
                    }
                    // temperature 0 without a penalty is the greedy generator's
                    var greedy = gen.generate(prompts, Generation.of(n).sampling(Sampling.GREEDY)).sequences();
                    for (int b = 0; b < prompts.length; b++) assertThat(greedy[b]).containsExactly(float64Greedy(w, prompts[b], n));
                }
        }
    }

    /**
     * The generator's graphs (the padded prefill, the decode of one position and the ragged one, greedy and drawn; batch
     * 1 and 3, TP 1 and 2) pass the planner's independent checks; the drawn decode writes its context in place and
     * draws with one {@code sample} step.
     */
    @Test
    void theFormsPlansPassThePlannersIndependentChecks() {
        for (var form : List.of(new LlamaDecoder.Form(false, true), new LlamaDecoder.Form(true, false), new LlamaDecoder.Form(true, true)))
            for (int tp : new int[]{1, 2})
                for (int batch : new int[]{1, 3})
                    for (var g : List.of(LlamaDecoder.decode(C, batch, MAX, tp, DType.BF16, form), LlamaDecoder.prefill(C, batch, 8, MAX, tp, DType.BF16, form))) {
                        var options = host(tp);
                        var plan = dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(g, options.lowering()), options.planning());
                        String as = g.name() + " " + form + " batch " + batch + " tp " + tp + ":\n" + plan;
                        assertThat(dev.gatun.planner.testing.PlanChecksAccess.all(plan)).as(as).isEmpty();
                        assertThat(plan.steps()).as(as).filteredOn(st -> st instanceof dev.gatun.planner.Step.OpCall o && o.spec() == dev.gatun.ir.ops.Sample.SPEC).hasSize(form.sampling() ? 1 : 0);
                        if (form.sampling() && g.name().contains("decode"))
                            assertThat(plan.states()).as(as).anyMatch(b -> b.input().equals(LlamaDecoder.CONTEXT));
                    }
    }

    @Test
    void promptsAndSamplingsItWasNotMadeForAreRefused(@TempDir Path dir) throws IOException {
        LlamaCheckpoint.writeRandom(C, DType.F32, 24, dir);
        try (var w = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS));
             var gen = new LlamaGenerator(C, shards(C, w, 1), 2, 6, MAX, 1, DType.F32, host(1))) {
            assertThatThrownBy(() -> gen.generate(new int[][]{prompt(7, 0), prompt(3, 0)}, 2, false)).isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class)
                    .hasMessageContaining("prompt 0 has 7 tokens: the prefill was compiled for 1 to 6");
            assertThatThrownBy(() -> gen.generate(new int[][]{prompt(2, 0), new int[0]}, 2, false)).isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class).hasMessageContaining("prompt 1 has 0 tokens");
            assertThatThrownBy(() -> gen.generate(new int[][]{prompt(2, 0)}, 2, false)).isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class).hasMessageContaining("a batch of 2 prompts, not 1");
            int[][] two = {prompt(2, 0), prompt(3, 0)};
            assertThatThrownBy(() -> gen.generate(two, Generation.of(2).sampling(Sampling.temperature(0.5))))
                    .isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class).hasMessageContaining("generate: this generator was made for greedy tokens; make it with sampling");
            assertThatThrownBy(() -> gen.generate(two, Generation.of(2).sampling(Sampling.GREEDY, Sampling.GREEDY, Sampling.GREEDY)))
                    .isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class).hasMessageContaining("3 samplings for a batch of 2 sequences");
            assertThat(gen.generate(two, Generation.of(2).sampling(Sampling.GREEDY)).sequences()).hasDimensions(2, 2);
        }
        assertThatThrownBy(() -> Sampling.temperature(-1)).hasMessageContaining("temperature -1.0");
        assertThatThrownBy(() -> Sampling.temperature(1).topP(0)).hasMessageContaining("top-p 0.0: give a value above 0 and at most 1");
        assertThatThrownBy(() -> Sampling.temperature(1).minP(1.5)).hasMessageContaining("min-p 1.5");
        assertThatThrownBy(() -> Sampling.temperature(1).topK(-2)).hasMessageContaining("top-k -2");
        assertThatThrownBy(() -> Sampling.temperature(1).repetitionPenalty(0)).hasMessageContaining("repetition penalty 0.0");
    }
}
