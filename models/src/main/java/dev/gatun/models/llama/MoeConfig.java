package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.json.Json;

import java.util.Set;
import java.util.TreeSet;

/**
 * The mixture-of-experts MLP of a decoder (transformers' {@code mixtral}, {@code qwen2_moe} and {@code qwen3_moe}), as
 * its {@code config.json} states it: a router (a linear layer of one logit an expert) whose softmax, in float32, picks
 * the {@code topK} most probable of {@code experts} SwiGLU MLPs of width {@code expertSize} for each token; the token's
 * output is their outputs weighted by those probabilities (renormalised to sum 1 where {@code normTopK}), plus, for
 * Qwen2-MoE, a shared expert of width {@code sharedSize} weighted by a sigmoid gate. {@link MixtureOfExperts} computes
 * it.
 *
 * @param naming        how the checkpoint names the block's tensors
 * @param experts       {@code num_local_experts} (Mixtral, Qwen3-MoE in transformers 5) or {@code num_experts} (Qwen)
 * @param topK          {@code num_experts_per_tok}: the experts each token is routed to
 * @param expertSize    each expert's MLP width: Mixtral's {@code intermediate_size}, Qwen's {@code moe_intermediate_size}
 * @param normTopK      whether the top-k probabilities are divided by their sum: always for Mixtral, Qwen's
 *                      {@code norm_topk_prob} (false when left out)
 * @param sharedSize    Qwen2-MoE's {@code shared_expert_intermediate_size}: the shared expert's width; 0: none
 * @param sparseStep    Qwen's {@code decoder_sparse_step}: layer L is a mixture where {@code (L + 1) % step == 0}
 * @param mlpOnlyLayers Qwen's {@code mlp_only_layers}: layers that are a dense MLP of {@code intermediate_size} instead
 */
public record MoeConfig(Naming naming, int experts, int topK, int expertSize, boolean normTopK, int sharedSize, int sparseStep,
                        Set<Integer> mlpOnlyLayers) {

    /** The tensor names of the two families (see {@link MixtureOfExperts#shapes}). */
    public enum Naming {
        /** {@code block_sparse_moe.gate.weight}, {@code block_sparse_moe.experts.E.w1|w3|w2.weight} (gate, up, down). */
        MIXTRAL,
        /** {@code mlp.gate.weight}, {@code mlp.experts.E.gate_proj|up_proj|down_proj.weight}, the shared expert's beside. */
        QWEN
    }

    /** The most experts a configuration may have: far more than any model's (DeepSeek's 256, Qwen3's 128). */
    public static final int MAX_EXPERTS = 1 << 14;

    public MoeConfig {
        if (naming == null) throw new GraphException("MoeConfig: the naming is null");
        if (experts < 1 || experts > MAX_EXPERTS)
            throw new GraphException("the number of experts must be 1 to " + MAX_EXPERTS + ", not " + experts);
        if (topK < 1 || topK > experts)
            throw new GraphException("num_experts_per_tok must be 1 to the number of experts (" + experts + "), not " + topK);
        if (expertSize < 1 || expertSize > LlamaConfig.MAX_WIDTH)
            throw new GraphException("the experts' intermediate size must be 1 to " + LlamaConfig.MAX_WIDTH + ", not " + expertSize);
        if (sharedSize < 0 || sharedSize > LlamaConfig.MAX_WIDTH)
            throw new GraphException("shared_expert_intermediate_size must be 0 (none) to " + LlamaConfig.MAX_WIDTH + ", not " + sharedSize);
        if (naming == Naming.MIXTRAL && (sharedSize != 0 || !normTopK))
            throw new GraphException("Mixtral's experts have no shared expert and always renormalise the top-k probabilities");
        if (sparseStep < 1) throw new GraphException("decoder_sparse_step must be at least 1, not " + sparseStep);
        mlpOnlyLayers = Set.copyOf(new TreeSet<>(mlpOnlyLayers));
        for (int l : mlpOnlyLayers) if (l < 0) throw new GraphException("mlp_only_layers holds " + l + ", not a layer index");
    }

    /** Whether layer {@code layer} is a mixture of experts (else a dense MLP), as transformers' Qwen decoder layers decide. */
    public boolean sparse(int layer) { return !mlpOnlyLayers.contains(layer) && (layer + 1) % sparseStep == 0; }

    /**
     * The block of a {@code config.json} of model type {@code type} ("mixtral", "qwen2_moe" or "qwen3_moe"); null for any
     * other type. The sizes are required (real configs give them; transformers' defaults are a particular model's).
     */
    static MoeConfig read(LlamaConfigReader.Fields f, String type, int intermediateSize) {
        return switch (type) {
            case "mixtral" -> new MoeConfig(Naming.MIXTRAL, f.integer("num_local_experts", null), f.integer("num_experts_per_tok", null),
                    intermediateSize, true, 0, 1, Set.of());
            case "qwen2_moe" -> new MoeConfig(Naming.QWEN, f.integer("num_experts", null), f.integer("num_experts_per_tok", null),
                    f.integer("moe_intermediate_size", null), f.bool("norm_topk_prob", false), f.integer("shared_expert_intermediate_size", null),
                    f.integer("decoder_sparse_step", 1), layers(f));
            case "qwen3_moe" -> new MoeConfig(Naming.QWEN, qwen3Experts(f), f.integer("num_experts_per_tok", null), f.integer("moe_intermediate_size", null),
                    f.bool("norm_topk_prob", false), 0, f.integer("decoder_sparse_step", 1), layers(f));
            default -> null;
        };
    }

    /**
     * Qwen3-MoE's experts: transformers 5 writes {@code num_local_experts} (its {@code num_experts} an alias of it), older
     * files {@code num_experts}; where both are given they must agree.
     */
    private static int qwen3Experts(LlamaConfigReader.Fields f) {
        boolean local = f.has("num_local_experts"), named = f.has("num_experts");
        if (local && named && f.integer("num_local_experts", null) != f.integer("num_experts", null))
            throw new CompilationException(f.file() + ": fields 'num_local_experts' (" + f.integer("num_local_experts", null) + ") and 'num_experts' ("
                    + f.integer("num_experts", null) + ") disagree: which one the checkpoint means is unclear");
        return f.integer(local || !named ? "num_local_experts" : "num_experts", null);
    }

    /** {@code mlp_only_layers}: a list of layer indices (none when left out or null). */
    private static Set<Integer> layers(LlamaConfigReader.Fields f) {
        Json v = f.obj().get("mlp_only_layers");
        if (v == null || v instanceof Json.Null) return Set.of();
        if (!(v instanceof Json.Arr a)) throw new GraphException(f.file() + ": field 'mlp_only_layers' is a JSON " + v.kind() + ", not a list of layers");
        var out = new TreeSet<Integer>();
        for (Json item : a.items()) {
            Integer l = null;
            if (item instanceof Json.Num n) {
                try {
                    l = Integer.parseInt(n.text());
                } catch (NumberFormatException ignored) { }
            }
            if (l == null || l < 0)
                throw new GraphException(f.file() + ": field 'mlp_only_layers' holds " + ConfigPolicy.shortText(item) + ", not a layer index (a whole number of at least 0)");
            out.add(l);
        }
        return out;
    }
}
