package dev.gatun.cuda.backend;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.lower.Algorithm;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.dist.Rendezvous;
import dev.gatun.runtime.reference.ReferenceInterpreter;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;

/**
 * One rank of the multi-GPU acceptance checks, started by gatun-run (one JVM per GPU): the seeds' graph
 * eagerly and over 1000 graph replays, random graphs with collectives against the reference interpreter
 * (all-reduce results compared bit for bit across ranks), every all-reduce algorithm forced, and a stress
 * run that reuses communication slots across many graphs and calls with random per-rank delays. Prints one
 * line per check; exits non-zero on the first wrong value.
 *
 * <p>Arguments: [random graphs, default 40] [stress calls, default 200].
 */
public final class MultiGpuCheck {
    private MultiGpuCheck() {}

    static int rank, world;
    static Rendezvous rv;

    public static void main(String[] args) {
        int graphs = args.length > 0 ? Integer.parseInt(args[0]) : 40;
        ncclOnly = args.length > 2 && args[2].equals("nccl-only");
        int stress = args.length > 1 ? Integer.parseInt(args[1]) : 200;
        rv = Distributed.rendezvous();
        rank = rv.rank();
        world = rv.worldSize();
        Watchdog.startFromEnvironment("rank " + rank);
        try {
            seeds();
            dynamicShape();
            randomGraphs(graphs);
            if (!ncclOnly) algorithms();
            stress(stress);
            System.out.println("rank " + rank + ": ALL CHECKS PASSED" + (ncclOnly ? " (every collective through NCCL)" : ""));
        } catch (Throwable t) {
            System.out.println("rank " + rank + ": FAILED: " + t);
            t.printStackTrace(System.out);
            System.out.flush();
            Runtime.getRuntime().halt(1);
        }
        System.out.flush();
        rv.close();
        System.exit(0);
    }

    /** A short collective timeout, so a stuck barrier traps soon with its message instead of hanging the check. */
    static CompileOptions opts() {
        var o = CompileOptions.world(world).timeout(java.time.Duration.ofSeconds(20));
        return ncclOnly ? o.symmetricMemory(false) : o;
    }

    /** Every collective through NCCL (with NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1: its network transport, as across hosts). */
    static boolean ncclOnly;

    static Graph seedsGraph(int n) {
        var g = Gatun.graph("seeds");
        var x = g.input("x", F32, n, n);
        var a = x.add(1).allReduce(SUM);
        var b = x.add(2).allReduce(SUM);
        var c = x.add(3).allReduce(SUM);
        g.output("d", a.add(b).add(c).allReduce(SUM));
        return g.build();
    }

    static void seeds() {
        double want = world * (3 * world * (world + 1) / 2.0 + 6 * world);
        for (boolean graphs : new boolean[]{false, true}) {
            try (var s = Session.compile(seedsGraph(4), opts().cudaGraphs(graphs))) {
                check(s.backendName().equals("cuda"), "backend is " + s.backendName());
                var in = Map.of("x", NDArray.full(F32, rank + 1, 4, 4));
                int calls = graphs ? 1000 : 20;
                for (int i = 0; i < calls; i++) {
                    var d = s.run(in).get("d").toFloatArray();
                    for (float v : d) check(v == want, "seeds call " + i + " graphs=" + graphs + ": d = " + v + ", want " + want);
                }
                System.out.println("rank " + rank + ": seeds d = " + (long) want + " on " + calls + " calls, cuda graphs " + (graphs ? "on (replays)" : "off"));
            }
        }
    }

    /** A symbolic shape: the all-reduce falls back to NCCL, and one compiled session serves several sizes. */
    static void dynamicShape() {
        var g = Gatun.graph("dynamic");
        var x = g.input("x", F32, "n", 4);
        g.output("y", x.mul(2).allReduce(SUM));
        try (var s = Session.compile(g.build(), opts())) {
            check(s.plan().toString().contains("all_reduce.nccl"), "symbolic all-reduce is not NCCL:\n" + s.plan());
            for (int n : new int[]{3, 7, 1}) {
                float want = 2f * world * (world + 1) / 2;
                for (float v : s.run(Map.of("x", NDArray.full(F32, rank + 1, n, 4))).get("y").toFloatArray())
                    check(v == want, "dynamic n=" + n + ": " + v + " != " + want);
            }
        }
        System.out.println("rank " + rank + ": symbolic shape [n,4] all-reduce through NCCL right for n = 3, 7, 1");
    }

