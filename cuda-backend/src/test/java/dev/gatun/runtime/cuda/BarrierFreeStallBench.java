package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;

import java.time.Duration;
import java.util.Arrays;
import java.util.Locale;
import java.util.Map;

import static dev.gatun.ir.graph.ReduceOp.SUM;

/**
 * A reproducer for the barrier-free all-reduce's stall (a median of milliseconds at 4 MiB where its p10 is tens of
 * microseconds, on two H200s): every rank a thread of this process, all on this machine's one GPU ({@code ranksPerGpu}),
 * the all-reduce of a device-resident input replayed as a CUDA graph, each call synchronized and timed on its own
 * (the latency's spread: p10, median, p90, max, and how many calls took more than ten times the p10), then calls back
 * to back in batches of 50 (the pipelined time a call). Barrier-free and one-shot side by side, f32 and bf16.
 * Arguments: [world, default 2] [calls, default 2000] [sizes in bytes, default 256,16384,1048576,4194304] [ranks a GPU,
 * default the world: all on GPU 0; 1 on a machine with a GPU a rank]. {@code GATUN_FENCE_SC=1} fences the pushes.
 *
 * <p>On one H200 with two ranks (2026-11-29) there is no stall: every cell's median is within 1.25x of its p10 for both
 * algorithms (the odd slow call, up to 8 ms, comes to both alike: the host's). What stalls on two GPUs is therefore in
 * what crosses NVLink: the pushes' stores to a peer, or the polling beside them.
 *
 * <p>Run on a GPU machine with {@code bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.BarrierFreeStallBench}.
 */
public final class BarrierFreeStallBench {
    private BarrierFreeStallBench() {}

    public static void main(String[] args) {
        int world = args.length > 0 ? Integer.parseInt(args[0]) : 2;
        int calls = args.length > 1 ? Integer.parseInt(args[1]) : 2000;
        long[] sizes = Arrays.stream((args.length > 2 ? args[2] : "256,16384,1048576,4194304").split(",")).mapToLong(Long::parseLong).toArray();
        int perGpu = args.length > 3 ? Integer.parseInt(args[3]) : world;
        for (DType t : new DType[]{DType.F32, DType.BF16})
            for (long bytes : sizes)
                for (Algorithm a : new Algorithm[]{Algorithm.BARRIER_FREE, Algorithm.ONE_SHOT})
                    cell(world, perGpu, calls, t, bytes, a);
        System.exit(0);
    }

    static void cell(int world, int perGpu, int calls, DType t, long bytes, Algorithm a) {
        long n = bytes / t.byteSize();
        var g = Gatun.graph("ar");
        g.output("y", g.input("x", t, n).allReduce(SUM));
        var graph = g.build();
        String[] lines = new String[world];
        LocalWorld.run(world, Duration.ofMinutes(5), rv -> {
            var options = CompileOptions.world(world).rank(rv).ranksPerGpu(perGpu).forceAllReduce(a).cudaGraphs(true).timeout(Duration.ofSeconds(20));
            try (var s = Session.compile(graph, options)) {
                NDArray host = NDArray.full(t, rv.rank() + 1, n);
                try (DeviceArray x = s.toDevice(host)) {
                    var in = Map.of("x", x);
                    for (int i = 0; i < 50; i++) s.run(in);
                    s.synchronize();
                    double want = world * (world + 1) / 2.0;
                    NDArray y = s.runToHost(in).get("y");
                    long bad = 0;
                    for (long i = 0; i < n; i++) if (y.get(i) != want) bad++;
                    String wrong = bad == 0 ? "" : " WRONG: " + bad + " of " + n + " elements are not " + want;
                    double[] lat = new double[calls];
                    for (int i = 0; i < calls; i++) {
                        long t0 = System.nanoTime();
                        s.run(in);
                        s.synchronize();
                        lat[i] = (System.nanoTime() - t0) / 1e3;
                    }
                    double[] pipe = new double[Math.max(1, calls / 50)];
                    for (int k = 0; k < pipe.length; k++) {
                        long t0 = System.nanoTime();
                        for (int i = 0; i < 50; i++) s.run(in);
                        s.synchronize();
                        pipe[k] = (System.nanoTime() - t0) / 1e3 / 50;
                    }
                    double[] sorted = lat.clone();
                    Arrays.sort(sorted);
                    double p10 = sorted[calls / 10];
                    long slow = Arrays.stream(lat).filter(v -> v > 10 * p10).count();
                    Arrays.sort(pipe);
                    lines[rv.rank()] = String.format(Locale.ROOT, "%-12s %-4s %9d B rank %d: latency p10 %8.1f median %8.1f p90 %8.1f max %9.1f µs, %4d calls > 10x p10; pipelined median %8.1f min %8.1f max %9.1f µs%s",
                            a.name().toLowerCase(Locale.ROOT), t.name().toLowerCase(Locale.ROOT), bytes, rv.rank(), p10, sorted[calls / 2], sorted[calls * 9 / 10],
                            sorted[calls - 1], slow, pipe[pipe.length / 2], pipe[0], pipe[pipe.length - 1], wrong);
                }
            }
        });
        for (String l : lines) System.out.println(l);
        System.out.flush();
    }
}
