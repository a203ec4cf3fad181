package dev.gatun.runtime.host;

import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.TestInputs;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentHashMap;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The plan printout is the truth: on random graphs, every simulated rank of the host backend runs exactly the
 * steps the plan prints, in the printed order, nothing skipped, nothing added (collective batches and fused
 * copy-ins included, since they are plan steps too).
 */
class PlanIsWhatRunsTest {

    /** The printed step lines: the plan's text without its header, pool declarations, partition markers and return. */
    static List<String> printedSteps(Plan plan) {
        var lines = plan.toString().lines().skip(1).map(String::strip).toList();
        var out = new ArrayList<String>();
        for (String l : lines) {
            if (l.startsWith("# --- capture partition") || l.startsWith("return ")) continue;
            if (plan.pools().stream().anyMatch(p -> l.startsWith(p.name() + " = alloc"))) continue;
            out.add(l);
        }
        return out;
    }

    /** A step's text as the plan prints it: its launch choices (a row kernel's form, say) at the end of its first line. */
    static String withChoice(String format, String choice) {
        if (choice.isEmpty()) return format;
        int nl = format.indexOf('\n');
        return nl < 0 ? format + "   # launch: " + choice : format.substring(0, nl) + "   # launch: " + choice + format.substring(nl);
    }

    static Graph threeAllReduces() {
        var g = dev.gatun.dsl.Gatun.graph("three");
        var x = g.input("x", dev.gatun.ir.DType.FLOAT32, 4, 4);
        var s = x.add(1).allReduce(dev.gatun.ir.graph.ReduceOp.SUM).add(x.add(2).allReduce(dev.gatun.ir.graph.ReduceOp.SUM))
                .add(x.add(3).allReduce(dev.gatun.ir.graph.ReduceOp.SUM));
        g.output("d", s.allReduce(dev.gatun.ir.graph.ReduceOp.SUM));
        return g.build();
    }

    static Graph inputAllReduce() {
        var g = dev.gatun.dsl.Gatun.graph("input_all_reduce");
        var x = g.input("x", dev.gatun.ir.DType.FLOAT32, 8, 8);
        g.output("y", x.allReduce(dev.gatun.ir.graph.ReduceOp.SUM).mul(2));
        return g.build();
    }

    @Test
    void everyRankRunsExactlyThePrintedStepsInOrder() {
        int graphs = 0, batches = 0, fused = 0, withKernels = 0;
        for (long seed = -2; seed < 120; seed++) {
            int world = seed < 0 ? 2 : 1 + (int) (seed % 4);
            // two hand-made graphs first: three independent all-reduces (a batch), an input's all-reduce (a fused copy-in)
            Graph g = seed == -2 ? threeAllReduces() : seed == -1 ? inputAllReduce()
                    : RandomGraphs.generate(seed, RandomGraphs.Options.defaults().withWorldSize(world));
            var options = CompileOptions.world(world).backend("host");
            Plan plan = Planner.plan(Lowering.lower(g, options.lowering()), options.planning());
            var executed = new ConcurrentHashMap<Integer, List<Step>>();
            try (var exe = new HostExecutable(plan, options)) {
                exe.trace = (rank, step) -> executed.computeIfAbsent(rank, r -> java.util.Collections.synchronizedList(new ArrayList<>())).add(step);
                exe.run(TestInputs.of(g, seed, world));
            }
            List<String> printed = printedSteps(plan);
            assertThat(executed.keySet()).as("seed %d: every rank ran", seed).hasSize(world);
            for (int rank = 0; rank < world; rank++) {
                var ran = executed.get(rank);
                // pool allocations print as the plan's pool declarations at the top, every other step as a line of its own
                var pools = ran.stream().filter(s -> s instanceof Step.AllocPool).map(s -> ((Step.AllocPool) s).pool().name()).toList();
                assertThat(pools).as("seed %d rank %d: pools", seed, rank).containsExactlyElementsOf(plan.pools().stream().map(p -> p.name()).toList());
                // a step's notes print as lines of their own under it
                var lines = ran.stream().filter(s -> !(s instanceof Step.AllocPool)).flatMap(s -> withChoice(s.format(), plan.choice(s).describe()).lines().map(String::strip)).toList();
                assertThat(lines).as("seed %d rank %d:\n%s", seed, rank, plan).containsExactlyElementsOf(printed);
            }
            graphs++;
            batches += (int) plan.steps().stream().filter(s -> s instanceof Step.CollectiveBatch
                    || s instanceof Step.FusedCollective f && f.collective() instanceof Step.CollectiveBatch).count();
            fused += (int) plan.steps().stream().flatMap(s -> s.collectives().stream()).filter(Step.Collective::copiesIn).count();
            withKernels += (int) plan.steps().stream().filter(s -> s instanceof Step.FusedCollective).count();
        }
        assertThat(graphs).isEqualTo(122);
        // the random graphs exercise the collective passes, so their steps are among those compared
        assertThat(batches).as("collective batches seen").isPositive();
        assertThat(fused).as("fused copy-ins seen").isPositive();
        assertThat(withKernels).as("collectives fused with their kernels seen").isPositive();
    }
}
