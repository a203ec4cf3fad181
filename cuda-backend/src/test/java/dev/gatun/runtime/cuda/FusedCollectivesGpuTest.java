package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;
import dev.gatun.runtime.host.FusedCollectivesHostTest;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.List;
import java.util.Map;
import java.util.Random;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Fused collective launches ({@code Step.FusedCollective}, {@link CollectiveCodegen}) with ranks sharing one GPU: the
 * seeds' graph in two launches over a thousand replays with ranks held back at random, and all-reduce + residual +
 * RMSNorm in one launch against float64.
 */
@RequiresGpu
class FusedCollectivesGpuTest {

    static CompileOptions shared(int world, dev.gatun.runtime.distributed.Rendezvous rv) {
        return CompileOptions.world(world).rank(rv).ranksPerGpu(world).timeout(java.time.Duration.ofSeconds(20));
    }

    /**
     * The seeds' graph with each all-reduce algorithm that fuses, 1,000 replays each with new inputs (x = rank + 1 + call),
     * a rank pausing before about one call in eight: every value the closed form's (exact in float), so bit for bit the
     * same on every rank.
     */
    @ParameterizedTest
    @ValueSource(ints = {2, 4})
    void theSeedsGraphInTwoLaunchesOverAThousandReplays(int world) {
        LocalWorld.run(world, rv -> {
            int rank = rv.rank();
            var random = new Random(17 + rank);
            for (Algorithm a : new Algorithm[]{null, Algorithm.ONE_SHOT, Algorithm.BARRIER_FREE}) {
                var options = shared(world, rv).cudaGraphs(true);
                if (a != null) options = options.forceAllReduce(a);
                try (var s = Session.compile(MultiGpuCheck.seedsGraph(8), options)) {
                    long launches = s.plan().steps().stream().filter(st -> st.isDeviceWork() && !(st instanceof Step.CopyIn)).count();
                    assertThat(launches).as(s.plan().toString()).isLessThanOrEqualTo(2);
                    assertThat(s.plan().steps()).anyMatch(st -> st instanceof Step.FusedCollective);
                    for (int call = 0; call < 1000; call++) {
                        if (random.nextInt(8) == 0) Thread.sleep(random.nextInt(3));
                        double sum = world * (world + 1) / 2.0 + (double) world * call;
                        float want = (float) (world * (3 * sum + 6 * world));
                        assertThat(s.runToHost(Map.of("x", NDArray.full(F32, rank + 1 + call, 8, 8))).get("d").toFloatArray())
                                .as("%s call %d rank %d", a, call, rank).containsOnly(want);
                    }
                }
            }
        });
    }

    /**
     * All-reduce + residual + RMSNorm in bf16, one launch, at hidden 4096 and 8192 and 1 to 256 tokens, against float64:
     * the one-shot and the barrier-free all-reduce (both fuse; above 512 KiB the automatic choice at 4 ranks is the
     * two-shot, which does not).
     */
    @ParameterizedTest
    @ValueSource(ints = {2, 4})
    void allReduceResidualAndRmsNormInOneLaunch(int world) {
        LocalWorld.run(world, rv -> {
            int rank = rv.rank();
            for (int hidden : new int[]{4096, 8192})
                for (int tokens : new int[]{1, 8, 64, 256})
                    for (Algorithm a : new Algorithm[]{Algorithm.ONE_SHOT, Algorithm.BARRIER_FREE}) {
                        Graph g = FusedCollectivesHostTest.arNorm(tokens, hidden);
                        NDArray residual = NDArray.randn(DType.BF16, 99, tokens, hidden), w = NDArray.randn(DType.BF16, 98, hidden);
                        double[][] x = new double[world][];
                        NDArray mine = null;
                        for (int r = 0; r < world; r++) {
                            NDArray xr = NDArray.randn(DType.BF16, 100 + r, tokens, hidden);
                            x[r] = xr.toDoubleArray();
                            if (r == rank) mine = xr;
                        }
                        try (var s = Session.compile(g, shared(world, rv).cudaGraphs(true).forceAllReduce(a))) {
                            assertThat(s.plan().steps().stream().filter(st -> st.isDeviceWork() && !(st instanceof Step.CopyIn)).toList())
                                    .as(s.plan().toString()).singleElement().isInstanceOf(Step.FusedCollective.class);
                            s.bind("w", w); // the weight bound once, as a model binds it (on this rank, whichever it is)
                            for (int call = 0; call < 3; call++) {
                                var got = s.runToHost(Map.of("x", mine, "residual", residual));
                                FusedCollectivesHostTest.checkArNorm(tokens + "x" + hidden + " " + a + " call " + call, x, residual.toDoubleArray(), w.toDoubleArray(), tokens, hidden,
                                        got.get("y").toDoubleArray(), got.get("h").toDoubleArray());
                            }
                        }
                    }
        });
    }
}
