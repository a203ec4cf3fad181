package dev.gatun.runtime.bench;

import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.Session;

import java.lang.management.ManagementFactory;
import java.util.Arrays;

/**
 * The time of {@code Session.compile} (lowering, planning, loading the host executable) of the host-scale ladder
 * ({@link HostScaleBench#ladder}) at world 2, compiled {@code n} times in one JVM:
 *
 * <pre>CompileTiming [layers [n]]   (default 12000 layers, the 60k-op graph, 8 compiles)</pre>
 *
 * Prints each compile's wall-clock and thread CPU time, then the first compile (cold: the JIT has not compiled the
 * planner yet, as in {@link HostScaleBench}) and min/median/max of the others (warm). Thread CPU time leaves out
 * what other processes on a shared machine take, but not the collector's pauses, which the wall-clock time holds.
 */
public final class CompileTiming {
    private CompileTiming() {}

    public static void main(String[] args) {
        int layers = args.length > 0 ? Integer.parseInt(args[0]) : 12000, n = args.length > 1 ? Integer.parseInt(args[1]) : 8;
        Graph g = HostScaleBench.ladder(layers);
        var threads = ManagementFactory.getThreadMXBean();
        double[] wall = new double[n], cpu = new double[n];
        for (int i = 0; i < n; i++) {
            long c0 = threads.getCurrentThreadCpuTime(), t0 = System.nanoTime();
            try (var s = Session.compile(g, CompileOptions.world(HostScaleBench.WORLD).backend("host"))) {
                wall[i] = (System.nanoTime() - t0) / 1e6;
                cpu[i] = (threads.getCurrentThreadCpuTime() - c0) / 1e6;
            }
            System.out.printf("compile %d: wall %.0f ms, cpu %.0f ms%n", i, wall[i], cpu[i]);
        }
        System.out.printf("layers %d: cold wall %.0f ms cpu %.0f ms; warm (%d) wall %s ms, cpu %s ms (min/median/max)%n", layers, wall[0], cpu[0], n - 1,
                summary(wall), summary(cpu));
    }

    private static String summary(double[] all) {
        if (all.length < 2) return "-";
        double[] warm = Arrays.copyOfRange(all, 1, all.length);
        Arrays.sort(warm);
        return String.format("%.0f/%.0f/%.0f", warm[0], warm[warm.length / 2], warm[warm.length - 1]);
    }
}
