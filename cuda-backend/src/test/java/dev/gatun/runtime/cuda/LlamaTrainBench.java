package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Optimizers;
import dev.gatun.ir.ByteSize;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaTraining;
import dev.gatun.models.llama.LlamaTraining.DataParallel;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Collectors;
import java.util.stream.IntStream;

/**
 * A Llama-shape training step ({@link LlamaTraining}: forward, gradients, AdamW clipped at 1.0, f32 master weights)
 * on the CUDA backend, for {@code bench/llama_train_torch.py} (PyTorch FSDP2) to set beside it on the same shape, data
 * and initial weights ({@link TrainInit}): each step's loss, the step time (median of the timed steps), tokens per
 * second, MFU and the plan's pools. The ranks are threads of this process ({@link LocalWorld}), rank r on GPU
 * r / ranks-per-gpu; over several ranks the weights are fully sharded (FSDP, ZeRO-3) or replicated. The first run
 * compiles every kernel of the plan with NVRTC, one program each (1257 at world 1 for the 1b shape at 2048 tokens,
 * 1423 a rank fully sharded over 2: minutes), cached on disk for later runs; "compiled and bound in" says how long it
 * took. {@code --layers 2} tries the shape in a fraction of that.
 *
 * <pre>
 * --config NAME      tiny (2 layers, hidden 64), 1b (Llama-3.2-1B's shape, tied embeddings; default); then overrides:
 * --layers --hidden --heads --kv-heads --intermediate --vocab
 * --seq N            tokens a sequence (default 2048)       --batch N  sequences a rank (default 1)
 * --world N          ranks (default 1)                      --ranks-per-gpu K  ranks sharing each GPU (default 1)
 * --mode fsdp|dp     how several ranks hold the weights (default fsdp)
 * --compute bf16|f32 the compute dtype (default bf16; the weights, moments and loss are f32 either way)
 * --recompute L      decoder layers recomputed in the backward pass: none (default), all, or a list "0,1,5"
 * --reshard-after-forward true|false  fully sharded: the other layers gather their weights again in the backward pass
 *                    (default true, as FSDP2) or keep them from the forward pass
 * --steps N          timed steps (default 10)                --warmup N steps before them (default 3)
 *                    (--steps 0 --warmup 0: plan only, print the summary and write nothing; --backend host plans with no GPU)
 * --lr X             AdamW's learning rate (default 1e-4)    --seed S   the weights' seed (default 0)
 * --peak-tflops X    the GPU's dense peak for MFU (default 989: an H200's bf16; 67 for its f32 without tensor cores)
 * --out FILE         JSON: the losses of every step, the median step time, tokens/s, MFU, pools, the shape
 * --backend NAME     cuda (default), or host to try the harness without a GPU
 * --plan             print the whole plan of rank 0 (the summary is always printed)
 * --profile N        after timing, profile one step and print rank 0's N slowest steps
 * </pre>
 */
public final class LlamaTrainBench {
    private LlamaTrainBench() {}

