package dev.gatun.dsl;

import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.graph.TypeInference;

import java.util.ArrayList;
import java.util.List;

/**
 * The vector-Jacobian product of each op but the pointwise ones ({@link PointwiseGradients}): given a node and the
 * gradient of its result, the gradient of each input that {@link Gradients} asks for, written with the DSL's own ops so
 * the backward pass is an ordinary part of the graph. The rules are PyTorch's: a sum's gradient is expanded back, a
 * mean's divided by the count, an amax or amin splits its gradient evenly among tied elements (as {@code torch.amax});
 * a matrix product's gradient is two products summed over broadcast batch dimensions; views map the gradient back
 * (a slice's is padded with zeros, interleaved with zeros for a step); {@code index_select}, {@code gather} and
 * {@code topk} scatter theirs with {@code scatter_add}; the fused decode attention is recomputed as the ops it fuses
 * and those differentiated; flash_attention's gradient is one fused op ({@code flash_attention_backward}). Collectives
 * transpose: all_reduce(sum) to all_reduce(sum), all_gather to reduce_scatter(sum) and back; with max or min the
 * gradient goes to the ranks holding the result; a broadcast's is a reduce to its root.
 * What has no rule is refused by name ({@link #refuse}).
 */
final class GradientRules {
    private GradientRules() {}

    /** One gradient per input of {@code n} (null where {@code want} is false), given {@code g}, the gradient of {@code n}. */
    static Tensor[] vjp(GraphBuilder graph, String call, Node n, Tensor g, boolean[] want) {
        Tensor[] out = new Tensor[n.inputs().size()];
        switch (n.op()) {
            case Op.Pointwise p -> PointwiseGradients.vjp(graph, p.fn(), n, g, want, out);
            case Op.Cast c -> out[0] = g;
            case Op.Reduce r -> out[0] = reduce(graph, call, r, n, g);
            case Op.Matmul m -> matmul(graph, n, g, want, out);
            case Op.Reshape r -> out[0] = reshape(graph, g, n.input(0).type().shape());
            case Op.Permute p -> out[0] = g.permute(inverse(p.perm()));
            case Op.Slice s -> out[0] = unslice(graph, s, n.input(0).type().shape(), g);
            case Op.Cat c -> uncat(c, n, g, out);
            case Op.Expand e -> out[0] = unbroadcast(graph, g, n.input(0).type().shape());
            case Op.Collective c -> out[0] = collective(graph, call, c, n, g);
            case Op.Registered r -> registered(graph, call, r, n, g, want, out);
            case Op.Input in -> { }
            case Op.Constant c -> { }
            case Op.Custom c -> throw refuse(call, n, "user op '" + c.name() + "' declares no gradient");
            case Op.CustomOutput o -> throw refuse(call, n, "output " + o.index() + " of " + n.input(0).op().opName() + " has no gradient");
        }
        return out;
    }

    /**
     * The fused attention's gradient: the attention recomputed from its inputs as the ops it fuses (the scaled scores'
     * product, the positions after the one given masked with -inf by a {@code where}, softmax, the values' product) in
     * the inputs' dtype, and that differentiated with {@code g} as its seed. A tensor passed twice (q as the values too)
     * gets its whole gradient once.
     */
    private static void attention(GraphBuilder graph, String call, double scale, Node n, Tensor g, boolean[] want, Tensor[] out) {
        Tensor q = graph.wrap(n.input(0)), kT = graph.wrap(n.input(1)), v = graph.wrap(n.input(2)), at = graph.wrap(n.input(3));
        long positions = kT.shape().dim(2).size();
        Tensor scores = q.matmul(kT).mul(scale);
        Tensor seen = graph.arange(at.dtype(), positions).le(reshape(graph, at, Shape.of(1)));
        Tensor y = seen.where(scores, graph.scalar(Double.NEGATIVE_INFINITY, scores.dtype())).softmax(-1).matmul(v);
        var distinct = new java.util.LinkedHashMap<Node, Integer>();
        for (int k = 0; k < 3; k++) if (want[k]) distinct.putIfAbsent(n.input(k), k);
        Tensor[] wrt = distinct.keySet().stream().map(graph::wrap).toArray(Tensor[]::new);
        Tensor[] grads = Gradients.of(graph, call, y, g, wrt);
        int i = 0;
        for (int k : distinct.values()) out[k] = grads[i++];
    }

