package dev.gatun.planner.bench;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Pool;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static dev.gatun.ir.DType.F32;

/**
 * The planner suite by command (test class path):
 * <pre>
 * PlannerBench timing [N ...]     planning time of synthetic graphs (default 1k 10k 100k 1M), warm, and the
 *                                 fitted growth exponent (least-squares slope of log time over log nodes)
 * PlannerBench ordering           estimated peak of the chosen order against the plain order, random and layered DAGs
 * </pre>
 */
public final class PlannerBench {
    private PlannerBench() {}

    public static LoweredGraph lowered(int nodes) {
        return Lowering.lower(SyntheticGraphs.chainsAndLayers(nodes, 42), LoweringOptions.world(1));
    }

    /** Row of the timing table. */
    public record Timing(int nodes, int works, double lowerMs, double planMs, long arena, long arenaMaxLive) {}

    public static Timing time(int nodes, int runs, PrintStream log) {
        long t0 = System.nanoTime();
        var g = lowered(nodes);
        double lowerMs = (System.nanoTime() - t0) / 1e6;
        double best = Double.MAX_VALUE;
        Plan p = null;
        for (int r = 0; r < runs; r++) {
            long t = System.nanoTime();
            p = Planner.plan(g);
            best = Math.min(best, (System.nanoTime() - t) / 1e6);
        }
        var arena = p.pools().stream().filter(x -> x.kind() == Pool.Kind.REGULAR).findFirst();
        return new Timing(nodes, p.steps().size(), lowerMs, best, arena.map(Pool::bytes).orElse(0L), arena.map(Pool::maxLive).orElse(0L));
    }

    /** Least-squares slope of log(y) over log(x). */
    public static double slope(double[] x, double[] y) {
        int n = x.length;
        double mx = 0, my = 0;
        for (int i = 0; i < n; i++) { mx += Math.log(x[i]); my += Math.log(y[i]); }
        mx /= n; my /= n;
        double sxy = 0, sxx = 0;
        for (int i = 0; i < n; i++) { double dx = Math.log(x[i]) - mx; sxy += dx * (Math.log(y[i]) - my); sxx += dx * dx; }
        return sxy / sxx;
    }

    public static void timing(int[] sizes, PrintStream out) {
        // warm-up: JIT the whole pipeline on a mid-sized graph first; the C2 code for the planner's loops
        // settles only after several hundred thousand steps, so plan it repeatedly
        var warm = lowered(20_000);
        for (int i = 0; i < 8; i++) Planner.plan(warm);
        out.printf("%-10s %8s %10s %10s %12s %12s %7s%n", "nodes", "steps", "lower ms", "plan ms", "arena", "max-live", "ratio");
        var rows = new ArrayList<Timing>();
        for (int n : sizes) {
            int runs = n >= 1_000_000 ? 3 : n >= 100_000 ? 6 : 10;
            var t = time(n, runs, out);
            rows.add(t);
            out.printf("%-10d %8d %10.1f %10.2f %12d %12d %7.3f%n", t.nodes(), t.works(), t.lowerMs(), t.planMs(), t.arena(), t.arenaMaxLive(),
                    t.arenaMaxLive() == 0 ? 1.0 : (double) t.arena() / t.arenaMaxLive());
        }
        double[] x = rows.stream().mapToDouble(Timing::nodes).toArray(), y = rows.stream().mapToDouble(Timing::planMs).toArray();
        out.printf("fitted exponent (plan ms ~ nodes^k): k = %.3f over %s nodes%n", slope(x, y), Arrays.toString(sizes));
        if (rows.size() > 2) {
            double[] x2 = Arrays.copyOfRange(x, 1, x.length), y2 = Arrays.copyOfRange(y, 1, y.length);
            out.printf("fitted exponent without the smallest size: k = %.3f%n", slope(x2, y2));
        }
    }

