package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.Algorithm;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;
import dev.gatun.runtime.distributed.Rendezvous;
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
 * One rank of the multi-GPU acceptance checks: the seeds' graph eagerly and over 1000 graph replays, random graphs
 * with collectives against the reference interpreter (all-reduce results compared bit for bit across ranks), every
 * algorithm forced, and a stress run that reuses communication slots across many graphs and calls with random
 * per-rank delays, and device inputs that move on some ranks only. Prints one line per check; exits non-zero on the
 * first wrong value.
 *
 * <p>Started by gatun-run (one JVM per rank; {@code --ranks-per-gpu K} there lets ranks share GPUs under MPS), or
 * as one process whose threads are the ranks: {@code --threads N [--ranks-per-gpu K]}, which is how a world of
 * several ranks runs on a single GPU. Where ranks share a GPU, NCCL cannot run: the checks then expect every
 * collective on symmetric memory, and a clear refusal for what only NCCL could do.
 *
 * <p>Arguments: [--threads N] [--ranks-per-gpu K] [random graphs, default 40] [stress calls, default 200] [nccl-only].
 */
public final class MultiGpuCheck {
    final int rank, world, ranksPerGpu;
    final Rendezvous rv;
    final boolean threads, ncclOnly;

    MultiGpuCheck(Rendezvous rv, boolean threads, int ranksPerGpu, boolean ncclOnly) {
        this.rv = rv;
        this.rank = rv.rank();
        this.world = rv.worldSize();
        this.threads = threads;
        this.ranksPerGpu = ranksPerGpu;
        this.ncclOnly = ncclOnly;
    }

    public static void main(String[] args) {
        var rest = new ArrayList<>(List.of(args));
        int threadRanks = flag(rest, "--threads", 0);
        String env = System.getenv("GATUN_RANKS_PER_GPU");
        int perGpu = flag(rest, "--ranks-per-gpu", env == null ? 1 : Integer.parseInt(env.trim()));
        int graphs = rest.size() > 0 ? Integer.parseInt(rest.get(0)) : 40;
        int stress = rest.size() > 1 ? Integer.parseInt(rest.get(1)) : 200;
        boolean ncclOnly = rest.size() > 2 && rest.get(2).equals("nccl-only");
        if (threadRanks > 0) {
            try {
                LocalWorld.run(threadRanks, rv -> {
                    var check = new MultiGpuCheck(rv, true, perGpu, ncclOnly);
                    Watchdog.startFromEnvironment("rank " + rv.rank());
                    check.all(graphs, stress);
                });
                System.out.println("MULTI CHECK PASSED: " + threadRanks + " ranks as threads, " + perGpu + " per GPU");
            } catch (Throwable t) {
                System.out.println("FAILED: " + t);
                t.printStackTrace(System.out);
                System.out.flush();
                Runtime.getRuntime().halt(1);
            }
            System.out.flush();
            System.exit(0);
        }
        Rendezvous rv = dev.gatun.runtime.World.fromEnvironment(System.getenv()).rendezvous();
        var check = new MultiGpuCheck(rv, false, perGpu, ncclOnly);
        Watchdog.startFromEnvironment("rank " + check.rank);
        try {
            check.all(graphs, stress);
        } catch (Throwable t) {
            System.out.println("rank " + check.rank + ": FAILED: " + t);
            t.printStackTrace(System.out);
            System.out.flush();
            Runtime.getRuntime().halt(1);
        }
        System.out.flush();
        rv.close();
        System.exit(0);
    }

    private static int flag(List<String> args, String name, int otherwise) {
        int i = args.indexOf(name);
        if (i < 0) return otherwise;
        int v = Integer.parseInt(args.get(i + 1));
        args.remove(i + 1);
        args.remove(i);
        return v;
    }

    void all(int graphs, int stress) throws InterruptedException {
        if (shared() && !threads && !mps()) {
            timeSlicedProcesses();
            return;
        }
        seeds();
        movingInputs();
        dynamicShape();
        randomGraphs(graphs);
        meshes(Math.max(2, graphs / 4));
        if (!ncclOnly) algorithms();
        stress(stress);
        System.out.println("rank " + rank + ": ALL CHECKS PASSED" + (ncclOnly ? " (every collective through NCCL)" : "")
                + (shared() ? " (" + ranksPerGpu + " ranks per GPU" + (threads ? ", threads" : ", processes") + ")" : ""));
    }

    boolean shared() { return ranksPerGpu > 1; }

    static boolean mps() {
        try (var d = dev.gatun.cuda.Device.open(0)) {
            return d.attribute(dev.gatun.cuda.DeviceAttribute.MPS_ENABLED) == 1;
        }
    }

