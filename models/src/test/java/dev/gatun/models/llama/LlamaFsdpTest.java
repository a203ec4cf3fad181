package dev.gatun.models.llama;

import dev.gatun.dsl.Optimizers;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.models.llama.LlamaTraining.DataParallel;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Fully sharded data parallelism (ZeRO-3 / FSDP2) of the tiny Llama: 50 AdamW steps (clipped at 1.0, float64) at world
 * 2 and 4, each rank storing a half or a quarter of every weight and moment, give the same loss at every step as world 1
 * with every weight whole, and the ranks' final blocks put together are world 1's final weights. The expected values
 * come from the world-1 session of the plain graph (no all_gather, no reduce_scatter), itself checked against the
 * reference interpreter by {@link LlamaTrainingTest}.
 */
class LlamaFsdpTest {
    static final LlamaConfig TINY = LlamaTrainingTest.TINY;
    static final int SEQUENCES = LlamaTrainingTest.SEQUENCES, TOKENS = LlamaTrainingTest.TOKENS, STEPS = LlamaTrainingTest.STEPS;

    static Graph graph(int dp, DataParallel mode) { return graph(dp, 1, mode); }

    static Graph graph(int dp, int tp, DataParallel mode) {
        return LlamaTraining.graph(TINY, SEQUENCES / dp, TOKENS, dp, tp, mode, DType.F64, DType.F64, Optimizers.adamW(1e-2).clipGradNorm(1.0), true);
    }

    /** The world's mean loss of each step and each rank's states after the last step. */
    record Run(double[] losses, List<Map<String, NDArray>> finalStates) {}

    static Run train(int dp, DataParallel mode) { return train(dp, 1, mode); }

