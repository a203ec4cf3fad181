package dev.gatun.dsl;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.ir.graph.ReduceOp;

import java.util.ArrayList;
import java.util.List;

/**
 * A typed handle to a value of a graph under construction. Every method adds an op to the same graph and
 * checks shapes and dtypes at the call site; scalars broadcast.
 */
public final class Tensor {
    private final GraphBuilder graph;
    private final Node node;

    Tensor(GraphBuilder graph, Node node) {
        this.graph = graph;
        this.node = node;
    }

    public Node node() { return node; }
    public GraphBuilder graph() { return graph; }
    public TensorType type() { return node.type(); }
    public DType dtype() { return node.type().dtype(); }
    public Shape shape() { return node.type().shape(); }
    public int rank() { return node.type().rank(); }

    // ---- pointwise, binary
    public Tensor add(Tensor o) { return binary(PointwiseFn.ADD, o); }
    public Tensor add(double s) { return binary(PointwiseFn.ADD, scalar(s)); }
    public Tensor sub(Tensor o) { return binary(PointwiseFn.SUB, o); }
    public Tensor sub(double s) { return binary(PointwiseFn.SUB, scalar(s)); }
    public Tensor mul(Tensor o) { return binary(PointwiseFn.MUL, o); }
    public Tensor mul(double s) { return binary(PointwiseFn.MUL, scalar(s)); }
    public Tensor div(Tensor o) { return binary(PointwiseFn.DIV, o); }
    public Tensor div(double s) { return binary(PointwiseFn.DIV, scalar(s)); }
    public Tensor pow(Tensor o) { return binary(PointwiseFn.POW, o); }
    public Tensor pow(double s) { return binary(PointwiseFn.POW, scalar(s)); }
    public Tensor maximum(Tensor o) { return binary(PointwiseFn.MAXIMUM, o); }
    public Tensor maximum(double s) { return binary(PointwiseFn.MAXIMUM, scalar(s)); }
    public Tensor minimum(Tensor o) { return binary(PointwiseFn.MINIMUM, o); }
    public Tensor minimum(double s) { return binary(PointwiseFn.MINIMUM, scalar(s)); }
    public Tensor eq(Tensor o) { return binary(PointwiseFn.EQ, o); }
    public Tensor eq(double s) { return binary(PointwiseFn.EQ, scalar(s)); }
    public Tensor ne(Tensor o) { return binary(PointwiseFn.NE, o); }
    public Tensor ne(double s) { return binary(PointwiseFn.NE, scalar(s)); }
    public Tensor lt(Tensor o) { return binary(PointwiseFn.LT, o); }
    public Tensor lt(double s) { return binary(PointwiseFn.LT, scalar(s)); }
    public Tensor le(Tensor o) { return binary(PointwiseFn.LE, o); }
    public Tensor le(double s) { return binary(PointwiseFn.LE, scalar(s)); }
    public Tensor gt(Tensor o) { return binary(PointwiseFn.GT, o); }
    public Tensor gt(double s) { return binary(PointwiseFn.GT, scalar(s)); }
    public Tensor ge(Tensor o) { return binary(PointwiseFn.GE, o); }
    public Tensor ge(double s) { return binary(PointwiseFn.GE, scalar(s)); }

    /** {@code this ? a : b} elementwise; this tensor must be bool. */
    public Tensor where(Tensor a, Tensor b) { return graph.op(new Op.Pointwise(PointwiseFn.WHERE), this, a, b); }
    public Tensor where(double a, double b) { return where(graph.scalar(a, DType.FLOAT32), graph.scalar(b, DType.FLOAT32)); }

