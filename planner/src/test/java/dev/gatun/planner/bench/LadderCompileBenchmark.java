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
 * Warm lowering and planning of the host-scale ladder ({@link SyntheticGraphs#ladder}) at world 2: what
 * {@code Session.compile} does before it loads the plan on a backend (loading the host executable adds a few per cent).
 * {@code layers=12000} is the 60,000-op graph with 12,000 all-reduces; the graph is built in the setup.
 */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 10)
@Measurement(iterations = 10)
@Fork(value = 1, jvmArgs = {"-Xss16m", "-Xmx6g"})
public class LadderCompileBenchmark {
    @Param({"12000"})
    public int layers;

    private Graph graph;

    @Setup
    public void build() { graph = SyntheticGraphs.ladder(layers); }

    @Benchmark
    public Plan lowerAndPlan() { return Planner.plan(Lowering.lower(graph, LoweringOptions.world(2))); }
}