    /** {@code dp} x {@code tp} ranks; rank r is data-parallel rank r / tp and takes that rank's sequences. */
    static Run train(int dp, int tp, DataParallel mode) {
        Graph g = graph(dp, tp, mode);
        int world = dp * tp;
        var whole = LlamaTraining.initialWeights(graph(1, DataParallel.REPLICATED), 7, 0.02, DType.F64);
        var tables = LlamaTraining.tables(TINY, TOKENS, DType.F64);
        var batch = LlamaTraining.batch(TINY, SEQUENCES, TOKENS, dp, 11);
        double[] losses = new double[STEPS];
        List<Map<String, NDArray>> out = List.of();
        try (var s = Session.compile(g, CompileOptions.world(world).backend("host"))) {
            var perRank = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < world; r++) {
                s.bind(r, LlamaTraining.rankWeights(TINY, g, whole, tp, r));
                var in = new HashMap<>(batch.get(r / tp));
                in.putAll(tables);
                perRank.add(in);
            }
            for (int step = 0; step < STEPS; step++) {
                out = s.runToHost(perRank);
                for (var rank : out) losses[step] += rank.get("loss").get(0) / world;
            }
        }
        return new Run(losses, out);
    }

    @Test
    void fullyShardedWorldsTrainAsOneRankWithWholeWeights() {
        Run one = train(1, DataParallel.REPLICATED);
        assertThat(one.losses()[STEPS - 1]).isLessThan(one.losses()[0] * 0.5);
        for (int dp : new int[]{2, 4}) {
            Run many = train(dp, DataParallel.FULLY_SHARDED);
            for (int i = 0; i < STEPS; i++)
                assertThat(Math.abs(many.losses()[i] - one.losses()[i]))
                        .as("step %d: FSDP world %d %s vs world 1 %s", i, dp, many.losses()[i], one.losses()[i])
                        .isLessThanOrEqualTo(1e-11 * Math.abs(one.losses()[i]));
            for (var e : one.finalStates().getFirst().entrySet()) {
                if (e.getKey().equals("loss")) continue;
                var parts = new ArrayList<NDArray>();
                for (var rank : many.finalStates()) parts.add(rank.get(e.getKey()));
                boolean sharded = parts.getFirst().shape()[0] != e.getValue().shape()[0];
                NDArray gathered = sharded ? NDArray.concat(0, parts) : parts.getFirst();
                assertThat(gathered.shape()).as("%s at world %d", e.getKey(), dp).isEqualTo(e.getValue().shape());
                double[] want = e.getValue().toDoubleArray(), got = gathered.toDoubleArray();
                for (int i = 0; i < want.length; i++)
                    assertThat(Math.abs(got[i] - want[i])).as("%s[%d] at world %d", e.getKey(), i, dp).isLessThanOrEqualTo(1e-11 * Math.max(1e-3, Math.abs(want[i])));
            }
        }
    }

    /**
     * TP x DP and TP x FSDP on a 2 x 2 mesh: each rank holds its heads' part of every projection (tensor parallel over
     * "tp"), and of that, and of every tied weight, all or (FSDP) its half along "dp"; the losses are world 1's, and
     * each rank's final states (weights and moments) are its cut of world 1's final states.
     */
    @Test
    void tensorParallelTimesDataParallelTrainsAsOneRank() {
        Run one = train(1, DataParallel.REPLICATED);
        var wholeFinal = new HashMap<>(one.finalStates().getFirst());
        wholeFinal.remove("loss");
        for (DataParallel mode : DataParallel.values()) {
            Graph g = graph(2, 2, mode);
            Run mesh = train(2, 2, mode);
            for (int i = 0; i < STEPS; i++)
                assertThat(Math.abs(mesh.losses()[i] - one.losses()[i])).as("step %d: 2x2 %s %s vs world 1 %s", i, mode, mesh.losses()[i], one.losses()[i])
                        .isLessThanOrEqualTo(1e-11 * Math.abs(one.losses()[i]));
            assertThat(g.inputs().get("model.layers.0.self_attn.o_proj.weight").type().shape().sizes()).as("o_proj [16, 16]: half the columns (tp), of those all or half the rows (dp)")
                    .containsExactly(mode == DataParallel.FULLY_SHARDED ? 8L : 16L, 8L);
            for (int r = 0; r < 4; r++) {
                var want = LlamaTraining.rankWeights(TINY, g, wholeFinal, 2, r);
                for (var e : want.entrySet()) {
                    double[] w = e.getValue().toDoubleArray(), got = mesh.finalStates().get(r).get(e.getKey()).toDoubleArray();
                    assertThat(got.length).isEqualTo(w.length);
                    for (int i = 0; i < w.length; i++)
                        assertThat(Math.abs(got[i] - w[i])).as("%s rank %d: %s[%d]", mode, r, e.getKey(), i).isLessThanOrEqualTo(1e-11 * Math.max(1e-3, Math.abs(w[i])));
                }
            }
        }
    }

    @Test
    void mixedPrecisionGathersBf16CopiesOfF32Shards() {
        Graph g = LlamaTraining.graph(TINY, 1, TOKENS, 2, 1, DataParallel.FULLY_SHARDED, DType.F32, DType.BF16, Optimizers.adamW(1e-2), false);
        assertThat(g.inputs().get("model.norm.weight").type().dtype()).isEqualTo(DType.F32);
        assertThat(g.inputs().get("model.norm.weight").type().shape().sizes()).containsExactly(8L);
        var whole = LlamaTraining.initialWeights(graph(1, DataParallel.REPLICATED), 5, 0.02, DType.F32);
        var batch = LlamaTraining.batch(TINY, 2, TOKENS, 2, 3);
        try (var s = Session.compile(g, CompileOptions.world(2).backend("host"))) {
            var perRank = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < 2; r++) {
                s.bind(r, LlamaTraining.rankWeights(TINY, g, whole, 1, r));
                var in = new HashMap<>(batch.get(r));
                in.putAll(LlamaTraining.tables(TINY, TOKENS, DType.BF16));
                perRank.add(in);
            }
            double first = s.runToHost(perRank).getFirst().get("loss").get(0), last = first;
            for (int i = 0; i < 30; i++) last = s.runToHost(perRank).getFirst().get("loss").get(0);
            assertThat(last).isLessThan(first * 0.7);
        }
    }

    @Test
    void aTensorParallelDegreeThatSplitsAHeadIsRefused() {
        assertThatThrownBy(() -> graph(1, 3, DataParallel.FULLY_SHARDED)).isInstanceOf(GraphException.class)
                .hasMessageContaining("tensor-parallel degree of 3").hasMessageContaining("num_attention_heads (4)");
    }

    @Test
    void eachRankStoresItsShardAndThePlanGathersAndReduceScattersEveryWeight() {
        int dp = 4;
        Graph rep = graph(dp, DataParallel.REPLICATED), fsdp = graph(dp, DataParallel.FULLY_SHARDED);
        var wholeShapes = new ArrayList<List<Long>>();
        var gatheredShapes = new ArrayList<List<Long>>();   // a decoder layer's weights twice: again in the backward pass (reshard after forward)
        for (String name : LlamaTraining.initialWeights(rep, 1, 0.02, DType.F64).keySet()) {
            var shape = java.util.Arrays.stream(rep.inputs().get(name).type().shape().sizes()).boxed().toList();
            wholeShapes.add(shape);
            gatheredShapes.add(shape);
            if (name.startsWith("model.layers.")) gatheredShapes.add(shape);
        }
        try (var r = Session.compile(rep, CompileOptions.world(dp).backend("host"));
             var f = Session.compile(fsdp, CompileOptions.world(dp).backend("host"))) {
            long repBytes = stateBytes(r), fsdpBytes = stateBytes(f), count = 8;   // optimizer.step: one f64 whole on every rank
            assertThat(fsdpBytes - count).isEqualTo((repBytes - count) / dp);
            var gathered = new ArrayList<List<Long>>();
            var scattered = new ArrayList<List<Long>>();
            for (Step s : f.plan().steps())
                for (var c : s.collectives()) {
                    var shape = java.util.Arrays.stream(c.output().shape().sizes()).boxed().toList();
                    if (c.call().kind() == CollectiveKind.ALL_GATHER) gathered.add(shape);
                    if (c.call().kind() == CollectiveKind.REDUCE_SCATTER) {
                        assertThat(c.call().reduceOp()).isEqualTo(ReduceOp.AVG);
                        scattered.add(java.util.Arrays.stream(c.input().shape().sizes()).boxed().toList());
                    }
                }
            assertThat(gathered).as("an all_gather of each whole weight, a layer's again for the backward pass").containsExactlyInAnyOrderElementsOf(gatheredShapes);
            assertThat(scattered).as("one reduce_scatter of each weight's whole gradient").containsExactlyInAnyOrderElementsOf(wholeShapes);
            assertThat(r.plan().steps().stream().flatMap(s -> s.collectives().stream())
                    .filter(c -> c.call().kind() != CollectiveKind.ALL_REDUCE)).as("plain data parallelism gathers nothing").isEmpty();
        }
    }

    static long stateBytes(Session s) {
        return s.plan().states().stream().mapToLong(b -> b.type().byteSize()).sum();
    }

    @Test
    void aWeightWhoseRowsDoNotDivideByTheGroupIsRefusedByName() {
        assertThatThrownBy(() -> graph(3, DataParallel.FULLY_SHARDED)).isInstanceOf(GraphException.class)
                .hasMessageContaining("model.embed_tokens.weight").hasMessageContaining("does not divide by the 3 ranks");
    }
}
