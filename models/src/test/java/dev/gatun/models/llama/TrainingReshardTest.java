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
 * Resharding a training checkpoint to another world size ({@link StateCheckpoint#reshard}): the tiny Llama's states
 * (weights, AdamW moments, the step count) saved at one world and resumed at another, FSDP over the world. A world-1
 * run's checkpoint taken through world 2, 4 and back to 1 comes back byte for byte, and the resumed run's losses and
 * final states are the unbroken world-1 run's bit for bit. An FSDP world-2 checkpoint resumed at world 1 and 4 goes on
 * with world 1's losses (to the 1e-11 that separates FSDP worlds' sums from world 1's, {@link LlamaFsdpTest}), and at
 * world 2 again bit for bit with the unbroken world-2 run. What cannot be resharded is refused by name.
 */
class TrainingReshardTest {
    static final LlamaConfig TINY = LlamaTrainingTest.TINY;
    static final int STEPS = 6, HALF = 3;

    static Graph graph(int world) { return LlamaFsdpTest.graph(world, world == 1 ? DataParallel.REPLICATED : DataParallel.FULLY_SHARDED); }

    static Graph whole() { return graph(1); }

    static List<Map<String, NDArray>> inputs(int world) {
        var tables = LlamaTraining.tables(TINY, LlamaTrainingTest.TOKENS, DType.F64);
        var batch = LlamaTraining.batch(TINY, LlamaTrainingTest.SEQUENCES, LlamaTrainingTest.TOKENS, world, 11);
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) {
            var in = new HashMap<>(batch.get(r));
            in.putAll(tables);
            out.add(in);
        }
        return out;
    }

    /** A run of {@code steps} steps at {@code world} from {@code states} (per rank): each step's mean loss, and the last outputs. */
    record Run(double[] losses, List<Map<String, NDArray>> last) {}

    static Run run(int world, List<Map<String, NDArray>> states, int steps) {
        Graph g = graph(world);
        double[] losses = new double[steps];
        List<Map<String, NDArray>> out = List.of();
        try (var s = Session.compile(g, CompileOptions.world(world).backend("host"))) {
            for (int r = 0; r < world; r++) s.bind(r, states.get(r));
            var in = inputs(world);
            for (int i = 0; i < steps; i++) {
                out = s.runToHost(in);
                for (var rank : out) losses[i] += rank.get("loss").get(0) / world;
            }
        }
        return new Run(losses, out);
    }

    static List<Map<String, NDArray>> initial(int world) {
        var w = LlamaTraining.initialWeights(whole(), 7, 0.02, DType.F64);
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) out.add(LlamaTraining.rankWeights(TINY, graph(world), w, 1, r));
        return out;
    }

    static void save(Path dir, int world, List<Map<String, NDArray>> outputs) {
        for (int r = 0; r < world; r++) StateCheckpoint.save(dir, graph(world), r, world, outputs.get(r));
    }

    static List<Map<String, NDArray>> reshard(Path dir, int saved, int world) {
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) out.add(StateCheckpoint.reshard(dir, saved, whole(), graph(world), r, world));
        return out;
    }

    @Test
    void aWorldOneCheckpointThroughWorldsTwoAndFourResumesBitForBit(@TempDir Path dir) {
        Run straight = run(1, initial(1), STEPS);
        Run first = run(1, initial(1), HALF);
        save(dir.resolve("w1"), 1, first.last());
        save(dir.resolve("w2"), 2, reshard(dir.resolve("w1"), 1, 2));
        // world 2's files hold each rank's block of the saved whole states
        var saved = StateCheckpoint.load(dir.resolve("w1"), whole(), 0, 1);
        var block = StateCheckpoint.load(dir.resolve("w2"), graph(2), 1, 2);
        NDArray embed = saved.get("model.embed_tokens.weight");
        assertThat(block.get("model.embed_tokens.weight")).isEqualTo(embed.slice(0, embed.shape()[0] / 2, embed.shape()[0]));
        assertThat(block.get("optimizer.step")).isEqualTo(saved.get("optimizer.step"));
        save(dir.resolve("w4"), 4, reshard(dir.resolve("w2"), 2, 4));
        save(dir.resolve("back"), 1, reshard(dir.resolve("w4"), 4, 1));
        var back = StateCheckpoint.load(dir.resolve("back"), whole(), 0, 1);
        for (var e : saved.entrySet()) assertThat(back.get(e.getKey())).as("%s after worlds 2 and 4", e.getKey()).isEqualTo(e.getValue());
        Run resumed = run(1, List.of(back), STEPS - HALF);
        for (int i = 0; i < STEPS - HALF; i++)
            assertThat(resumed.losses()[i]).as("step %d", HALF + i).isEqualTo(straight.losses()[HALF + i]);
        for (var e : straight.last().getFirst().entrySet())
            assertThat(resumed.last().getFirst().get(e.getKey())).as("final %s", e.getKey()).isEqualTo(e.getValue());
    }

    @Test
    void anFsdpWorldTwoCheckpointResumesAtWorldsOneFourAndTwo(@TempDir Path dir) {
        Run one = run(1, initial(1), STEPS);
        Run two = run(2, initial(2), STEPS);
        save(dir, 2, run(2, initial(2), HALF).last());
        for (int world : new int[]{1, 4}) {
            Run resumed = run(world, reshard(dir, 2, world), STEPS - HALF);
            for (int i = 0; i < STEPS - HALF; i++)
                assertThat(Math.abs(resumed.losses()[i] - one.losses()[HALF + i])).as("step %d at world %d: %s vs world 1's %s", HALF + i, world,
                        resumed.losses()[i], one.losses()[HALF + i]).isLessThanOrEqualTo(1e-11 * Math.abs(one.losses()[HALF + i]));
        }
        Run again = run(2, reshard(dir, 2, 2), STEPS - HALF);
        for (int i = 0; i < STEPS - HALF; i++) assertThat(again.losses()[i]).as("step %d at world 2", HALF + i).isEqualTo(two.losses()[HALF + i]);
        for (int r = 0; r < 2; r++)
            for (var e : two.last().get(r).entrySet())
                assertThat(again.last().get(r).get(e.getKey())).as("rank %d final %s", r, e.getKey()).isEqualTo(e.getValue());
    }

    @Test
    void whatCannotBeReshardedIsRefusedByName(@TempDir Path dir) {
        var states = initial(2);
        for (int r = 0; r < 2; r++) {
            var values = new HashMap<>(states.get(r));
            for (String name : graph(2).states())   // the moments and the step count: zeros, as a session starts; rank 1's step count differs
                values.computeIfAbsent(name, n -> NDArray.zeros(DType.F64, graph(2).inputs().get(n).type().shape().sizes()));
            if (r == 1) values.put("optimizer.step", NDArray.of(new double[]{5}, 1));
            StateCheckpoint.save(dir, graph(2), r, 2, values);
        }
        assertThatThrownBy(() -> StateCheckpoint.loadWhole(dir, whole(), 2)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("'optimizer.step'").hasMessageContaining("rank 1");
        var whole = LlamaTraining.initialWeights(whole(), 7, 0.02, DType.F64);
        var other = new HashMap<>(whole);
        other.put("model.norm.weight", NDArray.zeros(DType.F64, 12));
        assertThatThrownBy(() -> StateCheckpoint.shard(graph(2), other, 0, 2)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("'model.norm.weight'").hasMessageContaining("f64[12]");
        Graph mesh = LlamaFsdpTest.graph(2, 2, DataParallel.FULLY_SHARDED);
        assertThatThrownBy(() -> StateCheckpoint.shard(mesh, whole, 0, 4)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("mesh");
        assertThatThrownBy(() -> StateCheckpoint.shard(graph(2), whole, 0, 4)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("2 ranks, not 4");
    }
}
