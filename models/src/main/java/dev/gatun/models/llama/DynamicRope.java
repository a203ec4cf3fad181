package dev.gatun.models.llama;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;

/**
 * Dynamic NTK rotary scaling ({@link LlamaConfig.RopeScaling.Dynamic}) as transformers computes it, where the
 * frequencies depend on the sequence's length and so cannot be one table of a compiled graph.
 *
 * <p>transformers keeps the unscaled frequencies while the sequence is at most {@code max_position_embeddings} long;
 * each forward pass whose largest position reaches past it recomputes them for its length {@code n}, the base grown to
 * {@code theta * (factor * n / max - (factor - 1))^(d / (d - 2))}, in float32. A generation with a cache rotates each
 * key once, at the step that made it: the prompt's keys with the prompt's frequencies, each later step's key and query
 * with those of its own length (its position + 1). So here:
 * <ul>
 *   <li>a prompt's tables ({@link #frequencies(LlamaConfig, int)}) are those of its length, computed on the host;</li>
 *   <li>a decode step computes its frequencies in the graph from its cache slot ({@link #frequencies(GraphBuilder,
 *   LlamaConfig, Tensor)}): the slot is the batch's largest position, which transformers' batch-wide maximum reads too;</li>
 *   <li>a prefill of prompts padded to a compiled length ({@link LlamaGenerator}'s) is refused past
 *   {@code max_position_embeddings} ({@link #checkPaddedPrompts}): there transformers' frequencies follow the longest
 *   prompt of each batch, which tables bound once for the padded length cannot.</li>
 * </ul>
 * The float32 steps are transformers' own, each rounded where it rounds them.
 */
final class DynamicRope {
    private DynamicRope() {}

    /** The dynamic scaling of {@code c}, or null where it has another or none. */
    private static LlamaConfig.RopeScaling.Dynamic of(LlamaConfig c) {
        return c.ropeScaling() instanceof LlamaConfig.RopeScaling.Dynamic d ? d : null;
    }

    /**
     * The rotary frequencies ({@code rotaryDim / 2}) of a forward pass over {@code length} positions: the configuration's
     * own ({@link LlamaConfig#ropeFrequencies}) unless dynamic scaling grows them past {@code max_position_embeddings}.
     */
    static double[] frequencies(LlamaConfig c, int length) {
        var s = of(c);
        if (s == null || length <= s.maxPositions()) return c.ropeFrequencies();
        int d = c.rotaryDim();
        float base = grownBase(s, c.ropeTheta(), d, length);
        double[] f = new double[d / 2];
        for (int i = 0; i < f.length; i++) f[i] = 1f / (float) Math.pow(base, (float) (2 * i) / d);   // float32, as transformers
        return f;
    }

    /** transformers' grown base for a sequence of {@code length}, each float32 step rounded as torch rounds it. */
    private static float grownBase(LlamaConfig.RopeScaling.Dynamic s, double theta, int d, int length) {
        float factor = (float) s.factor();
        float ratio = (float) length * factor / (float) s.maxPositions() - (float) (s.factor() - 1);
        return (float) theta * (float) Math.pow(ratio, (float) ((double) d / (d - 2)));
    }

    /**
     * A decode step's frequencies, [rotaryDim] f32 (each pair's twice, as the tables lay them), from its cache slot
     * {@code slot} (i32 [1]): the unscaled ones while slot + 1 is at most {@code max_position_embeddings}, else those of
     * a sequence of slot + 1 positions, computed in the graph; for a configuration without dynamic scaling, a constant.
     */
    static Tensor frequencies(GraphBuilder g, LlamaConfig c, Tensor slot) {
        int d = c.rotaryDim();
        double[] f = c.ropeFrequencies(), both = new double[d], exponents = new double[d];
        for (int e = 0; e < d; e++) {
            both[e] = f[e % (d / 2)];
            exponents[e] = (float) (2 * (e % (d / 2))) / d;
        }
        Tensor unscaled = g.constant(DType.F32, new long[]{d}, both);
        var s = of(c);
        if (s == null) return unscaled;
        Tensor length = slot.cast(DType.F32).add(1);
        Tensor base = length.mul(s.factor()).div(s.maxPositions()).sub(s.factor() - 1).pow((double) d / (d - 2)).mul(c.ropeTheta());
        Tensor grown = g.scalar(1, DType.F32).div(base.pow(g.constant(DType.F32, new long[]{d}, exponents)));
        return length.gt(s.maxPositions()).where(grown, unscaled);
    }

    /**
     * Refuses, for dynamic scaling, a prefill of prompts padded to {@code tokens} positions past
     * {@code max_position_embeddings} (see the class comment); a shorter one computes what transformers does.
     */
    static void checkPaddedPrompts(LlamaConfig c, int tokens) {
        var s = of(c);
        if (s != null && tokens > s.maxPositions())
            throw new CompilationException("rope_type \"dynamic\" (dynamic NTK) with max_position_embeddings " + s.maxPositions()
                    + ": a prefill for prompts of up to " + tokens + " tokens is not implemented: past max_position_embeddings the rotary "
                    + "frequencies follow each batch's longest prompt, which tables bound once for the padded length cannot follow; "
                    + "build the generator for prompts of at most " + s.maxPositions() + " tokens (the steps after them are scaled as they grow)");
    }
}