    /**
     * flash_attention's gradient: one {@code flash_attention_backward} ({@link dev.gatun.ir.ops.FlashAttentionBackward},
     * flash attention 2's backward pass) from q, k, v, the forward's result and {@code g}, every case the forward takes
     * (causal, window, soft cap, grouped-query heads): it recomputes the scores tile by tile and never holds the [T, S]
     * probabilities, where differentiating the attention recomputed as the ops it fuses held four or five of them per
     * layer. Its gradients come in float32 (f64 for f64), dk and dv as each query head's part, summed here over the
     * query heads sharing a key-value head, and are cast to the dtype here. A tensor passed twice (k as v too) gets both
     * contributions, which {@link Gradients} adds.
     */
    private static void flashAttention(GraphBuilder graph, Op.Registered r, Node n, Tensor g, boolean[] want, Tensor[] out) {
        Tensor q = graph.wrap(n.input(0)), k = graph.wrap(n.input(1)), v = graph.wrap(n.input(2));
        // the forward's own attributes (scale, causal, window, softcap): the backward op takes the same ones
        var grads = graph.apply(dev.gatun.ir.ops.FlashAttentionBackward.SPEC.name(), r.attrs().values(), q, k, v, graph.wrap(n), g);
        if (want[0]) out[0] = inDtype(grads.get(0), q.dtype());
        if (want[1]) out[1] = groupSum(grads.get(1), k);
        if (want[2]) out[2] = groupSum(grads.get(2), v);
    }

    /** Each query head's part [B, Hq, S, d] summed over the heads sharing a key-value head: x's gradient, in its dtype. */
    private static Tensor groupSum(Tensor parts, Tensor x) {
        long[] ps = parts.shape().sizes(), xs = x.shape().sizes();
        Tensor whole = ps[1] == xs[1] ? parts : parts.reshape(xs[0], xs[1], ps[1] / xs[1], xs[2], xs[3]).sum(2);
        return inDtype(whole, x.dtype());
    }

    private static Tensor inDtype(Tensor t, DType d) { return t.dtype() == d ? t : t.cast(d); }

    /** A {@link GraphException} naming the call, the op and the node, with why and what to do instead. */
    static GraphException refuse(String call, Node n, String why) {
        return new GraphException(call + ": cannot differentiate through " + n.op().opName() + " " + n.describe() + ": " + why);
    }

    static Tensor reshape(GraphBuilder graph, Tensor t, Shape shape) {
        return t.shape().equals(shape) ? t : graph.op(new Op.Reshape(shape), t);
    }

    static Tensor expand(GraphBuilder graph, Tensor t, Shape shape) {
        return t.shape().equals(shape) ? t : graph.op(new Op.Expand(shape), t);
    }

    /** {@code t} (of a shape {@code shape} broadcasts to) summed over the broadcast dimensions back to {@code shape}. */
    static Tensor unbroadcast(GraphBuilder graph, Tensor t, Shape shape) {
        Shape s = t.shape();
        if (s.equals(shape)) return t;
        int lead = s.rank() - shape.rank();
        var dims = new ArrayList<Integer>();
        for (int d = 0; d < lead; d++) dims.add(d);
        for (int d = 0; d < shape.rank(); d++)
            if (!shape.dim(d).equals(s.dim(lead + d))) dims.add(lead + d);
        Tensor summed = dims.isEmpty() ? t : t.sum(dims.stream().mapToInt(Integer::intValue).toArray());
        return reshape(graph, summed, shape);
    }

    /** {@code shape} with size 1 at {@code dims}: where a reduction's result sits in its input with keepdim. */
    private static Shape keptShape(Shape shape, List<Integer> dims) {
        var out = new ArrayList<>(shape.dims());
        for (int d : dims) out.set(d, Dim.of(1));
        return new Shape(out);
    }

