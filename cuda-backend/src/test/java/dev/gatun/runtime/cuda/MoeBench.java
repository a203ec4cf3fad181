package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.models.llama.ExpertParallel;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;
import dev.gatun.runtime.distributed.Rendezvous;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeSet;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

/**
 * Expert parallelism's all-to-alls on the CUDA backend, for {@code bench/moe_torch.py} (PyTorch under torchrun) to
 * set beside it on the same inputs ({@link MoeInputs}: formulas both sides compute): two workloads through the public
 * API, each a session whose inputs are all bound (device-resident) and whose calls replay its captured CUDA graphs.
 * <ul>
 *   <li><b>dispatch+combine</b>: {@code --tokens} (128) tokens a rank of {@code --hidden} (4096), top-2 of
 *   {@code --experts} (8) split over all ranks, the routing given (uniform, and skewed: three tokens in four send their
 *   first choice to expert 0); {@link ExpertParallel#layer}'s dispatch all_to_all, a trivial expert (local expert i
 *   scales its rows by i + 1) and the combine all_to_all with the weighted sum.</li>
 *   <li><b>layer</b>: a Mixtral-shape MoE layer at EP = the world (hidden 4096, width {@code --intermediate} 14336,
 *   8 experts, top 2, SwiGLU experts by {@code expert_matmul}): the router as {@code MixtureOfExperts} computes it
 *   (logits in the model's dtype, softmax in float32, top-k, renormalised), {@code --layer-tokens} (1,8,128) a rank,
 *   the whole layer one session.</li>
 * </ul>
 * Each case: latency (a synchronisation after every call; median and 10th percentile of {@code --iters}) and pipelined
 * ({@code --iters} calls back to back, one synchronisation, divided). Every rank checks its result against plain
 * float64 loops ({@link MoeCheck}): every token of dispatch+combine; the first {@code --check-tokens} (4) tokens of
 * the smallest layer case (its router's choice by the same loops; a token whose k-th and next logits are within two
 * units in the last place of the dtype is ambiguous and skipped), and that case against the same graph on the host
 * backend ({@code --host-check}). A mismatch fails the run. The JSON gives
 * {@code moe_torch.py} each rank's fingerprint of each case: the tokens compared (the layer's unambiguous ones), the
 * sum of their magnitudes and sample rows. Ranks are threads of this
 * process ({@link LocalWorld}), rank r on GPU r / ranks-per-gpu.
 *
 * <pre>
 * --world N            ranks (default 2)                  --ranks-per-gpu K  ranks sharing each GPU (default 1)
 * --dtype bf16|f32     tokens, weights, activations (default bf16)
 * --tokens N           dispatch+combine tokens a rank (default 128)      --hidden H (default 4096)
 * --experts E          experts, a multiple of the world (default 8; top-2 always)
 * --intermediate F     the layer's expert width (default 14336)          --layer-tokens LIST (default 1,8,128)
 * --only W             dispatch or layer (default both)   --check-tokens N (default 4)
 * --iters N            timed calls (default 200)          --warmup N  calls before them (default 10000: the JVM's
 *                      steady state; after 200 the call path is not yet compiled by C2 and one call holds some 25 µs
 *                      more of host time, measured on two H200s)
 * --out FILE           JSON (default gatun-moe.json)      --backend cuda|host (host: try the harness without a GPU)
 * --plan               print rank 0's whole plan of each case (its summary is always printed)
 * --host-check on|off  also run the smallest layer case on the host backend and compare (default on, off with
 *                      --backend host)
 * </pre>
 */
public final class MoeBench {
    private MoeBench() {}

    static final int K = 2;

