package dev.gatun.models.llama;

import dev.gatun.dsl.LossScale;
import dev.gatun.dsl.Optimizer;
import dev.gatun.dsl.Optimizers;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.models.llama.LlamaTraining.DataParallel;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The planner's state writes on the Llama training step: every state the optimizer rewrites (each weight, its two
 * moments, the step count) has its new value written straight into its slot by the update's kernel, so the plan has no
 * {@code snapshot} and no {@code update_slice} at all, at world 1 and fully sharded over 2 (mixed precision, f64,
 * recomputed layers, a loss scale, tensor parallel x FSDP), the plan's note counts them, and the regular arena no
 * longer holds the old values' copies. With in-place writes off the plan is as before: a snapshot and an update per
 * state. The values are {@link LlamaTrainingTest}'s, {@link LlamaFsdpTest}'s and {@link RecomputeTest}'s (run on the
 * host with the rule on, against the reference interpreter and world 1).
 */
class StateWritesPlanTest {
    static final LlamaConfig TINY = LlamaTrainingTest.TINY;

    static Plan plan(Graph g, int world, PlanOptions options) { return Planner.plan(Lowering.lower(g, LoweringOptions.world(world)), options); }

    static long count(Plan p, String op) {
        return p.steps().stream().flatMap(s -> s.parts().stream())
                .filter(s -> s instanceof Step.OpCall o && o.spec().name().equals(op) || op.equals("update_slice") && s instanceof Step.UpdateSlices)
                .count();
    }

    static long regularBytes(Plan p) {
        return p.pools().stream().filter(pool -> pool.kind() == Pool.Kind.REGULAR).mapToLong(Pool::bytes).sum();
    }

    @ParameterizedTest(name = "dp {0} x tp {1} {2}, {3} over {4}, recompute {5}, loss scale {6}")
    @CsvSource({
            "1, 1, REPLICATED, BFLOAT16, FLOAT32, false, false", "1, 1, REPLICATED, FLOAT64, FLOAT64, false, false",
            "2, 1, FULLY_SHARDED, BFLOAT16, FLOAT32, false, false", "2, 1, FULLY_SHARDED, FLOAT32, FLOAT32, false, false",
            "2, 1, FULLY_SHARDED, FLOAT64, FLOAT64, true, false", "2, 1, REPLICATED, FLOAT32, FLOAT32, false, false",
            "1, 1, REPLICATED, FLOAT16, FLOAT32, false, true", "2, 2, FULLY_SHARDED, FLOAT64, FLOAT64, false, false"})
    void everyOptimizerStateIsWrittenInPlace(int dp, int tp, DataParallel mode, DType compute, DType master, boolean recompute, boolean scaled) {
        Optimizer opt = Optimizers.adamW(1e-2).clipGradNorm(1.0);
        if (scaled) opt = opt.scaleLoss(LossScale.dynamic());
        Graph g = LlamaTraining.graph(TINY, 2, LlamaTrainingTest.TOKENS, dp, tp, mode, master, compute, opt, false, recompute ? Set.of(0, 1) : Set.of());
        int states = g.states().size();
        Plan on = plan(g, dp * tp, PlanOptions.DEFAULT), off = plan(g, dp * tp, PlanOptions.DEFAULT.withInPlace(false));
        assertThat(count(off, "snapshot")).as("snapshots with in-place writes off").isEqualTo(states);
        assertThat(count(off, "update_slice")).as("update_slices with in-place writes off").isEqualTo(states);
        assertThat(count(on, "snapshot")).as("snapshots in\n%s", on.notes()).isZero();
        assertThat(count(on, "update_slice")).as("update_slices in\n%s", on.notes()).isZero();
        assertThat(on.notes()).first().asString().startsWith("state writes: " + states + " of " + states + " snapshotted states written in place");
        long noted = on.steps().stream().flatMap(s -> s.parts().stream()).filter(s -> s instanceof Step.Launch)
                .flatMap(s -> ((Step.Launch) s).notes().stream()).filter(n -> n.contains("straight into state")).count();
        assertThat(noted).as("writer kernels' notes, one a state").isEqualTo(states);
        assertThat(regularBytes(on)).as("the regular arena without the old values' copies").isLessThan(regularBytes(off));
    }
}
