package dev.gatun.models.llama;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.Realization;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The launches of expert parallelism's dispatch and combine ({@link ExpertParallel#layer} with the trivial expert of
 * {@code MoeBench}: local expert i scales its rows by i + 1), planned as the CUDA backend plans them (2 MiB
 * communication granularity, an H200). Each all_to_all's inputs are written into symmetric memory by the op that makes
 * them (lowering's path 1 for a registered op's output and a collective's result), the sent rows are picked from the
 * tokens themselves (no [N * k, H] copy first), and the routing's index arithmetic is one pointwise launch over the ids'
 * shape; the pairs are ordered by counting (two row reductions, no sort, no index_select of the ids); the combine's
 * weighted sum over k computes the products and the weights' cast itself (lowering: a value only a narrow sum reads,
 * and a small value read only broadcast). At the bench's shape (128 tokens a rank, hidden 4096, bf16, top-2 of 8
 * experts, world 2) that is 11 device launches where the plan before these rules had 22 (three identity copies into
 * symmetric memory, the expanded copy of x, two of the four index kernels, the two sorts and their key kernel, the
 * ids' index_select, the weights' cast and the products before the sum, the expert's scale of its ids; one row
 * reduction more); and 9 once the dispatch's three all_to_alls (the rows, their counts, each row's local expert), which
 * read only what the kernels before wrote, run as one step with one barrier pair (CollectivePasses). The values are {@link ExpertParallelTest}'s (float64 loops and the reference
 * interpreter, worlds 1 to 4, skewed and empty experts) and {@code MoeBenchTest}'s (the bench's own graph in bf16).
 */
class ExpertParallelPlanTest {
    static Graph dispatchCombine(int world, int tokens, int hidden, int experts, int k, DType dtype) {
        GraphBuilder g = Gatun.graph("moe_dispatch_combine").mesh("ep", world);
        Tensor x = g.input("x", dtype, tokens, hidden), w = g.input("weights", DType.F32, tokens, k), ids = g.input("ids", DType.I64, tokens, k);
        long capacity = (long) tokens * k * world;
        g.output("y", ExpertParallel.layer(g, x, w, ids, experts, "ep", world, capacity, (rows, local) -> {
            long cap = rows.shape().sizes()[0];
            return rows.mul(local.reshape(cap, 1).add(g.scalar(1, DType.I64)).cast(dtype));
        }));
        return g.build();
    }

    static Plan cudaPlan(Graph graph, int world) {
        var options = CompileOptions.world(world);
        return Planner.plan(Lowering.lower(graph, options.lowering()),
                options.planning().withCommGranularity(2L << 20).withTarget(PlanOptions.Target.H200));
    }

    static List<Step> launches(Plan p) { return p.steps().stream().filter(Step::isDeviceWork).toList(); }