    /** The benchmark's settings. */
    record Settings(int world, int perGpu, DType dtype, int tokens, int hidden, int experts, int width, int[] layerTokens, String only,
                    int checkTokens, int iters, int warmup, String backend, boolean plan, boolean hostCheck) {
        static Settings of(Map<String, String> o) {
            DType dtype = switch (o.getOrDefault("dtype", "bf16")) {
                case "bf16" -> DType.BF16;
                case "f32" -> DType.F32;
                default -> throw new IllegalArgumentException("--dtype bf16 or f32, not " + o.get("dtype"));
            };
            int[] layer = Arrays.stream(o.getOrDefault("layer-tokens", "1,8,128").split(",")).map(String::trim).mapToInt(Integer::parseInt).sorted().toArray();
            var s = new Settings(num(o, "world", 2), num(o, "ranks-per-gpu", 1), dtype, num(o, "tokens", 128), num(o, "hidden", 4096), num(o, "experts", 8),
                    num(o, "intermediate", 14336), layer, o.getOrDefault("only", "all"), num(o, "check-tokens", 4), num(o, "iters", 200),
                    num(o, "warmup", 10_000), o.getOrDefault("backend", "cuda"), o.containsKey("plan"),
                    switch (o.getOrDefault("host-check", o.getOrDefault("backend", "cuda").equals("host") ? "off" : "on")) {
                        case "on" -> true;
                        case "off" -> false;
                        default -> throw new IllegalArgumentException("--host-check on or off, not " + o.get("host-check"));
                    });
            if (s.experts < 2 || s.experts % s.world != 0)
                throw new IllegalArgumentException("--experts " + s.experts + ": at least 2 and a multiple of --world " + s.world);
            if (!java.util.Set.of("all", "dispatch", "layer").contains(s.only)) throw new IllegalArgumentException("--only dispatch or layer, not " + s.only);
            if (s.iters < 1 || s.warmup < 0) throw new IllegalArgumentException("--iters at least 1, --warmup at least 0");
            return s;
        }

        boolean runs(String workload) { return only.equals("all") || only.equals(workload); }
    }

    private static int num(Map<String, String> o, String key, int otherwise) { return Integer.parseInt(o.getOrDefault(key, String.valueOf(otherwise))); }

    /** One case's measurements (rank 0's clock) and every rank's check and fingerprint of its output. */
    static final class Result {
        final String workload, variant;
        final int tokens;
        final long capacity;
        double latency, p10, pipelined;
        /**
         * The latency loop's host side, to see where a synchronised call's time goes beside the pipelined figure: each
         * rank's process-wide clock (the ranks are threads of one process) when each call starts and when its run()
         * returns (the launch's host time); set by every rank.
         */
        final long[][] starts, returns;
        String algorithms, summary;
        int partitions;
        final String[] checks;
        final double[] absSum;
        final double[][] samples;
        final int[][] compared;

        Result(String workload, String variant, int tokens, long capacity, int world) {
            this.workload = workload;
            this.variant = variant;
            this.tokens = tokens;
            this.capacity = capacity;
            checks = new String[world];
            absSum = new double[world];
            samples = new double[world][];
            compared = new int[world][];
            starts = new long[world][];
            returns = new long[world][];
        }

        /**
         * "host: run() returns after X us (median, rank 0); the ranks' starts differ by Y us (median over calls of the
         * latest start less the earliest)", or "" where the starts were not recorded (a world of one).
         */
        String hostSide() {
            if (starts.length < 2 || Arrays.stream(starts).anyMatch(java.util.Objects::isNull)) return "";
            int n = starts[0].length;
            double[] host = new double[n], skew = new double[n];
            for (int i = 0; i < n; i++) {
                host[i] = (returns[0][i] - starts[0][i]) / 1e3;
                long lo = Long.MAX_VALUE, hi = Long.MIN_VALUE;
                for (long[] st : starts) {
                    lo = Math.min(lo, st[i]);
                    hi = Math.max(hi, st[i]);
                }
                skew[i] = (hi - lo) / 1e3;
            }
            return String.format(Locale.ROOT, "host: run() returns after %.1f us (median, rank 0); the ranks' starts differ by %.1f us (median)",
                    LlamaBench.median(host), LlamaBench.median(skew));
        }
    }

    /** Dispatch, a trivial expert (local expert i scales by i + 1) and combine, as {@link ExpertParallel#layer} builds them. */
    static Graph dispatchGraph(Settings s, long capacity) {
        GraphBuilder g = Gatun.graph("moe_dispatch_combine").mesh("ep", s.world);
        Tensor x = g.input("x", s.dtype, s.tokens, s.hidden), w = g.input("weights", DType.F32, s.tokens, K), ids = g.input("ids", DType.I64, s.tokens, K);
        g.output("y", ExpertParallel.layer(g, x, w, ids, s.experts, "ep", s.world, capacity, (rows, local) -> {
            long cap = rows.shape().sizes()[0];
            return rows.mul(local.reshape(cap, 1).add(g.scalar(1, DType.I64)).cast(s.dtype));   // the scale computed by the product (broadcast)
        }));
        return g.build();
    }

