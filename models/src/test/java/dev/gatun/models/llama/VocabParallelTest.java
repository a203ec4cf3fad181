package dev.gatun.models.llama;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The vocabulary-parallel output projection ({@link VocabParallel}): under tensor parallelism each rank's head
 * product reads its {@code ceil(vocab / tp)} rows (the plan's bytes), the shards are the checkpoint's rows (zero
 * rows and a -inf padding past a vocabulary tp does not divide), a padded row never wins the greedy choice, and a
 * vocabulary tp does not divide decodes the float64 pass's tokens at TP 1, 2 and 4 with one rank's logits.
 */
class VocabParallelTest {
    static final int MAX = 24;
    /** The tiny model with a vocabulary of 251 (prime: padded at 2 and 4 ranks), tied. */
    static final LlamaConfig ODD = odd(true);

    private static LlamaConfig odd(boolean tied) {
        var t = LlamaCheckpointTest.TINY;
        return new LlamaConfig(t.hiddenSize(), t.layers(), t.heads(), t.kvHeads(), t.intermediateSize(), 251, t.ropeTheta(), t.rmsNormEps(), tied);
    }

    /**
     * Decode (batch 1 and 3) and prefill at TP 1, 2 and 4: the one step that reads {@code lm_head.weight} is the head's
     * product, and the bytes it reads are {@code ceil(vocab / tp)} rows of hidden; the embedding is read by its lookup
     * only; above one rank the plan has the head's two all-gathers: the logits' shard and the greedy choice's
     * (value, position) pairs (float64, two a row).
     */
    @Test
    void theTensorParallelHeadReadsItsShareOfTheVocabulary() {
        for (LlamaConfig c : List.of(LlamaCheckpointTest.TINY, ODD))
            for (int tp : new int[]{1, 2, 4})
                for (int batch : new int[]{1, 3})
                    for (var g : List.of(LlamaDecoder.decode(c, batch, MAX, tp, DType.BF16), LlamaDecoder.prefill(c, batch, 8, MAX, tp, DType.BF16))) {
                        var options = CompileOptions.world(tp).backend("host");
                        Plan plan = dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(g, options.lowering()), options.planning());
                        String as = g.name() + " vocab " + c.vocabSize() + " tp " + tp + " batch " + batch + ":\n" + plan;
                        long rows = (c.vocabSize() + tp - 1) / tp, hidden = c.hiddenSize();
                        PlanBuffer head = plan.input("lm_head.weight");
                        assertThat(bytes(head)).as(as).isEqualTo(rows * hidden * 2);
                        var readers = readersOf(plan, head);
                        assertThat(readers).as(as).singleElement().satisfies(s -> {
                            Step.Matmul m = s instanceof Step.TiledProduct t ? t.product() : (Step.Matmul) s;
                            PlanBuffer w = m.b().storage() == head ? m.b() : m.a();
                            assertThat(w.storage()).isSameAs(head);
                            assertThat(bytes(w)).isEqualTo(rows * hidden * 2);
                        });
                        assertThat(readersOf(plan, plan.input("model.embed_tokens.weight"))).as(as)
                                .singleElement().satisfies(s -> assertThat(s.kind()).isEqualTo("index_select"));
                        var gathers = plan.steps().stream().flatMap(s -> s.collectives().stream())
                                .filter(k -> k.call().kind() == CollectiveKind.ALL_GATHER).toList();
                        if (tp == 1) assertThat(gathers).as(as).isEmpty();
                        else assertThat(gathers).as(as).hasSize(2).anySatisfy(k -> assertThat(bytes(k.input())).isEqualTo(batch * rows * 2))
                                .anySatisfy(k -> {
                                    assertThat(k.input().dtype()).isEqualTo(DType.F64);
                                    assertThat(bytes(k.input())).isEqualTo(batch * 2 * 8);
                                });
                        assertThat(plan.input(VocabParallel.PADDING) != null).as(as).isEqualTo(tp > 1 && c.vocabSize() % tp != 0);
                    }
    }

    /**
     * Each rank's head is its rows of the checkpoint's (of the embedding where tied), zero rows past the vocabulary; the
     * padding is 0 for the vocabulary's rows and -inf past them, absent where tp divides the vocabulary.
     */
    @Test
    void eachRankHoldsItsRowsOfTheHeadAndThePaddingPastTheVocabulary(@TempDir Path dir) throws IOException {
        for (LlamaConfig c : List.of(odd(false), ODD, LlamaCheckpointTest.TINY)) {
            Path d = Files.createDirectories(dir.resolve(c.vocabSize() + (c.tieWordEmbeddings() ? "tied" : "")));
            LlamaCheckpoint.writeRandom(c, DType.F32, 3, d);
            try (var weights = SafeTensors.open(d.resolve(LlamaCheckpoint.WEIGHTS))) {
                NDArray whole = weights.get(c.tieWordEmbeddings() ? "model.embed_tokens.weight" : "lm_head.weight");
                int h = c.hiddenSize(), v = c.vocabSize();
                for (int tp : new int[]{2, 4}) {
                    int rows = (v + tp - 1) / tp;
                    for (int r = 0; r < tp; r++) {
                        var shard = LlamaDecoder.weights(c, weights, tp, r, DType.F32);
                        NDArray head = shard.get("lm_head.weight");
                        assertThat(head.shape()).containsExactly(rows, h);
                        for (int i = 0; i < rows; i++) {
                            int row = r * rows + i;
                            for (int j = 0; j < h; j++)
                                assertThat(head.get((long) i * h + j)).as("tp %d rank %d row %d", tp, r, i).isEqualTo(row < v ? whole.get((long) row * h + j) : 0.0);
                        }
                        assertThat(shard.get("model.embed_tokens.weight").shape()).containsExactly(v, h);
                        NDArray padding = shard.get(VocabParallel.PADDING);
                        if (v % tp == 0) assertThat(padding).isNull();
                        else for (int i = 0; i < rows; i++)
                            assertThat(padding.get(i)).as("tp %d rank %d padding %d", tp, r, i).isEqualTo(r * rows + i < v ? 0.0 : Double.NEGATIVE_INFINITY);
                    }
                }
            }
        }
    }

    /**
     * Every logit negative: the padded rows' zero logits would win the argmax but for the padding. Five tokens at four
     * ranks (two rows each: rank 2 one real row, rank 3 none), the largest logit tied between tokens 1 and 2 (across
     * ranks 0 and 1): the greedy token is 1 on every rank, and the gathered logits are the five.
     */
    @Test
    void aPaddedRowNeverWins() {
        var t = LlamaCheckpointTest.TINY;
        var c = new LlamaConfig(8, 1, 4, 2, 8, 5, t.ropeTheta(), t.rmsNormEps(), false);
        int tp = 4;
        double[][] w = {{-3, 0}, {-1, -1}, {-2, 0}, {-1, -2}, {-4, 0}};   // the first two columns; logits of h = (1, 1, 0, ...): -3 -2 -2 -3 -4
        var g = Gatun.graph("head").world(tp);
        var head = VocabParallel.head(g, c, g.input("h", DType.F32, 1, 8), tp, DType.F32);
        g.output("logits", head.logits());
        g.output("next", head.greedy(g, DType.F32));
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < tp; r++) {
            double[] rows = new double[2 * 8], padding = new double[2];
            for (int i = 0; i < 2; i++) {
                int row = 2 * r + i;
                if (row < 5) System.arraycopy(w[row], 0, rows, i * 8, 2);
                else padding[i] = Double.NEGATIVE_INFINITY;
            }
            inputs.add(Map.of("h", NDArray.of(DType.F32, new double[]{1, 1, 0, 0, 0, 0, 0, 0}, 1, 8), "lm_head.weight", NDArray.of(DType.F32, rows, 2, 8),
                    VocabParallel.PADDING, NDArray.of(DType.F32, padding, 2)));
        }
        try (var s = Session.compile(g.build(), CompileOptions.world(tp).backend("host"))) {
            var out = s.runToHost(inputs);
            for (int r = 0; r < tp; r++) {
                assertThat((long) out.get(r).get("next").get(0)).as("rank %d", r).isEqualTo(1);
                assertThat(out.get(r).get("logits").shape()).containsExactly(1, 5);
                assertThat(out.get(r).get("logits").toDoubleArray()).containsExactly(-3, -2, -2, -3, -4);
            }
        }
    }

    /**
     * The vocabulary of 251, tied and untied, at TP 1, 2 and 4: the greedy tokens of a generation are the float64 pass's
     * and every step's logits (gathered from the shards) one rank's within float32 rounding.
     */
    @Test
    void aVocabularyTheRanksDoNotDivideDecodesAsOneRank(@TempDir Path dir) throws IOException {
        int[] prompt = java.util.Arrays.stream(LlamaPrefillTest.PROMPT).map(id -> id % 251).toArray();
        for (LlamaConfig c : List.of(ODD, odd(false))) {
            Path d = Files.createDirectories(dir.resolve(c.tieWordEmbeddings() ? "tied" : "untied"));
            LlamaCheckpoint.writeRandom(c, DType.F32, 12, d);
            try (var weights = SafeTensors.open(d.resolve(LlamaCheckpoint.WEIGHTS))) {
                int[] want = LlamaPrefillTest.greedy(prompt, 8, ids -> {
                    double[][] l = LlamaPrefillTest.Reference.logits(c, weights, ids);
                    return l[l.length - 1];
                });
                List<double[]> single = null;
                for (int tp : new int[]{1, 2, 4}) {
                    var shards = new ArrayList<Map<String, NDArray>>();
                    for (int r = 0; r < tp; r++) shards.add(LlamaDecoder.weights(c, weights, tp, r, DType.F32));
                    try (var gen = new LlamaGenerator(c, shards, prompt.length, MAX, tp, DType.F32, CompileOptions.world(tp).backend("host"))) {
                        var result = gen.generate(prompt, 8);
                        assertThat(result.tokens()).as("tied %s tp %d", c.tieWordEmbeddings(), tp).containsExactly(want);
                        assertThat(gen.generate(prompt, 8, false).tokens()).as("queued, tp %d", tp).containsExactly(want);
                        if (tp == 1) single = result.logits();
                        else for (int k = 0; k < 8; k++) {
                            double[] got = result.logits().get(k), one = single.get(k);
                            double worst = 0, scale = 0;
                            for (int v = 0; v < c.vocabSize(); v++) {
                                scale = Math.max(scale, Math.abs(one[v]));
                                worst = Math.max(worst, Math.abs(got[v] - one[v]));
                            }
                            assertThat(worst / scale).as("tied %s tp %d step %d", c.tieWordEmbeddings(), tp, k).isLessThan(1e-5);
                        }
                    }
                }
            }
        }
    }

    /** The bytes of a buffer's elements (a view's, not its storage's). */
    private static long bytes(PlanBuffer b) {
        long n = 1;
        for (long s : b.shape().sizes()) n *= s;
        return n * b.dtype().byteSize();
    }

    /** The plan's steps that read {@code storage} (directly or through a view). */
    private static List<Step> readersOf(Plan plan, PlanBuffer storage) {
        return plan.steps().stream().filter(s -> s.reads().stream().anyMatch(b -> b.storage() == storage)).toList();
    }
}