    // ---- pointwise, unary
    public Tensor neg() { return unary(PointwiseFn.NEG); }
    public Tensor abs() { return unary(PointwiseFn.ABS); }
    public Tensor exp() { return unary(PointwiseFn.EXP); }
    public Tensor log() { return unary(PointwiseFn.LOG); }
    public Tensor sqrt() { return unary(PointwiseFn.SQRT); }
    public Tensor rsqrt() { return unary(PointwiseFn.RSQRT); }
    public Tensor sin() { return unary(PointwiseFn.SIN); }
    public Tensor cos() { return unary(PointwiseFn.COS); }
    public Tensor tanh() { return unary(PointwiseFn.TANH); }
    public Tensor sigmoid() { return unary(PointwiseFn.SIGMOID); }
    public Tensor relu() { return unary(PointwiseFn.RELU); }
    public Tensor gelu() { return unary(PointwiseFn.GELU); }
    public Tensor silu() { return unary(PointwiseFn.SILU); }

    /** A materialized copy (contiguous, its own storage). */
    public Tensor copy() { return unary(PointwiseFn.IDENTITY); }

    public Tensor cast(DType to) { return graph.op(new Op.Cast(to), this); }

    // ---- reductions (no dims: all dims)
    public Tensor sum(int... dims) { return reduce(ReduceFn.SUM, false, dims); }
    public Tensor sum(boolean keepdim, int... dims) { return reduce(ReduceFn.SUM, keepdim, dims); }
    public Tensor mean(int... dims) { return reduce(ReduceFn.MEAN, false, dims); }
    public Tensor mean(boolean keepdim, int... dims) { return reduce(ReduceFn.MEAN, keepdim, dims); }
    public Tensor max(int... dims) { return reduce(ReduceFn.MAX, false, dims); }
    public Tensor max(boolean keepdim, int... dims) { return reduce(ReduceFn.MAX, keepdim, dims); }
    public Tensor min(int... dims) { return reduce(ReduceFn.MIN, false, dims); }
    public Tensor min(boolean keepdim, int... dims) { return reduce(ReduceFn.MIN, keepdim, dims); }

    /**
     * {@code torch.softmax(x, dim)}, written as the DSL's ops (the row's max subtracted, exp, divided by the row's
     * sum), which the planner fuses into one kernel per row and {@link GraphBuilder#grad} differentiates. The max only
     * shifts the exponentials (any shift gives the same value), so it is {@link #detach}ed, as in {@link #logSoftmax}:
     * the gradient is PyTorch's {@code softmax * (dy - sum(dy * softmax))}, with no share of it sent through the max to
     * the row's largest elements (zero in exact arithmetic, and a mask the size of x to keep from the forward pass to
     * the backward one: in an attention's backward, a tensor of heads x tokens x tokens).
     */
    public Tensor softmax(int dim) {
        Tensor e = sub(max(true, dim).detach()).exp();
        return e.div(e.sum(true, dim));
    }

    /**
     * {@code torch.log_softmax(x, dim)}: {@code x - max - log(sum(exp(x - max)))}, without the overflow of log(softmax).
     * The max only shifts the exponentials (any shift gives the same value), so it is {@link #detach}ed: the gradient is
     * PyTorch's {@code dy - softmax * sum(dy)}, with no split of a gradient among the row's largest elements (which would
     * keep a mask of them, the size of x, from the forward pass to the backward one).
     */
    public Tensor logSoftmax(int dim) {
        Tensor shifted = sub(max(true, dim).detach());
        return shifted.sub(shifted.exp().sum(true, dim).log());
    }

    /**
     * {@code log(sum(exp(x), dim))} with the dimension kept, computed as {@code max + log(sum(exp(x - max)))} (no
     * overflow; the max {@link #detach}ed, as in {@link #logSoftmax}): its gradient is {@code softmax(x)}.
     */
    public Tensor logSumExp(int dim) {
        Tensor m = max(true, dim).detach();
        return m.add(sub(m).exp().sum(true, dim).log());
    }

    /**
     * This tensor's value, as a node of its own that no gradient passes through ({@code torch.Tensor.detach}): a
     * {@link GraphBuilder#grad} treats it as a constant. A view of this tensor (no copy).
     */
    public Tensor detach() { return graph.detach(this); }

