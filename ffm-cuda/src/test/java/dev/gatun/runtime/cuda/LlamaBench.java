package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.models.llama.LlamaGenerator;
import dev.gatun.runtime.CompileOptions;
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
 * </pre>
 */
public final class LlamaBench {
    private LlamaBench() {}

    /** The prompt's token ids: deterministic, spread over the vocabulary; the PyTorch peer makes the same. */
    static int[] prompt(int n, int vocab) {
        int[] ids = new int[n];
        for (int i = 0; i < n; i++) ids[i] = (int) ((i * 7919L + 13) % vocab);
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
        int runs = Integer.parseInt(opts.getOrDefault("runs", "5"));
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
        int[] ids = prompt(promptLength, c.vocabSize());
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            LlamaCheckpoint.check(c, weights, dir);
            var options = CompileOptions.world(1).backend(opts.getOrDefault("backend", "cuda"));
            try (var gen = new LlamaGenerator(c, List.of(LlamaDecoder.weights(c, weights, 1, 0, DType.BF16)), promptLength, promptLength + n,
                    1, DType.BF16, options)) {
                var first = gen.generate(ids, n, true);
                double[] prefill = new double[runs - 1], decode = new double[runs - 1];
                for (int r = 0; r < runs - 1; r++) {
                    var res = gen.generate(ids, n, false);
                    if (!Arrays.equals(res.tokens(), first.tokens())) throw new IllegalStateException("run " + r + " gave other tokens");
                    prefill[r] = res.prefillMillis();
                    decode[r] = median(res.stepMillis());
                }
                var json = new StringBuilder("{\n");
                json.append("  \"system\": \"gatun\",\n  \"device\": \"").append(gen.device()).append("\",\n");
                json.append("  \"config\": \"").append(c).append("\",\n");
                json.append("  \"prompt\": ").append(promptLength).append(", \"new\": ").append(n).append(",\n");
                json.append("  \"tokens\": ").append(Arrays.toString(first.tokens())).append(",\n");
                json.append("  \"first_logits\": ").append(Arrays.toString(first.logits().getFirst())).append(",\n");
                json.append(String.format(Locale.ROOT, "  \"prefill_ms\": %.4f, \"decode_ms\": %.4f%n}%n", median(prefill), median(decode)));
                Files.writeString(Path.of(opts.getOrDefault("out", "gatun-llama.json")), json);
                System.out.printf(Locale.ROOT, "gatun: tokens %s; prefill of %d tokens %.3f ms, decode %.3f ms a token (medians of %d runs)%n",
                        Arrays.toString(first.tokens()), promptLength, median(prefill), median(decode), runs - 1);
            }
        }
    }
}
