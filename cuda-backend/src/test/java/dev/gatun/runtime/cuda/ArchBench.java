package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.ir.CompilationException;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaGenerator;
import dev.gatun.runtime.CompileOptions;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

/**
 * The decode step of every architecture of the decoder family at about a billion parameters ({@link ArchShapes}), bf16,
 * batch 1, one GPU, through the public API ({@link LlamaCheckpoint#open}, {@link LlamaGenerator}), for
 * {@code bench/arch_torch.py} to set beside transformers on the same files and to turn into the bandwidth-fraction
 * table ({@code bundle/gpu-suite.sh --worlds 1 --only archs}).
 *
 * <pre>
 * --write ROOT --archs a,b,..   write a random bf16 checkpoint of each architecture into ROOT/NAME (config.json and
 *                               model.safetensors, {@link LlamaCheckpoint#writeRandom}) where ROOT/NAME holds none,
 *                               several at once (--threads, default 4), the largest first, each into ROOT/NAME.partial first, then moved
 * --arch NAME --dir DIR         measure the checkpoint in DIR (its config.json says the shape; NAME labels the row)
 * --prompt N (128) --new N (32) --runs N (6: the first a warm-up) --warmup N (2: generations before the timed ones,
 *                               the first of --runs among them) --backend cuda|host --out FILE (gatun-arch-NAME.json)
 * --profile N                   after timing, profile a prefill and a decode step and print each one's N slowest steps
 * </pre>
 *
 * The JSON holds the shape, the weight reads of a step ({@link ArchShapes.StepReads}: {@code step_weight_bytes} what
 * a step must read, and what the routed decode step reads, {@code dense_weight_bytes} what the dense every-expert form
 * reads), the greedy tokens and the
 * medians of the prefill and of the decode step (each timed generation's steps queued, their time over their number;
 * the median over the timed generations). Where the backend refuses the model (a {@link CompilationException} while
 * it is compiled or first run: an op it has no kernel for, say), the JSON says {@code "refused"} with the refusal's
 * words, which are printed, and the process ends normally: the table shows the refusal and goes on to the next
 * architecture. Any other error while it is compiled or run is a {@code "failed"} row with the error's words (its stack
 * trace in the log); an error before (the checkpoint unreadable, say) ends the process (the table shows no row).
 */
public final class ArchBench {
    private ArchBench() {}

    public static void main(String[] args) throws Exception {
        var opts = LlamaBench.options(args);
        if (opts.containsKey("write")) {
            write(Path.of(opts.get("write")), List.of(opts.getOrDefault("archs", String.join(",", ArchShapes.NAMES)).split(",")),
                    Integer.parseInt(opts.getOrDefault("threads", "4")));
            return;
        }
        String arch = required(opts, "arch");
        Path dir = Path.of(required(opts, "dir"));
        int prompt = Integer.parseInt(opts.getOrDefault("prompt", "128")), n = Integer.parseInt(opts.getOrDefault("new", "32"));
        int runs = Integer.parseInt(opts.getOrDefault("runs", "6")), warmup = Integer.parseInt(opts.getOrDefault("warmup", "2"));
        if (runs < 2 || warmup < 1 || prompt < 1 || n < 2)
            throw new IllegalArgumentException("ArchBench: --runs at least 2, --warmup at least 1, --prompt at least 1 and --new at least 2, not "
                    + runs + ", " + warmup + ", " + prompt + " and " + n);
        String json = measure(arch, dir, prompt, n, runs, warmup, opts.getOrDefault("backend", "cuda"), Integer.parseInt(opts.getOrDefault("profile", "0")));
        Files.writeString(Path.of(opts.getOrDefault("out", "gatun-arch-" + arch + ".json")), json);
    }

    private static String required(java.util.Map<String, String> opts, String name) {
        String v = opts.get(name);
        if (v == null || v.equals("true")) throw new IllegalArgumentException("ArchBench: --" + name + " is required (see the class comment)");
        return v;
    }

    /**
     * Writes each missing checkpoint of {@code archs} under {@code root}, {@code threads} at a time, the largest first
     * (the writes are as long as the checkpoints are large: the longest started first end soonest together).
     */
    static void write(Path root, List<String> archs, int threads) throws Exception {
        var largestFirst = new ArrayList<>(archs);
        for (String a : archs) ArchShapes.shape(a);   // an unknown name is refused before anything is written
        largestFirst.sort(java.util.Comparator.comparingLong((String a) -> -ArchShapes.reads(ArchShapes.shape(a)).total()));
        ExecutorService pool = Executors.newFixedThreadPool(Math.max(1, threads));
        try {
            var jobs = new ArrayList<Future<?>>();
            for (String a : largestFirst) jobs.add(pool.submit(() -> { writeOne(root, a); return null; }));
            for (var j : jobs) j.get();
        } finally {
            pool.shutdownNow();
        }
    }

    private static void writeOne(Path root, String arch) throws IOException {
        Path dir = root.resolve(arch), partial = root.resolve(arch + ".partial");
        if (Files.exists(dir.resolve(LlamaCheckpoint.CONFIG)) && Files.exists(dir.resolve(LlamaCheckpoint.WEIGHTS))) return;
        long t = System.nanoTime();
        deleteTree(partial);
        LlamaCheckpoint.writeRandom(ArchShapes.shape(arch), DType.BF16, 1, partial);
        deleteTree(dir);
        Files.move(partial, dir);
        System.out.printf(Locale.ROOT, "archs: wrote a random %s checkpoint to %s in %.1f s%n", arch, dir, (System.nanoTime() - t) / 1e9);
    }