    /**
     * {@code torch.nn.functional.cross_entropy(logits, targets)} with the default mean reduction: these logits
     * {@code [..., C]} (floating) and integer class {@code targets} (i32 or i64) of the logits' shape without the last
     * dimension; the mean over the targets of {@code -log_softmax(logits)[target]}, a scalar, computed as the mean of
     * {@code logSumExp(logits) - logits[target]}: nothing of the logits' size is kept for the loss, and the backward pass
     * needs only the exponentials ({@code softmax - one_hot(target)}, over the count). A target outside
     * {@code [0, C)} fails the call (no ignore_index, no label smoothing, no class weights).
     */
    public Tensor crossEntropy(Tensor targets) {
        String call = "crossEntropy(" + describe() + ", " + (targets == null ? "null" : targets.describe()) + ")";
        if (targets == null) throw new dev.gatun.ir.GraphException(call + ": the targets are null");
        if (!dtype().isFloating()) throw new dev.gatun.ir.GraphException(call + ": the logits are " + dtype() + "; they must be floating");
        if (targets.dtype() != DType.INT32 && targets.dtype() != DType.INT64)
            throw new dev.gatun.ir.GraphException(call + ": the targets are " + targets.dtype() + "; they must be class indices, i64 (or i32)");
        if (rank() < 1) throw new dev.gatun.ir.GraphException(call + ": the logits are a scalar; they need a last dimension of classes");
        var want = new Shape(shape().dims().subList(0, rank() - 1));
        if (!targets.shape().equals(want))
            throw new dev.gatun.ir.GraphException(call + ": the targets have shape " + targets.shape() + " but must have the logits' shape without"
                    + " the last (class) dimension, " + want);
        var withOne = new ArrayList<>(targets.shape().dims());
        withOne.add(dev.gatun.ir.Dim.of(1));
        Tensor index = graph.op(new Op.Reshape(new Shape(withOne)), targets);
        return logSumExp(-1).sub(targetLogit(index)).mean();
    }

    /**
     * Each row's logit at its target, {@code x.gather(-1, index)}; where these logits are a widening cast of narrower
     * floats (bf16 logits cast to f32), picked from those and then cast (the same values): the pick reads the logits
     * the cast read, so no wide copy of them is made for it.
     */
    private Tensor targetLogit(Tensor index) {
        if (node.op() instanceof Op.Cast && node.input(0).type().dtype().isFloating()
                && node.input(0).type().dtype().byteSize() < dtype().byteSize())
            return graph.wrap(node.input(0)).gather(-1, index).cast(dtype());
        return gather(-1, index);
    }

    public Tensor matmul(Tensor o) { return graph.op(new Op.Matmul(), this, o); }

    /**
     * The i64 position of the largest element along the last dimension ({@code dim} -1 or rank - 1): greedy sampling.
     * The first of equal largest elements wins; a NaN counts as the largest, as in PyTorch.
     */
    public Tensor argmax(int dim) { return graph.apply("argmax", java.util.Map.of("dim", dim), this).getFirst(); }

    /**
     * The {@code k} largest elements along the last dimension, largest first, and their positions (i64), as
     * {@code torch.topk(x, k)} on a CPU: of equal elements the lower index first, a NaN above every number. The last
     * dimension must be static and k 1 to its size. Every backend gives the same values and positions
     * ({@link dev.gatun.ir.ops.TopK}).
     */
    public TopK topk(int k) {
        var out = graph.apply("topk", java.util.Map.of("k", k), this);
        return new TopK(out.get(0), out.get(1));
    }

