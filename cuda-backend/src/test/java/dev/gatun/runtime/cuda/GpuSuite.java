package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.Algorithm;
import dev.gatun.lowering.Lowering;
import dev.gatun.planner.Planner;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.World;
import dev.gatun.runtime.distributed.Rendezvous;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.function.Function;

import static dev.gatun.ir.graph.ReduceOp.SUM;

/**
 * Gatun's half of the GPU benchmark suite (run by gatun-run, one JVM per GPU): the workloads of the benchmark
 * issue, each per call under CUDA-graph replay and eagerly, each result checked against a float64 reference.
 * Rank 0 appends one JSON object per measurement to the file given by {@code --out} (the schema of
 * {@code bench/report.py}, which merges these rows with PyTorch's and prints the table).
 *
 * <pre>
 * --out FILE            rows (JSON lines), appended
 * --iters N             timed calls per cell (default 200), after 50 warm-up calls
 * --only a,b            workloads: all_reduce, seeds, mlp, ar_norm, input_path, host_overhead, norms (default all);
 *                       norms (world 1 only) is layernorm, rmsnorm, softmax and loop_order, also named one by one
 * --dtypes f32,bf16     all-reduce dtypes
 * --sides 8,64,...      all-reduce shapes (side x side)
 * --modes replay,eager  the modes of every workload (default both; replay alone halves the time)
 * --row-forms a,b       norms: beside each cell's default row, a row per row-kernel form forced by the plan options
 *                       (block, warp, warp_ahead: PlanOptions.RowForm; variants rows_block, rows_warp, rows_warp_ahead)
 * </pre>
 *
 * <p>Every figure is taken through the public API ({@code Session.run} with device arrays, {@code Session.synchronize})
 * except the engine's floors it is set beside: bare launches of the captured graphs, and bare pinned copies. Times are
 * host wall microseconds per call: "median" with a synchronization after every call (latency), "pipelined" for calls
 * back to back with one synchronization at the end (the method of docs/DESIGN.md's reference figures).
 */
public final class GpuSuite {
    private static final int WARMUP = 50;

    private final Rendezvous rv;
    private final int rank, world, iters, localRank;
    private final Path out;
    private final String device;
    /** The modes every workload is measured in (--modes): replay (CUDA graphs), eager, or both. */
    private List<String> modes = List.of("replay", "eager");
    /** The row-kernel forms the norms are measured in beside the planner's own (--row-forms). */
    private List<dev.gatun.planner.PlanOptions.RowForm> rowForms = List.of();

    private GpuSuite(Rendezvous rv, int iters, Path out) {
        this.rv = rv;
        this.rank = rv.rank();
        this.world = rv.worldSize();
        var warmups = new java.util.concurrent.atomic.AtomicInteger();
        CudaTiming.sameOnEveryRank = world == 1 ? null : n -> {
            int most = n;
            for (byte[] b : rv.allGather("warm-up " + warmups.getAndIncrement(), Integer.toString(n).getBytes(java.nio.charset.StandardCharsets.UTF_8)))
                most = Math.max(most, Integer.parseInt(new String(b, java.nio.charset.StandardCharsets.UTF_8)));
            return most;
        };
        this.iters = iters;
        this.out = out;
        this.localRank = World.fromEnvironment(System.getenv()).localRank();
        try (Device d = Device.open(localRank)) {
            this.device = d.name();
        }
    }

