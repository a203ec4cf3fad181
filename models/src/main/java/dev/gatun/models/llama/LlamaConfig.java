package dev.gatun.models.llama;

import dev.gatun.ir.CompilationException;
import dev.gatun.ir.GraphException;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Set;

/**
 * The shape of a Llama-architecture decoder (transformers' {@code llama}, {@code mistral}, {@code qwen2}, {@code qwen3}, {@code phi3}, {@code gemma}, {@code gemma2}, {@code mixtral}, {@code qwen2_moe} and {@code qwen3_moe} model types), as a
 * checkpoint's {@code config.json} states it. {@link #read} reads the file and refuses, by name, every field that
 * would change the computation in a way this decoder does not implement ({@link LlamaConfigReader} says how).
 *
 * @param hiddenSize        {@code hidden_size}: the width of the residual stream
 * @param layers            {@code num_hidden_layers}
 * @param heads             {@code num_attention_heads}: query heads
 * @param kvHeads           {@code num_key_value_heads}: key and value heads (grouped-query attention)
 * @param intermediateSize  {@code intermediate_size}: the width of the gated MLP
 * @param vocabSize         {@code vocab_size}
 * @param ropeTheta         {@code rope_theta} (10000 when left out)
 * @param rmsNormEps        {@code rms_norm_eps} (1e-6 when left out)
 * @param tieWordEmbeddings {@code tie_word_embeddings}: the output projection is the embedding (false when left out)
 * @param ropeScaling       the rotary frequencies' scaling ({@code rope_type} "llama3", "linear", "yarn" or "dynamic"), or null: unscaled
 * @param headDim           {@code head_dim}: the width of one attention head ({@code hidden_size / num_attention_heads}
 *                          when left out); the query, key, value and output projections are {@code heads * head_dim}
 *                          wide, which need not be {@code hidden_size}
 * @param slidingWindow     Mistral's {@code sliding_window}: each position attends to the last this many, or 0: to
 *                          every position before it. Only the case where it changes nothing is implemented: a graph
 *                          for more positions than the window is refused ({@link #checkPositions})
 * @param biases            which projections add a bias: Qwen2's query, key and value projections; Llama's and Qwen3's
 *                          with {@code attention_bias} (and its output projection) or {@code mlp_bias}
 * @param qkNorm            Qwen3's QK-norm: an RMSNorm of each query and each key head ({@code q_norm}, {@code k_norm},
 *                          one weight of {@code head_dim} each) before the rotary embedding
 * @param rotaryDim         how many of each head's {@code head_dim} dimensions rotate (Phi-3's {@code partial_rotary_factor}
 *                          times {@code head_dim}): the first this many, the rest pass through; 0 is read as all of them
 * @param fused             Phi-3's checkpoint layout: each layer's query, key and value projections one tensor
 *                          ({@code self_attn.qkv_proj}), its gate and up projections one ({@code mlp.gate_up_proj}); the
 *                          computation is the same ({@link LlamaCheckpoint#shapes})
 * @param gemma             Gemma's and Gemma 2's changes ({@link GemmaFeatures}), or null: none
 * @param moe               the mixture-of-experts MLP of Mixtral, Qwen2-MoE and Qwen3-MoE ({@link MixtureOfExperts}), or
 *                          null: every layer's MLP is dense
 */