    /** The Mixtral-shape layer: the router (softmax in float32, top-k, renormalised) and SwiGLU experts over the ranks. */
    static Graph layerGraph(Settings s, int tokens) {
        GraphBuilder g = Gatun.graph("moe_layer").mesh("ep", s.world);
        int local = s.experts / s.world, f = s.width, h = s.hidden;
        Tensor x = g.input("x", s.dtype, tokens, h), router = g.input("router", s.dtype, s.experts, h);
        Tensor gateUp = g.input("gate_up", s.dtype, local, 2 * f, h), down = g.input("down", s.dtype, local, h, f);
        Tensor logits = x.matmul(router.transpose(0, 1));
        if (s.dtype != DType.F32) logits = logits.cast(DType.F32);
        Tensor e = logits.sub(logits.max(true, -1)).exp();
        var top = e.div(e.sum(true, -1)).topk(K);
        Tensor weights = top.values().div(top.values().sum(true, -1));
        // the local experts as the decoder's mixtures run them: routed where the rows are few, else each expert once
        g.output("y", ExpertParallel.layer(g, x, weights, top.indices(), s.experts, "ep", s.world, (long) tokens * K * s.world,
                ExpertParallel.swiGluExperts(g, gateUp, down)));
        return g.build();
    }

    public static void main(String[] args) throws Exception {
        var o = LlamaBench.options(args);
        Settings s = Settings.of(o);
        System.out.printf(Locale.ROOT, "moe bench: %d ranks (%d a GPU, %s), %s, hidden %d, top-%d of %d experts; dispatch+combine %d tokens a rank; "
                        + "layer width %d, tokens %s a rank; %d timed calls after %d%n", s.world, s.perGpu, s.backend, s.dtype.shortName(), s.hidden, K,
                s.experts, s.tokens, s.width, Arrays.toString(s.layerTokens), s.iters, s.warmup);
        var results = new ArrayList<Result>();
        if (s.runs("dispatch"))
            for (String variant : List.of("uniform", "skewed")) results.add(new Result("dispatch+combine", variant, s.tokens, (long) s.tokens * K * s.world, s.world));
        if (s.runs("layer"))
            for (int t : s.layerTokens) results.add(new Result("layer", "mixtral", t, (long) t * K * s.world, s.world));
        LocalWorld.run(s.world, Duration.ofMinutes(10), rv -> rank(s, rv, results));
        for (Result r : results) {
            System.out.printf(Locale.ROOT, "%n== %s %s, %d tokens a rank: capacity %d rows, all_to_all %s, %d partition(s)%n%s", r.workload, r.variant,
                    r.tokens, r.capacity, r.algorithms, r.partitions, r.summary);
            System.out.printf(Locale.ROOT, "gatun: %s %s %d tokens: latency %.1f us (p10 %.1f), pipelined %.1f us; check %s%n", r.workload, r.variant,
                    r.tokens, r.latency, r.p10, r.pipelined, String.join("; ", r.checks));
            if (!r.hostSide().isEmpty()) System.out.printf(Locale.ROOT, "gatun: %s %s %d tokens: %s%n", r.workload, r.variant, r.tokens, r.hostSide());
        }
        Files.writeString(Path.of(o.getOrDefault("out", "gatun-moe.json")), json(s, results));
    }

