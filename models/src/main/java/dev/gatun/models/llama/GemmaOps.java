package dev.gatun.models.llama;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.runtime.NDArray;

/**
 * The pieces of the decoder's graph that {@link GemmaFeatures} change, each the Llama one where the configuration has
 * none, so that {@link LlamaDecoder} calls one method where the two architectures differ. Each is written with the
 * DSL's plain ops (the tanh form of GELU, the soft-caps and the sliding window have no op of their own), as
 * transformers computes them:
 * <ul>
 *   <li>{@link #embed}: the embedding times {@code sqrt(hidden_size)}, the factor rounded to the activations' dtype
 *   first (transformers makes it a tensor of that dtype);</li>
 *   <li>{@link #normWeight}: an RMSNorm's weight as applied, {@code 1 + w}; with Gemma 2's norms around the attention's
 *   output and the MLP ({@link #afterAttention}, {@link #mlpInputNorm}, {@link #afterMlp});</li>
 *   <li>{@link #activation}: GELU's tanh approximation {@code x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))}
 *   ({@code gelu_pytorch_tanh}) instead of SiLU;</li>
 *   <li>{@link #softcap}: {@code cap * tanh(x / cap)}, for the attention scores (after the scaling, before the mask)
 *   and for the final logits;</li>
 *   <li>{@link #stepMask}: the additive mask of a decode step's sliding-window layer (position {@code i}
 *   sees positions {@code j} with {@code i - window < j <= i}, as transformers' sliding-window causal mask).</li>
 * </ul>
 */
final class GemmaOps {
    private GemmaOps() {}

    /** The looked-up embedding rows {@code x}, scaled where the configuration is Gemma's. */
    static Tensor embed(LlamaConfig c, Tensor x, DType dtype) {
        return c.gemma() == null ? x : x.mul(rounded(Math.sqrt(c.hiddenSize()), dtype));
    }

    /** The weight an RMSNorm multiplies by: the checkpoint's {@code w}, or Gemma's {@code 1 + w}. */
    static Tensor normWeight(LlamaConfig c, Tensor w) { return c.gemma() == null ? w : w.add(1.0); }

    /** The gated MLP's activation of the gate: SiLU, or Gemma's tanh-approximated GELU. */
    static Tensor activation(LlamaConfig c, Tensor gate) {
        if (c.gemma() == null) return gate.silu();
        Tensor inner = gate.add(gate.mul(gate).mul(gate).mul(0.044715)).mul(Math.sqrt(2 / Math.PI));
        return gate.mul(0.5).mul(inner.tanh().add(1.0));
    }

    /** {@code cap * tanh(x / cap)}, or {@code x} where {@code cap} is 0 (none). */
    static Tensor softcap(Tensor x, double cap) { return cap == 0 ? x : x.div(cap).tanh().mul(cap); }

    /** The factor the attention scores are multiplied by: Gemma's {@code query_pre_attn_scalar^-1/2}, else {@code head_dim^-1/2}. */
    static double attentionScale(LlamaConfig c) { return c.gemma() == null ? 1 / Math.sqrt(c.headDim()) : c.gemma().attentionScale(); }

    /** Whether layer {@code l}'s attention is plain (no soft-cap, no window): what the fused {@code attention} step computes. */
    static boolean plainAttention(LlamaConfig c, int l) { return c.gemma() == null || c.gemma().plainAttention(l); }

    /** Whether any layer attends through a sliding window. */
    static boolean anySliding(LlamaConfig c) { return c.gemma() != null && !c.gemma().slidingLayers().isEmpty(); }

    /** Whether layer {@code l} attends through a sliding window. */
    static boolean slides(LlamaConfig c, int l) { return c.gemma() != null && c.gemma().slides(l); }

    /**
     * A decode step's mask [maxLen] over the cache's slots at {@code position} (i32 [1]): -inf after the position, and
     * with a {@code window} (0: none) at the slots {@code window} or more positions before it.
     */
    static Tensor stepMask(GraphBuilder g, Tensor position, int maxLen, int window, DType dtype) {
        Tensor slots = g.arange(DType.I32, maxLen);
        Tensor causal = slots.le(position).where(0.0, Double.NEGATIVE_INFINITY);
        return (window == 0 ? causal : causal.add(slots.add(window).gt(position).where(0.0, Double.NEGATIVE_INFINITY))).cast(dtype);
    }

    /** The RMSNorm of {@code x} by the weight input {@code name} ([hidden]), applied as the architecture applies it. */
    static Tensor norm(GraphBuilder g, LlamaConfig c, Tensor x, String name, DType dtype) {
        return LlamaPrefill.rmsNorm(x, normWeight(c, g.input(name, dtype, c.hiddenSize())), c.rmsNormEps());
    }

    /** Whether the layers have Gemma 2's norms around the attention's output and the MLP. */
    static boolean sandwich(LlamaConfig c) { return c.gemma() != null && c.gemma().sandwichNorms(); }

    /** The attention's output (summed over the ranks) as it joins the residual stream: Gemma 2 normalizes it first. */
    static Tensor afterAttention(GraphBuilder g, LlamaConfig c, Tensor out, String layer, DType dtype) {
        return sandwich(c) ? norm(g, c, out, layer + "post_attention_layernorm.weight", dtype) : out;
    }

    /** The norm of the MLP's input: Llama's {@code post_attention_layernorm}, Gemma 2's {@code pre_feedforward_layernorm}. */
    static String mlpInputNorm(LlamaConfig c) { return sandwich(c) ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight"; }

    /** The MLP's output (summed over the ranks) as it joins the residual stream: Gemma 2 normalizes it first. */
    static Tensor afterMlp(GraphBuilder g, LlamaConfig c, Tensor out, String layer, DType dtype) {
        return sandwich(c) ? norm(g, c, out, layer + "post_feedforward_layernorm.weight", dtype) : out;
    }

    /** A layer's norm weights besides Llama's two ([hidden] each, every rank's whole): Gemma 2's around the MLP. */
    static java.util.List<String> extraNorms(LlamaConfig c) {
        return sandwich(c) ? java.util.List.of("pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight") : java.util.List.of();
    }

    /** {@code v} rounded to {@code dtype}, as a tensor of that dtype holds it. */
    private static double rounded(double v, DType dtype) {
        var one = NDArray.zeros(dtype, 1);
        one.set(0, v);
        return one.get(0);
    }
}
