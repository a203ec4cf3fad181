package dev.gatun.models.llama;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Optimizer;
import dev.gatun.dsl.Parameters;
import dev.gatun.dsl.Tensor;
import dev.gatun.dsl.TrainStep;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.NDArray;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Random;

/**
 * One training step of the Llama architecture as one graph: the full-sequence forward pass (RMSNorm, rotary embeddings,
 * grouped-query causal attention by {@code flash_attention}, the gated SiLU MLP), the cross-entropy of each position's
 * next token, its backward pass and an {@link Optimizer} step over every weight, the weights and the optimizer's moments
 * states of the session. Data parallelism over {@code dp} ranks: each rank computes the loss of its own sequences and
 * the gradients are averaged over the world ({@code all_reduce(avg)}) before clipping and update, so every rank's
 * weights stay equal. Fully sharded ({@link DataParallel#FULLY_SHARDED}, ZeRO-3 / FSDP2): each rank stores block r of
 * dimension 0 of every weight and of its moments ({@link Parameters#fullyShardedOver}), all-gathers each weight where
 * the forward pass first reads it (the layer that uses it), reduce-scatters its gradient with avg and updates its own
 * block. On a dp x tp mesh each rank of a "tp" slice also holds only its heads' part of each projection (TP x FSDP);
 * {@link #rankWeights} cuts the whole weights into a rank's parts to bind.
 *
 * <p>Why a graph of its own: {@link LlamaDecoder}'s graphs read the weights as inputs, fused ({@code qkv_proj}) and
 * sharded for tensor-parallel inference; a training step needs them as {@link Parameters}. What it reuses:
 * {@link LlamaPrefill#rmsNorm}, {@link LlamaPrefill#rope} and the prompt's rotary tables ({@link LlamaDecoder#promptTables}),
 * and the weights' names are the checkpoint's. The plain Llama architecture only: Gemma's features, mixtures of experts,
 * biases, q/k norms and sliding windows are refused by name.
 *
 * <p>Inputs: {@code tokens} [batch * tokens] (i32), {@code targets} [batch * tokens] (i64, the token after each),
 * {@code cos} and {@code sin} [tokens, rotary_dim] ({@link #tables}). Output: {@code loss}, this rank's mean
 * cross-entropy before the step; with {@code outputStates}, every state after the step under its own name.
 */
public final class LlamaTraining {
    private LlamaTraining() {}

    /** How the {@code dp} ranks hold the weights: each all of them, or each its block of dimension 0 (FSDP). */
    public enum DataParallel { REPLICATED, FULLY_SHARDED }

    /** The data-parallel group: every rank of the world without tensor parallelism, else the mesh axis "dp". */
    public static String dataParallelGroup(int tp) { return tp == 1 ? "world" : DP_AXIS; }

    /** The mesh axes of a data x tensor-parallel world (row-major: rank = dp index * tp + tp index). */
    public static final String DP_AXIS = "dp", TP_AXIS = "tp";

    /**
     * The step for {@code batch} sequences of {@code tokens} tokens on each of {@code dp} ranks, weights kept in
     * {@code master} and computed in {@code compute} (bf16 over f32 for mixed precision; the loss in {@code master}),
     * each rank holding all weights (plain data parallelism).
     */
    public static Graph graph(LlamaConfig c, int batch, int tokens, int dp, DType master, DType compute, Optimizer opt, boolean outputStates) {
        return graph(c, batch, tokens, dp, 1, DataParallel.REPLICATED, master, compute, opt, outputStates);
    }