    @Test
    void theBenchShapeDispatchesAndCombinesInNineLaunches() {
        Plan p = cudaPlan(dispatchCombine(2, 128, 4096, 8, 2, DType.BF16), 2);
        var steps = launches(p);
        assertThat(steps).as(p.toString()).hasSize(9);
        // the four all_to_alls (rows, counts, ids: one step, one barrier pair; results back), the rows' index_select, six kernels: no sort
        assertThat(steps.stream().flatMap(s -> s.collectives().stream()).filter(c -> c.call().kind() == CollectiveKind.ALL_TO_ALL)).hasSize(4);
        var dispatch = steps.stream().filter(s -> s instanceof Step.JoinedAllToAll).map(s -> (Step.JoinedAllToAll) s).toList();
        assertThat(dispatch).singleElement().satisfies(j -> {
            assertThat(j.members()).hasSize(3);
            assertThat(j.why()).isEqualTo("three all_to_alls of group \"ep\" with no path between them: one barrier pair");
            // the rows and each row's expert pushed into receive buffers by the same counts, the counts pulled
            assertThat(j.members()).filteredOn(c -> c.uneven() && c.output().isSymmetric()).hasSize(2);
            assertThat(j.members()).filteredOn(c -> !c.uneven()).hasSize(1);
        });
        assertThat(p.explain()).contains(" joined: three all_to_alls of group \"ep\" with no path between them: one barrier pair");
        // the combine reads what the dispatch received (its counts): a path, so it stays apart, and the plan says so only
        // where they are adjacent (here a kernel comes between)
        assertThat(steps.stream().filter(s -> s instanceof Step.Collective c && c.call().kind() == CollectiveKind.ALL_TO_ALL)).hasSize(1);
        assertThat(dev.gatun.planner.testing.PlanChecksAccess.all(p)).as(p.toString()).isEmpty();
        assertThat(steps.stream().filter(s -> s instanceof Step.OpCall)).hasSize(1);
        assertThat(steps.stream().filter(s -> s instanceof Step.Launch)).hasSize(6);
        // the expert's scale of its received ids computed by its product, which reads the receive buffer itself
        assertThat(p.lowered().decisions()).anyMatch(d -> d.contains("add: not made; its readers, pointwise loops at least 16 times its size"));
        // the combine is one kernel: the weights' cast and the weighted products computed inside the sum over k, which
        // reads the rows sent back through the inverse order (gather fusion)
        var combine = (Step.Launch) steps.getLast();
        assertThat(combine.kernel().inputs()).extracting(b -> b.name()).contains("weights");
        assertThat(combine.notes()).anyMatch(n -> n.contains("through its indices (gather fusion)"));
        assertThat(p.lowered().decisions()).anyMatch(d -> d.contains("not made; the narrow sum that alone reads it"))
                .anyMatch(d -> d.contains("cast: not made; its readers, pointwise loops at least 16 times its size"));
        noCopies(p);
        // nothing of [N * k, H] is made in regular memory before the dispatch: the picked rows go straight into the pool
        assertThat(p.toString()).contains("= index_select(x, ");
        for (Step s : steps)
            if (s instanceof Step.Launch l) assertThat(l.kernel().inputs()).as(l.kernel().name()).noneMatch(b -> b.name().equals("x"));
    }

    @Test
    void randomShapesAtWorldsOneToFourCopyNothingIntoSymmetricMemory() {
        var rnd = new Random(38);
        for (int i = 0; i < 16; i++) {
            int world = 1 + i % 4, local = 1 + rnd.nextInt(3), k = 1 + rnd.nextInt(Math.min(3, world * local)), tokens = 1 + rnd.nextInt(40);
            int hidden = 1 + rnd.nextInt(64);
            DType dtype = rnd.nextBoolean() ? DType.BF16 : DType.F32;
            Plan p = cudaPlan(dispatchCombine(world, tokens, hidden, world * local, k, dtype), world);
            noCopies(p);
            assertThat(launches(p).size()).as("world %d, %d tokens of %d, top-%d of %d: %s", world, tokens, hidden, k, world * local, p)
                    .isLessThanOrEqualTo(10);   // 9, and one more where hidden < 16 (the expert's scale is not read 16 times over)
            if (world > 1) assertThat(p.steps()).as(p.toString()).anyMatch(s -> s instanceof Step.JoinedAllToAll j && j.members().size() == 3);
            assertThat(dev.gatun.planner.testing.PlanChecksAccess.all(p)).as(p.toString()).isEmpty();
        }
    }

    /** Every all_to_all input is written where the collective reads it (path 1), and no kernel only copies. */
    private static void noCopies(Plan p) {
        for (Realization r : p.lowered().realizations())
            if (r.algorithm() != null && r.algorithm().isSymmetric()) assertThat(r.path()).as(r.consumer() + " input " + r.input() + ": " + r.notTaken()).isEqualTo(Realization.Path.ZERO_COPY);
        for (Step s : p.steps())
            if (s instanceof Step.Launch l) assertThat(l.kernel().name()).as(p.toString()).doesNotStartWith("copy_");
    }
}