    private static void deleteTree(Path p) throws IOException {
        if (!Files.exists(p)) return;
        try (var s = Files.walk(p)) {
            for (Path q : s.sorted(java.util.Comparator.reverseOrder()).toList()) Files.delete(q);
        }
    }

    /** Measures the checkpoint in {@code dir}; the JSON of the row (see the class comment). */
    static String measure(String arch, Path dir, int prompt, int n, int runs, int warmup, String backend, int profile) throws IOException {
        try (var ckpt = LlamaCheckpoint.open(dir)) {
            LlamaConfig c = ckpt.config();
            var reads = ArchShapes.reads(c).times(2);
            var head = new StringBuilder("{\n");
            head.append("  \"system\": \"gatun\", \"arch\": \"").append(arch).append("\", \"backend\": \"").append(backend).append("\",\n");
            head.append("  \"config\": \"").append(c).append("\",\n");
            head.append(String.format(Locale.ROOT, "  \"prompt\": %d, \"new\": %d, \"runs\": %d, \"warmup\": %d, \"dtype\": \"bfloat16\", \"batch\": 1,%n",
                    prompt, n, runs, warmup));
            head.append(String.format(Locale.ROOT, "  \"total_weight_bytes\": %d, \"step_weight_bytes\": %d, \"dense_weight_bytes\": %d,%n",
                    reads.total(), reads.step(), reads.dense()));
            var shard = List.of(ckpt.shard(1, 0, DType.BF16, null));
            int[] ids = LlamaBench.prompt(prompt, c.vocabSize());
            LlamaGenerator gen;
            LlamaGenerator.Result first;
            try {
                gen = new LlamaGenerator(c, shard, prompt, prompt + n, 1, DType.BF16, CompileOptions.world(1).backend(backend));
            } catch (RuntimeException e) {
                return ended(arch, head, e);
            }
            try (gen) {
                try {
                    first = gen.generate(new int[][]{ids}, n, false, true);
                    String row = timed(arch, head, gen, ids, first, n, runs, warmup);
                    if (profile > 0) for (var p : gen.profile(new int[][]{ids})) System.out.println(p.top(profile, 4800)); // an H200's 4.8 TB/s
                    return row;
                } catch (RuntimeException e) {
                    return ended(arch, head, e);
                }
            }
        }
    }

    /**
     * The row of a model that gave no time: {@code "refused"} where the backend refused to compile it (a
     * {@link CompilationException}), {@code "failed"} for any other error (its stack trace printed for the log).
     */
    private static String ended(String arch, StringBuilder head, RuntimeException e) {
        boolean refused = e instanceof CompilationException;
        String why = e.getClass().getSimpleName() + ": " + e.getMessage();
        System.out.println("archs: gatun " + (refused ? "refused " : "failed on ") + arch + ": " + why);
        if (!refused) e.printStackTrace(System.out);
        return head.append("  \"").append(refused ? "refused" : "failed").append("\": \"").append(escape(why)).append("\"\n}\n").toString();
    }

    private static String timed(String arch, StringBuilder head, LlamaGenerator gen, int[] ids, LlamaGenerator.Result first, int n, int runs, int warmup) {
        for (int w = 1; w < warmup; w++) same(first, gen.generate(new int[][]{ids}, n, false, true), "warm-up " + w);
        double[] prefill = new double[runs - 1], decode = new double[runs - 1];
        for (int r = 0; r < runs - 1; r++) {
            var res = gen.generate(new int[][]{ids}, n, false, true);
            same(first, res, "run " + r);
            prefill[r] = res.prefillMillis();
            decode[r] = LlamaBench.median(res.stepMillis());
        }
        double p = LlamaBench.median(prefill), d = LlamaBench.median(decode);
        System.out.printf(Locale.ROOT, "archs: gatun %s on %s: decode %.4f ms a step, prefill of %d tokens %.3f ms (medians of %d runs); tokens %s%n",
                arch, gen.device(), d, ids.length, p, runs - 1, Arrays.toString(first.tokens()));
        head.append("  \"device\": \"").append(escape(gen.device())).append("\",\n");
        head.append("  \"tokens\": ").append(Arrays.toString(first.tokens())).append(",\n");
        head.append("  \"decode_runs_ms\": ").append(Arrays.toString(decode)).append(",\n");
        return head.append(String.format(Locale.ROOT, "  \"prefill_ms\": %.4f, \"decode_ms\": %.4f%n}%n", p, d)).toString();
    }

    /** A later generation of the same prompt must give the first one's tokens (greedy, the same weights and plan). */
    private static void same(LlamaGenerator.Result first, LlamaGenerator.Result again, String which) {
        if (!Arrays.deepEquals(first.sequences(), again.sequences()))
            throw new IllegalStateException("ArchBench: " + which + " gave other tokens than the first generation: "
                    + Arrays.toString(again.tokens()) + " against " + Arrays.toString(first.tokens()));
    }

    private static String escape(String s) {
        var sb = new StringBuilder();
        for (char ch : s.toCharArray()) {
            switch (ch) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                default -> sb.append(ch < 0x20 ? ' ' : ch);
            }
        }
        return sb.toString();
    }
}