    static LlamaConfig config(Map<String, String> o) {
        LlamaConfig base = switch (o.getOrDefault("config", "1b")) {
            case "tiny" -> new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false);
            case "1b" -> new LlamaConfig(2048, 16, 32, 8, 8192, 128256, 500000, 1e-5, true);
            default -> throw new IllegalArgumentException("--config tiny or 1b");
        };
        return new LlamaConfig(num(o, "hidden", base.hiddenSize()), num(o, "layers", base.layers()), num(o, "heads", base.heads()),
                num(o, "kv-heads", base.kvHeads()), num(o, "intermediate", base.intermediateSize()), num(o, "vocab", base.vocabSize()),
                base.ropeTheta(), base.rmsNormEps(), base.tieWordEmbeddings());
    }

    static int num(Map<String, String> o, String key, int otherwise) { return Integer.parseInt(o.getOrDefault(key, String.valueOf(otherwise))); }

    static Set<Integer> recompute(String spec, int layers) {
        return switch (spec) {
            case "none" -> Set.of();
            case "all" -> IntStream.range(0, layers).boxed().collect(Collectors.toSet());
            default -> Arrays.stream(spec.split(",")).map(String::trim).map(Integer::valueOf).collect(Collectors.toSet());
        };
    }

    /** Parameters that the matmuls read, each once (the tied head is the embedding): the 6 N of the MFU. */
    static long matmulParameters(LlamaConfig c) {
        long h = c.hiddenSize(), d = c.headDim(), q = (long) c.heads() * d, kv = (long) c.kvHeads() * d, ff = c.intermediateSize();
        return c.layers() * (h * q + 2 * h * kv + q * h + 3 * h * ff) + (long) c.vocabSize() * h;
    }

    /**
     * Model FLOPs of one token's step: 6 per matmul parameter (forward 2, backward 4) and the attention's scores and
     * weighted values, 12 * layers * heads * head size * sequence (PaLM's count: the full square, causal or not;
     * recomputation not counted).
     */
    static double flopsPerToken(LlamaConfig c, int seq) {
        return 6.0 * matmulParameters(c) + 12.0 * c.layers() * c.heads() * c.headDim() * seq;
    }

    /** What the plan chose: its order and peak, pools, launches, and the steps by kind (collectives by kind and algorithm). */
    static String summary(Plan p) {
        var sb = new StringBuilder();
        sb.append(String.format(Locale.ROOT, "plan %s: %d steps, %d kernels, %d partitions; order %s%n", p.name(), p.steps().size(), p.kernels().size(),
                p.partitions().size(), p.orderChoice()));
        sb.append("  launches: ").append(p.launches().programmatic() ? "programmatic" : "plain").append(" (").append(p.launches().why()).append(")\n");
        var kinds = new TreeMap<String, Integer>();
        for (Step s : p.steps())
            for (Step part : s.parts()) {
                String k = switch (part) {
                    case Step.Collective c -> c.call().opName();
                    case Step.OpCall o -> o.spec().name();
                    case Step.Matmul m -> m.gemv() ? "matmul (gemv)" : "matmul";
                    default -> part.kind();
                };
                kinds.merge(k, 1, Integer::sum);
            }
        sb.append("  steps by kind: ").append(kinds).append('\n');
        for (Pool pool : p.pools())
            sb.append(String.format(Locale.ROOT, "  pool %-24s %-8s %12s (max live %s)%n", pool.name(), pool.kind().name().toLowerCase(Locale.ROOT),
                    ByteSize.format(pool.allocationBytes()), ByteSize.format(pool.maxLive())));
        for (Pool pool : p.pools())
            if (pool.kind() == Pool.Kind.REGULAR) sb.append("  ").append(p.peak(pool.name()).describe(p.steps(), 12));
        return sb.toString();
    }

    /** The pools' bytes but the states' (the weights and moments): what the step's activations and gradients take. */
    static long workBytes(Plan p) {
        return p.pools().stream().filter(pool -> pool.kind() != Pool.Kind.STATE).mapToLong(Pool::allocationBytes).sum();
    }

    public static void main(String[] args) throws Exception {
        var o = LlamaBench.options(args);
        LlamaConfig c = config(o);
        int seq = num(o, "seq", 2048), batch = num(o, "batch", 1), world = num(o, "world", 1), perGpu = num(o, "ranks-per-gpu", 1);
        int steps = num(o, "steps", 10), warmup = num(o, "warmup", 3);
        DType compute = switch (o.getOrDefault("compute", "bf16")) {
            case "bf16" -> DType.BF16;
            case "f32" -> DType.F32;
            default -> throw new IllegalArgumentException("--compute bf16 or f32");
        };
        DataParallel mode = switch (o.getOrDefault("mode", "fsdp")) {
            case "fsdp" -> world == 1 ? DataParallel.REPLICATED : DataParallel.FULLY_SHARDED;
            case "dp" -> DataParallel.REPLICATED;
            default -> throw new IllegalArgumentException("--mode fsdp or dp");
        };
        String backend = o.getOrDefault("backend", "cuda");
        double lr = Double.parseDouble(o.getOrDefault("lr", "1e-4")), peak = Double.parseDouble(o.getOrDefault("peak-tflops", "989")) * 1e12;
        long seed = Long.parseLong(o.getOrDefault("seed", "0"));
        boolean planOnly = steps + warmup == 0;
        var optimizer = Optimizers.adamW(lr, 0.9, 0.999, 1e-8, 0.01).clipGradNorm(1.0);
        Graph g = LlamaTraining.graph(c, batch, seq, world, 1, mode, DType.F32, compute, optimizer, false, recompute(o.getOrDefault("recompute", "none"), c.layers()),
                Boolean.parseBoolean(o.getOrDefault("reshard-after-forward", "true")));
        System.out.printf(Locale.ROOT, "llama training step: %s%n  %d ranks (%s, %d a GPU), %d x %d tokens a rank, f32 master, %s compute, AdamW lr %g clipped at 1.0%n",
                c, world, mode, perGpu, batch, seq, compute.shortName(), lr);
        if (planOnly) {   // rank 0's plan with CompileOptions' defaults (the H200 target, symmetric memory) and the CUDA backend's granularity; nothing allocated
            var options = CompileOptions.world(world);
            Plan p = dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(g, options.lowering()),
                    options.planning().withCommGranularity(CudaBackend.GRANULARITY));
            System.out.print(summary(p));
            if (o.containsKey("plan")) System.out.println(p);
            return;
        }
        double[][] losses = new double[world][warmup + steps];
        double[] times = new double[steps];
        var report = new String[2];   // rank 0's plan summary and pools
        long[] poolBytes = new long[2];
        var tables = LlamaTraining.tables(c, seq, compute);
        LocalWorld.run(world, Duration.ofMinutes(10), rv -> {
            int r = rv.rank();
            var options = world == 1 ? CompileOptions.world(1) : CompileOptions.world(world).rank(rv).ranksPerGpu(perGpu).timeout(Duration.ofMinutes(10));
            long t0 = System.nanoTime();
            try (var s = Session.compile(g, options.backend(backend))) {
                int me = s.ranks().getFirst();
                var bound = new HashMap<String, NDArray>(tables);
                bound.putAll(TrainInit.batch(c, r * batch, batch, seq));
                for (String name : g.states())
                    if (!name.equals("optimizer.step") && !name.endsWith(".exp_avg") && !name.endsWith(".exp_avg_sq"))
                        bound.put(name, TrainInit.block(name, g.inputs().get(name).type().shape().sizes(), mode == DataParallel.FULLY_SHARDED ? r : 0, seed, 0.02));
                s.bind(me, bound);
                if (r == 0) {
                    report[0] = summary(s.plan());
                    poolBytes[0] = s.plan().pools().stream().mapToLong(Pool::allocationBytes).sum();
                    poolBytes[1] = workBytes(s.plan());
                    if (o.containsKey("plan")) report[1] = s.plan().toString();
                    System.out.printf(Locale.ROOT, "compiled and bound in %.1f s%n", (System.nanoTime() - t0) / 1e9);
                }
                for (int i = 0; i < warmup + steps; i++) {
                    long a = System.nanoTime();
                    // the loss alone to the host (the step is then done); the states stay on the device, as a
                    // training loop keeps them (runToHost would copy every updated weight and moment out each step)
                    losses[r][i] = s.run(Map.of()).get("loss").toHost().get(0);
                    if (r == 0 && i >= warmup) times[i - warmup] = (System.nanoTime() - a) / 1e6;
                }
                if (o.containsKey("profile")) {
                    var p = s.profile(Map.of());   // every rank takes part; rank 0 prints
                    if (r == 0) report[1] = (report[1] == null ? "" : report[1] + "\n") + p.top(Integer.parseInt(o.get("profile")), 4800);
                }
            }
        });
        System.out.print(report[0]);
        if (report[1] != null) System.out.println(report[1]);
        double[] mean = new double[warmup + steps];
        for (double[] rank : losses) for (int i = 0; i < mean.length; i++) mean[i] += rank[i] / world;
        double ms = LlamaBench.median(times);
        long tokens = (long) world * batch * seq;
        double tokensPerSecond = tokens / (ms / 1e3), mfu = tokensPerSecond * flopsPerToken(c, seq) / (world * peak);
        System.out.printf(Locale.ROOT, "losses: %s%n", Arrays.toString(mean));
        System.out.printf(Locale.ROOT, "gatun: step %.2f ms (median of %d), %.0f tokens/s, MFU %.1f%% of %.0f TFLOP/s a rank; rank 0's pools %s (activations and gradients %s)%n",
                ms, steps, tokensPerSecond, 100 * mfu, peak / 1e12, ByteSize.format(poolBytes[0]), ByteSize.format(poolBytes[1]));
        var json = new LinkedHashMap<String, Object>();
        json.put("system", "\"gatun\"");
        json.put("config", String.format(Locale.ROOT, "{\"hidden\": %d, \"layers\": %d, \"heads\": %d, \"kv_heads\": %d, \"intermediate\": %d, \"vocab\": %d, \"rope_theta\": %s, \"eps\": %s, \"tied\": %b}",
                c.hiddenSize(), c.layers(), c.heads(), c.kvHeads(), c.intermediateSize(), c.vocabSize(), c.ropeTheta(), c.rmsNormEps(), c.tieWordEmbeddings()));
        json.put("seq", seq);
        json.put("batch", batch);
        json.put("world", world);
        json.put("mode", "\"" + mode.name().toLowerCase(Locale.ROOT) + "\"");
        json.put("compute", "\"" + compute.shortName() + "\"");
        json.put("lr", lr);
        json.put("seed", seed);
        json.put("warmup", warmup);
        json.put("losses", Arrays.toString(mean));
        json.put("step_ms", ms);
        json.put("step_ms_all", Arrays.toString(times));
        json.put("tokens_per_s", tokensPerSecond);
        json.put("mfu", mfu);
        json.put("pool_bytes", poolBytes[0]);
        json.put("work_bytes", poolBytes[1]);
        var text = json.entrySet().stream().map(e -> "  \"" + e.getKey() + "\": " + e.getValue()).collect(Collectors.joining(",\n", "{\n", "\n}\n"));
        Files.writeString(Path.of(o.getOrDefault("out", "gatun-train.json")), text);
    }
}