    public static void main(String[] args) {
        var opts = new LinkedHashMap<String, String>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) throw new IllegalArgumentException("expected --option value, got '" + args[i] + "'");
            opts.put(args[i].substring(2), args[i + 1]);
        }
        var rv = dev.gatun.runtime.World.fromEnvironment(System.getenv()).rendezvous();
        Watchdog.startFromEnvironment("rank " + rv.rank());
        var suite = new GpuSuite(rv, Integer.parseInt(opts.getOrDefault("iters", "200")), Path.of(opts.getOrDefault("out", "gatun-rows.jsonl")));
        List<String> only = List.of(opts.getOrDefault("only", "all_reduce,seeds,mlp,ar_norm,input_path,host_overhead,norms").split(","));
        long[] sides = Arrays.stream(opts.getOrDefault("sides", "8,64,256,512,1024,4096").split(",")).mapToLong(Long::parseLong).toArray();
        List<String> modes = List.of(opts.getOrDefault("modes", "replay,eager").split(","));
        for (String m : modes) if (!m.equals("replay") && !m.equals("eager")) throw new IllegalArgumentException("--modes takes replay and eager, got '" + m + "'");
        suite.modes = modes;
        String forms = opts.getOrDefault("row-forms", "");
        suite.rowForms = forms.isEmpty() ? List.of() : Arrays.stream(forms.split(",")).map(f -> switch (f) {
            case "block" -> dev.gatun.planner.PlanOptions.RowForm.BLOCK;
            case "warp" -> dev.gatun.planner.PlanOptions.RowForm.WARP;
            case "warp_ahead" -> dev.gatun.planner.PlanOptions.RowForm.WARP_AHEAD;
            default -> throw new IllegalArgumentException("--row-forms takes block, warp and warp_ahead, got '" + f + "'");
        }).toList();
        if (only.contains("host_overhead")) suite.hostOverhead();
        if (only.contains("all_reduce"))
            for (String t : opts.getOrDefault("dtypes", "f32,bf16").split(",")) suite.allReduce(DType.parse(t), sides);
        if (only.contains("input_path")) suite.inputPaths(sides);
        if (only.contains("seeds")) suite.seeds(new long[]{4, 64, 256, 1024});
        if (only.contains("mlp")) for (int tokens : new int[]{8, 128}) suite.mlp(tokens);
        if (only.contains("ar_norm")) suite.arNorm();
        var normOps = Arrays.stream(NormWorkloads.Op.values()).filter(o -> only.contains("norms") || only.contains(o.id)).toList();
        if (!normOps.isEmpty()) suite.norms(normOps, modes);
        System.out.flush();
        rv.close();
        System.exit(0);
    }

    // ------------------------------------------------------------------ workloads

    /** {@code y = x.allReduce(SUM)} on a graph input of side x side, this rank's input and the float64 sum over ranks. */
    private record AllReduceCase(Graph graph, Map<String, NDArray> in, double[] ref, String shape, long bytes) {}

    private AllReduceCase allReduceCase(String name, DType t, long side) {
        var g = Gatun.graph(name);
        g.output("y", g.input("x", t, side, side).allReduce(SUM));
        return new AllReduceCase(g.build(), Map.of("x", NDArray.random(t, 100 + rank, side, side)),
                sumOverRanks(r -> NDArray.random(t, 100 + r, side, side)), side + "x" + side, side * side * t.byteSize());
    }

    /** x.allReduce(SUM) on a graph input, per algorithm (null: Gatun's automatic choice). */
    void allReduce(DType t, long[] sides) {
        for (long side : sides) {
            var c = allReduceCase("allreduce", t, side);
            for (Algorithm a : new Algorithm[]{Algorithm.ONE_SHOT, Algorithm.TWO_SHOT, Algorithm.BARRIER_FREE, Algorithm.NCCL, null}) {
                var options = CompileOptions.world(world);
                if (a != null) options = options.forceAllReduce(a);
                String variant = a == null ? "auto" : a.name().toLowerCase(Locale.ROOT);
                run("all_reduce", variant, t, c.shape(), c.bytes(), c.graph(), options, c.in(), "y", c.ref(), tolerance(t));
            }
        }
    }

    /** A graph input feeding an all-reduce: path 2 with its copy fused into the collective, path 2 with a DMA copy, path 3. */
    void inputPaths(long[] sides) {
        DType t = DType.F32;
        for (long side : sides) {
            var c = allReduceCase("input_path", t, side);
            run("input_path", "path2_fused", t, c.shape(), c.bytes(), c.graph(), CompileOptions.world(world), c.in(), "y", c.ref(), 1e-5);
            run("input_path", "path2_dma", t, c.shape(), c.bytes(), c.graph(),
                    CompileOptions.world(world).planning(dev.gatun.planner.PlanOptions.DEFAULT.withFusedCopyIns(false)), c.in(), "y", c.ref(), 1e-5);
            run("input_path", "path3", t, c.shape(), c.bytes(), c.graph(), CompileOptions.world(world).symmetricInputs(false), c.in(), "y",
                    c.ref(), 1e-5);
        }
    }

    /** The seeds' graph: d = allReduce(allReduce(x+1) + allReduce(x+2) + allReduce(x+3)). */
    void seeds(long[] sides) {
        for (long side : sides) {
            // the default (fused, two launches), the barrier-free all-reduce forced, and the unfused plan (four launches)
            run("seeds", "default", DType.F32, side + "x" + side, side * side * 4, seedsGraph(side), CompileOptions.world(world),
                    Map.of("x", seedsInput(rank, side)), java.util.Set.of(), "d", seedsReference(world, side), 1e-5, true);
            run("seeds", "barrier_free", DType.F32, side + "x" + side, side * side * 4, seedsGraph(side), CompileOptions.world(world).forceAllReduce(Algorithm.BARRIER_FREE),
                    Map.of("x", seedsInput(rank, side)), java.util.Set.of(), "d", seedsReference(world, side), 1e-5, true);
            run("seeds", "unfused", DType.F32, side + "x" + side, side * side * 4, seedsGraph(side), CompileOptions.world(world).fuseCollectives(false),
                    Map.of("x", seedsInput(rank, side)), java.util.Set.of(), "d", seedsReference(world, side), 1e-5, true);
        }
    }

    static Graph seedsGraph(long side) {
        var g = Gatun.graph("seeds");
        var x = g.input("x", DType.F32, side, side);
        g.output("d", x.add(1).allReduce(SUM).add(x.add(2).allReduce(SUM)).add(x.add(3).allReduce(SUM)).allReduce(SUM));
        return g.build();
    }

    static NDArray seedsInput(int rank, long side) { return plus(NDArray.random(DType.F32, 200 + rank, side, side), rank + 1); }

    static double[] seedsReference(int world, long side) {
        double[] s = sumOverRanks(world, r -> seedsInput(r, side));
        // a + b + c = 3 * sum(x) + 6 * world on every rank; the last all-reduce multiplies by world
        for (int i = 0; i < s.length; i++) s[i] = world * (3 * s[i] + 6.0 * world);
        return s;
    }

    /**
     * The tensor-parallel MLP block in bfloat16: y = allReduce(gelu(x @ w1) @ w2) with hidden 4096, w1 a column
     * shard [4096, 16384 / world] and w2 a row shard [16384 / world, 4096]. Checked on the first 4 tokens
     * against float64 over every rank's shards.
     */
    void mlp(int tokens) {
        int hidden = 4096;
        run("mlp", "default", DType.BF16, tokens + "x" + hidden, (long) tokens * hidden * 2, mlpGraph(world, tokens, hidden),
                CompileOptions.world(world), mlpInputs(rank, world, tokens, hidden), java.util.Set.of("w1", "w2"), "y",
                mlpReference(world, tokens, hidden, 4), 2e-2, true);
    }

    /** Tokens and hidden sizes of the all-reduce + residual + RMSNorm workload (a decoder layer's tail in bf16). */
    static final int[] AR_NORM_TOKENS = {1, 8, 64, 256}, AR_NORM_HIDDEN = {4096, 8192};
    static final double AR_NORM_EPS = 1e-6;

    /**
     * {@code h = all_reduce(x) + residual; y = h * rsqrt(mean(h * h, -1) + eps) * w}, outputs y and h, in bf16: Gatun's
     * automatic choice and the one-shot and barrier-free all-reduces forced, each fused into one launch (the default)
     * and, to compare, unfused (the all-reduce, then the row kernel).
     */
    void arNorm() {
        for (int hidden : AR_NORM_HIDDEN)
            for (int tokens : AR_NORM_TOKENS) {
                Graph graph = arNormGraph(tokens, hidden);
                double[] ref = arNormReference(world, tokens, hidden);
                for (Algorithm a : new Algorithm[]{null, Algorithm.ONE_SHOT, Algorithm.BARRIER_FREE})
                    for (boolean fuse : new boolean[]{true, false}) {
                        if (!fuse && a == null) continue;
                        var options = CompileOptions.world(world).fuseCollectives(fuse);
                        if (a != null) options = options.forceAllReduce(a);
                        run("ar_norm", (a == null ? "auto" : a.name().toLowerCase(Locale.ROOT)) + (fuse ? "" : "_unfused"), DType.BF16, tokens + "x" + hidden,
                                (long) tokens * hidden * 2, graph, options, arNormInputs(rank, tokens, hidden), java.util.Set.of("w"), "y", ref, tolerance(DType.BF16), false);
                    }
            }
    }

    static Graph arNormGraph(int tokens, int hidden) {
        var g = Gatun.graph("ar_norm");
        Tensor x = g.input("x", DType.BF16, tokens, hidden), residual = g.input("residual", DType.BF16, tokens, hidden), w = g.input("w", DType.BF16, hidden);
        Tensor h = x.allReduce(SUM).add(residual);
        g.output("y", h.mul(h.mul(h).mean(true, -1).add(AR_NORM_EPS).rsqrt()).mul(w));
        g.output("h", h);
        return g.build();
    }

    /** Rank r's partial sums x (seeded per rank), the residual and the weight (the same on every rank). */
    static Map<String, NDArray> arNormInputs(int rank, int tokens, int hidden) {
        return Map.of("x", weights(300 + rank, tokens, hidden, 1.0), "residual", weights(299, tokens, hidden, 1.0), "w", weights(298, hidden));
    }

    /** y in float64 from the inputs as the ranks hold them (bf16 values), with no rounding in between. */
    static double[] arNormReference(int world, int tokens, int hidden) {
        double[] h = sumOverRanks(world, r -> arNormInputs(r, tokens, hidden).get("x"));
        var in = arNormInputs(0, tokens, hidden);
        double[] res = in.get("residual").toDoubleArray(), w = in.get("w").toDoubleArray(), y = new double[h.length];
        for (int t = 0; t < tokens; t++) {
            double ss = 0;
            for (int i = 0; i < hidden; i++) {
                h[t * hidden + i] += res[t * hidden + i];
                ss += h[t * hidden + i] * h[t * hidden + i];
            }
            double scale = 1 / Math.sqrt(ss / hidden + AR_NORM_EPS);
            for (int i = 0; i < hidden; i++) y[t * hidden + i] = h[t * hidden + i] * scale * w[i];
        }
        return y;
    }

    static Graph mlpGraph(int world, int tokens, int hidden) {
        int shard = 4 * hidden / world;
        var g = Gatun.graph("mlp");
        Tensor x = g.input("x", DType.BF16, tokens, hidden);
        Tensor w1 = g.input("w1", DType.BF16, hidden, shard);
        Tensor w2 = g.input("w2", DType.BF16, shard, hidden);
        g.output("y", x.matmul(w1).gelu().matmul(w2).allReduce(SUM));
        return g.build();
    }

    static Map<String, NDArray> mlpInputs(int rank, int world, int tokens, int hidden) {
        int shard = 4 * hidden / world;
        return Map.of("x", weights(7, tokens, hidden, 1.0), "w1", weights(1000 + rank, hidden, shard, 1 / Math.sqrt(hidden)),
                "w2", weights(2000 + rank, shard, hidden, 1 / Math.sqrt(4.0 * hidden)));
    }

    /** The first {@code rows} tokens of the MLP block's result, in float64 over every rank's shards. */
    static double[] mlpReference(int world, int tokens, int hidden, int rows) {
        int shard = 4 * hidden / world;
        rows = Math.min(rows, tokens);
        double[] ref = new double[rows * hidden];
        for (int r = 0; r < world; r++) {
            var in = mlpInputs(r, world, tokens, hidden);
            double[] h = matmul(in.get("x"), rows, hidden, in.get("w1"), shard);
            for (int i = 0; i < h.length; i++) h[i] = dev.gatun.ir.graph.ScalarMath.gelu(h[i]);
            double[] y = matmul(NDArray.of(h, rows, shard), rows, shard, in.get("w2"), hidden);
            for (int i = 0; i < y.length; i++) ref[i] += y[i];
        }
        return ref;
    }

    private record OverheadCase(String name, Graph graph, CompileOptions options, Map<String, NDArray> in) {}

    /** Host time to enqueue one call through {@code Session.run} (device inputs) against the bare launch of the same captured graphs. */
    void hostOverhead() {
        var g = Gatun.graph("allreduce");
        g.output("y", g.input("x", DType.F32, 8, 8).allReduce(SUM));
        var cases = List.of(
                new OverheadCase("seeds_local 64x64, 1 GPU", PointwiseBenchmark.seedsLocal(64), CompileOptions.world(1),
                        Map.of("x", NDArray.random(DType.F32, 3, 64, 64))),
                new OverheadCase("all_reduce 8x8", g.build(), CompileOptions.world(world), Map.of("x", NDArray.random(DType.F32, 3 + rank, 8, 8))));
        int n = Math.max(iters, 1000);
        for (OverheadCase c : cases) {
            // the one-GPU plan runs on rank 0 only; the collective on every rank
            if (c.options().worldSize() == 1 && rank != 0) continue;
            try (var exe = executable(c.graph(), c.options()); var bare = CudaTiming.Bare.of(exe, c.in(), java.util.Set.of());
                 var s = Session.compile(c.graph(), c.options().backend("cuda").timeout(Duration.ofSeconds(30)))) {
                if (bare == null) continue;
                var onDevice = new LinkedHashMap<String, DeviceArray>();
                c.in().forEach((k, v) -> onDevice.put(k, s.toDevice(v)));
                var calls = new CudaTiming.Call[]{new CudaTiming.Call(bare::once, bare::sync), new CudaTiming.Call(() -> s.run(onDevice), s::synchronize)};
                var t = c.options().worldSize() == 1 ? CudaTiming.alone(() -> CudaTiming.sideBySide(WARMUP, n, calls)) : CudaTiming.sideBySide(WARMUP, n, calls);
                row("host_overhead", "graph_launch", DType.F32, c.name(), 0, t[0], null, null, null, "bare cudaGraphLaunch from Java (FFM)");
                row("host_overhead", "gatun_replay", DType.F32, c.name(), 0, t[1], null, null, null,
                        String.format(Locale.ROOT, "Session.run with device inputs: %.2f us above the bare launch", t[1].enqueue() - t[0].enqueue()));
            }
        }
    }

    /**
     * The {@code norms} family ({@link NormWorkloads}), on one GPU: each cell checked once against float64 on the
     * host before it is timed (a wrong result is a failed row, not timed), then timed through {@code Session.run}
     * with device inputs under replay and eagerly. Before each mode's cell, in the same run, the floor (variant
     * {@code d2d_copy}): a device-to-device {@code cudaMemcpyAsync} moving as many bytes (half of them read, half
     * written) as the cell must move at least, timed the same way. Rows carry {@code moved_bytes} (bytes read once
     * plus written once), {@code gbps} (moved_bytes / pipelined time), {@code copy_gbps} (the copy's, measured just
     * before) and {@code of_copy} (their ratio). {@code chosen} says how many kernels the plan launches.
     */
    void norms(List<NormWorkloads.Op> ops, List<String> modes) {
        if (world != 1) {
            if (rank == 0) System.out.println("norms: measured at world 1 (one GPU) only; skipped at world " + world);
            return;
        }
        try (Device d = Device.open(localRank)) {  // held for the family: the copy floors run on it
            for (NormWorkloads.Case c : NormWorkloads.cases()) if (ops.contains(c.op())) norm(d, c, modes);
        }
    }

    private void norm(Device dev, NormWorkloads.Case c, List<String> modes) {
        String wl = c.op().id, shape = c.shape();
        DType t = c.dtype();
        long bytes = c.bytes(), moved = c.movedBytes();
        Graph graph;
        Map<String, NDArray> in;
        Map<String, double[]> ref;
        try {
            graph = c.graph();
            in = c.inputs();
            ref = c.reference(in);
        } catch (RuntimeException e) {
            for (String mode : modes) failed(wl, "default", t, shape, bytes, mode, e, Map.of("moved_bytes", moved));
            return;
        }
        long copyBytes = (moved + 1) / 2;
        for (String mode : modes) {
            // the floor, just before each mode's cell: a device-to-device copy of half the moved bytes reads and
            // writes as many bytes as the cell must (the same plain cudaMemcpyAsync in both modes, no graph)
            double copyGBs = Double.NaN;
            try (var a = dev.allocate(copyBytes); var b = dev.allocate(copyBytes); var stream = dev.createStream()) {
                a.memset(1);
                var timing = CudaTiming.ofCalls(() -> b.copyFromAsync(a, stream), stream::synchronize, WARMUP, iters);
                copyGBs = gbps(2 * copyBytes, timing.pipelined());
                row(wl, "d2d_copy", t, shape, bytes, timing, mode, null, null,
                        String.format(Locale.ROOT, "cudaMemcpyAsync device to device of %.1f MiB: the floor, not Gatun", copyBytes / 1048576.0),
                        bandwidth(2 * copyBytes, timing, copyGBs, true));
            } catch (RuntimeException e) {
                failed(wl, "d2d_copy", t, shape, bytes, mode, e, Map.of("moved_bytes", 2 * copyBytes));
            }
            var options = CompileOptions.world(1).backend("cuda").timeout(Duration.ofSeconds(30)).cudaGraphs(mode.equals("replay"));
            normCell(c, graph, "default", options, mode, in, ref, moved, copyGBs);
            for (var form : rowForms)
                normCell(c, graph, "rows_" + form.name().toLowerCase(Locale.ROOT), options.planning(options.planning().withRowForm(form)), mode, in, ref, moved, copyGBs);
        }
    }

    /**
     * One norm cell in one mode, compiled with {@code options} (the default's, or a row form forced): checked against
     * float64, then timed. Its note names the kernels and each row kernel's form ({@code rows[warp]}).
     */
    private void normCell(NormWorkloads.Case c, Graph graph, String variant, CompileOptions options, String mode, Map<String, NDArray> in, Map<String, double[]> ref,
                          long moved, double copyGBs) {
        String wl = c.op().id, shape = c.shape();
        DType t = c.dtype();
        long bytes = c.bytes();
        try (var s = Session.compile(graph, options)) {
            var onDevice = new LinkedHashMap<String, DeviceArray>();
            in.forEach((k, v) -> onDevice.put(k, s.toDevice(v)));
            var launches = s.plan().steps().stream().filter(st -> st instanceof dev.gatun.planner.Step.Launch).toList();
            long kernels = launches.size();
            var forms = launches.stream().map(st -> s.plan().choice(st).rows()).filter(java.util.Objects::nonNull).map(r -> r.describe()).toList();
            String chosen = kernels + (kernels == 1 ? " kernel" : " kernels") + (forms.isEmpty() ? "" : " " + String.join(" ", forms));
            // checked once, before timing: every output against float64, from a host copy
            var out = s.run(onDevice);
            double err = 0;
            String worst = null;
            for (var e : ref.entrySet()) {
                DeviceArray o = out.get(e.getKey());
                if (c.op() == NormWorkloads.Op.LOOP_ORDER && e.getKey().equals("z_t"))
                    chosen += "; z_t strides " + Arrays.toString(o.strides());
                double oe = relativeError(o.toHost(), e.getValue());
                if (worst == null || (!Double.isNaN(err) && !(oe <= err))) { // the largest, NaN sticking
                    err = oe;
                    worst = e.getKey();
                }
            }
            if (!(err <= c.tolerance())) {
                wrong(wl, variant, t, shape, bytes, mode, err, String.format(Locale.ROOT,
                        "WrongResult: output '%s' relative error %.3g > %.0e against float64 (checked before timing; not timed) [%s]",
                        worst, err, c.tolerance(), chosen), Map.of("moved_bytes", moved));
                return;
            }
            var timing = CudaTiming.ofCalls(() -> s.run(onDevice), s::synchronize, WARMUP, iters);
            row(wl, variant, t, shape, bytes, timing, mode, err, true, chosen, bandwidth(moved, timing, copyGBs, false));
        } catch (RuntimeException e) {
            failed(wl, variant, t, shape, bytes, mode, e, Map.of("moved_bytes", moved));
        }
    }

    /** Gigabytes per second of {@code bytes} moved in {@code micros}. */
    static double gbps(long bytes, double micros) { return bytes / (micros * 1e-6) / 1e9; }

    private static Map<String, Object> bandwidth(long moved, CudaTiming.Timing timing, double copyGBs, boolean floor) {
        var m = new LinkedHashMap<String, Object>();
        double g = gbps(moved, timing.pipelined());
        m.put("moved_bytes", moved);
        m.put("gbps", g);
        m.put("copy_gbps", copyGBs);
        m.put("of_copy", g / copyGBs);
        if (floor) m.put("floor", true);
        return m;
    }

    // ------------------------------------------------------------------ measuring

    private void run(String workload, String variant, DType t, String shape, long bytes, Graph graph, CompileOptions options,
                     Map<String, NDArray> in, String output, double[] ref, double tol) {
        run(workload, variant, t, shape, bytes, graph, options, in, java.util.Set.of(), output, ref, tol, false);
    }

    /**
     * One workload through the public API, each mode in a session of its own: inputs on the device ({@code toDevice}
     * once; {@code bound} ones bound once), outputs left there, in each of the suite's modes (replay, eager). With {@code roundTrip}, the
     * host round trip too (host arrays in, host arrays out: ordinary ones, and page-locked ones from
     * {@code allocateHost}) beside the engine's floors measured in the same run: bare replay of the captured graphs, and
     * bare pinned copies around it.
     */
    private void run(String workload, String variant, DType t, String shape, long bytes, Graph graph, CompileOptions options,
                     Map<String, NDArray> in, java.util.Set<String> bound, String output, double[] ref, double tol, boolean roundTrip) {
        String chosen = Lowering.lower(graph, options.lowering()).realizations().stream()
                .map(r -> (r.algorithm() == null ? "identity" : r.algorithm().opName()) + (workload.equals("input_path") ? " " + r.path() : "")).distinct()
                .reduce((a, b) -> a + "+" + b).orElse(null);
        var modes = new ArrayList<>(this.modes);
        try {
            while (!modes.isEmpty()) {
                boolean graphs = modes.getFirst().equals("replay");
                try (var s = Session.compile(graph, options.backend("cuda").timeout(Duration.ofSeconds(30)).cudaGraphs(graphs))) {
                    var passed = new LinkedHashMap<String, NDArray>(in);
                    for (String b : bound) s.bind(b, passed.remove(b));
                    var onDevice = new LinkedHashMap<String, DeviceArray>();
                    passed.forEach((k, v) -> onDevice.put(k, s.toDevice(v)));
                    var device = new CudaTiming.Call(() -> s.run(onDevice), s::synchronize);
                    if (graphs && roundTrip) {
                        hostRoundTrip(workload, variant, t, shape, bytes, graph, options, s, device, in, passed, output, ref, tol, chosen);
                        modes.removeFirst();
                        continue;
                    }
                    var timing = CudaTiming.ofCalls(device.call(), device.sync(), WARMUP, iters);
                    double err = relativeError(s.runToHost(onDevice).get(output), ref);
                    row(workload, variant, t, shape, bytes, timing, modes.removeFirst(), err, err <= tol, chosen);
                }
            }
        } catch (RuntimeException e) {
            // recorded, not hidden; a failing rank makes its peers' collectives time out, so all ranks move on together
            for (String mode : modes) failed(workload, variant, t, shape, bytes, mode, e);
        }
    }

    /**
     * Device-resident calls beside the bare replay of the same plan, and the host round trip (ordinary arrays, and
     * page-locked ones from allocateHost) beside bare pinned copies around the bare replay: each pair timed side by
     * side in one loop.
     */
    private void hostRoundTrip(String workload, String variant, DType t, String shape, long bytes, Graph graph, CompileOptions options,
                               Session s, CudaTiming.Call device, Map<String, NDArray> in, Map<String, NDArray> passed, String output,
                               double[] ref, double tol, String chosen) {
        var pinnedIn = new LinkedHashMap<String, NDArray>();
        passed.forEach((k, v) -> {
            NDArray p = s.allocateHost(v.dtype(), v.shape());
            p.segment().copyFrom(v.segment());
            pinnedIn.put(k, p);
        });
        var pinnedOut = new LinkedHashMap<String, NDArray>();
        s.run(pinnedIn).forEach((k, v) -> pinnedOut.put(k, s.allocateHost(v.dtype(), v.shape())));
        var pinned = new CudaTiming.Call(() -> s.run(pinnedIn).forEach((k, v) -> v.copyTo(pinnedOut.get(k))), () -> {});
        var plainOut = new LinkedHashMap<String, NDArray>();
        s.run(passed).forEach((k, v) -> plainOut.put(k, NDArray.zeros(v.dtype(), v.shape())));
        var plain = new CudaTiming.Call(() -> s.run(passed).forEach((k, v) -> v.copyTo(plainOut.get(k))), () -> {});
        var fresh = new CudaTiming.Call(() -> s.runToHost(passed), () -> {});
        try (var exe = executable(graph, options); var bare = CudaTiming.Bare.of(exe, in, java.util.Set.of());
             var bareCopies = CudaTiming.Bare.of(exe, in, passed.keySet())) {
            CudaTiming.Timing[] x;
            if (bare == null) {
                x = new CudaTiming.Timing[]{CudaTiming.ofCalls(device.call(), device.sync(), WARMUP, iters), null};
            } else {
                x = CudaTiming.sideBySide(WARMUP, iters, device, new CudaTiming.Call(bare::once, bare::sync));
            }
            double err = relativeError(s.runToHost(passed).get(output), ref);
            row(workload, variant, t, shape, bytes, x[0], "replay", err, err <= tol, chosen);
            if (x[1] != null) row(workload, variant + "/engine", t, shape, bytes, x[1], "replay", null, null, "bare cudaGraphLaunch of the captured graphs");
            var h = bareCopies == null ? new CudaTiming.Timing[]{CudaTiming.ofCalls(pinned.call(), pinned.sync(), WARMUP, iters), null}
                    : CudaTiming.sideBySide(WARMUP, iters, pinned, new CudaTiming.Call(bareCopies::once, bareCopies::sync));
            pinned.call().run();
            err = relativeError(pinnedOut.get(output), ref);
            row(workload, variant + "/host_pinned", t, shape, bytes, h[0], "replay", err, err <= tol, chosen + "; allocateHost arrays in and out");
            if (h[1] != null) row(workload, variant + "/engine_pinned_copies", t, shape, bytes, h[1], "replay", null, null,
                    "bare pinned H2D + cudaGraphLaunch + pinned D2H");
        }
        var p = CudaTiming.ofCalls(plain.call(), plain.sync(), WARMUP, iters);
        plain.call().run();
        double err = relativeError(plainOut.get(output), ref);
        row(workload, variant + "/host", t, shape, bytes, p, "replay", err, err <= tol, chosen + "; ordinary NDArrays in and out (copyTo)");
        // runToHost makes its outputs anew every call: fresh memory, whose first touch costs the operating system's page faults
        p = CudaTiming.ofCalls(fresh.call(), fresh.sync(), WARMUP, iters);
        err = relativeError(s.runToHost(passed).get(output), ref);
        row(workload, variant + "/host_new", t, shape, bytes, p, "replay", err, err <= tol, chosen + "; NDArray in, runToHost out (new arrays)");
    }

    private CudaExecutable executable(Graph g, CompileOptions options) {
        options = options.timeout(Duration.ofSeconds(30));
        var plan = Planner.plan(Lowering.lower(g, options.lowering()), options.planning().withCommGranularity(CudaBackend.GRANULARITY));
        return new CudaExecutable(plan, options, CudaBackend.gpu(options));
    }

    private double[] sumOverRanks(Function<Integer, NDArray> input) { return sumOverRanks(world, input); }

    static double[] sumOverRanks(int world, Function<Integer, NDArray> input) {
        double[] sum = null;
        for (int r = 0; r < world; r++) {
            double[] v = input.apply(r).toDoubleArray();
            if (sum == null) sum = v;
            else for (int i = 0; i < v.length; i++) sum[i] += v[i];
        }
        return sum;
    }

    /** ||out - ref|| / ||ref|| over the reference's elements (a prefix of out); NaN anywhere gives NaN. */
    static double relativeError(NDArray out, double[] ref) {
        double num = 0, den = 0;
        for (int i = 0; i < ref.length; i++) {
            double d = out.get(i) - ref[i];
            num += d * d;
            den += ref[i] * ref[i];
        }
        return Math.sqrt(num) / Math.max(Math.sqrt(den), Double.MIN_NORMAL);
    }

    static double tolerance(DType t) { return t == DType.F32 ? 1e-5 : 1e-2; }

    static NDArray plus(NDArray a, double c) {
        for (long i = 0; i < a.numel(); i++) a.set(i, a.get(i) + c);
        return a;
    }

    /** Seeded uniform values with the variance of a unit normal, times {@code scale}, rounded to bfloat16. */
    static NDArray weights(long seed, int rows, int cols, double scale) { return fill(NDArray.zeros(DType.BF16, rows, cols), seed, scale); }

    /** The same for a vector of {@code n} (a norm's weight), scale 1. */
    static NDArray weights(long seed, int n) { return fill(NDArray.zeros(DType.BF16, n), seed, 1.0); }

    private static NDArray fill(NDArray a, long seed, double scale) {
        var rnd = new SplittableRandom(seed);
        double s = scale * Math.sqrt(3);
        for (long i = 0; i < a.numel(); i++) a.set(i, (rnd.nextDouble() * 2 - 1) * s);
        return a;
    }

    /** The first {@code rows} rows of a [rows, k] x b [k, n] in float64. */
    static double[] matmul(NDArray a, int rows, int k, NDArray b, int n) {
        double[] bv = b.toDoubleArray(), out = new double[rows * n];
        for (int i = 0; i < rows; i++)
            for (int p = 0; p < k; p++) {
                double x = a.get((long) i * k + p);
                if (x == 0) continue;
                for (int j = 0; j < n; j++) out[i * n + j] += x * bv[p * n + j];
            }
        return out;
    }

    // ------------------------------------------------------------------ rows

    private void row(String workload, String variant, DType t, String shape, long bytes, CudaTiming.Timing timing, String mode,
                     Double err, Boolean correct, String chosen) {
        row(workload, variant, t, shape, bytes, timing, mode, err, correct, chosen, Map.of());
    }

    /** One measured row; {@code extra} fields (e.g. bandwidth) follow the schema's. */
    private void row(String workload, String variant, DType t, String shape, long bytes, CudaTiming.Timing timing, String mode,
                     Double err, Boolean correct, String chosen, Map<String, Object> extra) {
        var m = base(workload, variant, t, shape, bytes, mode == null ? "replay" : mode);
        m.put("median_us", timing.median());
        m.put("p10_us", timing.p10());
        m.put("p90_us", timing.p90());
        m.put("pipelined_us", Double.isNaN(timing.pipelined()) ? null : timing.pipelined());
        m.put("enqueue_us", timing.enqueue());
        m.put("calls", timing.calls());
        m.put("correct", correct);
        m.put("max_rel_err", err);
        m.put("chosen", chosen);
        m.put("error", null);
        m.putAll(extra);
        String bw = extra.get("gbps") instanceof Double g && extra.get("of_copy") instanceof Double r
                ? String.format(Locale.ROOT, " %.0f GB/s (%.2f of copy)", g, r) : "";
        emit(m, String.format(Locale.ROOT, "%-13s %-13s %-7s %-4s %-12s %9.1f us (p10 %.1f, p90 %.1f) pipelined %s enqueue %.1f %s%s%s",
                workload, variant, m.get("mode"), t.name().toLowerCase(Locale.ROOT), shape, timing.median(), timing.p10(), timing.p90(),
                Double.isNaN(timing.pipelined()) ? "-" : String.format(Locale.ROOT, "%.1f", timing.pipelined()), timing.enqueue(),
                correct == null ? "" : correct ? "ok" : "WRONG err " + err, bw, chosen == null ? "" : " [" + chosen + "]"));
    }

    /** A result outside tolerance, found before timing: a failed row with its error, not timed. */
    private void wrong(String workload, String variant, DType t, String shape, long bytes, String mode, double err, String msg,
                       Map<String, Object> extra) {
        var m = base(workload, variant, t, shape, bytes, mode);
        m.putAll(extra);
        m.put("correct", false);
        m.put("max_rel_err", err);
        m.put("error", msg.length() > 300 ? msg.substring(0, 300) : msg);
        emit(m, workload + " " + variant + " " + mode + " " + shape + " " + m.get("dtype") + " FAILED " + msg);
    }

    private void failed(String workload, String variant, DType t, String shape, long bytes, String mode, RuntimeException e) {
        failed(workload, variant, t, shape, bytes, mode, e, Map.of());
    }

    private void failed(String workload, String variant, DType t, String shape, long bytes, String mode, RuntimeException e,
                        Map<String, Object> extra) {
        var m = base(workload, variant, t, shape, bytes, mode);
        m.putAll(extra);
        String msg = e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage()).lines().findFirst().orElse("");
        m.put("error", msg.length() > 300 ? msg.substring(0, 300) : msg);
        // rows come from rank 0; another rank's failure (which makes rank 0 wait) is printed where it happens
        if (rank != 0) System.err.println("rank " + rank + ": " + workload + " " + variant + " " + mode + " " + shape + " FAILED " + e);
        emit(m, workload + " " + variant + " " + mode + " " + shape + " FAILED " + msg);
    }

    private LinkedHashMap<String, Object> base(String workload, String variant, DType t, String shape, long bytes, String mode) {
        var m = new LinkedHashMap<String, Object>();
        m.put("system", "gatun");
        m.put("workload", workload);
        m.put("variant", variant);
        m.put("mode", mode);
        m.put("dtype", t == DType.F32 ? "f32" : t == DType.BF16 ? "bf16" : t.name().toLowerCase(Locale.ROOT));
        m.put("shape", shape);
        m.put("bytes", bytes);
        m.put("world", world);
        m.put("device", device);
        m.put("versions", "gatun 0.1.0, java " + Runtime.version());
        return m;
    }

    private void emit(Map<String, Object> m, String line) {
        if (rank != 0) return;
        System.out.println(line);
        try {
            Files.writeString(out, json(m) + "\n", StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        } catch (IOException e) {
            throw new UncheckedIOException("writing benchmark rows to " + out, e);
        }
    }

    static String json(Map<String, Object> m) {
        var parts = new ArrayList<String>();
        m.forEach((k, v) -> parts.add("\"" + k + "\": " + value(v)));
        return "{" + String.join(", ", parts) + "}";
    }

    private static String value(Object v) {
        if (v == null) return "null";
        if (v instanceof Double d)
            return d.isNaN() || d.isInfinite() ? "null" : java.math.BigDecimal.valueOf(d).round(new java.math.MathContext(5)).toString();
        if (v instanceof Number || v instanceof Boolean) return v.toString();
        var sb = new StringBuilder("\"");
        for (char c : v.toString().toCharArray()) {
            if (c == '"' || c == '\\') sb.append('\\').append(c);
            else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
            else sb.append(c);
        }
        return sb.append('"').toString();
    }
}