    private static Tensor reduce(GraphBuilder graph, String call, Op.Reduce r, Node n, Tensor g) {
        Node x = n.input(0);
        Shape xs = x.type().shape();
        List<Integer> dims = TypeInference.reductionDims(r.opName(), x, r.dims());
        Shape kept = keptShape(xs, dims);
        Tensor spread = expand(graph, reshape(graph, g, kept), xs);
        return switch (r.fn()) {
            case SUM -> spread;
            case MEAN -> {
                long count = 1;
                for (int d : dims) {
                    if (!xs.dim(d).isStatic())
                        throw refuse(call, n, "the mean is over the symbolic dimension " + xs.dim(d) + "; its gradient needs a static count (use a sum and"
                                + " divide by the count)");
                    count *= xs.dim(d).size();
                }
                yield spread.div(count);
            }
            case MAX, MIN -> {
                // torch.amax / amin: the gradient is split evenly among the elements equal to the result
                Tensor xt = graph.wrap(x), y = expand(graph, reshape(graph, graph.wrap(n), kept), xs);
                Tensor hit = xt.eq(y).cast(g.dtype());
                Tensor ties = hit.sum(true, dims.stream().mapToInt(Integer::intValue).toArray());
                yield hit.mul(expand(graph, reshape(graph, g, kept).div(ties), xs));
            }
        };
    }

    /** C = A B: dA = dC B^T and dB = A^T dC, each summed over the batch dimensions its operand was broadcast in. */
    private static void matmul(GraphBuilder graph, Node n, Tensor g, boolean[] want, Tensor[] out) {
        Tensor a = graph.wrap(n.input(0)), b = graph.wrap(n.input(1));
        if (want[0]) out[0] = unbroadcast(graph, g.matmul(b.t()), a.shape());
        if (want[1]) out[1] = unbroadcast(graph, a.t().matmul(g), b.shape());
    }

    private static int[] inverse(List<Integer> perm) {
        int r = perm.size();
        int[] inv = new int[r];
        for (int i = 0; i < r; i++) inv[perm.get(i) < 0 ? perm.get(i) + r : perm.get(i)] = i;
        return inv;
    }

    /**
     * The gradient of {@code x.slice(dim, start, end, step)}: {@code g} put back at its positions of a tensor of x's
     * shape, zeros elsewhere. A step s interleaves s - 1 zeros after each element first (a reshape, a cat with zeros,
     * a reshape back), then zeros before and after pad it to x's size: only cat, reshape and slice, which every backend
     * runs.
     */
    private static Tensor unslice(GraphBuilder graph, Op.Slice s, Shape xs, Tensor g) {
        int d = s.dim() < 0 ? s.dim() + xs.rank() : s.dim();
        long size = xs.dim(d).size(), n = g.shape().dim(d).size();
        if (n == 0) return Gradients.zeros(graph, xs, g);
        Tensor spread = g;
        if (s.step() > 1) {
            var one = new ArrayList<>(g.shape().dims());
            one.add(d + 1, Dim.of(1));
            var gaps = new ArrayList<>(one);
            gaps.set(d + 1, Dim.of(s.step() - 1));
            Tensor wide = graph.cat(d + 1, reshape(graph, g, new Shape(one)), Gradients.zeros(graph, new Shape(gaps), g));
            var flat = new ArrayList<>(g.shape().dims());
            flat.set(d, Dim.of(n * s.step()));
            spread = reshape(graph, wide, new Shape(flat)).slice(d, 0, (n - 1) * s.step() + 1);
        }
        long len = (n - 1) * s.step() + 1, after = size - s.start() - len;
        var parts = new ArrayList<Tensor>();
        if (s.start() > 0) parts.add(Gradients.zeros(graph, withDim(xs, d, s.start()), g));
        parts.add(spread);
        if (after > 0) parts.add(Gradients.zeros(graph, withDim(xs, d, after), g));
        return parts.size() == 1 ? spread : graph.cat(d, parts);
    }

    private static Shape withDim(Shape s, int d, long size) {
        var dims = new ArrayList<>(s.dims());
        dims.set(d, Dim.of(size));
        return new Shape(dims);
    }

    private static void uncat(Op.Cat c, Node n, Tensor g, Tensor[] out) {
        int d = TypeInference.catDim("cat", c.dim(), n.type().rank());
        long at = 0;
        for (int k = 0; k < out.length; k++) {
            long size = n.input(k).type().shape().dim(d).size();
            out[k] = g.slice(d, at, at + size);
            at += size;
        }
    }