    /**
     * Scaled dot-product attention of a whole sequence, this tensor the queries [B, Hq, T, d], with keys and values
     * [B, Hkv, S, d] (Hq a multiple of Hkv: grouped-query attention without copies): {@code softmax(scale * q kT) v} per
     * head, the scores never stored, the result token-major [B, T, Hq, d]. {@code causal}: query i stands at position
     * S - T + i and sees the keys up to it; {@code window} (0: none) keeps only the last {@code window} of those;
     * {@code softcap} (0: none) caps each scaled score as {@code softcap * tanh(s / softcap)}. See
     * {@link dev.gatun.ir.ops.FlashAttention}.
     */
    public Tensor flashAttention(Tensor k, Tensor v, double scale, boolean causal, int window, double softcap) {
        return graph.apply("flash_attention", java.util.Map.of("scale", scale, "causal", causal ? 1 : 0, "window", window, "softcap", softcap), this, k, v).getFirst();
    }

    /** {@link #argmaxAcrossRanks(String)} over the group "world". */
    public Tensor argmaxAcrossRanks() { return argmaxAcrossRanks(ProcessGroup.WORLD_NAME); }

    /**
     * The argmax over the last dimension of a tensor split across the ranks of {@code group} by that dimension: this
     * tensor is one rank's shard, member k of the group holding columns {@code [k * s, (k + 1) * s)} of the whole
     * (s: this shard's width, the same on every member). The result (i64, the other dimensions) is the position in the
     * whole, the same on every member, and exactly what {@link #argmax} of the whole gives: the first of equal largest
     * elements, a NaN above every number (the first NaN wins). Each rank takes its shard's argmax and the value there;
     * one all-gather of the (value, position) pairs (as float64: exact for every floating dtype and for positions
     * below 2^53) brings every member's, and the argmax of the members' values picks the member (the first of equal
     * values: the lowest positions), whose position is the answer. The leading dimensions must be static.
     */
    public Tensor argmaxAcrossRanks(String group) {
        String call = "argmaxAcrossRanks(" + describe() + ")";
        if (rank() < 1) throw new dev.gatun.ir.GraphException(call + ": a scalar has no dimension to search");
        if (!dtype().isFloating()) throw new dev.gatun.ir.GraphException(call + ": the input is " + dtype() + "; it must be a floating dtype");
        if (!shape().isStatic()) throw new dev.gatun.ir.GraphException(call + ": the shape " + shape() + " must be static");
        long[] sizes = shape().sizes();
        long s = sizes[sizes.length - 1], n = 1;
        for (int i = 0; i < sizes.length - 1; i++) n *= sizes[i];
        if (s == 0) throw new dev.gatun.ir.GraphException(call + ": the last dimension is empty; there is no largest element");
        Tensor rows = reshape(n, s);
        Tensor local = rows.argmax(-1);                                                       // [n] i64, within the shard
        // the value at it, read by position (exactly the element the argmax chose, a NaN included)
        Tensor value = rows.reshape(n * s, 1).indexSelect(0, local.add(graph.arange(DType.INT64, n).mul(s)));   // [n, 1]
        Tensor pairs = value.cast(DType.FLOAT64).cat(1, local.reshape(n, 1).cast(DType.FLOAT64)).allGather(group);   // [members * n, 2]
        long members = pairs.shape().sizes()[0] / n;
        Tensor values = pairs.slice(1, 0, 1).reshape(members, n).cast(dtype());               // exact: back to this dtype
        Tensor winner = values.transpose(0, 1).argmax(-1);                                     // [n]: the member, first of equals
        Tensor global = pairs.slice(1, 1, 2).reshape(members, n).cast(DType.INT64)
                .add(graph.arange(DType.INT64, members).mul(s).reshape(members, 1));           // [members, n] positions in the whole
        Tensor picked = global.reshape(members * n, 1).indexSelect(0, winner.mul(n).add(graph.arange(DType.INT64, n)));
        return picked.reshape(java.util.Arrays.stream(sizes, 0, sizes.length - 1).boxed().toArray());
    }

    /** What {@link #topk} gives: the values, in this tensor's dtype, and their i64 positions along the last dimension. */
    public record TopK(Tensor values, Tensor indices) {}

