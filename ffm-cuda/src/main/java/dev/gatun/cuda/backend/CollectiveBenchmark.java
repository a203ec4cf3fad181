package dev.gatun.cuda.backend;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.lower.Algorithm;
import dev.gatun.ir.lower.Lowering;
import dev.gatun.planner.Planner;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;

import java.util.Locale;
import java.util.Map;

import static dev.gatun.ir.graph.ReduceOp.SUM;

/**
 * The multi-GPU benchmark command (run by gatun-run, one JVM per GPU): per-call latency of all-reduce at
 * 8x8 .. 4096x4096 float32 with Gatun's one-shot, two-shot and NCCL, under CUDA-graph replay and eagerly, and
 * the seeds' graph per call. Each cell is the median of N timed calls after 50 warm-ups: host wall time from
 * enqueue to completion, and device time between events. Rank 0 prints the table.
 *
 * <p>Arguments: [iterations, default 200] [dtype, default f32].
 */
public final class CollectiveBenchmark {
    private CollectiveBenchmark() {}

    public static void main(String[] args) {
        int iters = args.length > 0 ? Integer.parseInt(args[0]) : 200;
        DType t = args.length > 1 ? DType.parse(args[1]) : DType.F32;
        var rv = Distributed.rendezvous();
        int rank = rv.rank(), world = rv.worldSize();
        Watchdog.startFromEnvironment("rank " + rank);
        long[] sides = {8, 64, 256, 512, 1024, 4096};
        if (rank == 0) {
            System.out.printf(Locale.ROOT, "all-reduce %s, %d ranks, median of %d calls (us): wall = enqueue to completion, dev = events%n", t, world, iters);
            System.out.printf(Locale.ROOT, "%-10s %10s | %9s %9s | %9s %9s | %9s %9s | %9s%n", "shape", "bytes", "1shot wall", "dev", "2shot wall", "dev",
                    "nccl wall", "dev", "auto");
        }
        for (long side : sides) {
            var g = Gatun.graph("allreduce");
            var x = g.input("x", t, side, side);
            g.output("y", x.allReduce(SUM));
            Graph graph = g.build();
            var in = Map.of("x", NDArray.random(t, rank + 1, side, side));
            double[] cells = new double[6];
            int c = 0;
            for (Algorithm a : new Algorithm[]{Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL}) {
                double[][] r = time(graph, CompileOptions.world(world).forceAllReduce(a).timeout(java.time.Duration.ofSeconds(20)), in, iters);
                cells[c++] = r[2][iters / 2] * 1e3;
                cells[c++] = r[0][iters / 2] * 1e3;
            }
            String auto = Lowering.lower(graph, CompileOptions.world(world).lowering()).realizations().getFirst().algorithm().opName();
            if (rank == 0)
                System.out.printf(Locale.ROOT, "%-10s %10d | %9.1f %9.1f | %9.1f %9.1f | %9.1f %9.1f | %9s%n", side + "x" + side,
                        side * side * t.byteSize(), cells[0], cells[1], cells[2], cells[3], cells[4], cells[5], auto);
        }
        if (rank == 0) System.out.printf(Locale.ROOT, "%nseeds graph (4 all-reduces), %d ranks, median us per call%n%-10s %12s %12s %12s%n",
                world, "shape", "replay wall", "replay dev", "eager wall");
        for (long side : new long[]{4, 64, 256, 1024}) {
            var g = Gatun.graph("seeds");
            var x = g.input("x", DType.F32, side, side);
            g.output("d", x.add(1).allReduce(SUM).add(x.add(2).allReduce(SUM)).add(x.add(3).allReduce(SUM)).allReduce(SUM));
            var in = Map.of("x", NDArray.full(DType.F32, rank + 1, side, side));
            double[][] replay = time(g.build(), CompileOptions.world(world), in, iters);
            double[][] eager = time(g.build(), CompileOptions.world(world).cudaGraphs(false), in, iters);
            if (rank == 0) System.out.printf(Locale.ROOT, "%-10s %12.1f %12.1f %12.1f%n", side + "x" + side,
                    replay[2][iters / 2] * 1e3, replay[0][iters / 2] * 1e3, eager[2][iters / 2] * 1e3);
        }
        System.out.flush();
        rv.close();
        System.exit(0);
    }

    static double[][] time(Graph g, CompileOptions options, Map<String, NDArray> in, int iters) {
        var plan = Planner.plan(Lowering.lower(g, options.lowering()), options.planning().withCommGranularity(CudaBackend.GRANULARITY));
        try (var exe = new CudaExecutable(plan, options, CudaBackend.localRank(options))) {
            return exe.timeDevice(in, 50, iters);
        }
    }
}