    /**
     * The step on a {@code dp} x {@code tp} mesh, the weights held as {@code mode} says along "dp". With {@code tp}
     * above 1 each rank of a "tp" slice holds its query and key-value heads' rows of {@code q/k/v_proj}, its MLP rows
     * of {@code gate/up_proj} and the matching columns of {@code o_proj} and {@code down_proj} (Megatron's column- and
     * row-parallel layers, {@code all_reduce(sum)} over "tp" after each), and a tied copy of the embeddings, norms and
     * head ({@link Parameters#tiedOver}). Fully sharded, every weight's (rank-local) dimension 0 must divide by
     * {@code dp} (refused by name otherwise).
     */
    public static Graph graph(LlamaConfig c, int batch, int tokens, int dp, int tp, DataParallel mode, DType master, DType compute, Optimizer opt, boolean outputStates) {
        return graph(c, batch, tokens, dp, tp, mode, master, compute, opt, outputStates, java.util.Set.of());
    }

    /**
     * Like {@link #graph(LlamaConfig, int, int, int, int, DataParallel, DType, DType, Optimizer, boolean)}, with the
     * activations of the decoder layers in {@code recomputeLayers} computed again in the backward pass instead of kept
     * ({@link GraphBuilder#recompute}, a region {@code layer.<l>} each; only the layer's input, the residual stream, is
     * kept): the same losses and gradients bit for bit (in f64 and f32; with half compute, with {@code roundEachOp}), a
     * lower planned peak.
     */
    public static Graph graph(LlamaConfig c, int batch, int tokens, int dp, int tp, DataParallel mode, DType master, DType compute, Optimizer opt,
                              boolean outputStates, java.util.Set<Integer> recomputeLayers) {
        return graph(c, batch, tokens, dp, tp, mode, master, compute, opt, outputStates, recomputeLayers, true);
    }

    /**
     * Like {@link #graph(LlamaConfig, int, int, int, int, DataParallel, DType, DType, Optimizer, boolean, java.util.Set)};
     * with {@code reshardAfterForward} (the default, as FSDP2's) each fully sharded decoder layer that is not recomputed
     * gathers its weights again in the backward pass instead of keeping them from the forward one
     * ({@link GraphBuilder#regather}, a region {@code layer.<l>} each): the same losses and gradients bit for bit, the
     * gathered weights of one layer live at a time rather than of all of them. The embedding, the final norm and the
     * head (the root, used at the forward pass's end and the backward pass's start) are kept, as FSDP2 keeps its root's.
     * No effect on replicated weights.
     */
    public static Graph graph(LlamaConfig c, int batch, int tokens, int dp, int tp, DataParallel mode, DType master, DType compute, Optimizer opt,
                              boolean outputStates, java.util.Set<Integer> recomputeLayers, boolean reshardAfterForward) {
        refuseUnsupported(c, tp);
        for (int l : recomputeLayers)
            if (l < 0 || l >= c.layers()) throw new GraphException("LlamaTraining: recompute layer " + l + " is not a layer of the model's " + c.layers());
        if (batch < 1 || tokens < 1 || dp < 1)
            throw new GraphException("LlamaTraining: batch " + batch + ", tokens " + tokens + " and dp " + dp + " must each be at least 1");
        if (mode == null) throw new GraphException("LlamaTraining: the data-parallel mode is null; give REPLICATED or FULLY_SHARDED");
        GraphBuilder g = tp == 1 ? Gatun.graph("llama_train").world(dp) : Gatun.graph("llama_train").mesh(DP_AXIS, dp, TP_AXIS, tp);
        String dpGroup = dataParallelGroup(tp);
        var all = Parameters.of(g);
        var held = mode == DataParallel.FULLY_SHARDED ? all.fullyShardedOver(dpGroup) : all;
        var params = tp == 1 ? held : held.tiedOver(TP_AXIS);
        var split = tp == 1 ? held : held.shardedOver(TP_AXIS);
        int h = c.hiddenSize(), rd = c.rotaryDim(), b = batch, t = tokens;
        Tensor ids = g.input("tokens", DType.I32, b * t), targets = g.input("targets", DType.I64, b * t);
        Tensor cos = g.input("cos", compute, t, rd).reshape(1, t, 1, rd), sin = g.input("sin", compute, t, rd).reshape(1, t, 1, rd);
        Tensor embed = params.parameter("model.embed_tokens.weight", master, compute, c.vocabSize(), h);
        Tensor x = embed.indexSelect(0, ids);
        for (int l = 0; l < c.layers(); l++) {
            Layer layer = new Layer(c, params, split, "model.layers." + l + ".", master, compute, b, t, tp, cos, sin);
            Tensor in = x;
            if (recomputeLayers.contains(l)) x = g.recompute("layer." + l, () -> layer.apply(in));
            else if (reshardAfterForward && mode == DataParallel.FULLY_SHARDED) x = g.regather("layer." + l, () -> layer.apply(in));
            else x = layer.apply(in);
        }
        Tensor hn = LlamaPrefill.rmsNorm(x, params.parameter("model.norm.weight", master, compute, h), c.rmsNormEps());
        Tensor head = c.tieWordEmbeddings() ? embed : params.parameter("lm_head.weight", master, compute, c.vocabSize(), h);
        Tensor loss = linear(hn, head).cast(master).crossEntropy(targets);
        // every rank of a tp slice computes the same loss; the graph's gradient is of the sum over the ranks, so each
        // slice's loss is differentiated once
        TrainStep step = (dp > 1 ? opt.averageGradients(dpGroup) : opt).step(tp == 1 ? loss : loss.div(tp), all);
        g.output("loss", loss);
        if (outputStates) step.states().forEach(g::output);
        return g.build();
    }