    /** Rank rv's part: every case in order (every rank makes the same calls), its check, rank 0's timing and plan. */
    private static void rank(Settings s, Rendezvous rv, List<Result> results) {
        int r = rv.rank();
        var options = (s.world == 1 ? CompileOptions.world(1) : CompileOptions.world(s.world).rank(rv).ranksPerGpu(s.perGpu))
                .backend(s.backend).timeout(Duration.ofMinutes(5));
        NDArray gateUp = null, down = null;
        for (Result res : results) {
            boolean layer = res.workload.equals("layer");
            Graph graph = layer ? layerGraph(s, res.tokens) : dispatchGraph(s, res.capacity);
            var in = new java.util.HashMap<String, NDArray>();
            in.put("x", MoeInputs.tokens(s.dtype, r, res.tokens, s.hidden));
            MoeInputs.Routing routing = null;
            if (layer) {
                int local = s.experts / s.world;
                if (gateUp == null) {
                    gateUp = MoeInputs.experts(s.dtype, 0, r * local, local, s.hidden, s.width);
                    down = MoeInputs.experts(s.dtype, 1, r * local, local, s.hidden, s.width);
                }
                in.put("router", MoeInputs.tensor(s.dtype, MoeInputs.ROUTER_SALT, MoeInputs.ROUTER_SHIFT, s.experts, s.hidden));
                in.put("gate_up", gateUp);
                in.put("down", down);
            } else {
                routing = MoeInputs.routing(r, res.tokens, s.experts, res.variant.equals("skewed"));
                in.put("ids", NDArray.of(routing.ids(), res.tokens, K));
                in.put("weights", NDArray.of(DType.F32, routing.weights(), res.tokens, K));
            }
            try (var session = Session.compile(graph, options)) {
                session.bind(session.ranks().getFirst(), in);
                if (r == 0) describe(s, session.plan(), res);
                NDArray y = session.runToHost(Map.of()).get("y");
                fingerprint(s, res, r, y);
                boolean smallest = layer && res.tokens == s.layerTokens[0];
                res.checks[r] = layer ? (smallest ? MoeCheck.layer(s, r, y) : "not checked (only the smallest case)")
                        : MoeCheck.dispatch(s, r, res.tokens, routing, y);
                if (smallest && s.hostCheck) res.checks[r] += "; " + hostCheck(s, rv, graph, in, y);
                res.starts[r] = new long[s.iters];
                res.returns[r] = new long[s.iters];
                if (s.world > 1) rv.barrier("moe-bench/" + res.workload + "/" + res.variant + "/" + res.tokens);   // as PyTorch's dist.barrier()
                double[] t = time(session, s.warmup, s.iters, res.starts[r], res.returns[r]);
                if (r == 0) {
                    res.latency = t[0];
                    res.p10 = t[1];
                    res.pipelined = t[2];
                }
            }
        }
    }

    /**
     * The same graph and inputs on the host backend (every rank takes part): rank rv's {@code y} against it over the
     * tokens whose router choice is not {@link MoeCheck#ambiguous}, within {@link MoeCheck#layerTolerance} of the
     * largest of them. Fails the run where it is off.
     */
    private static String hostCheck(Settings s, Rendezvous rv, Graph graph, Map<String, NDArray> in, NDArray y) {
        int r = rv.rank();
        var options = (s.world == 1 ? CompileOptions.world(1) : CompileOptions.world(s.world).rank(rv)).backend("host").timeout(Duration.ofMinutes(5));
        try (var host = Session.compile(graph, options)) {
            host.bind(host.ranks().getFirst(), in);
            NDArray want = host.runToHost(Map.of()).get("y");
            int tokens = (int) y.shape()[0], h = s.hidden, compared = 0;
            double max = 0, err = 0;
            for (int n = 0; n < tokens; n++) {
                if (MoeCheck.ambiguous(s, r, n)) continue;
                compared++;
                for (int c = 0; c < h; c++) {
                    max = Math.max(max, Math.abs(want.get((long) n * h + c)));
                    err = Math.max(err, Math.abs(y.get((long) n * h + c) - want.get((long) n * h + c)));
                }
            }
            double tol = MoeCheck.layerTolerance(s.dtype) * max;
            if (!(err <= tol))
                throw new IllegalStateException(String.format(Locale.ROOT, "layer rank %d: %s differs from the host backend by %s (tolerance %s: %s of the largest, %s)",
                        r, s.backend, err, tol, MoeCheck.layerTolerance(s.dtype), max));
            return String.format(Locale.ROOT, "the host backend's %d tokens within %.2g of the largest", compared, max == 0 ? 0 : err / max);
        }
    }

    /** Rank 0's plan: its summary, the all_to_all lines, the algorithms of the all_to_alls, the partitions. */
    private static void describe(Settings s, Plan p, Result res) {
        var algorithms = new TreeSet<String>();
        for (Step st : p.steps())
            for (var c : st.collectives())
                if (c.call().kind() == CollectiveKind.ALL_TO_ALL) algorithms.add(c.call().algorithm().name().toLowerCase(Locale.ROOT));
        String text = p.toString();
        res.algorithms = algorithms.isEmpty() ? "none" : String.join(",", algorithms);
        res.partitions = p.partitions().size();
        res.summary = LlamaTrainBench.summary(p) + Arrays.stream(text.split("\n")).filter(l -> l.contains("all_to_all")).map(l -> "  " + l.strip() + "\n")
                .collect(Collectors.joining()) + (s.plan ? text + "\n" : "");
    }

