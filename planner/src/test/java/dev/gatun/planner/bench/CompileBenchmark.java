package dev.gatun.planner.bench;

import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Fork;
import org.openjdk.jmh.annotations.Measurement;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.Warmup;

import java.util.concurrent.TimeUnit;

/**
 * Warm lowering and planning at world 2 of the two graphs the planning-time targets name: {@code ladder-60k}, the
 * 60,000-op ladder with 12,000 all-reduces ({@link SyntheticGraphs#ladder}), and {@code mixed-100k}, 100,000 nodes of
 * elementwise chains, matmuls, reductions and collectives ({@link SyntheticGraphs#mixed}). The graph is built in the
 * setup, outside the timed part. What {@code Session.compile} does before it loads the plan on a backend.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 10)
@Measurement(iterations = 10)
@Fork(value = 2, jvmArgs = {"-Xss16m", "-Xmx6g"})
public class CompileBenchmark {
    @Param({"ladder-60k", "mixed-100k"})
    public String graph;

    private Graph g;

    @Setup
    public void build() {
        g = switch (graph) {
            case "ladder-60k" -> SyntheticGraphs.ladder(12_000);
            case "mixed-100k" -> SyntheticGraphs.mixed(100_000, 42);
            default -> throw new IllegalStateException("unknown graph " + graph + "; ladder-60k or mixed-100k");
        };
    }

    @Benchmark
    public Plan lowerAndPlan() { return Planner.plan(Lowering.lower(g, LoweringOptions.world(2))); }
}