    /**
     * Collectives in an SPMD graph: the gradient is that of the sum over ranks of each rank's output, so each one's
     * transpose moves the gradients back to the ranks their inputs came from.
     */
    private static Tensor collective(GraphBuilder graph, String call, Op.Collective c, Node n, Tensor g) {
        Tensor x = graph.wrap(n.input(0)), y = graph.wrap(n);
        return switch (c.kind()) {
            case ALL_REDUCE -> switch (c.reduceOp()) {
                case SUM, AVG -> g.allReduce(c.reduceOp(), c.group());
                case MAX, MIN -> extremum(x.eq(y), g.allReduce(ReduceOp.SUM, c.group()), c.group(), g);
            };
            case ALL_GATHER -> g.reduceScatter(ReduceOp.SUM, c.group());
            case REDUCE_SCATTER -> switch (c.reduceOp()) {
                case SUM -> g.allGather(c.group());
                case AVG -> {
                    Tensor all = g.allGather(c.group());
                    long mine = g.shape().dim(0).size();
                    yield mine == 0 ? all : all.div((double) all.shape().dim(0).size() / mine);
                }
                case MAX, MIN -> extremum(x.eq(y.allGather(c.group())), g.allGather(c.group()), c.group(), g);
            };
            case BROADCAST -> broadcast(graph, call, c, n, g);
            // an even all_to_all is a permutation of the ranks' parts whose inverse is itself: part j of rank i went to
            // rank j as its part i, and the same collective sends that part's gradient back
            case ALL_TO_ALL -> {
                if (c.uneven()) throw refuse(call, n, "an all_to_all with row counts read at run time has no gradient rule yet");
                yield g.allToAll(c.group());
            }
        };
    }

    /**
     * A broadcast's gradient is a reduce to the root: the world's sum of {@code g} on the root, zeros elsewhere. Which
     * rank of the group this is comes from a reduce_scatter(sum) of {@code 0, 1, ..., n - 1}: group rank i receives
     * {@code n * i}. That needs the group's size and every rank in it (the world declared, or a mesh axis).
     */
    private static Tensor broadcast(GraphBuilder graph, String call, Op.Collective c, Node n, Tensor g) {
        var group = graph.group(c.group());
        Integer world = graph.worldSize();
        if (world == null || !group.coversEveryRank(world))
            throw refuse(call, n, world == null ? "its gradient needs the group's size; declare the world size (g.world(n)) or a mesh"
                    : "group '" + c.group() + "' leaves out ranks, so no reduce_scatter can tell its ranks apart; broadcast along a mesh axis"
                    + " or the world");
        int size = group.size(world);
        Tensor me = graph.arange(dev.gatun.ir.DType.FLOAT32, size).reduceScatter(ReduceOp.SUM, c.group());
        Tensor root = reshape(graph, me.eq((double) size * c.root()), Shape.SCALAR);
        return root.where(g.allReduce(ReduceOp.SUM, c.group()), graph.scalar(0, g.dtype()));
    }

    /**
     * An all_reduce or reduce_scatter with max or min: the world's gradient of each element ({@code total}) goes to the
     * ranks whose element is the result ({@code hit}), split evenly among tied ranks (as {@code torch.amax} splits
     * ties), so the gradient is {@code hit * total / (ranks hit)}.
     */
    private static Tensor extremum(Tensor hit, Tensor total, String group, Tensor g) {
        Tensor mask = hit.cast(g.dtype());
        return mask.mul(total).div(mask.allReduce(ReduceOp.SUM, group));
    }