    /** The layered DAG of MemoryAwareOrderTest, generalised: k wide results, each reduced, then summed. */
    static Graph layered(int k, int side) {
        var g = Gatun.graph("layered-" + k);
        var x = g.input("x", F32, side, side);
        var big = new ArrayList<Tensor>();
        for (int i = 0; i < k; i++) big.add(x.matmul(g.input("w" + i, F32, side, side)));
        var small = new ArrayList<Tensor>();
        for (Tensor b : big) small.add(b.sum(1));
        Tensor acc = small.getFirst();
        for (int i = 1; i < k; i++) acc = acc.add(small.get(i));
        g.output("y", acc);
        return g.build();
    }

    public record OrderRow(String graph, int steps, String chosen, long plainPeak, long chosenPeak) {
        double ratio() { return plainPeak == 0 ? 1.0 : (double) chosenPeak / plainPeak; }
    }

    public static List<OrderRow> ordering() {
        var rows = new ArrayList<OrderRow>();
        for (long seed = 1; seed <= 12; seed++) {
            Graph g = RandomGraphs.generate(seed, RandomGraphs.Options.defaults().withWorldSize(1).withMaxNodes(48).staticOnly());
            rows.add(row("random seed " + seed, Planner.plan(Lowering.lower(g, LoweringOptions.world(1)))));
        }
        for (int k : new int[]{2, 4, 8, 16, 32})
            rows.add(row("layered k=" + k, Planner.plan(Lowering.lower(layered(k, 32), LoweringOptions.world(1)))));
        for (int n : new int[]{1_000, 10_000})
            rows.add(row("synthetic " + n, Planner.plan(lowered(n))));
        return rows;
    }

    private static OrderRow row(String name, Plan p) {
        String choice = p.orderChoice();
        return new OrderRow(name, p.steps().size(), choice.substring(0, choice.indexOf(' ')), p.plainOrderPeak(), p.estimatedPeak());
    }

    public static void printOrdering(List<OrderRow> rows, PrintStream out) {
        out.printf("%-18s %6s %-20s %12s %12s %7s%n", "graph", "steps", "chosen order", "plain peak", "chosen peak", "ratio");
        for (var r : rows) out.printf("%-18s %6d %-20s %12d %12d %7.3f%n", r.graph(), r.steps(), r.chosen(), r.plainPeak(), r.chosenPeak(), r.ratio());
    }

    /**
     * Each of {@code k} warm plans of the {@code n}-node graph, after the warm-up of {@link #timing}, and their
     * min/median/max: the spread of single plans, where {@code timing} keeps only the best.
     */
    public static void plans(int n, int k, PrintStream out) {
        var warm = lowered(20_000);
        for (int i = 0; i < 8; i++) Planner.plan(warm);
        var g = lowered(n);
        double[] ms = new double[k];
        for (int i = 0; i < k; i++) {
            long t = System.nanoTime();
            Planner.plan(g);
            ms[i] = (System.nanoTime() - t) / 1e6;
            out.printf("plan %d of %d nodes: %.0f ms%n", i + 1, n, ms[i]);
        }
        Arrays.sort(ms);
        out.printf("%d plans of %d nodes: min/median/max %.0f/%.0f/%.0f ms%n", k, n, ms[0], ms[k / 2], ms[k - 1]);
    }

    public static void main(String[] args) {
        String what = args.length > 0 ? args[0] : "timing";
        switch (what) {
            case "timing" -> {
                int[] sizes = args.length > 1 ? Arrays.stream(args, 1, args.length).mapToInt(Integer::parseInt).toArray() : new int[]{1_000, 10_000, 100_000, 1_000_000};
                timing(sizes, System.out);
            }
            case "plans" -> plans(args.length > 1 ? Integer.parseInt(args[1]) : 100_000, args.length > 2 ? Integer.parseInt(args[2]) : 5, System.out);
            case "ordering" -> printOrdering(ordering(), System.out);
            default -> { System.err.println("usage: PlannerBench timing [N ...] | plans [N [K]] | ordering"); System.exit(2); }
        }
    }
}