    /**
     * Ranks as separate processes on one GPU without MPS: a plan whose collectives spin is refused on every rank at
     * compile time, with the reason; a plan without collectives still runs.
     */
    void timeSlicedProcesses() {
        try (var s = Session.compile(seedsGraph(4), opts())) {
            throw new AssertionError("the seeds' graph compiled for processes time-sliced on one GPU");
        } catch (dev.gatun.runtime.GatunRuntimeException e) {
            check(e.getMessage().contains("without the Multi-Process Service"), "unexpected refusal: " + e.getMessage());
        }
        var g = Gatun.graph("local").world(world);
        g.output("y", g.input("x", F32, 4, 4).mul(3));
        try (var s = Session.compile(g.build(), opts())) {
            for (float v : s.runToHost(Map.of("x", NDArray.full(F32, rank, 4, 4))).get("y").toFloatArray())
                check(v == 3f * rank, "local graph: " + v);
        }
        System.out.println("rank " + rank + ": ALL CHECKS PASSED (" + ranksPerGpu + " ranks per GPU as processes without MPS:"
                + " collectives refused at compile time with the reason, a graph without collectives runs)");
    }

    /** A short collective timeout, so a stuck barrier traps soon with its message instead of hanging the check. */
    CompileOptions opts() {
        // compared with the reference, which rounds every op
        var o = CompileOptions.world(world).timeout(java.time.Duration.ofSeconds(20)).roundEachOp();
        if (threads) o = o.rank(rv);
        if (shared()) o = o.ranksPerGpu(ranksPerGpu);
        return ncclOnly ? o.symmetricMemory(false) : o;
    }

    static Graph seedsGraph(int n) {
        var g = Gatun.graph("seeds");
        var x = g.input("x", F32, n, n);
        var a = x.add(1).allReduce(SUM);
        var b = x.add(2).allReduce(SUM);
        var c = x.add(3).allReduce(SUM);
        g.output("d", a.add(b).add(c).allReduce(SUM));
        return g.build();
    }

    void seeds() {
        double want = world * (3 * world * (world + 1) / 2.0 + 6 * world);
        for (boolean graphs : new boolean[]{false, true}) {
            try (var s = Session.compile(seedsGraph(4), opts().cudaGraphs(graphs))) {
                check(s.backendName().equals("cuda"), "backend is " + s.backendName());
                var in = Map.of("x", NDArray.full(F32, rank + 1, 4, 4));
                int calls = graphs ? 1000 : 20;
                for (int i = 0; i < calls; i++) {
                    var d = s.runToHost(in).get("d").toFloatArray();
                    for (float v : d) check(v == want, "seeds call " + i + " graphs=" + graphs + ": d = " + v + ", want " + want);
                }
                System.out.println("rank " + rank + ": seeds d = " + (long) want + " on " + calls + " calls, cuda graphs " + (graphs ? "on (replays)" : "off"));
            }
        }
    }

    /**
     * A symbolic shape: the all-reduce falls back to NCCL, and one compiled session serves several sizes; where ranks
     * share a GPU, NCCL cannot run, and compiling says so on every rank.
     */
    void dynamicShape() {
        var g = Gatun.graph("dynamic");
        var x = g.input("x", F32, "n", 4);
        g.output("y", x.mul(2).allReduce(SUM));
        if (shared()) {
            try (var s = Session.compile(g.build(), opts())) {
                throw new AssertionError("a symbolic all-reduce compiled with ranks sharing a GPU:\n" + s.plan());
            } catch (dev.gatun.ir.CompilationException e) {
                check(e.getMessage().contains("NCCL cannot run here"), "unexpected refusal: " + e.getMessage());
            }
            System.out.println("rank " + rank + ": symbolic shape [n,4] all-reduce refused at compile time (NCCL cannot run with ranks sharing a GPU)");
            return;
        }
        try (var s = Session.compile(g.build(), opts())) {
            check(s.plan().toString().contains("all_reduce.nccl"), "symbolic all-reduce is not NCCL:\n" + s.plan());
            for (int n : new int[]{3, 7, 1}) {
                float want = 2f * world * (world + 1) / 2;
                for (float v : s.runToHost(Map.of("x", NDArray.full(F32, rank + 1, n, 4))).get("y").toFloatArray())
                    check(v == want, "dynamic n=" + n + ": " + v + " != " + want);
            }
        }
        System.out.println("rank " + rank + ": symbolic shape [n,4] all-reduce through NCCL right for n = 3, 7, 1");
    }

