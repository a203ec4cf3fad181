package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.models.llama.LlamaGenerator;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;
import dev.gatun.runtime.World;
import dev.gatun.runtime.distributed.LaunchEnvironment;
import dev.gatun.runtime.distributed.Rendezvous;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The Llama decoder on one GPU, or on several at tensor parallelism, through the public API, for
 * {@code bench/llama_torch.py} to set beside PyTorch on the same checkpoint: greedy tokens, the first step's logits,
 * prefill time and per-token decode time.
 *
 * <pre>
 * --dir DIR        checkpoint directory (config.json, model.safetensors); a random one is written there if it is empty
 * --config NAME    for a new checkpoint: tiny (2 layers, hidden 64) or 1b (the shape of Llama-3.2-1B), bf16
 * --write-only     write the checkpoint (unless DIR holds one) and stop
 * --prompt N       prompt tokens (default 512)    --new N   tokens to generate (default 32)
 * --runs N         generations timed (default 5; the first is a warm-up and not counted)
 * --warmup N       generations before the timed ones (default 1: the first of --runs; more keep the JIT and the GPU's
 *                  clocks from warming during the timed runs: one process's rounds fall for about ten generations)
 * --dtype T        bf16 (default) or f32: the weights (converted where the checkpoint's type differs), activations and
 *                  cache; f32 against llama_torch.py --dtype float32 compares the models token for token
 * --stepwise       the timed generations read each step's token before queuing the next (default: queued, each step
 *                  fed the token the step before left on the device; see LlamaGenerator#generate)
 * --out FILE       JSON written there: tokens, first_logits, prefill_ms and decode_ms (medians), batch, tp, the machine
 * --backend NAME   cuda (default), or host to try the harness on a machine without a GPU
 * --batch N        sequences generated at once (default 1), each with its own prompt
 * --tp N           tensor-parallel ranks (default 1); with the CUDA backend, N processes started by Gatun's launcher,
 *                  one rank and one GPU each ({@code Launcher --nproc N ... --main LlamaBench --tp N}); the host
 *                  backend simulates the N ranks in one process
 * --profile N      after timing, profile a prefill and a decode step and print each one's N slowest steps, each
 *                  with its GB/s and its share of --peak-gbs (default 4800, an H200)
 * --barrier-free-max B  all-reduces of at most B bytes a rank run barrier-free (default: CompileOptions' own,
 *                  LoweringOptions.measuredBarrierFreeMax: 512 KiB at TP 2, 1 KiB at more; 0: never)
 * </pre>
 *
 * Under a launcher each process loads only its rank's shard of the weights ({@link LlamaDecoder#weights}); rank 0
 * writes a missing checkpoint before any rank reads it (every rank waits at a barrier of the launcher's store), every
 * rank takes part in every call and must generate rank 0's tokens, and rank 0 prints the times and writes the JSON
 * (its own timings: each rank times its calls until its tokens are on its host). Launched with the host backend, which
 * runs no world across processes, each process simulates all N ranks: the launch, the checkpoint's hand-over and the
 * report can be tried without a GPU, the collectives between processes cannot.
 */
public final class LlamaBench {
    private LlamaBench() {}

    /** The prompt's token ids: deterministic, spread over the vocabulary; the PyTorch peer makes the same. */
    static int[] prompt(int n, int vocab) { return prompt(n, vocab, 0); }

    /** Sequence {@code b}'s prompt of a batch: token i is ((i + 31 b) * 7919 + 13) mod vocab (b = 0: {@link #prompt(int, int)}). */
    static int[] prompt(int n, int vocab, int b) {
        int[] ids = new int[n];
        for (int i = 0; i < n; i++) ids[i] = (int) (((i + 31L * b) * 7919L + 13) % vocab);
        return ids;
    }

    static double median(double[] xs) {
        double[] s = xs.clone();
        Arrays.sort(s);
        return s.length == 0 ? Double.NaN : s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    /** The shapes a new random checkpoint can take. */
    static LlamaConfig shape(String name) {
        return switch (name) {
            case "tiny" -> new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false);
            case "1b" -> new LlamaConfig(2048, 16, 32, 8, 8192, 128256, 500000, 1e-5, true);
            default -> throw new IllegalArgumentException("--config tiny or 1b");
        };
    }

    /** Writes a random checkpoint of {@code config} into {@code dir} unless it holds one already. */
    static void writeIfMissing(Path dir, String config) throws java.io.IOException {
        if (Files.exists(dir.resolve(LlamaCheckpoint.CONFIG)) && Files.exists(dir.resolve(LlamaCheckpoint.WEIGHTS))) return;
        long t = System.nanoTime();
        LlamaCheckpoint.writeRandom(shape(config), DType.BF16, 1, dir);
        System.out.printf(Locale.ROOT, "wrote a random checkpoint to %s in %.1f s%n", dir, (System.nanoTime() - t) / 1e9);
    }

    /** {@code --name value} pairs; an option followed by another option or by nothing is a flag ("true"). */
    static LinkedHashMap<String, String> options(String[] args) {
        var opts = new LinkedHashMap<String, String>();
        for (int i = 0; i < args.length; i++) {
            if (!args[i].startsWith("--")) throw new IllegalArgumentException("expected an option, not '" + args[i] + "'");
            boolean flag = i + 1 == args.length || args[i + 1].startsWith("--");
            opts.put(args[i].substring(2), flag ? "true" : args[++i]);
        }
        return opts;
    }

    public static void main(String[] args) throws Exception {
        var opts = options(args);
        Path dir = Path.of(opts.getOrDefault("dir", "llama-checkpoint"));
        int promptLength = Integer.parseInt(opts.getOrDefault("prompt", "512")), n = Integer.parseInt(opts.getOrDefault("new", "32"));
        int runs = Integer.parseInt(opts.getOrDefault("runs", "5")), batch = Integer.parseInt(opts.getOrDefault("batch", "1"));
        int tp = Integer.parseInt(opts.getOrDefault("tp", "1"));
        String backend = opts.getOrDefault("backend", "cuda");
        boolean cuda = backend.equals("cuda");
        if (runs < 2) throw new IllegalArgumentException("--runs " + runs + ": at least 2 (the first is a warm-up)");
        int warmup = Integer.parseInt(opts.getOrDefault("warmup", "1"));
        boolean queued = !opts.containsKey("stepwise");
        DType dtype = switch (opts.getOrDefault("dtype", "bf16")) {
            case "bf16" -> DType.BF16;
            case "f32" -> DType.F32;
            default -> throw new IllegalArgumentException("--dtype " + opts.get("dtype") + ": bf16 or f32");
        };
        if (warmup < 1) throw new IllegalArgumentException("--warmup " + warmup + ": at least 1 (the first run, whose tokens are reported)");
        // a launcher's world: one rank per process, each process loads its own shard; else every rank in this process
        LaunchEnvironment job = LaunchEnvironment.current();
        boolean launched = job != null && job.worldSize() > 1;
        if (launched && job.worldSize() != tp)
            throw new IllegalArgumentException("this process is rank " + job.rank() + " of a launched world of " + job.worldSize()
                    + ": run it with --tp " + job.worldSize() + " (one rank per process), not --tp " + tp);
        int rank = launched ? job.rank() : 0;
        boolean leader = rank == 0;
        Rendezvous rv = launched ? World.fromEnvironment(System.getenv()).rendezvous() : null;
        // the checkpoint: written once, by rank 0, before any rank reads it (or beforehand by --write-only)
        if (leader) writeIfMissing(dir, opts.getOrDefault("config", "tiny"));
        if (rv != null) rv.barrier("llama-checkpoint", Duration.ofMinutes(20));
        if (opts.containsKey("write-only")) return;
        LlamaConfig c = LlamaConfig.read(dir.resolve(LlamaCheckpoint.CONFIG));
        c.checkTensorParallel(tp);
        int[][] ids = new int[batch][];
        for (int b = 0; b < batch; b++) ids[b] = prompt(promptLength, c.vocabSize(), b);
        // the world the sessions run on: the launched one (this process drives its rank), or tp ranks in this process.
        // The host backend runs no world across processes: launched on it, each process simulates all tp ranks (this
        // tries the launch, the checkpoint's hand-over and rank 0's report without a GPU; not the collectives across
        // processes)
        World world = launched && cuda ? World.fromEnvironment(System.getenv()) : World.simulated(tp);
        if (launched && !cuda && leader)
            System.out.println("note: the host backend simulates every rank in one process: each of the " + tp
                    + " launched processes runs all " + tp + " ranks");
        var options = (tp == 1 && !launched ? CompileOptions.world(1) : CompileOptions.of(world)).backend(backend);
        // all-reduces up to this many bytes barrier-free ("measured": the rule of LoweringOptions.measuredBarrierFreeMax)
        String bf = opts.get("barrier-free-max");
        if (bf != null) options = options.barrierFreeMax(bf.equals("measured") ? dev.gatun.lowering.LoweringOptions.measuredBarrierFreeMax(tp) : Long.parseLong(bf));
        List<Integer> localRanks = new ArrayList<>();
        if (world.drivesEveryRank()) for (int r = 0; r < tp; r++) localRanks.add(r);
        else localRanks.add(world.rank());
        // device memory in use before anything is loaded, and after: weights, caches, pools, staging, cuBLAS, kernels
        dev.gatun.cuda.Device device = cuda ? dev.gatun.cuda.Device.open(world.localRank() / world.ranksPerGpu()) : null;
        long freeBefore = cuda ? device.memoryInfo()[0] : 0;
        String machine = cuda ? (launched ? tp + " x " : "") + device.name() : "host";
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            LlamaCheckpoint.check(c, weights, dir);
            var shards = new ArrayList<Map<String, NDArray>>();
            for (int r : localRanks) shards.add(LlamaDecoder.weights(c, weights, tp, r, dtype));
            // each distinct array once (a tied output projection is the embedding itself), of this process's first rank
            var seen = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<NDArray, Boolean>());
            long weightBytes = shards.getFirst().values().stream().filter(seen::add).mapToLong(NDArray::byteSize).sum();
            // each layer's keys and values of one rank for every position of every sequence, bf16, once: the decode's
            // states (the prefill's pool holds the copy it outputs, counted with the pools); a rank holds its share of
            // the key-value heads, or one of them where there are fewer than ranks
            int kvHeads = Math.max(1, c.kvHeads() / tp);
            long cacheBytes = 2L * c.layers() * batch * kvHeads * (promptLength + n) * c.headDim() * dtype.byteSize();
            try (var gen = new LlamaGenerator(c, shards, batch, promptLength, promptLength + n, tp, dtype, options)) {
                long made = cuda ? freeBefore - device.memoryInfo()[0] : 0;   // weights, pools, kernels, staging
                var first = gen.generate(ids, n, true);
                if (cuda) System.out.printf(Locale.ROOT, "device memory: %.3f GB once both sessions were made, %.3f GB more after the first generation%n",
                        made / 1e9, (freeBefore - device.memoryInfo()[0] - made) / 1e9);
                if (rv != null) {
                    // every rank's greedy tokens must be rank 0's
                    var all = rv.allGather("llama-tokens", Arrays.deepToString(first.sequences()).getBytes(StandardCharsets.UTF_8));
                    for (int r = 1; r < all.size(); r++)
                        if (!Arrays.equals(all.get(r), all.getFirst()))
                            throw new IllegalStateException("rank " + r + " generated other tokens than rank 0: "
                                    + new String(all.get(r), StandardCharsets.UTF_8) + " against " + new String(all.getFirst(), StandardCharsets.UTF_8));
                }
                for (int w = 1; w < warmup; w++)
                    if (!Arrays.deepEquals(gen.generate(ids, n, false, queued).sequences(), first.sequences()))
                        throw new IllegalStateException("warm-up " + w + " gave other tokens");
                double[] prefill = new double[runs - 1], decode = new double[runs - 1];
                for (int r = 0; r < runs - 1; r++) {
                    var res = gen.generate(ids, n, false, queued);
                    if (!Arrays.deepEquals(res.sequences(), first.sequences())) throw new IllegalStateException("run " + r + " gave other tokens");
                    prefill[r] = res.prefillMillis();
                    decode[r] = median(res.stepMillis());
                }
                var json = new StringBuilder("{\n");
                json.append("  \"system\": \"gatun\",\n  \"device\": \"").append(gen.device()).append("\",\n");
                json.append("  \"machine\": \"").append(machine).append("\",\n");
                json.append("  \"config\": \"").append(c).append("\",\n");
                json.append("  \"prompt\": ").append(promptLength).append(", \"new\": ").append(n).append(",\n");
                json.append("  \"dtype\": \"").append(dtype == DType.F32 ? "float32" : "bfloat16").append("\",\n");
                json.append("  \"batch\": ").append(batch).append(", \"tp\": ").append(tp).append(",\n");
                json.append("  \"tokens\": ").append(Arrays.toString(first.tokens())).append(",\n");
                json.append("  \"sequences\": ").append(Arrays.deepToString(first.sequences())).append(",\n");
                if (cuda) {
                    long used = freeBefore - device.memoryInfo()[0], pools = gen.poolBytes();
                    json.append(String.format(Locale.ROOT, "  \"device_bytes\": %d, \"weight_bytes\": %d, \"cache_bytes\": %d, \"pool_bytes\": %d,%n",
                            used, weightBytes, cacheBytes, pools));
                    // every rank's own GPU (with a launcher, each line is prefixed by its rank)
                    System.out.printf(Locale.ROOT, "device memory: %.3f GB in use; weights %.3f GB + KV cache %.3f GB + the plans' pools %.3f GB = %.3f GB (ratio %.3f)%n",
                            used / 1e9, weightBytes / 1e9, cacheBytes / 1e9, pools / 1e9, (weightBytes + cacheBytes + pools) / 1e9,
                            used / (double) (weightBytes + cacheBytes + pools));
                }
                json.append("  \"first_logits\": ").append(Arrays.toString(first.logits().getFirst())).append(",\n");
                json.append(String.format(Locale.ROOT, "  \"prefill_ms\": %.4f, \"decode_ms\": %.4f%n}%n", median(prefill), median(decode)));
                if (leader) Files.writeString(Path.of(opts.getOrDefault("out", "gatun-llama.json")), json);
                if (opts.containsKey("profile")) {
                    var profiles = gen.profile(ids);   // every rank takes part; rank 0 prints
                    if (leader) for (var p : profiles) System.out.println(p.top(Integer.parseInt(opts.get("profile")), Double.parseDouble(opts.getOrDefault("peak-gbs", "4800"))));
                }
                if (device != null) device.close();
                if (leader)
                    System.out.printf(Locale.ROOT, "gatun: batch %d, tp %d, tokens %s; prefill of %d tokens %.3f ms, decode %.3f ms a step (medians of %d runs)%n",
                            batch, tp, Arrays.toString(first.tokens()), promptLength, median(prefill), median(decode), runs - 1);
            }
        }
        // no rank leaves (closing its sessions and the launcher's store connection) while another still needs it
        if (rv != null) rv.barrier("llama-done", Duration.ofMinutes(5));
    }
}
