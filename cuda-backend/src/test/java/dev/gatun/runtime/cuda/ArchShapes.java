package dev.gatun.runtime.cuda;

import dev.gatun.ir.CompilationException;
import dev.gatun.models.llama.GemmaFeatures;
import dev.gatun.models.llama.LlamaCheckpoint;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.MoeConfig;

import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The shapes of {@link ArchBench}'s bandwidth table: one configuration of about a billion parameters per architecture
 * the decoder family implements, each a published small member's shape where one exists near that size, scaled
 * otherwise (the comment of each says which), and what a decode step of it at batch 1 reads.
 *
 * <p>The published members: Llama-3.2-1B (as {@code LlamaBench --config 1b}, without its llama3 rotary scaling, which
 * changes no time), Qwen2.5-1.5B, Qwen3-1.7B, Gemma-2B and Gemma-2-2B (their 256,000-token vocabularies kept: the
 * output projection is a fifth of their weights, and as much a part of the step as the layers). Scaled: Mistral
 * (Mistral-7B's proportions: heads of 128, four query heads a key-value head, an MLP 3.5 times the hidden width, its
 * 32,768-token vocabulary, a window of 4096, at hidden 2048 and 16 layers), Phi-3 (Phi-3-mini's: as many key-value heads
 * as query heads, an MLP about 2.6 times the hidden width, the fused layout, its 32,064-token vocabulary, at hidden
 * 2048 and 18 layers) and the mixtures, to a total near a billion: Mixtral (8 experts, top 2, Mixtral's vocabulary of
 * 32,000, at hidden 1024 and 16 layers), Qwen2-MoE (Qwen1.5-MoE-A2.7B's 60 experts, top 4 not renormalised, a shared
 * expert four experts wide, q/k/v biases, at hidden 1024 and 12 layers) and Qwen3-MoE (Qwen3-30B-A3B's 128 experts,
 * top 8 renormalised, QK-norm, heads of 128, at hidden 1024 and 12 layers); the Qwen ones keep the 151,936-token
 * vocabulary.
 */
final class ArchShapes {
    private ArchShapes() {}

    /** The architectures in the table's order: llama first (the others' fractions are relative to its). */
    static final List<String> NAMES = List.of("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "mixtral", "qwen2_moe", "qwen3_moe");

    /** The shape of architecture {@code name} (one of {@link #NAMES}). */
    static LlamaConfig shape(String name) {
        var none = LlamaConfig.Biases.NONE;
        return switch (name) {
            case "llama" -> new LlamaConfig(2048, 16, 32, 8, 8192, 128256, 500000, 1e-5, true);
            case "mistral" -> new LlamaConfig(2048, 16, 16, 4, 7168, 32768, 1e6, 1e-5, false, null, 128, 4096);
            case "qwen2" -> new LlamaConfig(1536, 28, 12, 2, 8960, 151936, 1e6, 1e-6, true, null, 128, 0, new LlamaConfig.Biases(true, false, false));
            case "qwen3" -> new LlamaConfig(2048, 28, 16, 8, 6144, 151936, 1e6, 1e-6, true, null, 128, 0, none, true);
            case "gemma" -> new LlamaConfig(2048, 18, 8, 1, 16384, 256000, 10000, 1e-6, true, null, 256, 0, none, false, GemmaFeatures.gemma(256));
            case "gemma2" -> new LlamaConfig(2304, 26, 8, 4, 9216, 256000, 10000, 1e-6, true, null, 256, 0, none, false,
                    new GemmaFeatures(true, 50, 30, 256, 4096, evenLayers(26)));
            case "phi3" -> new LlamaConfig(2048, 18, 16, 16, 5376, 32064, 10000, 1e-5, false, null, 128, 0, none, false, 0, true);
            case "mixtral" -> new LlamaConfig(1024, 16, 16, 4, 2304, 32000, 1e6, 1e-5, false, null, 64, 0)
                    .withMoe(new MoeConfig(MoeConfig.Naming.MIXTRAL, 8, 2, 2304, true, 0, 1, Set.of()));
            case "qwen2_moe" -> new LlamaConfig(1024, 12, 16, 16, 2816, 151936, 1e6, 1e-6, false, null, 64, 0, new LlamaConfig.Biases(true, false, false))
                    .withMoe(new MoeConfig(MoeConfig.Naming.QWEN, 60, 4, 256, false, 1024, 1, Set.of()));
            case "qwen3_moe" -> new LlamaConfig(1024, 12, 16, 4, 3072, 151936, 1e6, 1e-6, false, null, 128, 0, none, true)
                    .withMoe(new MoeConfig(MoeConfig.Naming.QWEN, 128, 8, 128, true, 0, 1, Set.of()));
            default -> throw new CompilationException("ArchBench: no shape for architecture '" + name + "'; the architectures are " + NAMES);
        };
    }

    /** Gemma 2's alternation: the even layers slide. */
    private static Set<Integer> evenLayers(int layers) {
        var s = new HashSet<Integer>();
        for (int l = 0; l < layers; l += 2) s.add(l);
        return s;
    }

    /**
     * What one decode step at batch 1 reads of a checkpoint's weights, in elements.
     *
     * @param total  every weight of the checkpoint
     * @param step   what the step must read: every tensor whole, but the embedding, of which the lookup reads one row
     *               (where the output projection is tied to it, the projection reads it whole and it counts once), and
     *               each mixture's experts, of which the one token is routed to {@code topK} (k distinct experts of E a
     *               layer: k/E of the layer's expert weights; the router and a shared expert are read whole)
     * @param dense  what a step that computes every expert reads ({@code MixtureOfExperts}' dense form, a prefill's:
     *               every expert weighted by its routing weight, zero for the experts not chosen): {@code step} with every
     *               expert whole. A decode step at batch 1 takes the routed form ({@code expert_matmul}), which reads
     *               {@code step}: k experts' gate, up and down a layer (ArchShapesTest checks it against the graph)
     */
    record StepReads(long total, long step, long dense) {
        /** The reads in bytes at {@code bytesPerElement}. */
        StepReads times(int bytesPerElement) { return new StepReads(total * bytesPerElement, step * bytesPerElement, dense * bytesPerElement); }
    }

    /** {@link StepReads} of {@code c}, from the checkpoint's tensor list ({@link LlamaCheckpoint#shapes}). */
    static StepReads reads(LlamaConfig c) {
        long total = 0, experts = 0, embedding = 0;
        for (Map.Entry<String, long[]> e : LlamaCheckpoint.shapes(c).entrySet()) {
            long n = 1;
            for (long d : e.getValue()) n = Math.multiplyExact(n, d);
            total += n;
            if (e.getKey().contains(".experts.")) experts += n;   // the routed experts (not the shared_expert)
            if (e.getKey().equals("model.embed_tokens.weight")) embedding = n;
        }
        long unread = c.tieWordEmbeddings() ? 0 : embedding - c.hiddenSize();   // an untied lookup reads one row
        long routed = c.moe() == null ? 0 : experts / c.moe().experts() * c.moe().topK();
        return new StepReads(total, total - unread - experts + routed, total - unread);
    }

    /** Each architecture's {@link StepReads} in bf16 bytes, in the table's order. */
    static Map<String, StepReads> bf16Reads() {
        var out = new LinkedHashMap<String, StepReads>();
        for (String n : NAMES) out.put(n, reads(shape(n)).times(2));
        return out;
    }
}
