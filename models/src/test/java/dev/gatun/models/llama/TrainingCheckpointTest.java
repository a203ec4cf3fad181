package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.models.llama.LlamaTraining.DataParallel;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.StateCheckpoint;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Saving a training run's states a file a rank ({@link StateCheckpoint}) and resuming in a new session continues it bit
 * for bit: the tiny Llama with FSDP at world 2 (sharded weights and moments, the step count), six AdamW steps straight
 * against three, a save, a fresh session, a load and three more: every loss and every final state byte-identical. A
 * file of another world, graph or a tampered one is refused by name.
 */
class TrainingCheckpointTest {
    static final LlamaConfig TINY = LlamaTrainingTest.TINY;
    static final int WORLD = 2, STEPS = 6;

    private static Graph graph() {
        return LlamaTraining.graph(TINY, LlamaTrainingTest.SEQUENCES / WORLD, LlamaTrainingTest.TOKENS, WORLD, 1, DataParallel.FULLY_SHARDED,
                DType.F64, DType.F64, dev.gatun.dsl.Optimizers.adamW(1e-2).clipGradNorm(1.0), true);
    }

    private static List<Map<String, NDArray>> inputs() {
        var tables = LlamaTraining.tables(TINY, LlamaTrainingTest.TOKENS, DType.F64);
        var batch = LlamaTraining.batch(TINY, LlamaTrainingTest.SEQUENCES, LlamaTrainingTest.TOKENS, WORLD, 11);
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < WORLD; r++) {
            var in = new HashMap<>(batch.get(r));
            in.putAll(tables);
            out.add(in);
        }
        return out;
    }

    private static void bindInitial(Session s, Graph g) {
        var whole = LlamaTraining.initialWeights(LlamaFsdpTest.graph(1, DataParallel.REPLICATED), 7, 0.02, DType.F64);
        for (int r = 0; r < WORLD; r++) s.bind(r, LlamaTraining.rankWeights(TINY, g, whole, 1, r));
    }

    @Test
    void aResumedRunContinuesBitForBit(@TempDir Path dir) {
        Graph g = graph();
        var in = inputs();
        var straight = new ArrayList<List<Map<String, NDArray>>>();
        try (var s = Session.compile(g, CompileOptions.world(WORLD).backend("host"))) {
            bindInitial(s, g);
            for (int step = 0; step < STEPS; step++) straight.add(s.runToHost(in));
        }
        try (var s = Session.compile(g, CompileOptions.world(WORLD).backend("host"))) {
            bindInitial(s, g);
            List<Map<String, NDArray>> out = null;
            for (int step = 0; step < STEPS / 2; step++) out = s.runToHost(in);
            for (int r = 0; r < WORLD; r++) StateCheckpoint.save(dir, g, r, WORLD, out.get(r));
        }
        try (var s = Session.compile(g, CompileOptions.world(WORLD).backend("host"))) {
            for (int r = 0; r < WORLD; r++) s.bind(r, StateCheckpoint.load(dir, g, r, WORLD));
            for (int step = STEPS / 2; step < STEPS; step++) {
                var out = s.runToHost(in);
                for (int r = 0; r < WORLD; r++)
                    for (var e : straight.get(step).get(r).entrySet())
                        assertThat(bytes(out.get(r).get(e.getKey()))).as("step %d rank %d %s", step, r, e.getKey()).isEqualTo(bytes(e.getValue()));
            }
        }
        assertThat(g.states()).contains("optimizer.step").anyMatch(n -> n.endsWith(".exp_avg_sq"));
    }

    @Test
    void aFileOfAnotherWorldOrGraphOrMissingAStateIsRefusedByName(@TempDir Path dir) {
        Graph g = graph();
        var values = new HashMap<String, NDArray>();
        for (String name : g.states()) {
            var t = g.inputs().get(name).type();
            values.put(name, NDArray.zeros(t.dtype(), t.shape().sizes()));
        }
        StateCheckpoint.save(dir, g, 0, WORLD, values);
        assertThatThrownBy(() -> StateCheckpoint.load(dir, g, 0, 4)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("no file");
        Graph other = LlamaFsdpTest.graph(1, DataParallel.REPLICATED);
        var missing = new HashMap<>(values);
        String dropped = missing.keySet().iterator().next();
        missing.remove(dropped);
        assertThatThrownBy(() -> StateCheckpoint.save(dir, g, 1, WORLD, missing)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("'" + dropped + "'");
        var wrong = new HashMap<>(values);
        wrong.put(dropped, NDArray.zeros(DType.F32, 3));
        assertThatThrownBy(() -> StateCheckpoint.save(dir, g, 1, WORLD, wrong)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("'" + dropped + "'").hasMessageContaining("f32[3]");
        // a file of the whole-weights graph at world 1 read as the sharded graph's (its states' shapes differ)
        StateCheckpoint.save(dir.resolve("one"), other, 0, 1, zeros(other));
        assertThatThrownBy(() -> StateCheckpoint.load(dir.resolve("one"), g, 0, 1)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("StateCheckpoint.load");
    }

    private static Map<String, NDArray> zeros(Graph g) {
        var values = new HashMap<String, NDArray>();
        for (String name : g.states()) {
            var t = g.inputs().get(name).type();
            values.put(name, NDArray.zeros(t.dtype(), t.shape().sizes()));
        }
        return values;
    }

    private static byte[] bytes(NDArray a) { return a.segment().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE); }
}
