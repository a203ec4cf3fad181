package dev.gatun.models.llama;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;

/**
 * The additive masks of one decode graph's attention layers written with plain ops (scores, mask, softmax), one of
 * each kind made once for every layer that needs it (a prompt's attention is {@code flash_attention}, causal and
 * windowed by itself): a decode step's over the cache's slots
 * [maxLen], made from the position (only for layers the fused {@code attention} step cannot compute: Gemma 2's
 * soft-capped or windowed ones), with or without the window; a ragged step's [batch, 1, 1, 1, maxLen] (an input and
 * the position). A ragged step with sliding layers is refused: its slots are not its positions (each sequence's gap),
 * and the window would need each sequence's prompt length, which the graph does not have.
 */
final class AttentionMasks {
    private final GraphBuilder g;
    private final LlamaConfig c;
    private final boolean decode, ragged;
    private final Tensor mask, position;
    private final int t, maxLen;
    private final DType dtype;
    private Tensor full, window;

    /**
     * The masks of a graph: {@code mask} is the ragged step's [batch, maxLen] (null for a plain step, which has
     * {@code position} instead, and for a prefill, which needs none).
     */
    AttentionMasks(GraphBuilder g, LlamaConfig c, boolean decode, boolean ragged, Tensor mask, Tensor position, int t, int maxLen, DType dtype) {
        if (ragged && GemmaOps.anySliding(c))
            throw new CompilationException("LlamaDecoder.decode: a ragged batch (prompts of different lengths) with sliding-window layers "
                    + "(gemma2's layer_types) is not implemented; generate prompts of one length together, or each alone");
        this.g = g;
        this.c = c;
        this.decode = decode;
        this.ragged = ragged;
        this.mask = mask;
        this.position = position;
        this.t = t;
        this.maxLen = maxLen;
        this.dtype = dtype;
    }

    /** The mask layer {@code l}'s scores [batch, kv heads, group, tokens, seen] are added to. */
    Tensor forLayer(int l, int batch, int seen) {
        if (ragged) return mask.reshape(batch, 1, 1, 1, seen);
        boolean slides = GemmaOps.slides(c, l);
        if (!decode) throw new IllegalStateException("a prompt's attention is flash_attention's: it takes no mask");
        if (slides) {
            if (window == null) window = GemmaOps.stepMask(g, position, maxLen, c.gemma().slidingWindow(), dtype);
            return window;
        }
        if (full == null) full = GemmaOps.stepMask(g, position, maxLen, 0, dtype);
        return full;
    }
}
