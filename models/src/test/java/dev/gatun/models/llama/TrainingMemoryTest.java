package dev.gatun.models.llama;

import dev.gatun.dsl.Optimizers;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.models.llama.LlamaTraining.DataParallel;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Pool;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The memory goal on the training graph: the planner's arenas (the regular pool and any communication pool)
 * are within 1.05x of the max-live bound, the peak over the steps of the bytes of the buffers alive at once. The bound
 * is computed here from the plan's own slot history ({@link Plan#slots()}: each buffer's first and last step), not
 * taken from the planner's {@link Pool#maxLive()}: a buffer written in place over a dying one shares its slot and counts
 * once. The tiny Llama step at world 1, data parallel over 2 and fully sharded over 2, and a larger shape (more layers,
 * wider, longer sequences, mixed precision) planned only.
 */
class TrainingMemoryTest {
    static final LlamaConfig WIDER = new LlamaConfig(64, 4, 8, 4, 256, 128, 10000, 1e-5, false);

    @ParameterizedTest(name = "{0} layers, hidden {1}, dp {2}, {3}, {4} over {5}")
    @CsvSource({
            "2, 16, 1, REPLICATED, FLOAT64, FLOAT64", "2, 16, 2, REPLICATED, FLOAT64, FLOAT64", "2, 16, 2, FULLY_SHARDED, FLOAT64, FLOAT64",
            "4, 64, 1, REPLICATED, FLOAT64, FLOAT64", "4, 64, 2, FULLY_SHARDED, FLOAT64, FLOAT64", "4, 64, 4, FULLY_SHARDED, BFLOAT16, FLOAT32"})
    void theArenasAreWithinFivePercentOfMaxLive(int layers, int hidden, int dp, DataParallel mode, DType compute, DType master) {
        LlamaConfig c = hidden == 16 ? LlamaTrainingTest.TINY : WIDER;
        assertThat(c.layers()).isEqualTo(layers);
        int batch = hidden == 16 ? LlamaTrainingTest.SEQUENCES / dp : 4 / dp * 2, tokens = hidden == 16 ? LlamaTrainingTest.TOKENS : 32;
        Graph g = LlamaTraining.graph(c, batch, tokens, dp, 1, mode, master, compute, Optimizers.adamW(1e-2).clipGradNorm(1.0), false);
        Plan p = Planner.plan(Lowering.lower(g, LoweringOptions.world(dp)));
        int checked = 0;
        for (Pool pool : p.pools()) {
            if (pool.kind() != Pool.Kind.REGULAR && pool.kind() != Pool.Kind.COMM) continue;
            long maxLive = maxLive(p, pool.name());
            assertThat(maxLive).as("pool %s holds buffers", pool.name()).isPositive();
            assertThat(pool.maxLive()).as("the planner's own bound for pool %s", pool.name()).isEqualTo(maxLive);
            assertThat((double) pool.bytes()).as("pool %s: %d bytes against a max-live of %d", pool.name(), pool.bytes(), maxLive)
                    .isLessThanOrEqualTo(1.05 * maxLive);
            checked++;
        }
        assertThat(checked).as("a regular arena").isPositive();
    }

    /**
     * The peak over steps of the summed sizes of the pool's slots alive at that step (first to last step, both
     * included); an in-place chain (a slot that {@code reuses} the buffer it writes over) counts once, at its largest
     * live member.
     */
    static long maxLive(Plan p, String pool) {
        List<Plan.Slot> slots = p.slots().stream().filter(s -> s.pool().equals(pool)).toList();
        var rootOf = new HashMap<String, String>();
        for (Plan.Slot s : slots) {
            String name = s.buffer().name();
            rootOf.put(name, s.inPlace() ? rootOf.getOrDefault(s.reuses(), s.reuses()) : name);
        }
        int steps = p.steps().size();
        long peak = 0;
        for (int t = 0; t < steps; t++) {
            Map<String, Long> live = new HashMap<>();
            for (Plan.Slot s : slots)
                if (s.first() <= t && t <= s.last()) live.merge(rootOf.get(s.buffer().name()), s.bytes(), Math::max);
            long sum = 0;
            for (long b : live.values()) sum += b;
            peak = Math.max(peak, sum);
        }
        return peak;
    }
}
