package dev.gatun.models.llama;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.TensorFiles;

import java.lang.foreign.MemorySegment;
import java.util.Map;

/**
 * The vocabulary-parallel output projection of a tensor-parallel decoder: each rank holds {@code ceil(vocab / tp)}
 * rows of {@code lm_head.weight} (rank r the rows from {@code r * ceil(vocab / tp)}; of the tied embedding where the
 * embeddings are tied) and computes its shard of the logits, so a step reads the head once across the ranks instead of
 * once a rank. The greedy token is {@link Tensor#argmaxAcrossRanks} of the shards: each rank's argmax and one tiny
 * all-gather of (value, position) pairs, exactly the argmax of the whole vocabulary (the lowest position of equal
 * largest logits; the first NaN). Where a caller needs every logit (the {@code logits} output, sampling) the shards
 * are all-gathered into the whole, in the vocabulary's order.
 *
 * <p>A vocabulary that {@code tp} does not divide is padded: the last ranks' head has zero rows past the vocabulary
 * and the input {@value #PADDING} (0 for each real row, -inf for each padded one, a rank's shard of
 * {@link LlamaDecoder#weights}) is added to the shard's logits before the argmax, so a padded row never wins (every
 * real logit is at least -inf and comes before it); the gathered logits are cut to the vocabulary. Without padding
 * there is no such input. The embedding lookup stays replicated: each rank holds the whole embedding for it.
 *
 * <p>At {@code tp} 1 nothing of this applies: the head is the whole, as it always was.
 */
final class VocabParallel {
    /** The padding of a rank's shard of the logits, [rows]: 0 for a row of the vocabulary, -inf for a padded one. */
    static final String PADDING = "lm_head.padding";

    private VocabParallel() {}

    /** The rows of the head each rank holds: vocab / tp, rounded up. */
    static long rows(LlamaConfig c, int tp) { return ((long) c.vocabSize() + tp - 1) / tp; }

    /** Whether the shards are padded (tp does not divide the vocabulary). */
    static boolean padded(LlamaConfig c, int tp) { return tp > 1 && c.vocabSize() % tp != 0; }

    /** A rank's shard of the logits of {@code h} [n, hidden] (Gemma 2's soft-capped), and what the whole takes. */
    record Head(Tensor shard, LlamaConfig c, int tp, String group) {
        /** Every logit, [n, vocab]: the shards all-gathered and laid side by side in the ranks' order. */
        Tensor logits() {
            long n = shard.shape().sizes()[0], s = rows(c, tp);
            Tensor whole = shard.allGather(group).reshape(tp, n, s).permute(1, 0, 2).reshape(n, tp * s);
            return padded(c, tp) ? whole.slice(1, 0, c.vocabSize()) : whole;
        }

        /** The greedy tokens, [n] i64: the argmax over the whole vocabulary, the padding masked. */
        Tensor greedy(GraphBuilder g, DType dtype) {
            Tensor masked = padded(c, tp) ? shard.add(g.input(PADDING, dtype, rows(c, tp))) : shard;
            return masked.argmaxAcrossRanks(group);
        }
    }

    /** {@link #head(GraphBuilder, LlamaConfig, Tensor, int, String, DType)} over the world. */
    static Head head(GraphBuilder g, LlamaConfig c, Tensor h, int tp, DType dtype) {
        return head(g, c, h, tp, dev.gatun.ir.graph.ProcessGroup.WORLD_NAME, dtype);
    }

    /** The head's product on this rank's rows: [n, vocab / tp] logits (Gemma 2's soft-capped); {@code group} the tp ranks'. */
    static Head head(GraphBuilder g, LlamaConfig c, Tensor h, int tp, String group, DType dtype) {
        Tensor w = g.input("lm_head.weight", dtype, rows(c, tp), c.hiddenSize());
        Tensor shard = GemmaOps.softcap(h.matmul(w.transpose(0, 1)), c.gemma() == null ? 0 : c.gemma().finalSoftcap());
        return new Head(shard, c, tp, group);
    }

    /**
     * Rank {@code rank}'s {@code lm_head.weight} into {@code in}: its rows of the head ({@code embed}, already in
     * {@code dtype}, where tied; a view of it where no padding is needed), zero rows past the vocabulary, and where
     * padded its {@value #PADDING}.
     */
    static void shard(LlamaConfig c, TensorFiles weights, WeightReads reads, Map<String, NDArray> in, NDArray embed, int tp, int rank, DType dtype) {
        long s = rows(c, tp), first = rank * s, real = Math.max(0, Math.min(s, c.vocabSize() - first)), h = c.hiddenSize(), e = dtype.byteSize();
        NDArray source = c.tieWordEmbeddings() ? embed : weights.get("lm_head.weight"), head;
        if (real == s) head = c.tieWordEmbeddings() ? NDArray.wrap(dtype, embed.segment().asSlice(first * h * e, s * h * e), s, h)
                : LlamaPrefill.rows(dtype, new LlamaPrefill.Rows(source, first, s));
        else {
            head = NDArray.zeros(dtype, s, h);
            if (real > 0) MemorySegment.copy(LlamaPrefill.rows(dtype, new LlamaPrefill.Rows(source, first, real)).segment(), 0, head.segment(), 0, real * h * e);
        }
        in.put("lm_head.weight", c.tieWordEmbeddings() ? head : reads.read(head, "lm_head.weight"));
        if (padded(c, tp)) {
            var padding = NDArray.zeros(dtype, s);
            for (long i = real; i < s; i++) padding.set(i, Double.NEGATIVE_INFINITY);
            in.put(PADDING, padding);
        }
    }
}