    List<Map<String, NDArray>> inputs(Graph g, long seed) {
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) {
            var m = new LinkedHashMap<String, NDArray>();
            RandomGraphs.inputs(g, seed, r).forEach((k, v) -> m.put(k, NDArray.of(v.dtype(), v.values(), v.shape())));
            out.add(m);
        }
        return out;
    }

    void randomGraphs(int count) {
        int compared = compareRandom("random", 0, count, RandomGraphs.Options.defaults().withWorldSize(world));
        System.out.println("rank " + rank + ": " + compared + " random-graph runs match the reference; all-reduce outputs bit-identical across ranks");
    }

    /** Random graphs on a device mesh (2 x world/2) with collectives along both axes, against the reference. */
    void meshes(int count) {
        if (world < 4 || world % 2 != 0) return;
        int compared = compareRandom("mesh", 300, count, RandomGraphs.Options.defaults().withMesh(2, world / 2));
        System.out.println("rank " + rank + ": " + compared + " random-graph runs on a 2 x " + world / 2 + " mesh match the reference");
    }

    /** Seeds [first, first + count) of static random graphs, eagerly and replayed, against the reference; returns the runs. */
    int compareRandom(String what, long first, int count, RandomGraphs.Options base) {
        var opts = base.staticOnly().withSubgroups(false);
        // with ranks sharing a GPU every collective runs on symmetric memory, whose reductions have f32, f16 and bf16 kernels
        if (shared()) opts = opts.withDTypes(DType.F32, DType.F16, DType.BF16);
        int compared = 0;
        for (long seed = first; seed < first + count; seed++) {
            Graph g = RandomGraphs.generate(seed, opts);
            var in = inputs(g, seed);
            var want = ReferenceInterpreter.evaluate(g, in).get(rank);
            for (boolean graphs : new boolean[]{false, true}) {
                try (var s = Session.compile(g, opts().cudaGraphs(graphs))) {
                    var got = s.runToHost(in.get(rank));
                    compare(what + " seed " + seed + " graphs " + graphs, want, got);
                    sameOnEveryRank(what + " " + seed + " " + graphs, g, got);
                    compared++;
                }
            }
        }
        return compared;
    }

    void algorithms() {
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
                    if (a == Algorithm.ONE_SHOT) g.output("bc", x.add(1).broadcast(world - 1));
                    if (shared() && a == Algorithm.NCCL) {
                        try (var s = Session.compile(g.build(), opts().forceAllReduce(a))) {
                            throw new AssertionError("an all-reduce forced to NCCL compiled with ranks sharing a GPU");
                        } catch (dev.gatun.ir.CompilationException e) {
                            check(e.getMessage().contains("NCCL cannot run here"), "unexpected refusal: " + e.getMessage());
                        }
                        continue;
                    }
                    if (a == Algorithm.ONE_SHOT && side % world == 0) {
                        g.output("rs", x.reduceScatter(SUM));
                        g.output("ag", x.allGather());
                    }
                    var in = Map.of("x", NDArray.random(t, 100 + rank, side, side));
                    try (var s = Session.compile(g.build(), opts().forceAllReduce(a))) {
                        for (int call = 0; call < 3; call++) { // the first call captures, later ones replay
                            var got = s.runToHost(in);
                            var ref = ReferenceInterpreter.evaluate(g.build(), allRanks(t, side)).get(rank);
                            compare(a + " " + t + " " + side + " call " + call, ref, got);
                            sameOnEveryRank(a + " " + t + " " + side + " call " + call, g.build(), got);
                        }
                    }
                }
            }
        }
        System.out.println("rank " + rank + ": one-shot, two-shot" + (shared() ? "" : " and NCCL") + " all-reduce (of computed and input slots),"
                + " reduce-scatter, all-gather and broadcast match the reference for f32, bf16, f16 at 8^2..1024^2"
                + (shared() ? "; NCCL forced is refused at compile time (ranks share a GPU)" : ""));
    }

    List<Map<String, NDArray>> allRanks(DType t, long side) {
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) out.add(Map.of("x", NDArray.random(t, 100 + r, side, side)));
        return out;
    }

    /**
     * Device inputs at addresses that change on some ranks only, replayed: rank 0 cycles through 3 arrays (graphs
     * captured for each, then reused), rank 1 through 12 (past the recapture limit, after which it stages them), the
     * others keep one. Each rank captures on its own, meeting nobody; where ranks share a GPU every rank stages
     * instead. Every call is compared with the reference interpreter.
     */
    void movingInputs() throws InterruptedException {
        var graph = seedsGraph(8);
        int arrays = rank == 0 ? 3 : rank == 1 ? 12 : 1, calls = 40;
        var random = new Random(rank * 131L + 7);
        try (var s = Session.compile(graph, opts())) {
            var xs = new ArrayList<dev.gatun.runtime.DeviceArray>();
            for (int i = 0; i < arrays; i++) xs.add(s.toDevice(NDArray.full(F32, 0, 8, 8)));
            for (int c = 0; c < calls; c++) {
                var x = xs.get(c % arrays);
                x.copyFrom(NDArray.full(F32, (c % 7) + rank, 8, 8));
                if (random.nextInt(3) == 0) Thread.sleep(random.nextInt(3));
                var got = s.runToHost(Map.of("x", x));
                var all = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < world; r++) all.add(Map.of("x", NDArray.full(F32, (c % 7) + r, 8, 8)));
                compare("moving inputs call " + c, ReferenceInterpreter.evaluate(graph, all).get(rank), got);
            }
        }
        System.out.println("rank " + rank + ": device inputs at " + arrays + " address(es) on this rank, " + calls
                + " replayed calls: every value right" + (shared() ? " (staged: ranks share a GPU)" : " (read in place, graphs per address set)"));
    }

    /** Several graphs alive at once, called in turn, with random host-side delays per rank and call. */
    void stress(int calls) throws InterruptedException {
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
                var got = sessions.get(i).runToHost(Map.of("x", NDArray.full(F32, v, n, n)));
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
    void sameOnEveryRank(String what, Graph g, Map<String, NDArray> got) {
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