    /**
     * One token drawn from each row of these logits [B, V] (f32, f16 or bf16) on the device, as i64 [B]: temperature,
     * top-k, top-p, min-p and a repetition penalty from {@code params} [B, 5] f32 (in that order, per row, read at run
     * time: they change without a new compile), Gumbel noise hashed from each row's {@code seeds} [B] i64 and
     * {@code steps} (i32 or i64, one value or one a row), the penalty on the tokens of {@code context} [B, H] (i32 or
     * i64, -1 for none). Temperature 0 is argmax. The same seed and step draw the same token on every backend; see
     * {@link dev.gatun.ir.ops.Sample} for the rule.
     */
    public Tensor sample(Tensor params, Tensor seeds, Tensor steps, Tensor context) {
        return graph.apply("sample", java.util.Map.of(), this, params, seeds, steps, context).getFirst();
    }

    /**
     * Attention of these queries [B, R, d] (one query position, R rows: the query heads sharing a key-value head, say)
     * over a cache of {@code S} positions: {@code keysT} [B, d, S] (the keys transposed, as a decode step keeps them),
     * {@code values} [B, S, d]; {@code softmax(scale * q keysT) values} over the positions 0 to {@code position}
     * inclusive (an i32 or i64 one-element tensor read at run time), the later ones masked. One step instead of the
     * scores' product, the mask, the softmax and the weighted values' product, with float32 sums rounded once; a
     * position outside the cache fails the call. For a prompt's causal attention, compose those ops instead.
     */
    public Tensor attention(Tensor keysT, Tensor values, Tensor position, double scale) {
        return graph.apply("attention", java.util.Map.of("scale", scale), this, keysT, values, position).getFirst();
    }

    /**
     * {@code dynamic_update_slice}: this tensor with {@code update} written along {@code dim} from the position
     * {@code start} holds at run time (an i32 or i64 tensor of one element), as {@code jax.lax.dynamic_update_slice}
     * along one dimension or {@code x.index_copy_(dim, arange(start, start + n), update)} in PyTorch. The update has
     * this tensor's dtype and rank and its sizes outside {@code dim}. A start where the update does not fit fails the
     * call with a message naming the op, on every backend (no clamping, no write elsewhere). On a state
     * ({@link GraphBuilder#state}) it writes in place and the state keeps the result; read the result, not the state,
     * after it (the graph refuses a read of the state's old contents). On anything else it writes a copy.
     */
    public Tensor updateSlice(int dim, Tensor update, Tensor start) {
        return graph.apply("update_slice", java.util.Map.of("dim", dim), this, update, start).getFirst();
    }

    /**
     * The rows of this table at {@code indices} (i32 or i64, any shape), along dimension 0: an embedding lookup,
     * {@code torch.index_select(table, 0, indices)} for 1-D indices, {@code table[indices]} in general. Only
     * dimension 0 is supported.
     */
    public Tensor indexSelect(int dim, Tensor indices) {
        if (dim != 0) throw new dev.gatun.ir.GraphException("index_select(" + node.describe() + "): only dimension 0 is supported, not " + dim);
        return graph.apply("index_select", java.util.Map.of(), this, indices).getFirst();
    }

    /**
     * {@code torch.gather(this, dim, index)}: the elements of this tensor picked along {@code dim} by {@code index}
     * (i64 or i32, this tensor's rank, no larger than it in every other dimension); the result has the index's shape,
     * {@code out[i][j][k] = this[i][index[i][j][k]][k]} for dim 1. An index outside {@code [0, size(dim))} fails the
     * call naming its value, position and the bound, on every backend ({@link dev.gatun.ir.ops.Gather}; the CUDA backend
     * takes tensors of up to 8 dimensions).
     */
    public Tensor gather(int dim, Tensor index) {
        return graph.apply("gather", java.util.Map.of("dim", dim), this, index).getFirst();
    }