    static List<Map<String, NDArray>> inputs(Graph g, long seed) {
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) {
            var m = new LinkedHashMap<String, NDArray>();
            RandomGraphs.inputs(g, seed, r).forEach((k, v) -> m.put(k, NDArray.of(v.dtype(), v.values(), v.shape())));
            out.add(m);
        }
        return out;
    }

    static void randomGraphs(int count) {
        int compared = 0;
        for (long seed = 0; seed < count; seed++) {
            var opts = RandomGraphs.Options.defaults().withWorldSize(world).staticOnly().withSubgroups(false);
            Graph g = RandomGraphs.generate(seed, opts);
            var in = inputs(g, seed);
            var want = ReferenceInterpreter.evaluate(g, in).get(rank);
            for (boolean graphs : new boolean[]{false, true}) {
                try (var s = Session.compile(g, opts().cudaGraphs(graphs))) {
                    var got = s.run(in.get(rank));
                    compare("random seed " + seed + " graphs " + graphs, want, got);
                    sameOnEveryRank("random " + seed + " " + graphs, g, got);
                    compared++;
                }
            }
        }
        System.out.println("rank " + rank + ": " + compared + " random-graph runs match the reference; all-reduce outputs bit-identical across ranks");
    }

    static void algorithms() {
        long[] sides = {8, 64, 256, 1024};
        for (Algorithm a : new Algorithm[]{Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.NCCL}) {
            for (DType t : new DType[]{DType.F32, DType.BF16, DType.F16}) {
                for (long side : sides) {
                    // the input computed into its slot (path 1), and the graph input itself (path 2, whose copy
                    // the collective kernel does), plus reduce-scatter and all-gather of a graph input
                    var g = Gatun.graph("ar").world(world);
                    var x = g.input("x", t, side, side);
                    g.output("y", x.mul(2).allReduce(SUM));
                    g.output("z", x.allReduce(SUM));
                    if (a == Algorithm.ONE_SHOT && side % world == 0) {
                        g.output("rs", x.reduceScatter(SUM));
                        g.output("ag", x.allGather());
                    }
                    var in = Map.of("x", NDArray.random(t, 100 + rank, side, side));
                    try (var s = Session.compile(g.build(), opts().forceAllReduce(a))) {
                        for (int call = 0; call < 3; call++) { // the first call captures, later ones replay
                            var got = s.run(in);
                            var ref = ReferenceInterpreter.evaluate(g.build(), allRanks(t, side)).get(rank);
                            compare(a + " " + t + " " + side + " call " + call, ref, got);
                            sameOnEveryRank(a + " " + t + " " + side + " call " + call, g.build(), got);
                        }
                    }
                }
            }
        }
        System.out.println("rank " + rank + ": one-shot, two-shot and NCCL all-reduce (of computed and input slots), reduce-scatter and all-gather match the reference for f32, bf16, f16 at 8^2..1024^2");
    }

    static List<Map<String, NDArray>> allRanks(DType t, long side) {
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) out.add(Map.of("x", NDArray.random(t, 100 + r, side, side)));
        return out;
    }

    /** Several graphs alive at once, called in turn, with random host-side delays per rank and call. */
    static void stress(int calls) throws InterruptedException {
        var sessions = new ArrayList<Session>();
        var graphs = new ArrayList<Graph>();
        for (int i = 0; i < 4; i++) {
            int n = 8 << i;
            var g = Gatun.graph("stress" + i);
            var x = g.input("x", F32, n, n);
            var h = x.add(i).allReduce(SUM);
            var k = h.mul(x).add(1).allReduce(SUM);
            g.output("y", k.add(h).allReduce(SUM));
            graphs.add(g.build());
            sessions.add(Session.compile(g.build(), opts().cudaGraphs(i % 2 == 0)));
        }
        var random = new Random(rank * 7919L + 1);
        try {
            for (int c = 0; c < calls; c++) {
                int i = c % sessions.size();
                int n = 8 << i;
                float v = (c % 5) + rank;
                if (random.nextInt(3) == 0) Thread.sleep(random.nextInt(3));
                var got = sessions.get(i).run(Map.of("x", NDArray.full(F32, v, n, n)));
                var all = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < world; r++) all.add(Map.of("x", NDArray.full(F32, (c % 5) + r, n, n)));
                compare("stress call " + c, ReferenceInterpreter.evaluate(graphs.get(i), all).get(rank), got);
            }
        } finally {
            sessions.forEach(Session::close);
        }
        System.out.println("rank " + rank + ": stress, " + calls + " calls over 4 live graphs with random delays: every value right");
    }

    static void compare(String what, Map<String, NDArray> want, Map<String, NDArray> got) {
        for (var e : want.entrySet()) {
            NDArray w = e.getValue(), x = got.get(e.getKey());
            double tol = w.dtype().isHalf() ? 3e-2 : w.dtype() == DType.F32 ? 1e-5 : 1e-12;
            String why = w.mismatch(x, tol, tol);
            check(why == null, what + " output '" + e.getKey() + "': " + why);
        }
    }

    /** Outputs produced by a world all-reduce must be bit-identical on every rank. */
    static void sameOnEveryRank(String what, Graph g, Map<String, NDArray> got) {
        var sb = new StringBuilder();
        g.outputs().forEach((name, node) -> {
            if (node.op() instanceof dev.gatun.ir.graph.Op.Collective c && c.kind() == dev.gatun.ir.graph.CollectiveKind.ALL_REDUCE
                    && c.group().equals("world")) sb.append(name).append('=').append(Arrays.hashCode(got.get(name).segment().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE))).append(';');
        });
        var all = rv.allGather("same/" + what, sb.toString().getBytes(StandardCharsets.UTF_8));
        for (int r = 0; r < all.size(); r++)
            check(Arrays.equals(all.get(r), all.getFirst()), what + ": rank " + r + " all-reduce bits differ from rank 0");
    }

    static void check(boolean ok, String message) {
        if (!ok) throw new AssertionError(message);
    }
}
