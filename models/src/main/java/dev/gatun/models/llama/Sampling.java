package dev.gatun.models.llama;

import dev.gatun.ir.DType;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;

import java.util.List;

/**
 * How a sequence's tokens are drawn, as transformers' {@code generate(do_sample=True, ...)} draws them: the repetition
 * penalty on every token seen so far (the prompt's and the generated), then the temperature, top-k, top-p and min-p, and
 * a draw from what is left, seeded. The draw runs on the device, in the graph ({@code sample}, whose rule is
 * {@code dev.gatun.ir.ops.TokenSampling}): the logits never come to the host, and the same seed draws the same tokens
 * on every backend and wherever the sequence sits in a batch (the noise is a hash of the seed, the token's position
 * and the column). Temperature 0 is greedy (the argmax of the penalized logits).
 *
 * @param temperature       0 for greedy, else above 0: the logits divided by it
 * @param topK              the k most likely tokens kept (ties with the k-th too); 0: all
 * @param topP              the most likely tokens kept while the probability of those more likely is below it, in
 *                          (0, 1]; 1: all
 * @param minP              tokens at least this times as likely as the most likely kept, in [0, 1]; 0: all
 * @param repetitionPenalty above 0: a seen token's logit divided by it where positive, else multiplied; 1: none
 * @param seed              the seed of the sequence's draws
 */
public record Sampling(double temperature, int topK, double topP, double minP, double repetitionPenalty, long seed) {
    /** Greedy: the argmax of every step's logits. */
    public static final Sampling GREEDY = new Sampling(0, 0, 1, 0, 1, 0);

    public Sampling {
        if (!(temperature >= 0) || Double.isInfinite(temperature))
            throw bad("temperature " + temperature + ": give 0 (greedy) or a finite value above 0");
        if (topK < 0) throw bad("top-k " + topK + ": give 0 (off) or a count above 0");
        if (!(topP > 0 && topP <= 1)) throw bad("top-p " + topP + ": give a value above 0 and at most 1 (1: off)");
        if (!(minP >= 0 && minP <= 1)) throw bad("min-p " + minP + ": give a value from 0 (off) to 1");
        if (!(repetitionPenalty > 0) || Double.isInfinite(repetitionPenalty))
            throw bad("repetition penalty " + repetitionPenalty + ": give a finite value above 0 (1: none)");
    }

    private static GatunRuntimeException bad(String what) { return new GatunRuntimeException("Sampling: " + what); }

    /** Drawn at {@code temperature}, no filter, no penalty, seed 0. */
    public static Sampling temperature(double temperature) { return new Sampling(temperature, 0, 1, 0, 1, 0); }

    public Sampling topK(int k) { return new Sampling(temperature, k, topP, minP, repetitionPenalty, seed); }

    public Sampling topP(double p) { return new Sampling(temperature, topK, p, minP, repetitionPenalty, seed); }

    public Sampling minP(double p) { return new Sampling(temperature, topK, topP, p, repetitionPenalty, seed); }

    public Sampling repetitionPenalty(double r) { return new Sampling(temperature, topK, topP, minP, r, seed); }

    public Sampling seed(long s) { return new Sampling(temperature, topK, topP, minP, repetitionPenalty, s); }

    /** Whether the argmax graph computes this: greedy and without a penalty. */
    public boolean isPlainGreedy() { return temperature == 0 && repetitionPenalty == 1; }

    /** The five parameters as {@code sample} reads them: temperature, top_k, top_p, min_p, repetition_penalty. */
    double[] parameters() { return new double[]{temperature, topK, topP, minP, repetitionPenalty}; }

    /** The graphs' {@value LlamaDecoder#SAMPLING} [batch, 5] f32: row b's parameters from {@code rows.get(b)}. */
    static NDArray parameters(List<Sampling> rows) {
        double[] p = new double[rows.size() * 5];
        for (int b = 0; b < rows.size(); b++) System.arraycopy(rows.get(b).parameters(), 0, p, b * 5, 5);
        return NDArray.of(DType.F32, p, rows.size(), 5);
    }

    /** The graphs' {@value LlamaDecoder#SEEDS} [batch] i64. */
    static NDArray seeds(List<Sampling> rows) {
        long[] s = new long[rows.size()];
        for (int b = 0; b < s.length; b++) s[b] = rows.get(b).seed();
        return NDArray.of(s, s.length);
    }
}