    /** One decoder layer's step: its parameters declared and its forward pass from the residual stream {@code x}. */
    private record Layer(LlamaConfig c, Parameters params, Parameters split, String p, DType master, DType compute, int b, int t, int tp,
                         Tensor cos, Tensor sin) {
        Tensor apply(Tensor x) {
            int h = c.hiddenSize(), d = c.headDim(), nh = c.heads() / tp, kv = c.kvHeads() / tp, ff = c.intermediateSize() / tp;
            Tensor xn = LlamaPrefill.rmsNorm(x, params.parameter(p + "input_layernorm.weight", master, compute, h), c.rmsNormEps());
            Tensor q = LlamaPrefill.rope(linear(xn, split.parameter(p + "self_attn.q_proj.weight", master, compute, nh * d, h)).reshape(b, t, nh, d), cos, sin, d);
            Tensor k = LlamaPrefill.rope(linear(xn, split.parameter(p + "self_attn.k_proj.weight", master, compute, kv * d, h)).reshape(b, t, kv, d), cos, sin, d);
            Tensor v = linear(xn, split.parameter(p + "self_attn.v_proj.weight", master, compute, kv * d, h)).reshape(b, t, kv, d);
            Tensor att = q.transpose(1, 2).flashAttention(k.transpose(1, 2), v.transpose(1, 2), 1 / Math.sqrt(d), true, 0, 0).reshape(b * t, nh * d);
            x = x.add(rowParallel(linear(att, split.parameter(p + "self_attn.o_proj.weight", master, compute, h, nh * d)), tp));
            xn = LlamaPrefill.rmsNorm(x, params.parameter(p + "post_attention_layernorm.weight", master, compute, h), c.rmsNormEps());
            Tensor gate = linear(xn, split.parameter(p + "mlp.gate_proj.weight", master, compute, ff, h));
            Tensor up = linear(xn, split.parameter(p + "mlp.up_proj.weight", master, compute, ff, h));
            x = x.add(rowParallel(linear(gate.silu().mul(up), split.parameter(p + "mlp.down_proj.weight", master, compute, h, ff)), tp));
            return x;
        }
    }

    /** A row-parallel layer's partial sums added over the tensor-parallel ranks. */
    private static Tensor rowParallel(Tensor partial, int tp) { return tp == 1 ? partial : partial.allReduce(dev.gatun.ir.graph.ReduceOp.SUM, TP_AXIS); }

    private static Tensor linear(Tensor x, Tensor w) { return x.matmul(w.transpose(0, 1)); }

