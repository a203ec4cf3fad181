package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.models.llama.LlamaGenerator;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;

/**
 * The Llama decoder on one GPU through the public API, for {@code bench/llama_torch.py} to set beside PyTorch on the
 * same checkpoint: greedy tokens, the first step's logits, prefill time and per-token decode time.
 *
 * <pre>
 * --dir DIR        checkpoint directory (config.json, model.safetensors); a random one is written there if it is empty
 * --config NAME    for a new checkpoint: tiny (2 layers, hidden 64) or 1b (the shape of Llama-3.2-1B), bf16
 * --prompt N       prompt tokens (default 512)    --new N   tokens to generate (default 32)
 * --runs N         generations timed (default 5; the first is a warm-up and not counted)
 * --out FILE       JSON written there: tokens, first_logits, prefill_ms and decode_ms (medians), the machine
 * --backend NAME   cuda (default), or host to try the harness on a machine without a GPU
 * --batch N        sequences generated at once (default 1), each with its own prompt
 * --profile N      after timing, profile a prefill and a decode step and print each one's N slowest steps
 * </pre>
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

    public static void main(String[] args) throws Exception {
        var opts = new LinkedHashMap<String, String>();
        for (int i = 0; i + 1 < args.length; i += 2) opts.put(args[i].replaceFirst("^--", ""), args[i + 1]);
        Path dir = Path.of(opts.getOrDefault("dir", "llama-checkpoint"));
        int promptLength = Integer.parseInt(opts.getOrDefault("prompt", "512")), n = Integer.parseInt(opts.getOrDefault("new", "32"));
        int runs = Integer.parseInt(opts.getOrDefault("runs", "5")), batch = Integer.parseInt(opts.getOrDefault("batch", "1"));
        if (!Files.exists(dir.resolve(LlamaCheckpoint.CONFIG))) {
            LlamaConfig shape = switch (opts.getOrDefault("config", "tiny")) {
                case "tiny" -> new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false);
                case "1b" -> new LlamaConfig(2048, 16, 32, 8, 8192, 128256, 500000, 1e-5, true);
                default -> throw new IllegalArgumentException("--config tiny or 1b");
            };
            long t = System.nanoTime();
            LlamaCheckpoint.writeRandom(shape, DType.BF16, 1, dir);
            System.out.printf(Locale.ROOT, "wrote a random checkpoint to %s in %.1f s%n", dir, (System.nanoTime() - t) / 1e9);
        }
        LlamaConfig c = LlamaConfig.read(dir.resolve(LlamaCheckpoint.CONFIG));
        int[][] ids = new int[batch][];
        for (int b = 0; b < batch; b++) ids[b] = prompt(promptLength, c.vocabSize(), b);
        boolean cuda = opts.getOrDefault("backend", "cuda").equals("cuda");
        // device memory in use before anything is loaded, and after: weights, caches, pools, staging, cuBLAS, kernels
        dev.gatun.cuda.Device device = cuda ? dev.gatun.cuda.Device.open(0) : null;
        long freeBefore = cuda ? device.memoryInfo()[0] : 0;
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            LlamaCheckpoint.check(c, weights, dir);
            var options = CompileOptions.world(1).backend(opts.getOrDefault("backend", "cuda"));
            var shard = LlamaDecoder.weights(c, weights, 1, 0, DType.BF16);
            // each distinct array once (a tied output projection is the embedding itself)
            var seen = java.util.Collections.newSetFromMap(new java.util.IdentityHashMap<NDArray, Boolean>());
            long weightBytes = shard.values().stream().filter(seen::add).mapToLong(NDArray::byteSize).sum();
            // each layer's keys and values for every position of every sequence, bf16, once (the plans' pools hold the
            // outputs' copies, and the decode's staging the copy it is passed)
            long cacheBytes = 2L * c.layers() * batch * c.kvHeads() * (promptLength + n) * c.headDim() * 2;
            try (var gen = new LlamaGenerator(c, List.of(shard), batch, promptLength, promptLength + n, 1, DType.BF16, options)) {
                var first = gen.generate(ids, n, true);
                double[] prefill = new double[runs - 1], decode = new double[runs - 1];
                for (int r = 0; r < runs - 1; r++) {
                    var res = gen.generate(ids, n, false);
                    if (!Arrays.deepEquals(res.sequences(), first.sequences())) throw new IllegalStateException("run " + r + " gave other tokens");
                    prefill[r] = res.prefillMillis();
                    decode[r] = median(res.stepMillis());
                }
                var json = new StringBuilder("{\n");
                json.append("  \"system\": \"gatun\",\n  \"device\": \"").append(gen.device()).append("\",\n");
                json.append("  \"config\": \"").append(c).append("\",\n");
                json.append("  \"prompt\": ").append(promptLength).append(", \"new\": ").append(n).append(",\n");
                json.append("  \"batch\": ").append(batch).append(",\n");
                json.append("  \"tokens\": ").append(Arrays.toString(first.tokens())).append(",\n");
                json.append("  \"sequences\": ").append(Arrays.deepToString(first.sequences())).append(",\n");
                if (cuda) {
                    long used = freeBefore - device.memoryInfo()[0], pools = gen.poolBytes();
                    json.append(String.format(Locale.ROOT, "  \"device_bytes\": %d, \"weight_bytes\": %d, \"cache_bytes\": %d, \"pool_bytes\": %d,%n",
                            used, weightBytes, cacheBytes, pools));
                    System.out.printf(Locale.ROOT, "device memory: %.3f GB in use; weights %.3f GB + KV cache %.3f GB + the plans' pools %.3f GB = %.3f GB (ratio %.3f)%n",
                            used / 1e9, weightBytes / 1e9, cacheBytes / 1e9, pools / 1e9, (weightBytes + cacheBytes + pools) / 1e9,
                            used / (double) (weightBytes + cacheBytes + pools));
                }
                json.append("  \"first_logits\": ").append(Arrays.toString(first.logits().getFirst())).append(",\n");
                json.append(String.format(Locale.ROOT, "  \"prefill_ms\": %.4f, \"decode_ms\": %.4f%n}%n", median(prefill), median(decode)));
                Files.writeString(Path.of(opts.getOrDefault("out", "gatun-llama.json")), json);
                if (opts.containsKey("profile"))
                    for (var p : gen.profile(ids)) System.out.println(p.top(Integer.parseInt(opts.get("profile"))));
                if (device != null) device.close();
                System.out.printf(Locale.ROOT, "gatun: batch %d, tokens %s; prefill of %d tokens %.3f ms, decode %.3f ms a step (medians of %d runs)%n",
                        batch, Arrays.toString(first.tokens()), promptLength, median(prefill), median(decode), runs - 1);
            }
        }
    }
}
