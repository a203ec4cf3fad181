package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.models.llama.LlamaGenerator;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.SafeTensors;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The decoder's step under several compile options in one process on one GPU, the variants' generations alternating
 * round after round, so that neither the machine's drift nor the order of processes favours one: each variant holds its
 * own copy of the weights and decodes the same prompts; prints each one's per-step medians, and whether its tokens are
 * the first variant's. Variants: {@code plain} (programmatic dependent launches off), {@code programmatic} (on); with
 * {@code apart} in the name (e.g. {@code programmatic+apart}) the update of the caches is a launch of its own, not the
 * attention's; with {@code untiled}, the kernels after each product (SwiGLU, rotary embedding) are launches of their
 * own, not the product's epilogues;
 * with {@code stepwise}, the host reads each step's token before it queues the next (not queued, fed on the device).
 *
 * <pre>
 * --dir DIR  a checkpoint LlamaBench wrote     --batch N  sequences (default 1)     --rounds N  (default 5)
 * --variants a,b,...  (default plain,programmatic)
 * </pre>
 */
public final class DecodeVariantsBench {
    private DecodeVariantsBench() {}

    static CompileOptions variant(String name) {
        var o = CompileOptions.world(1).backend("cuda").planning(dev.gatun.planner.PlanOptions.DEFAULT.withAttentionUpdates(!name.contains("apart"))
                .withProductEpilogues(!name.contains("untiled")));
        return o.programmaticLaunch(name.contains("programmatic") ? dev.gatun.planner.PlanOptions.ProgrammaticLaunch.ON : dev.gatun.planner.PlanOptions.ProgrammaticLaunch.OFF);
    }

    public static void main(String[] args) throws Exception {
        var opts = LlamaBench.options(args);
        Path dir = Path.of(opts.getOrDefault("dir", "/tmp/gatun-llama-1b"));
        int batch = Integer.parseInt(opts.getOrDefault("batch", "1")), rounds = Integer.parseInt(opts.getOrDefault("rounds", "5"));
        List<String> names = List.of(opts.getOrDefault("variants", "plain,programmatic").split(","));
        int prompt = 512, n = 32;
        LlamaConfig c = LlamaConfig.read(dir.resolve(LlamaCheckpoint.CONFIG));
        int[][] ids = new int[batch][];
        for (int b = 0; b < batch; b++) ids[b] = LlamaBench.prompt(prompt, c.vocabSize(), b);
        try (var weights = SafeTensors.open(dir.resolve(LlamaCheckpoint.WEIGHTS))) {
            List<Map<String, NDArray>> shards = List.of(LlamaDecoder.weights(c, weights, 1, 0, DType.BF16));
            var gens = new LinkedHashMap<String, LlamaGenerator>();
            try {
                for (String v : names) gens.put(v, new LlamaGenerator(c, shards, batch, prompt, prompt + n, 1, DType.BF16, variant(v)));
                int[][] first = null;
                for (var e : gens.entrySet()) {
                    int[][] t = e.getValue().generate(ids, n, false, !e.getKey().contains("stepwise")).sequences();
                    if (first == null) {
                        first = t;
                        System.out.println("tokens of the first sequence: " + Arrays.toString(t[0]));
                    }
                    System.out.println(e.getKey() + ": tokens " + (Arrays.deepEquals(first, t) ? "the same as " + names.getFirst() + "'s" : "DIFFER from " + names.getFirst() + "'s"));
                }
                var times = new LinkedHashMap<String, List<Double>>();
                for (int r = 0; r < rounds; r++)
                    for (var e : gens.entrySet())
                        times.computeIfAbsent(e.getKey(), k -> new ArrayList<>()).add(LlamaBench.median(e.getValue().generate(ids, n, false, !e.getKey().contains("stepwise")).stepMillis()));
                times.forEach((v, ts) -> System.out.printf(Locale.ROOT, "batch %d, %-22s median %.4f ms a step; rounds %s%n", batch, v,
                        LlamaBench.median(ts.stream().mapToDouble(Double::doubleValue).toArray()), ts));
            } finally {
                for (var g : gens.values()) g.close();
            }
        }
    }
}