    /**
     * Rank r's output for PyTorch to compare with: over the tokens compared (every one of dispatch+combine; the
     * layer's whose router choice is not {@link MoeCheck#ambiguous}, which PyTorch's top-k may break otherwise), the
     * sum of magnitudes, and the first 64 values of the first and last of them.
     */
    private static void fingerprint(Settings s, Result res, int r, NDArray y) {
        double[] v = y.toDoubleArray();
        int h = v.length / res.tokens, n = Math.min(64, h);
        int[] compared = IntStream.range(0, res.tokens).filter(t -> !res.workload.equals("layer") || !MoeCheck.ambiguous(s, r, t)).toArray();
        double sum = 0;
        for (int t : compared) for (int c = 0; c < h; c++) sum += Math.abs(v[t * h + c]);
        res.absSum[r] = sum;
        res.compared[r] = compared;
        double[] sample = new double[compared.length == 0 ? 0 : 2 * n];
        if (compared.length > 0) {
            System.arraycopy(v, compared[0] * h, sample, 0, n);
            System.arraycopy(v, compared[compared.length - 1] * h, sample, n, n);
        }
        res.samples[r] = sample;
    }

    /**
     * {latency median, latency 10th percentile, pipelined} in microseconds: {@code warmup} calls, then {@code iters}
     * each followed by a synchronisation, then {@code iters} back to back and one synchronisation. Every rank makes the
     * same calls (their collectives meet). Each latency call's start and the return of its run() (the host's part of
     * the launch) go into {@code starts} and {@code returns}.
     */
    static double[] time(Session s, int warmup, int iters, long[] starts, long[] returns) {
        for (int i = 0; i < warmup; i++) s.run(Map.of());
        s.synchronize();
        double[] lat = new double[iters];
        for (int i = 0; i < iters; i++) {
            long a = System.nanoTime();
            s.run(Map.of());
            returns[i] = System.nanoTime();
            s.synchronize();
            starts[i] = a;
            lat[i] = (System.nanoTime() - a) / 1e3;
        }
        long a = System.nanoTime();
        for (int i = 0; i < iters; i++) s.run(Map.of());
        s.synchronize();
        double pipelined = (System.nanoTime() - a) / 1e3 / iters;
        double[] sorted = lat.clone();
        Arrays.sort(sorted);
        return new double[]{LlamaBench.median(lat), sorted[(int) Math.floor(0.1 * (iters - 1))], pipelined};
    }

    static String json(Settings s, List<Result> results) {
        var sb = new StringBuilder("{\n");
        sb.append(String.format(Locale.ROOT, "  \"system\": \"gatun\", \"backend\": \"%s\", \"world\": %d, \"ranks_per_gpu\": %d, \"dtype\": \"%s\",%n",
                s.backend, s.world, s.perGpu, s.dtype == DType.BF16 ? "bfloat16" : "float32"));
        sb.append(String.format(Locale.ROOT, "  \"hidden\": %d, \"experts\": %d, \"topk\": %d, \"intermediate\": %d, \"iters\": %d, \"warmup\": %d,%n",
                s.hidden, s.experts, K, s.width, s.iters, s.warmup));
        sb.append("  \"cases\": [\n");
        for (int i = 0; i < results.size(); i++) {
            Result r = results.get(i);
            sb.append(String.format(Locale.ROOT, "    {\"workload\": \"%s\", \"variant\": \"%s\", \"tokens\": %d, \"capacity\": %d, \"algorithm\": \"%s\", "
                            + "\"partitions\": %d,%n     \"latency_us\": %.3f, \"latency_p10_us\": %.3f, \"pipelined_us\": %.3f,%n     \"host\": \"%s\",%n     \"checks\": [%s],%n"
                            + "     \"abs_sum\": %s,%n     \"tokens_compared\": %s,%n     \"samples\": %s}%s%n", r.workload, r.variant, r.tokens, r.capacity, r.algorithms, r.partitions,
                    r.latency, r.p10, r.pipelined, r.hostSide(), Arrays.stream(r.checks).map(c -> "\"" + c + "\"").collect(Collectors.joining(", ")),
                    Arrays.toString(r.absSum), Arrays.deepToString(r.compared), Arrays.deepToString(r.samples), i + 1 < results.size() ? "," : ""));
        }
        return sb.append("  ]\n}\n").toString();
    }
}
