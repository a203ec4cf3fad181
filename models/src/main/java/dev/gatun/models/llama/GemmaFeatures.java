package dev.gatun.models.llama;

import dev.gatun.ir.GraphException;

import java.util.Set;
import java.util.TreeSet;

/**
 * What Gemma and Gemma 2 (transformers' {@code gemma} and {@code gemma2} model types) change in the Llama layer; a
 * {@link LlamaConfig} without them ({@code gemma() == null}) is a Llama one. Every Gemma model has three changes
 * (made by {@link GemmaOps}): the embedding multiplied by {@code sqrt(hidden_size)} (rounded to the activations'
 * dtype, as transformers does), every RMSNorm's weight applied as {@code 1 + w}, and the gated MLP's activation the
 * tanh approximation of GELU ({@code gelu_pytorch_tanh}, GeGLU) instead of SiLU. Gemma 2 adds the rest, each off
 * where its field says so:
 *
 * @param sandwichNorms      Gemma 2's four norms a layer: {@code post_attention_layernorm} normalizes the attention's
 *                           output before it joins the residual stream (not the MLP's input, as in Llama),
 *                           {@code pre_feedforward_layernorm} the MLP's input, {@code post_feedforward_layernorm} its output
 * @param attnSoftcap        {@code attn_logit_softcapping}: the scaled attention scores become {@code cap * tanh(s / cap)}
 *                           before the mask and the softmax; 0: none
 * @param finalSoftcap       {@code final_logit_softcapping}: the logits become {@code cap * tanh(x / cap)}; 0: none
 * @param queryPreAttnScalar the attention scores are scaled by this to the power -1/2 ({@code query_pre_attn_scalar};
 *                           Gemma 1's is {@code head_dim})
 * @param slidingWindow      {@code sliding_window}: in the layers of {@code slidingLayers}, position {@code i} attends to
 *                           positions {@code j} with {@code i - window < j <= i} only; 0 where no layer slides
 * @param slidingLayers      the layers whose attention is windowed ({@code layer_types} "sliding_attention")
 */
public record GemmaFeatures(boolean sandwichNorms, double attnSoftcap, double finalSoftcap, double queryPreAttnScalar, int slidingWindow,
                            Set<Integer> slidingLayers) {

    public GemmaFeatures {
        slidingLayers = Set.copyOf(new TreeSet<>(slidingLayers));
        capping("attn_logit_softcapping", attnSoftcap);
        capping("final_logit_softcapping", finalSoftcap);
        if (!(queryPreAttnScalar > 0) || Double.isInfinite(queryPreAttnScalar))
            throw new GraphException("query_pre_attn_scalar must be positive and finite, not " + queryPreAttnScalar);
        if (slidingWindow < 0) throw new GraphException("sliding_window must be a positive number of positions, not " + slidingWindow);
        if (!slidingLayers.isEmpty() && slidingWindow < 1)
            throw new GraphException("layer_types names sliding-attention layers " + new TreeSet<>(slidingLayers) + " but sliding_window is not a positive number of positions");
    }

    /** Gemma 1's: the embedding scale, (1 + w) norms and GeGLU-tanh only; scores scaled by {@code headDim^-1/2}. */
    public static GemmaFeatures gemma(int headDim) { return new GemmaFeatures(false, 0, 0, headDim, 0, Set.of()); }

    private static void capping(String field, double cap) {
        if (!(cap >= 0) || Double.isInfinite(cap)) throw new GraphException(field + " must be a positive, finite cap (or none), not " + cap);
    }

    /** Refuses a sliding layer past the configuration's {@code layers}. */
    void checkLayers(int layers) {
        for (int l : slidingLayers)
            if (l < 0 || l >= layers) throw new GraphException("sliding layer " + l + " is not a layer of " + layers);
    }

    /** Whether layer {@code l} attends through the sliding window. */
    public boolean slides(int l) { return slidingLayers.contains(l); }

    /** The factor the attention scores are scaled by: {@code query_pre_attn_scalar^-1/2}. */
    public double attentionScale() { return Math.pow(queryPreAttnScalar, -0.5); }

    /**
     * Whether layer {@code l}'s attention is the plain one ({@link dev.gatun.dsl.Tensor#attention}'s: scale, causal mask,
     * softmax): no soft-capping of its scores and no window.
     */
    public boolean plainAttention(int l) { return attnSoftcap == 0 && !slides(l); }
}
