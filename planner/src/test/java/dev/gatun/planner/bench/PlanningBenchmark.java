package dev.gatun.planner.bench;

import dev.gatun.lowering.LoweredGraph;
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

/** Warm planning time of synthetic graphs (chains and layers, see {@link SyntheticGraphs}); lowering is outside the timed part. */
@State(Scope.Benchmark)
@BenchmarkMode(Mode.SingleShotTime)
@OutputTimeUnit(TimeUnit.MILLISECONDS)
@Warmup(iterations = 10)
@Measurement(iterations = 8)
@Fork(value = 1, jvmArgs = {"-Xss16m", "-Xmx8g"})
public class PlanningBenchmark {
    @Param({"1000", "10000", "100000", "1000000"})
    public int nodes;

    private LoweredGraph graph;

    @Setup
    public void lower() { graph = PlannerBench.lowered(nodes); }

    @Benchmark
    public Plan plan() { return Planner.plan(graph); }
}