    /**
     * {@code this.scatter_add(dim, index, src)} out of place, as in PyTorch: a copy of this tensor with each element of
     * {@code src} added where {@code index} (i64 or i32, this tensor's rank) points along {@code dim},
     * {@code out[index[i][j][k]][j][k] += src[i][j][k]} for dim 0. Repeated indices accumulate in the index's row-major
     * order, each sum rounded to the dtype, so the result is deterministic. An index outside {@code [0, size(dim))}
     * fails the call. The CUDA backend adds in the same order, so its result is the host's bit for bit (tensors of up
     * to 8 dimensions; {@link dev.gatun.ir.ops.ScatterAdd}).
     */
    public Tensor scatterAdd(int dim, Tensor index, Tensor src) {
        return graph.apply("scatter_add", java.util.Map.of("dim", dim), this, index, src).getFirst();
    }

    /**
     * The routed product of a mixture-of-experts layer, this tensor the activations: {@code y[n, j, :] =
     * w[ids[n, j]] @ x[n, j, :]} for x [N, k, In], or {@code @ x[n, :]} for x [N, In] or [N, 1, In] (one row a token,
     * used for each of its k choices); w [E, Out, In] the experts' nn.Linear weights stacked; ids [N, k] i64 (the
     * router's top-k). The result is [N, k, Out]. Each (token, choice) reads its one expert's weights and no other's:
     * a decode step of N tokens reads N * k experts' bytes where a dense product reads all E. An id outside
     * {@code [0, E)} fails the call naming it, on every backend ({@link dev.gatun.ir.ops.ExpertMatmul}).
     */
    public Tensor expertMatmul(Tensor w, Tensor ids) {
        return graph.apply("expert_matmul", java.util.Map.of(), this, w, ids).getFirst();
    }

    // ---- collectives (group "world" unless named)
    public Tensor allReduce(ReduceOp op) { return allReduce(op, ProcessGroup.WORLD_NAME); }
    public Tensor allReduce(ReduceOp op, String group) { return collective(CollectiveKind.ALL_REDUCE, op, group, 0); }
    public Tensor reduceScatter(ReduceOp op) { return reduceScatter(op, ProcessGroup.WORLD_NAME); }
    public Tensor reduceScatter(ReduceOp op, String group) { return collective(CollectiveKind.REDUCE_SCATTER, op, group, 0); }
    public Tensor allGather() { return allGather(ProcessGroup.WORLD_NAME); }
    public Tensor allGather(String group) { return collective(CollectiveKind.ALL_GATHER, null, group, 0); }
    public Tensor broadcast(int root) { return broadcast(root, ProcessGroup.WORLD_NAME); }
    public Tensor broadcast(int root, String group) { return collective(CollectiveKind.BROADCAST, null, group, root); }

    /**
     * PyTorch's {@code all_to_all_single} with even splits over the group of all ranks: see {@link #allToAll(String)}.
     */
    public Tensor allToAll() { return allToAll(ProcessGroup.WORLD_NAME); }

    /**
     * PyTorch's {@code all_to_all_single} with even splits: dimension 0 (static, divisible by the group's size) split
     * into one part per member, part j sent to the group's rank j; the result has this tensor's shape and holds the
     * parts received, concatenated in member order (part i from the group's rank i). Any dtype.
     */
    public Tensor allToAll(String group) { return collective(CollectiveKind.ALL_TO_ALL, null, group, 0); }

