package dev.gatun.models.llama;

import dev.gatun.dsl.Optimizers;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The host acceptance for training: a tiny Llama-architecture model trained 50 steps of AdamW (clipped at 1.0)
 * on a fixed random batch of 4 sequences, in float64, at world 1 and with data parallelism at world 2 and 4 (each rank
 * half or a quarter of the batch, the gradients averaged): the same losses at every world size, and the same as the
 * reference interpreter (no lowering, no planning) carrying the states from step to step; the loss falls.
 */
class LlamaTrainingTest {
    static final LlamaConfig TINY = new LlamaConfig(16, 2, 4, 2, 32, 32, 10000, 1e-5, false);
    static final int SEQUENCES = 4, TOKENS = 8, STEPS = 50;

    static Graph graph(int dp, boolean states) {
        return LlamaTraining.graph(TINY, SEQUENCES / dp, TOKENS, dp, DType.F64, DType.F64, Optimizers.adamW(1e-2).clipGradNorm(1.0), states);
    }

    /** The world's mean loss of each step, from a compiled session of {@code dp} ranks. */
    static double[] sessionLosses(int dp) {
        Graph g = graph(dp, false);
        var weights = LlamaTraining.initialWeights(g, 7, 0.02, DType.F64);
        var tables = LlamaTraining.tables(TINY, TOKENS, DType.F64);
        var batch = LlamaTraining.batch(TINY, SEQUENCES, TOKENS, dp, 11);
        double[] losses = new double[STEPS];
        try (var s = Session.compile(g, CompileOptions.world(dp).backend("host"))) {
            var perRank = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < dp; r++) {
                s.bind(r, weights);
                var in = new HashMap<>(batch.get(r));
                in.putAll(tables);
                perRank.add(in);
            }
            for (int step = 0; step < STEPS; step++) {
                var out = s.runToHost(perRank);
                for (var rank : out) losses[step] += rank.get("loss").get(0) / dp;
            }
        }
        return losses;
    }

    @Test
    void dataParallelWorldsTrainAsOneAndAsTheReferenceInterpreter() {
        double[] one = sessionLosses(1);
        assertThat(one[STEPS - 1]).as("the loss falls: %s", java.util.Arrays.toString(one)).isLessThan(one[0] * 0.5);
        double[] ref = referenceLosses();
        for (int i = 0; i < STEPS; i++) assertThat(one[i]).as("step %d: session vs reference interpreter", i).isCloseTo(ref[i], org.assertj.core.data.Offset.offset(1e-11));
        for (int dp : new int[]{2, 4}) {
            double[] many = sessionLosses(dp);
            for (int i = 0; i < STEPS; i++) assertThat(many[i]).as("step %d: world %d vs world 1", i, dp).isCloseTo(one[i], org.assertj.core.data.Offset.offset(1e-11));
        }
    }

    /** The reference interpreter at world 1, the states carried by hand: each step's outputs are the next step's states. */
    static double[] referenceLosses() {
        Graph g = graph(1, true);
        var in = new HashMap<String, NDArray>(LlamaTraining.tables(TINY, TOKENS, DType.F64));
        in.putAll(LlamaTraining.batch(TINY, SEQUENCES, TOKENS, 1, 11).getFirst());
        for (String state : g.states()) in.put(state, NDArray.zeros(g.inputs().get(state).type().dtype(), g.inputs().get(state).type().shape().sizes()));
        in.putAll(LlamaTraining.initialWeights(g, 7, 0.02, DType.F64));
        var interpreter = new ReferenceInterpreter(g);
        double[] losses = new double[STEPS];
        for (int step = 0; step < STEPS; step++) {
            var out = interpreter.run(in);
            losses[step] = out.get("loss").get(0);
            for (String state : g.states()) in.put(state, out.get(state));
        }
        return losses;
    }

    @Test
    void mixedPrecisionTrainsWithBf16ComputeOverF32Masters() {
        Graph g = LlamaTraining.graph(TINY, 2, TOKENS, 1, DType.F32, DType.BF16, Optimizers.adamW(1e-2), false);
        assertThat(g.inputs().get("model.norm.weight").type().dtype()).isEqualTo(DType.F32);
        var in = new HashMap<String, NDArray>(LlamaTraining.tables(TINY, TOKENS, DType.BF16));
        in.putAll(LlamaTraining.batch(TINY, 2, TOKENS, 1, 3).getFirst());
        try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
            s.bind(0, LlamaTraining.initialWeights(g, 5, 0.02, DType.F32));
            double first = s.runToHost(in).get("loss").get(0), last = first;
            for (int i = 0; i < 30; i++) last = s.runToHost(in).get("loss").get(0);
            assertThat(last).isLessThan(first * 0.7);
        }
    }

    @Test
    void configurationsTheGraphDoesNotBuildAreRefusedByName() {
        var biased = new LlamaConfig(16, 1, 4, 2, 32, 32, 10000, 1e-5, false, null, 4, 0, new LlamaConfig.Biases(true, false, false), false, 4, false, null);
        assertThatThrownBy(() -> LlamaTraining.graph(biased, 1, 4, 1, DType.F64, DType.F64, Optimizers.adamW(), false))
                .isInstanceOf(GraphException.class).hasMessageContaining("LlamaTraining").hasMessageContaining("biases");
        assertThatThrownBy(() -> LlamaTraining.batch(TINY, 3, 4, 2, 1)).isInstanceOf(GraphException.class).hasMessageContaining("do not split evenly");
    }
}
