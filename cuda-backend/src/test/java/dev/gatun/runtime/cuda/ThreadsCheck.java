package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;
import dev.gatun.runtime.reference.ReferenceInterpreter;

import java.util.Map;

import static dev.gatun.ir.DType.F32;

/**
 * Single-process mode: one thread per GPU of this machine, each a rank whose session meets the others through
 * an in-process rendezvous; symmetric memory is mapped with direct peer access. Runs the seeds' graph (eager
 * and replayed) and a few random graphs with collectives against the reference.
 */
public final class ThreadsCheck {
    private ThreadsCheck() {}

    public static void main(String[] args) {
        int world = args.length > 0 ? Integer.parseInt(args[0]) : Device.count();
        int graphs = args.length > 1 ? Integer.parseInt(args[1]) : 6;
        LocalWorld.run(world, rv -> {
            int rank = rv.rank();
            double want = world * (3 * world * (world + 1) / 2.0 + 6 * world);
            for (boolean replay : new boolean[]{false, true}) {
                try (var s = Session.compile(MultiGpuCheck.seedsGraph(8), CompileOptions.world(world).rank(rv).cudaGraphs(replay))) {
                    if (!s.backendName().equals("cuda")) throw new AssertionError("backend " + s.backendName());
                    for (int i = 0; i < 100; i++)
                        for (float v : s.runToHost(Map.of("x", NDArray.full(F32, rank + 1, 8, 8))).get("d").toFloatArray())
                            if (v != want) throw new AssertionError("rank " + rank + ": d = " + v + ", want " + want);
                }
            }
            for (long seed = 500; seed < 500 + graphs; seed++) {
                Graph g = RandomGraphs.generate(seed, RandomGraphs.Options.defaults().withWorldSize(world).staticOnly().withSubgroups(false));
                var in = new java.util.ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < world; r++) {
                    var m = new java.util.LinkedHashMap<String, NDArray>();
                    RandomGraphs.inputs(g, seed, r).forEach((k, v) -> m.put(k, NDArray.of(v.dtype(), v.values(), v.shape())));
                    in.add(m);
                }
                var want2 = ReferenceInterpreter.evaluate(g, in).get(rank);
                try (var s = Session.compile(g, CompileOptions.world(world).rank(rv).roundEachOp())) {
                    MultiGpuCheck.compare("threads seed " + seed, want2, s.runToHost(in.get(rank)));
                }
            }
            System.out.println("rank " + rank + " (thread): seeds d = " + (long) want + " over 200 calls, " + graphs + " random graphs match");
        });
        System.out.println("THREADS CHECK PASSED: " + world + " GPUs driven from threads of one process");
        System.exit(0);
    }
}