    private static void registered(GraphBuilder graph, String call, Op.Registered r, Node n, Tensor g, boolean[] want, Tensor[] out) {
        Tensor x = graph.wrap(n.input(0));
        switch (r.opName()) {
            case "index_select" -> out[0] = indexSelect(graph, call, n, g);
            case "gather" -> {
                int dim = x.shape().normalizeDim((int) r.attrs().integer("dim"));   // checked when the graph was built
                Tensor index = graph.wrap(n.input(1));
                out[0] = picksOne(x.shape(), index.shape(), dim) ? oneHot(graph, x.shape(), index, dim, g)
                        : Gradients.zeros(graph, x.shape(), g).scatterAdd(dim, index, g);
            }
            case "scatter_add" -> {
                int dim = (int) r.attrs().integer("dim");
                if (want[0]) out[0] = g;
                if (want[2]) out[2] = pad(graph, g.gather(dim, graph.wrap(n.input(1))), n.input(2).type().shape());
            }
            case "topk" -> out[0] = Gradients.zeros(graph, x.shape(), g).scatterAdd(-1, graph.wrap(secondOutput(graph, call, n)), g);
            case "attention" -> attention(graph, call, r.attrs().real("scale"), n, g, want, out);
            case "flash_attention" -> flashAttention(graph, r, n, g, want, out);
            case "update_slice" -> throw refuse(call, n, "update_slice writes at a position read at run time and has no gradient;"
                    + " build the tensor with cat instead");
            case "expert_matmul" -> throw refuse(call, n, "expert_matmul has no gradient rule yet; for training, write the layer densely"
                    + " (every expert's product weighted by the routing, as MixtureOfExperts' prefill form does)");
            default -> throw refuse(call, n, "op '" + r.opName() + "' has no gradient rule");
        }
    }

    /**
     * Whether a gather picks one element along {@code dim} (not negative; static shapes, the index of size 1 there and of x's size
     * everywhere else: cross-entropy's pick of each target's log-probability): its gradient is then a selection
     * ({@link #oneHot}), where a scatter into zeros would write an x-sized buffer twice and fuse with nothing.
     */
    private static boolean picksOne(Shape x, Shape index, int dim) {
        if (!x.isStatic() || !index.isStatic() || x.rank() != index.rank()) return false;
        for (int d = 0; d < x.rank(); d++)
            if (index.dim(d).size() != (d == dim ? 1 : x.dim(d).size())) return false;
        return true;
    }

    /**
     * {@code where(arange == index, g, 0)}, broadcast along {@code dim}: each element of x gets g where the index picked
     * it, else zero; a pointwise loop that fuses into the kernels reading the gradient.
     */
    private static Tensor oneHot(GraphBuilder graph, Shape x, Tensor index, int dim, Tensor g) {
        var along = new ArrayList<Dim>();
        for (int d = 0; d < x.rank(); d++) along.add(d == dim ? x.dim(d) : Dim.of(1));
        Tensor positions = reshape(graph, graph.arange(index.dtype(), x.dim(dim).size()), new Shape(along));
        return positions.eq(index).where(g, graph.scalar(0, g.dtype()));
    }

    /** The table's gradient: each row of {@code g} added to the row its index picked. */
    private static Tensor indexSelect(GraphBuilder graph, String call, Node n, Tensor g) {
        Shape table = n.input(0).type().shape();
        Tensor ids = graph.wrap(n.input(1));
        Dim count;
        if (ids.shape().isStatic()) count = Dim.of(ids.shape().numel());
        else if (ids.shape().rank() == 1) count = ids.shape().dim(0);
        else throw refuse(call, n, "its indices " + ids.describe() + " have symbolic dimensions; reshape them to one dimension first");
        var rows = new ArrayList<Dim>(table.dims());
        rows.set(0, count);
        var column = new ArrayList<Dim>();
        column.add(count);
        for (int d = 1; d < table.rank(); d++) column.add(Dim.of(1));
        Tensor index = expand(graph, reshape(graph, ids, new Shape(column)), new Shape(rows));
        return Gradients.zeros(graph, table, g).scatterAdd(0, index, reshape(graph, g, new Shape(rows)));
    }

    /** {@code t} padded with zeros at the end of each dimension to {@code shape} (which is no smaller anywhere). */
    private static Tensor pad(GraphBuilder graph, Tensor t, Shape shape) {
        for (int d = 0; d < shape.rank(); d++) {
            long want = shape.dim(d).size(), have = t.shape().dim(d).size();
            if (want > have) t = graph.cat(d, t, Gradients.zeros(graph, withDim(t.shape(), d, want - have), t));
        }
        return t;
    }

    private static Node secondOutput(GraphBuilder graph, String call, Node n) {
        for (int i = n.id() + 1; ; i++) {
            Node m = graph.node(i);
            if (m.op() instanceof Op.CustomOutput o && o.index() == 1 && m.input(0) == n) return m;
        }
    }
}