    /**
     * PyTorch's {@code all_to_all_single} with uneven splits known only at run time: {@code sendCounts} (i64, one row
     * count per member of the group, read at run time, e.g. tokens per expert from a router) says how many rows of
     * dimension 0 go to each member, in member order from row 0 (rows after the last part are not sent). Each member
     * receives its parts packed in sender order into a result of {@code capacity} rows (the rest zero), and
     * {@link AllToAll#counts()} holds the rows it got from each sender (the even all_to_all of the counts). A call where
     * a member would receive more than {@code capacity} rows, a count is negative, or the counts of a sender add up to
     * more rows than it has, is refused at run time naming the op and the counts: never truncated.
     */
    public AllToAll allToAll(String group, Tensor sendCounts, long capacity) {
        if (capacity < 0)
            throw new GraphException("all_to_all(" + node.describe() + ", " + sendCounts.node.describe() + ", capacity=" + capacity
                    + "): the capacity is negative; give the most rows a rank may receive");
        Tensor values = graph.op(new Op.Collective(CollectiveKind.ALL_TO_ALL, null, group, 0, capacity), this, sendCounts);
        return new AllToAll(values, sendCounts.allToAll(group));
    }

    /**
     * What an uneven {@link #allToAll(String, Tensor, long)} gives: {@code capacity} rows, the rows received packed in
     * sender order (zero after them), and the i64 count of rows received from each member.
     */
    public record AllToAll(Tensor values, Tensor counts) {}

    // ---- views
    public Tensor reshape(Object... dims) { return graph.op(new Op.Reshape(shape("reshape(" + node.describe() + ")", dims)), this); }
    public Tensor view(Object... dims) { return reshape(dims); }
    public Tensor permute(int... perm) {
        var p = new ArrayList<Integer>();
        for (int d : perm) p.add(d);
        return graph.op(new Op.Permute(p), this);
    }
    public Tensor transpose(int a, int b) {
        int r = rank();
        var p = new ArrayList<Integer>();
        for (int i = 0; i < r; i++) p.add(i);
        int na = a < 0 ? a + r : a, nb = b < 0 ? b + r : b;
        if (na < 0 || na >= r || nb < 0 || nb >= r)
            throw new dev.gatun.ir.GraphException("transpose(" + describe() + "): dimensions " + a + ", " + b + " out of range for rank " + r);
        p.set(na, nb);
        p.set(nb, na);
        return graph.op(new Op.Permute(p), this);
    }
    public Tensor t() { return transpose(-2, -1); }
    public Tensor slice(int dim, long start, long end) { return slice(dim, start, end, 1); }
    public Tensor slice(int dim, long start, long end, long step) { return graph.op(new Op.Slice(dim, start, end, step), this); }
    public Tensor expand(Object... dims) { return graph.op(new Op.Expand(shape("expand(" + node.describe() + ")", dims)), this); }

    /**
     * This tensor followed by {@code others} along {@code dim} (negative: counted from the end): same dtype and rank,
     * equal sizes outside {@code dim}, static sizes along it. The same as {@code graph().cat(dim, this, others...)}.
     * The planner has each producer write straight into its part of the result where it can (docs/DESIGN.md).
     */
    public Tensor cat(int dim, Tensor... others) {
        var all = new Tensor[others == null ? 1 : others.length + 1];
        all[0] = this;
        if (others != null) System.arraycopy(others, 0, all, 1, others.length);
        return graph.cat(dim, all);
    }

    /**
     * Views of consecutive parts of dimension {@code dim}, of the given sizes, which must add up to the dimension's
     * size: {@code x.split(0, 2, 3)} of a {@code [5,4]} tensor is {@code x[0:2]} and {@code x[2:5]}. Views, not copies
     * (slices); {@code cat(dim, parts)} puts them back together.
     */
    public List<Tensor> split(int dim, long... sizes) {
        String where = "split(" + describe() + ")";
        int d = parts(where, dim);
        if (sizes == null || sizes.length == 0) throw new dev.gatun.ir.GraphException(where + ": no sizes given; give the size of each part, e.g. split(" + dim + ", 2, 3)");
        long total = shape().dim(d).size(), sum = 0;
        for (long s : sizes) {
            if (s < 0) throw new dev.gatun.ir.GraphException(where + ": size " + s + " is negative; every part needs a size of 0 or more");
            sum += s;
        }
        if (sum != total)
            throw new dev.gatun.ir.GraphException(where + ": sizes " + java.util.Arrays.toString(sizes) + " add up to " + sum
                    + ", but dimension " + d + " has size " + total + "; give sizes that add up to " + total);
        var out = new ArrayList<Tensor>(sizes.length);
        long start = 0;
        for (long s : sizes) {
            out.add(slice(d, start, start + s));
            start += s;
        }
        return out;
    }

