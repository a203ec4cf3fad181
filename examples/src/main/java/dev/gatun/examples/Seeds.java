package dev.gatun.examples;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;

/**
 * The seeds' example of docs/DESIGN.md: three all-reduces of x+1, x+2, x+3, then an all-reduce of their sum.
 * Prints the graph, its lowered form, why each collective's input took its path and the plan; then runs it
 * with x = rank + 1 on every rank and checks that d = 42 everywhere (on 2 ranks).
 *
 * <p>Arguments: [world size, default 2] [n, default 4].
 */
public final class Seeds {
    private Seeds() {}

    public static Graph graph(int n) {
        var g = Gatun.graph("seeds");
        var x = g.input("x", F32, n, n);
        var a = x.add(1).allReduce(SUM);
        var b = x.add(2).allReduce(SUM);
        var c = x.add(3).allReduce(SUM);
        g.output("d", a.add(b).add(c).allReduce(SUM));
        return g.build();
    }

    /** d when x = rank + 1: each all-reduce sums over ranks, so d = world * (3 * sum(r + 1) + 6 * world). */
    static double expected(int world) {
        double sumX = world * (world + 1) / 2.0;
        return world * (3 * sumX + 6 * world);
    }

    public static void main(String[] args) {
        int world = args.length > 0 ? Integer.parseInt(args[0]) : 2;
        int n = args.length > 1 ? Integer.parseInt(args[1]) : 4;
        Graph graph = graph(n);
        try (var session = Session.compile(graph, CompileOptions.world(world))) {
            System.out.println(graph);
            System.out.println();
            System.out.println(session.lowered());
            System.out.println();
            System.out.println(session.explain());
            System.out.println();
            System.out.println(session.plan());
            System.out.println();
            System.out.println(session.plan().kernelSources());
            System.out.println();

            // each rank's input on its device once (GPU memory on the CUDA backend); outputs stay on the device
            var inputs = new ArrayList<Map<String, DeviceArray>>();
            for (int r = 0; r < world; r++) inputs.add(Map.of("x", session.toDevice(session.ranks().get(r), NDArray.full(F32, r + 1, n, n))));
            List<Map<String, DeviceArray>> out = session.run(inputs);
            int iterations = 200;
            long[] times = new long[iterations];
            for (int i = 0; i < iterations; i++) {
                long t0 = System.nanoTime();
                out = session.run(inputs);
                session.synchronize();
                times[i] = System.nanoTime() - t0;
            }
            Arrays.sort(times);

            double want = expected(world);
            boolean ok = true;
            for (int r = 0; r < world; r++) {
                NDArray d = out.get(r).get("d").toHost();
                System.out.println("rank " + r + ": d = " + d);
                for (float v : d.toFloatArray()) ok &= v == want;
            }
            System.out.printf("backend %s, world %d: median %.1f us per call, input on the device (%d calls)%n", session.backendName(), world,
                    times[iterations / 2] / 1e3, iterations);
            System.out.println(ok ? "verified: d = " + (long) want + " on every rank" : "WRONG: expected d = " + want);
            if (!ok) throw new AssertionError("seeds example produced a wrong result");
        }
    }
}