public record LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize,
                          double ropeTheta, double rmsNormEps, boolean tieWordEmbeddings, RopeScaling ropeScaling,
                          int headDim, int slidingWindow, Biases biases, boolean qkNorm, int rotaryDim, boolean fused, GemmaFeatures gemma,
                          MoeConfig moe) {

    /** A shape without experts (see the canonical constructor). */
    public LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize, double ropeTheta,
                       double rmsNormEps, boolean tieWordEmbeddings, RopeScaling ropeScaling, int headDim, int slidingWindow, Biases biases,
                       boolean qkNorm, int rotaryDim, boolean fused, GemmaFeatures gemma) {
        this(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim,
                slidingWindow, biases, qkNorm, rotaryDim, fused, gemma, null);
    }

    /** A shape whose heads rotate whole, its tensors in Llama's layout (see the canonical constructor). */
    public LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize, double ropeTheta,
                       double rmsNormEps, boolean tieWordEmbeddings, RopeScaling ropeScaling, int headDim, int slidingWindow, Biases biases,
                       boolean qkNorm) {
        this(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim,
                slidingWindow, biases, qkNorm, 0, false, null);
    }

    /** A shape whose heads rotate whole, its tensors in Llama's layout, with Gemma's changes {@code gemma} (null: none). */
    public LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize, double ropeTheta,
                       double rmsNormEps, boolean tieWordEmbeddings, RopeScaling ropeScaling, int headDim, int slidingWindow, Biases biases,
                       boolean qkNorm, GemmaFeatures gemma) {
        this(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim,
                slidingWindow, biases, qkNorm, 0, false, gemma);
    }

    /** A shape without Gemma's changes (see the canonical constructor). */
    public LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize, double ropeTheta,
                       double rmsNormEps, boolean tieWordEmbeddings, RopeScaling ropeScaling, int headDim, int slidingWindow, Biases biases,
                       boolean qkNorm, int rotaryDim, boolean fused) {
        this(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim,
                slidingWindow, biases, qkNorm, rotaryDim, fused, null);
    }

    /**
     * The projections that add a bias (each {@code <name>.bias}, one value an output): the query, key and value
     * projections; the attention's output projection; the MLP's three.
     */
    public record Biases(boolean qkv, boolean output, boolean mlp) {
        /** No bias anywhere: Llama's and Mistral's default. */
        public static final Biases NONE = new Biases(false, false, false);
    }

    /** A shape without biases (see the canonical constructor). */
    public LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize,
                       double ropeTheta, double rmsNormEps, boolean tieWordEmbeddings, RopeScaling ropeScaling, int headDim, int slidingWindow) {
        this(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim,
                slidingWindow, Biases.NONE, false);
    }

    /** A shape without QK-norm (see the canonical constructor). */
    public LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize, double ropeTheta,
                       double rmsNormEps, boolean tieWordEmbeddings, RopeScaling ropeScaling, int headDim, int slidingWindow, Biases biases) {
        this(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim,
                slidingWindow, biases, false);
    }

    /**
     * The most layers a configuration may have: hundreds of times the largest models' (about 130), so that a file
     * declaring billions is refused from the number before a list of its tensors or a graph of its layers is made.
     */
    public static final int MAX_LAYERS = 1 << 16;
    /** The widest a configuration's hidden, MLP, vocabulary and attention widths may be (the largest models': 2^18). */
    public static final int MAX_WIDTH = 1 << 24;

    /** How the rotary frequencies are scaled ({@code rope_type}), as transformers computes them. */
    public sealed interface RopeScaling permits RopeScaling.Llama3, RopeScaling.Linear, RopeScaling.Yarn, RopeScaling.Dynamic {
        /**
         * Pair {@code pair}'s frequency (radians per position; of {@code headDim / 2} pairs, base {@code theta}, unscaled
         * {@code frequency}) as this scaling changes it: Llama 3's and linear scaling look at the frequency alone, YaRN's
         * at the pair.
         */
        double scale(double frequency, int pair, int headDim, double theta);

        /** What the rotary tables are multiplied by (YaRN's attention factor; 1 for the others). */
        default double attentionFactor() { return 1; }

        /** The {@code rope_type} it is read from and written as. */
        String type();

        /**
         * Llama 3's scaling ({@code rope_type} "llama3", Llama 3.1 and later): frequencies whose wavelength exceeds
         * {@code originalMaxPositions / lowFreqFactor} are divided by {@code factor}, those shorter than
         * {@code originalMaxPositions / highFreqFactor} are kept, and those between are interpolated between the two.
         */
        record Llama3(double factor, double lowFreqFactor, double highFreqFactor, int originalMaxPositions) implements RopeScaling {
            public Llama3 {
                if (!(factor >= 1) || Double.isInfinite(factor)) throw new GraphException("rope_scaling.factor must be at least 1, not " + factor);
                if (!(lowFreqFactor > 0) || !(highFreqFactor > lowFreqFactor) || Double.isInfinite(highFreqFactor))
                    throw new GraphException("rope_scaling needs 0 < low_freq_factor < high_freq_factor, not " + lowFreqFactor + " and " + highFreqFactor);
                if (originalMaxPositions < 1) throw new GraphException("rope_scaling.original_max_position_embeddings must be at least 1, not " + originalMaxPositions);
            }

            @Override public double scale(double frequency, int pair, int headDim, double theta) {
                double wavelength = 2 * Math.PI / frequency;
                if (wavelength < originalMaxPositions / highFreqFactor) return frequency;
                if (wavelength > originalMaxPositions / lowFreqFactor) return frequency / factor;
                double smooth = (originalMaxPositions / wavelength - lowFreqFactor) / (highFreqFactor - lowFreqFactor);
                return (1 - smooth) * frequency / factor + smooth * frequency;
            }

            @Override public String type() { return "llama3"; }
        }

        /**
         * Linear position interpolation ({@code rope_type} "linear"): positions divided by {@code factor}, which is
         * every frequency divided by it (transformers divides the frequencies).
         */
        record Linear(double factor) implements RopeScaling {
            public Linear {
                if (!(factor > 0) || Double.isInfinite(factor)) throw new GraphException("rope_scaling.factor must be positive and finite, not " + factor);
            }

            @Override public double scale(double frequency, int pair, int headDim, double theta) { return frequency / factor; }

            @Override public String type() { return "linear"; }
        }

        /**
         * YaRN ({@code rope_type} "yarn"), as transformers computes it: each pair's frequency ramps from extrapolation
         * (kept) to interpolation (divided by {@code factor}) between the correction dimensions of {@code betaFast} and
         * {@code betaSlow} rotations over {@code originalMaxPositions} (floored and ceiled where {@code truncate}), and
         * the tables are multiplied by {@code attentionFactor} (0.1 ln(factor) + 1 where the file gives none).
         */
        record Yarn(double factor, int originalMaxPositions, double betaFast, double betaSlow, double attentionFactor, boolean truncate)
                implements RopeScaling {
            public Yarn {
                if (!(factor >= 1) || Double.isInfinite(factor)) throw new GraphException("rope_scaling.factor must be at least 1, not " + factor);
                if (originalMaxPositions < 1) throw new GraphException("rope_scaling.original_max_position_embeddings must be at least 1, not " + originalMaxPositions);
                if (!(betaFast > 0) || !(betaSlow > 0) || Double.isInfinite(betaFast) || Double.isInfinite(betaSlow))
                    throw new GraphException("rope_scaling.beta_fast and beta_slow must be positive and finite, not " + betaFast + " and " + betaSlow);
                if (!(attentionFactor > 0) || Double.isInfinite(attentionFactor))
                    throw new GraphException("rope_scaling.attention_factor must be positive and finite, not " + attentionFactor);
            }

            /** transformers' default attention factor for {@code factor}. */
            public static double defaultAttentionFactor(double factor) { return factor <= 1 ? 1 : 0.1 * Math.log(factor) + 1; }

            @Override public double scale(double frequency, int pair, int headDim, double theta) {
                double low = correctionDim(betaFast, headDim, theta), high = correctionDim(betaSlow, headDim, theta);
                if (truncate) {
                    low = Math.floor(low);
                    high = Math.ceil(high);
                }
                low = Math.max(low, 0);
                high = Math.min(high, headDim - 1);
                if (low == high) high += 0.001;
                double ramp = Math.clamp((pair - low) / (high - low), 0.0, 1.0), extrapolation = 1 - ramp;
                return frequency / factor * (1 - extrapolation) + frequency * extrapolation;
            }

            private double correctionDim(double rotations, int headDim, double theta) {
                return headDim * Math.log(originalMaxPositions / (rotations * 2 * Math.PI)) / (2 * Math.log(theta));
            }

            @Override public String type() { return "yarn"; }
        }

        /**
         * Dynamic NTK scaling ({@code rope_type} "dynamic"), as transformers computes it: up to {@code maxPositions}
         * ({@code max_position_embeddings}) positions the frequencies are the unscaled ones, which {@link #scale} gives;
         * past it the base grows with the sequence's length, so the frequencies depend on it ({@link DynamicRope}).
         */
        record Dynamic(double factor, int maxPositions) implements RopeScaling {
            public Dynamic {
                if (!(factor >= 1) || Double.isInfinite(factor)) throw new GraphException("rope_scaling.factor must be at least 1, not " + factor);
                if (maxPositions < 1) throw new GraphException("max_position_embeddings must be at least 1, not " + maxPositions);
            }

            @Override public double scale(double frequency, int pair, int headDim, double theta) { return frequency; }

            @Override public String type() { return "dynamic"; }
        }
    }

    /** A shape with unscaled rotary frequencies and heads of {@code hidden_size / num_attention_heads}. */
    public LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize,
                       double ropeTheta, double rmsNormEps, boolean tieWordEmbeddings) {
        this(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, null);
    }

    /** A shape with heads of {@code hidden_size / num_attention_heads} and no sliding window. */
    public LlamaConfig(int hiddenSize, int layers, int heads, int kvHeads, int intermediateSize, int vocabSize,
                       double ropeTheta, double rmsNormEps, boolean tieWordEmbeddings, RopeScaling ropeScaling) {
        this(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling,
                defaultHeadDim(hiddenSize, heads), 0);
    }

    public LlamaConfig {
        if (biases == null) biases = Biases.NONE;
        positive("hidden_size", hiddenSize);
        positive("num_hidden_layers", layers);
        positive("num_attention_heads", heads);
        positive("num_key_value_heads", kvHeads);
        positive("intermediate_size", intermediateSize);
        positive("vocab_size", vocabSize);
        positive("head_dim", headDim);
        if (layers > MAX_LAYERS)
            throw new GraphException("num_hidden_layers " + layers + " is over " + MAX_LAYERS + ", hundreds of times the layers of the largest models: not a real configuration");
        bounded("hidden_size", hiddenSize);
        bounded("intermediate_size", intermediateSize);
        bounded("vocab_size", vocabSize);
        if ((long) heads * headDim > MAX_WIDTH)
            throw new GraphException("num_attention_heads * head_dim = " + heads + " * " + headDim + " is over " + MAX_WIDTH + ": not a real configuration");
        if (heads % kvHeads != 0)
            throw new GraphException("num_attention_heads " + heads + " is not a multiple of num_key_value_heads " + kvHeads);
        if (headDim % 2 != 0) throw new GraphException("head_dim " + headDim + " is odd: rotary embeddings rotate pairs");
        if (!(ropeTheta > 0) || Double.isInfinite(ropeTheta)) throw new GraphException("rope_theta must be positive and finite, not " + ropeTheta);
        if (!(rmsNormEps > 0) || Double.isInfinite(rmsNormEps)) throw new GraphException("rms_norm_eps must be positive and finite, not " + rmsNormEps);
        if (slidingWindow < 0) throw new GraphException("sliding_window must be a positive number of positions (or none), not " + slidingWindow);
        if (gemma != null) gemma.checkLayers(layers);
        if (rotaryDim == 0) rotaryDim = headDim;
        if (rotaryDim < 2 || rotaryDim > headDim || rotaryDim % 2 != 0)
            throw new GraphException("the rotary dimensions (head_dim " + headDim + " times partial_rotary_factor) are " + rotaryDim
                    + ": they must be even (rotary embeddings rotate pairs), at least 2 and at most head_dim");
        if (ropeScaling instanceof RopeScaling.Dynamic && rotaryDim == 2)
            throw new CompilationException("rope_type \"dynamic\" with 2 rotary dimensions: its base grows with the power d / (d - 2), "
                    + "which for d = 2 transformers cannot compute either");
        if (fused && (biases.qkv() || biases.output() || biases.mlp() || qkNorm))
            throw new CompilationException("Phi-3's fused qkv_proj and gate_up_proj layout with biases or QK-norm is not implemented (Phi-3 has neither)");
        if (moe != null && (biases.mlp() || fused || gemma != null || moe.naming() == MoeConfig.Naming.MIXTRAL && moe.expertSize() != intermediateSize))
            throw new GraphException("a mixture of experts has no MLP biases, no fused or Gemma layout, and Mixtral's experts are intermediate_size wide");
    }

    private static void positive(String field, int v) {
        if (v < 1) throw new GraphException(field + " must be at least 1, not " + v);
    }

    private static void bounded(String field, int v) {
        if (v > MAX_WIDTH) throw new GraphException(field + " " + v + " is over " + MAX_WIDTH + ", far wider than any model: not a real configuration");
    }

    /** {@code hidden_size / num_attention_heads}, where it divides: the head size a config without {@code head_dim} means. */
    static int defaultHeadDim(int hiddenSize, int heads) {
        positive("num_attention_heads", heads);
        if (hiddenSize % heads != 0)
            throw new GraphException("hidden_size " + hiddenSize + " is not a multiple of num_attention_heads " + heads
                    + " (a model whose heads are of another width says so in head_dim)");
        return hiddenSize / heads;
    }

    /** This shape with another rotary frequency scaling (null: none). */
    public LlamaConfig withRopeScaling(RopeScaling scaling) {
        return new LlamaConfig(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, scaling, headDim, slidingWindow, biases, qkNorm, rotaryDim, fused, gemma, moe);
    }

    /** This shape with heads {@code headDim} wide (all of them rotating where all of the old ones did). */
    public LlamaConfig withHeadDim(int headDim) {
        return new LlamaConfig(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim, slidingWindow, biases, qkNorm, rotaryDim == this.headDim ? 0 : rotaryDim, fused, gemma, moe);
    }

    /** This shape with Mistral's sliding window of {@code window} positions (0: none). */
    public LlamaConfig withSlidingWindow(int window) {
        return new LlamaConfig(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim, window, biases, qkNorm, rotaryDim, fused, gemma, moe);
    }

    /** This shape with (or without) Qwen3's QK-norm. */
    public LlamaConfig withQkNorm(boolean on) {
        return new LlamaConfig(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim, slidingWindow, biases, on, rotaryDim, fused, gemma, moe);
    }

    /** This shape with Gemma's changes {@code gemma} (null: none). */
    public LlamaConfig withGemma(GemmaFeatures gemma) {
        return new LlamaConfig(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim, slidingWindow, biases, qkNorm, rotaryDim, fused, gemma, moe);
    }

    /** This shape with the mixture-of-experts MLP {@code moe} (null: dense). */
    public LlamaConfig withMoe(MoeConfig moe) {
        return new LlamaConfig(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim, slidingWindow, biases, qkNorm, rotaryDim, fused, gemma, moe);
    }

    /** This shape with {@code biases}. */
    public LlamaConfig withBiases(Biases biases) {
        return new LlamaConfig(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim, slidingWindow, biases, qkNorm, rotaryDim, fused, gemma, moe);
    }

    /** This shape with the first {@code rotaryDim} dimensions of each head rotating (Phi-3's partial rotary embedding). */
    public LlamaConfig withRotaryDim(int rotaryDim) {
        return new LlamaConfig(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim, slidingWindow, biases, qkNorm, rotaryDim, fused, gemma, moe);
    }

    /** This shape with its tensors in Phi-3's fused layout ({@code fused}) or Llama's. */
    public LlamaConfig withFused(boolean fused) {
        return new LlamaConfig(hiddenSize, layers, heads, kvHeads, intermediateSize, vocabSize, ropeTheta, rmsNormEps, tieWordEmbeddings, ropeScaling, headDim, slidingWindow, biases, qkNorm, rotaryDim, fused, gemma, moe);
    }

    /**
     * The rotary frequency of each of the {@code rotaryDim / 2} pairs, radians per position: {@code rope_theta^(-2i/d)}
     * ({@code d} = {@code rotaryDim}), scaled where {@code rope_scaling} says so (dynamic NTK: as it is up to
     * {@code max_position_embeddings}; {@link DynamicRope} has the frequencies past it).
     */
    public double[] ropeFrequencies() {
        int d = rotaryDim;   // transformers' dim: head_dim times partial_rotary_factor
        double[] f = new double[d / 2];
        for (int i = 0; i < f.length; i++) {
            f[i] = 1 / Math.pow(ropeTheta, 2.0 * i / d);
            if (ropeScaling != null) f[i] = ropeScaling.scale(f[i], i, d, ropeTheta);
        }
        return f;
    }

    /** What the rotary tables (cos and sin) are multiplied by: YaRN's attention factor, else 1. */
    public double ropeAttentionFactor() { return ropeScaling == null ? 1 : ropeScaling.attentionFactor(); }

    /** Query heads that share one key and value head. */
    public int groupSize() { return heads / kvHeads; }

    /**
     * Refuses a graph over {@code positions} positions (its KV cache's length) that the sliding window would change:
     * this decoder attends to every position before the current one, which is Mistral's sliding-window attention only
     * while the window covers them all (position {@code i} attends to the positions after {@code i - window}).
     */
    public void checkPositions(int positions) {
        if (slidingWindow > 0 && positions > slidingWindow)
            throw new CompilationException("config sliding_window = " + slidingWindow + ", but this graph is built for " + positions
                    + " positions: past the window each position would attend to fewer positions than all before it, and sliding-window "
                    + "attention is not implemented; build for at most " + slidingWindow + " positions (prompt and new tokens together)");
    }

    /**
     * Refuses a tensor-parallel degree this shape cannot be split over: Megatron-style parallelism gives each rank
     * whole query heads and an equal share of the MLP's width, and whole key-value heads, or, where there are fewer
     * key-value heads than ranks, a replica of the one its query heads share.
     */
    public void checkTensorParallel(int tp) {
        if (tp < 1) throw new CompilationException("tensor-parallel degree must be at least 1, not " + tp);
        if (denseLayers() && intermediateSize % tp != 0) throw indivisible(tp, "intermediate_size", intermediateSize);
        if (moe != null) {
            if (moe.expertSize() % tp != 0) throw indivisible(tp, moe.naming() == MoeConfig.Naming.MIXTRAL ? "intermediate_size" : "moe_intermediate_size", moe.expertSize());
            if (moe.sharedSize() % tp != 0) throw indivisible(tp, "shared_expert_intermediate_size", moe.sharedSize());
        }
        if (heads % tp != 0) throw indivisible(tp, "num_attention_heads", heads);
        if (kvHeads % tp != 0 && tp % kvHeads != 0)
            throw new CompilationException("a tensor-parallel degree of " + tp + " neither divides num_key_value_heads = " + kvHeads
                    + " nor is a multiple of it: each rank takes whole key-value heads or a replica of one");
    }

    /** Whether any layer's MLP is dense (of {@code intermediate_size}). */
    private boolean denseLayers() {
        for (int l = 0; l < layers; l++) if (moe == null || !moe.sparse(l)) return true;
        return false;
    }

    private static CompilationException indivisible(int tp, String field, int value) {
        return new CompilationException("a tensor-parallel degree of " + tp + " does not divide " + field + " = " + value
                + ": each rank takes whole heads and an equal share of the MLP (of each expert's); use a degree that divides "
                + "num_attention_heads and the MLPs' widths");
    }

    /**
     * Reads {@code config.json}, refusing what this decoder does not compute (see {@link LlamaConfigReader}): a
     * {@link GraphException} names the file and the field where the file is malformed (not JSON, a field missing or
     * ill-typed, a size past the bounds), a {@link CompilationException} where it asks for something not implemented
     * (another architecture, a feature, a field not known to be harmless). An {@link IOException} is a file that
     * cannot be read at all.
     */
    public static LlamaConfig read(Path file) throws IOException { return LlamaConfigReader.read(file, Set.of()); }

    /**
     * As {@link #read(Path)}, but fields named in {@code alsoHarmless} are ignored where they are not ones this loader
     * knows: for a checkpoint whose {@code config.json} carries a field of its own that the caller knows does not
     * change the forward pass. A field this loader reads or refuses is not affected.
     */
    public static LlamaConfig read(Path file, Set<String> alsoHarmless) throws IOException { return LlamaConfigReader.read(file, alsoHarmless); }

    /**
     * Writes {@code config.json} in transformers' layout, as the model type whose computation this configuration is
     * ({@link LlamaConfigWriter} says how each is chosen: {@code gemma} and {@code gemma2}, {@code mixtral},
     * {@code qwen2_moe}, {@code qwen3_moe}, {@code phi3}, {@code qwen3}, {@code qwen2}, {@code mistral} or {@code llama}),
     * with {@code rope_theta} and {@code rope_scaling}. The file is read back before this returns: a configuration that
     * no file says exactly (a sliding window with biases, Gemma 1's changes with a window, ...) is refused and no file
     * is left.
     */
    public void write(Path file) throws IOException { LlamaConfigWriter.write(this, file); }
}