    /**
     * {@code n} equal views along dimension {@code dim}, whose size {@code n} must divide ({@code torch.chunk}'s order of
     * arguments, as the runtime's {@code NDArray.chunk(chunks, dim)}; {@link #split} takes unequal sizes). Views, not copies.
     */
    public List<Tensor> chunk(int n, int dim) {
        String where = "chunk(" + describe() + ")";
        int d = parts(where, dim);
        if (n < 1) throw new dev.gatun.ir.GraphException(where + ": " + n + " chunks asked for; the number of chunks must be at least 1");
        long size = shape().dim(d).size();
        if (size % n != 0)
            throw new dev.gatun.ir.GraphException(where + ": " + n + " chunks do not divide dimension " + d + " of size " + size
                    + "; use a number of chunks that divides " + size + ", or split(" + dim + ", sizes...) for unequal parts");
        long[] sizes = new long[n];
        java.util.Arrays.fill(sizes, size / n);
        return split(d, sizes);
    }

    /** The dimension split and chunk cut, checked: it exists and has a static size. */
    private int parts(String where, int dim) {
        int r = rank(), d = dim < 0 ? dim + r : dim;
        if (d < 0 || d >= r) throw new dev.gatun.ir.GraphException(where + ": dimension " + dim + " does not exist (rank " + r + ")");
        if (!shape().dim(d).isStatic())
            throw new dev.gatun.ir.GraphException(where + ": dimension " + d + " is symbolic (" + shape().dim(d) + "); cutting it into parts needs a static size");
        return d;
    }

    /** Dims as the user wrote them (numbers or symbol names), or an error naming {@code where} and what was wrong. */
    static Shape shape(String where, Object... dims) {
        if (dims == null) throw new dev.gatun.ir.GraphException(where + ": the dimensions are null; give numbers or symbol names");
        try {
            return Shape.parse(dims);
        } catch (dev.gatun.ir.GraphException e) {
            throw new dev.gatun.ir.GraphException(where + ": " + e.getMessage(), e);
        }
    }
    public Tensor broadcastTo(Object... dims) { return expand(dims); }

    /** Marks this tensor as a graph output. */
    public Tensor output(String name) {
        graph.output(name, this);
        return this;
    }

    public String describe() { return node.describe(); }

    @Override public String toString() { return "Tensor " + node.format() + "  (graph '" + graph.name() + "')"; }

    // ---- helpers
    private Tensor unary(PointwiseFn fn) { return graph.op(new Op.Pointwise(fn), this); }

    private Tensor binary(PointwiseFn fn, Tensor o) { return graph.op(new Op.Pointwise(fn), this, o); }

    /** A scalar constant in a dtype that does not change this tensor's type when combined with it. */
    private Tensor scalar(double s) {
        DType t = dtype();
        if (t == DType.BOOL || (!t.isFloating() && s != Math.rint(s))) t = DType.FLOAT32;
        return graph.scalar(s, t);
    }

    private Tensor reduce(ReduceFn fn, boolean keepdim, int[] dims) {
        var d = new ArrayList<Integer>();
        for (int x : dims) d.add(x);
        return graph.op(new Op.Reduce(fn, d, keepdim), this);
    }

    private Tensor collective(CollectiveKind kind, ReduceOp op, String group, int root) {
        return graph.op(new Op.Collective(kind, op, group, root), this);
    }

    static List<Node> nodes(Tensor... ts) {
        var out = new ArrayList<Node>(ts.length);
        for (Tensor t : ts) out.add(t == null ? null : t.node);
        return out;
    }
}