    private static void refuseUnsupported(LlamaConfig c, int tp) {
        if (tp < 1 || c.heads() % tp != 0 || c.kvHeads() % tp != 0 || c.intermediateSize() % tp != 0)
            throw new GraphException("LlamaTraining: a tensor-parallel degree of " + tp + " must be at least 1 and divide num_attention_heads (" + c.heads()
                    + "), num_key_value_heads (" + c.kvHeads() + ") and intermediate_size (" + c.intermediateSize() + "); each rank trains whole heads");
        String why = c.gemma() != null ? "Gemma's features" : c.moe() != null ? "a mixture of experts" : c.qkNorm() ? "q/k norms"
                : c.biases().qkv() || c.biases().output() || c.biases().mlp() ? "biases" : c.slidingWindow() > 0 ? "a sliding window"
                : c.fused() ? "fused projections" : null;
        if (why != null)
            throw new GraphException("LlamaTraining: the configuration has " + why + ", which the training graph does not build yet; train the plain Llama architecture");
    }

    /**
     * Rank {@code rank}'s weights to bind in a step {@link #graph} built on a dp x {@code tp} mesh, from the whole weights
     * by name: its heads' part of each projection ({@link #tensorParallelPart}), then its block of that along "dp"
     * where the graph stores them fully sharded ({@link #shard}).
     */
    public static Map<String, NDArray> rankWeights(LlamaConfig c, Graph graph, Map<String, NDArray> whole, int tp, int rank) {
        var parts = new LinkedHashMap<String, NDArray>();
        for (var e : whole.entrySet()) parts.put(e.getKey(), tensorParallelPart(c, e.getKey(), e.getValue(), tp, rank % tp));
        return shard(graph, parts, dataParallelGroup(tp), rank);
    }

    /**
     * Tensor-parallel rank {@code t}'s part of weight {@code name}: rows of its query heads ({@code q_proj}), key-value
     * heads ({@code k/v_proj}) and MLP columns ({@code gate/up_proj}), the matching columns of {@code o_proj} and
     * {@code down_proj}, all of any other weight (a tied copy). A moment of a weight ({@code <weight>.exp_avg}) is cut
     * as its weight.
     */
    public static NDArray tensorParallelPart(LlamaConfig c, String name, NDArray whole, int tp, int t) {
        long q = (long) c.heads() / tp * c.headDim(), kv = (long) c.kvHeads() / tp * c.headDim(), ff = c.intermediateSize() / tp;
        if (tp == 1) return whole;
        String w = name.replaceFirst("\\.(exp_avg|exp_avg_sq|momentum_buffer)$", "");
        if (w.endsWith("self_attn.q_proj.weight")) return whole.slice(0, t * q, (t + 1) * q);
        if (w.endsWith("self_attn.k_proj.weight") || w.endsWith("self_attn.v_proj.weight")) return whole.slice(0, t * kv, (t + 1) * kv);
        if (w.endsWith("mlp.gate_proj.weight") || w.endsWith("mlp.up_proj.weight")) return whole.slice(0, t * ff, (t + 1) * ff);
        if (w.endsWith("self_attn.o_proj.weight")) return whole.slice(1, t * q, (t + 1) * q);
        if (w.endsWith("mlp.down_proj.weight")) return whole.slice(1, t * ff, (t + 1) * ff);
        return whole;
    }

    /**
     * Rank {@code rank}'s states of {@code graph} from the whole weights by name: a weight the graph stores whole is
     * passed as it is, one it stores sharded over {@code group} (FSDP) is cut to the rank's block of dimension 0 (the
     * block of its index in the group).
     */
    public static Map<String, NDArray> shard(Graph graph, Map<String, NDArray> whole, String group, int rank) {
        Integer world = graph.worldSize();
        var pg = group.equals(dev.gatun.ir.graph.ProcessGroup.WORLD_NAME) ? dev.gatun.ir.graph.ProcessGroup.WORLD : graph.groups().get(group);
        if (world == null || pg == null || rank < 0 || rank >= world)
            throw new GraphException("LlamaTraining.shard: rank " + rank + " of group '" + group + "' is not in the graph's world of " + world + " ranks");
        var members = pg.members(world, rank);
        int index = members.indexOf(rank), n = members.size();
        var out = new LinkedHashMap<String, NDArray>();
        for (var e : whole.entrySet()) {
            var in = graph.inputs().get(e.getKey());
            if (in == null) throw new GraphException("LlamaTraining.shard: '" + e.getKey() + "' is not a state of graph " + graph.name());
            long rows = in.type().shape().dim(0).size(), all = e.getValue().shape()[0];
            if (rows == all) out.put(e.getKey(), e.getValue());
            else if (rows * n == all) out.put(e.getKey(), e.getValue().slice(0, index * rows, (index + 1) * rows));
            else throw new GraphException("LlamaTraining.shard: '" + e.getKey() + "' has " + all + " rows, the graph's state " + rows
                    + ", which is neither all of it nor 1/" + n + " of it (group '" + group + "')");
        }
        return out;
    }

    /** The rotary tables {@code cos} and {@code sin} of positions 0 to {@code tokens - 1}, in {@code dtype}. */
    public static Map<String, NDArray> tables(LlamaConfig c, int tokens, DType dtype) {
        return LlamaDecoder.promptTables(c, 1, tokens, tokens, 1, dtype);
    }

    /**
     * Random initial weights by name, in {@code dtype}: the norms ones, every matrix normal with standard deviation
     * {@code std} (transformers' {@code initializer_range}), drawn from {@code seed} in the order the graph declares them.
     */
    public static Map<String, NDArray> initialWeights(Graph graph, long seed, double std, DType dtype) {
        var rnd = new Random(seed);
        var out = new LinkedHashMap<String, NDArray>();
        for (String name : graph.states()) {
            if (name.equals("optimizer.step") || name.endsWith(".exp_avg") || name.endsWith(".exp_avg_sq") || name.endsWith(".momentum_buffer")) continue;
            long[] shape = graph.inputs().get(name).type().shape().sizes();
            double[] v = new double[(int) java.util.Arrays.stream(shape).reduce(1, (a, e) -> a * e)];
            for (int i = 0; i < v.length; i++) v[i] = name.endsWith("norm.weight") ? 1 : rnd.nextGaussian() * std;
            out.put(name, NDArray.of(dtype, v, shape));
        }
        return out;
    }

    /**
     * A fixed batch of {@code sequences} random token sequences ({@code seed}) of {@code tokens + 1} tokens, split over
     * {@code dp} ranks: rank r's {@code tokens} (the first {@code tokens} of each of its sequences) and {@code targets}
     * (the last {@code tokens}).
     */
    public static java.util.List<Map<String, NDArray>> batch(LlamaConfig c, int sequences, int tokens, int dp, long seed) {
        if (sequences % dp != 0) throw new GraphException("LlamaTraining.batch: " + sequences + " sequences do not split evenly over " + dp + " ranks");
        var rnd = new Random(seed);
        int[][] all = new int[sequences][tokens + 1];
        for (int[] s : all) for (int i = 0; i <= tokens; i++) s[i] = rnd.nextInt(c.vocabSize());
        var out = new java.util.ArrayList<Map<String, NDArray>>();
        int per = sequences / dp;
        for (int r = 0; r < dp; r++) {
            int[] ids = new int[per * tokens];
            long[] next = new long[per * tokens];
            for (int s = 0; s < per; s++)
                for (int i = 0; i < tokens; i++) {
                    ids[s * tokens + i] = all[r * per + s][i];
                    next[s * tokens + i] = all[r * per + s][i + 1];
                }
            out.add(Map.of("tokens", NDArray.of(ids, ids.length), "targets", NDArray.of(next, next.length)));
        }
        return out;
    }
}
