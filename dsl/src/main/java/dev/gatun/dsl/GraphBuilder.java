package dev.gatun.dsl;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.ir.graph.UserOp;

import java.util.ArrayList;
import java.util.List;
import java.util.function.Supplier;

/**
 * Builds a graph in plain Java. Inputs come from {@link #input}; every {@link Tensor} method adds an op;
 * {@link #output} names results; {@link #build()} freezes the graph.
 *
 * <pre>{@code
 * var g = Gatun.graph("seeds");
 * var x = g.input("x", F32, 4, 4);
 * var a = x.add(1).allReduce(SUM);
 * g.output("a", a);
 * Graph graph = g.build();
 * }</pre>
 */
public final class GraphBuilder {
    private final Graph.Builder b;
    /** For toString while open: how many nodes exist (ids 0..nodeCount-1) and the outputs named so far. */
    private int nodeCount;
    /** The {@link #recompute} regions, the node ranges of each grad or vjp call, and the graph rebuilt with them. */
    private final List<Recompute.Region> regions = new ArrayList<>();
    private final List<int[]> backward = new ArrayList<>();
    private String openRegion;
    private Graph recomputed;
    private final java.util.Map<String, Integer> outputs = new java.util.LinkedHashMap<>();
    /** The nodes {@link Tensor#detach} made: no gradient passes through them. */
    private final java.util.Set<Integer> detached = new java.util.HashSet<>();

    GraphBuilder(String name) { this.b = Graph.builder(name); }

    public String name() { return b.name(); }

    /** Declares the world size (needed for reduce_scatter and all_gather, whose shapes depend on it). */
    public GraphBuilder world(int size) {
        b.worldSize(size);
        return this;
    }

    /** Declares a process group of explicit ranks; "world" (all ranks) always exists. */
    public GraphBuilder group(String name, Integer... ranks) {
        b.group(ProcessGroup.of(name, ranks));
        return this;
    }

    /**
     * A one-axis device mesh: a group {@code axis} of every rank ({@code size} of them), which fixes the world size.
     * See {@link #mesh(String, int, String, int)}.
     */
    public GraphBuilder mesh(String axis, int size) {
        b.mesh(java.util.List.of(axis), java.util.List.of(size));
        return this;
    }

    /**
     * A two-axis device mesh, as PyTorch's {@code DeviceMesh} and JAX's {@code Mesh}: {@code mesh("dp", 2, "tp", 4)}
     * is a world of 8 laid out row-major, with groups "tp" ({0,1,2,3} and {4,5,6,7}) and "dp" ({0,4}, {1,5}, {2,6},
     * {3,7}). A collective along an axis, {@code x.allReduce(SUM, "tp")}, runs in every slice of that axis at once.
     */
    public GraphBuilder mesh(String axis0, int size0, String axis1, int size1) {
        b.mesh(java.util.List.of(axis0, axis1), java.util.List.of(size0, size1));
        return this;
    }

    /** A three-axis device mesh (for example data, pipeline and tensor parallelism); see {@link #mesh(String, int, String, int)}. */
    public GraphBuilder mesh(String axis0, int size0, String axis1, int size1, String axis2, int size2) {
        b.mesh(java.util.List.of(axis0, axis1, axis2), java.util.List.of(size0, size1, size2));
        return this;
    }

    public GraphBuilder register(UserOp op) {
        b.register(op);
        return this;
    }

    /** A graph input; dims are numbers (static) or strings (symbols bound at call time). */
    public Tensor input(String name, DType dtype, Object... dims) {
        if (dtype == null) throw new GraphException("input '" + name + "': the dtype is null");
        return wrap(b.input(name, new TensorType(dtype, Tensor.shape("input '" + name + "'", dims))));
    }

    /**
     * A state: a tensor the session keeps from call to call, per rank, such as a KV cache. It is zeros until
     * {@code Session.bind} sets it, is never passed to a call, and {@link Tensor#updateSlice} writes it in place; the
     * state holds the last update after the call (output it to read it). Its shape must be static.
     */
    public Tensor state(String name, DType dtype, Object... dims) {
        if (dtype == null) throw new GraphException("state '" + name + "': the dtype is null");
        return wrap(b.state(name, new TensorType(dtype, Tensor.shape("state '" + name + "'", dims))));
    }

    public Tensor constant(DType dtype, long[] shape, double... values) {
        return wrap(b.constant(values, new TensorType(dtype, Shape.of(shape))));
    }

    /**
     * {@code 0, 1, ..., n - 1} in {@code dtype} ({@code torch.arange(n)}): positions, iotas, index grids. The size is
     * static, so the values are a constant the plan writes once; each must be exact in the dtype (bf16 holds integers
     * to 256, f16 to 2048, f32 to 2^24), else it is refused: use a wider dtype and cast.
     */
    public Tensor arange(DType dtype, long n) {
        if (dtype == null) throw new GraphException("arange(" + n + "): the dtype is null");
        if (n < 0) throw new GraphException("arange(" + n + "): the length must not be negative");
        if (n > Integer.MAX_VALUE - 8) throw new GraphException("arange(" + n + "): at most " + (Integer.MAX_VALUE - 8) + " elements");
        // the largest n - 1 each dtype holds exactly: 2^(significand bits) for floats, the largest value for integers
        long exact = switch (dtype) {
            case BOOL -> 1;
            case INT8 -> Byte.MAX_VALUE;
            case INT32 -> Integer.MAX_VALUE;
            case INT64 -> Long.MAX_VALUE;
            case BFLOAT16 -> 1L << 8;
            case FLOAT16 -> 1L << 11;
            case FLOAT32 -> 1L << 24;
            case FLOAT64 -> 1L << 53;
        };
        if (n - 1 > exact)
            throw new GraphException("arange(" + n + ") in " + dtype + ": " + (n - 1) + " is not exact in " + dtype + " (it holds integers to "
                    + exact + "); use an integer dtype or a wider float and cast");
        double[] values = new double[(int) n];
        for (int i = 0; i < values.length; i++) values[i] = i;
        return constant(dtype, new long[]{n}, values);
    }

    public Tensor scalar(double value, DType dtype) { return wrap(b.constant(new double[]{value}, new TensorType(dtype, Shape.SCALAR))); }

    /**
     * {@code tensors} joined along {@code dim} ({@code torch.cat}): at least one tensor, all of one dtype and rank, equal
     * sizes outside {@code dim} and static sizes along it; a negative {@code dim} counts from the end. Each producer
     * writes straight into its part of the result where it can (a matrix product, a fused kernel); graph inputs,
     * constants and views are copied there, and the plan says why (docs/DESIGN.md). {@link Tensor#split} and
     * {@link Tensor#chunk} take a tensor apart again, as views.
     */
    public Tensor cat(int dim, Tensor... tensors) {
        if (tensors == null) throw new GraphException("cat(dim " + dim + "): the tensors are null; give at least one");
        return op(new Op.Cat(dim), tensors);
    }

    /** Like {@link #cat(int, Tensor...)} for a list. */
    public Tensor cat(int dim, List<Tensor> tensors) {
        if (tensors == null) throw new GraphException("cat(dim " + dim + "): the tensors are null; give at least one");
        return cat(dim, tensors.toArray(Tensor[]::new));
    }

    /** Calls a registered user op; one tensor per declared output. */
    public List<Tensor> call(String opName, Tensor... args) {
        var out = new ArrayList<Tensor>();
        for (Node n : b.call(opName, Tensor.nodes(args))) out.add(wrap(n));
        return out;
    }

    /**
     * Calls the built-in op {@code opName} declared in {@link dev.gatun.ir.graph.OpRegistry} with its attributes; one
     * tensor per output. {@link Tensor}'s methods (argmax, topk, ...) call this.
     */
    public List<Tensor> apply(String opName, java.util.Map<String, ? extends Number> attrs, Tensor... args) {
        for (Tensor t : args) check(t, opName);
        var out = new ArrayList<Tensor>();
        for (Node n : b.apply(opName, attrs, Tensor.nodes(args))) out.add(wrap(n));
        return out;
    }

    /** Like {@link #call} for single-output ops. */
    public Tensor call1(String opName, Tensor... args) { return call(opName, args).getFirst(); }

    /**
     * Everything {@code body} computes is placed in symmetric memory of {@code group} (the scoped form of
     * declaring symmetric inputs).
     */
    public <T> T symmetric(String group, Supplier<T> body) {
        b.pushSymmetric(group);
        try {
            return body.get();
        } finally {
            b.popSymmetric();
        }
    }

    /**
     * Reverse-mode gradients, as {@code torch.autograd.grad(loss, [w1, w2])} or {@code jax.grad}: the gradient of the
     * scalar {@code loss} (one element, of any rank) with respect to each of {@code wrt}, one tensor each, of its type.
     * The backward nodes are added to this graph, so they compile with the forward pass into one plan; output them
     * like any tensor: {@code var dw = g.grad(loss, w)[0]; g.output("dw", dw);}. A tensor the loss does not depend
     * on gets zeros; integer and bool tensors carry no gradient. In a graph with collectives the gradient is that of the
     * sum over ranks of each rank's {@code loss}. An op without a gradient rule on the way from {@code wrt} to the loss
     * (docs/DESIGN.md lists them) is refused, naming it. Call it again (on a gradient) for higher derivatives.
     */
    public Tensor[] grad(Tensor loss, Tensor... wrt) {
        check(loss, "grad");
        refuseInRecompute("grad");
        if (loss.shape().rank() > 0 && !(loss.shape().isStatic() && loss.shape().numel() == 1))
            throw new GraphException("grad: the loss " + loss.describe() + " is not a scalar; reduce it first (sum(), mean()), or give the"
                    + " gradient of each element with vjp(output, seed, wrt...)");
        Tensor seed = loss.rank() == 0 ? scalar(1, loss.dtype()) : op(new Op.Expand(loss.shape()), scalar(1, loss.dtype()));
        int start = b.size();
        Tensor[] out = Gradients.of(this, "grad(" + loss.describe() + ")", loss, seed, wrt);
        backward.add(new int[]{start, b.size()});
        return out;
    }

    /** Like {@link #grad(Tensor, Tensor...)} for a list of tensors. */
    public List<Tensor> grad(Tensor loss, List<Tensor> wrt) {
        if (wrt == null) throw new GraphException("grad: the list of tensors to differentiate with respect to is null");
        return List.of(grad(loss, wrt.toArray(Tensor[]::new)));
    }

    /**
     * The vector-Jacobian product ({@code jax.vjp}, {@code torch.autograd.grad(output, wrt, grad_outputs=seed)}): the
     * gradient of {@code sum(output * seed)} with respect to each of {@code wrt}, where {@code seed} has the output's
     * type. {@link #grad(Tensor, Tensor...)} is this with a seed of one for a scalar loss.
     */
    public Tensor[] vjp(Tensor output, Tensor seed, Tensor... wrt) {
        check(output, "vjp");
        check(seed, "vjp");
        refuseInRecompute("vjp");
        int start = b.size();
        Tensor[] out = Gradients.of(this, "vjp(" + output.describe() + ")", output, seed, wrt);
        backward.add(new int[]{start, b.size()});
        return out;
    }

    /**
     * Activation recomputation ({@code torch.utils.checkpoint}): what {@code body} computes from the activations is not
     * kept for the backward pass but computed again there, from the region's inputs, when the backward pass reaches it
     * (the region's results read after it, a layer's output, are kept). A graph transformation made by {@link #build}
     * ({@code Recompute}), before planning: the losses and gradients are bit for bit those without it (in f16/bf16 with
     * {@code roundEachOp}: otherwise a clone may fuse otherwise and round its half intermediates elsewhere), the planned peak
     * lower by the region's activations, at the cost of computing them twice; the graph and its plan print the choice
     * ({@code # recompute layer.0: ...}). The weights a region reads are kept, except what it gathers (an FSDP
     * parameter's all_gather), which is gathered again in the backward pass.
     * Regions do not nest; {@code grad} is called after them.
     */
    public <T> T recompute(String name, Supplier<T> body) { return region("recompute", name, body, true); }

    /**
     * The weights {@code body} all-gathers (an FSDP parameter's {@code all_gather}, and the views and casts made of it)
     * are not kept for the backward pass but gathered again there, from their shards, when the backward pass reaches
     * the region: FSDP2's {@code reshard_after_forward}, one unit a region (a decoder layer). Its activations are kept,
     * as without a region. The same transformation as {@link #recompute}'s, limited to the gathers: the losses and
     * gradients are bit for bit the same, the planned peak lower by the gathered weights of every layer but the one
     * running, at the cost of a second all_gather each; the graph and its plan print the choice
     * ({@code # regather layer.0: ...}). Regions (of either kind) do not nest; {@code grad} is called after them.
     */
    public <T> T regather(String name, Supplier<T> body) { return region("regather", name, body, false); }

    private <T> T region(String kind, String name, Supplier<T> body, boolean activations) {
        if (name == null || name.isBlank()) throw new GraphException(kind + ": give the region a name (\"layer.0\")");
        if (body == null) throw new GraphException(kind + "(\"" + name + "\"): the body is null");
        refuseInRecompute(kind + "(\"" + name + "\")");
        for (var r : regions) if (r.name().equals(name)) throw new GraphException(kind + ": a region named '" + name + "' exists already; name each region once");
        openRegion = kind + "(\"" + name + "\")";
        int start = b.size();
        try {
            return body.get();
        } finally {
            openRegion = null;
            regions.add(new Recompute.Region(name, start, b.size(), activations));
        }
    }

    private void refuseInRecompute(String what) {
        if (openRegion != null)
            throw new GraphException(what + " inside " + openRegion + ": regions do not nest and the backward pass comes after them; close the region first");
    }

    public GraphBuilder output(String name, Tensor t) {
        check(t, "output");
        b.output(name, t.node());
        outputs.put(name, t.node().id());
        return this;
    }

    /**
     * The graph: with {@link #recompute} regions and a backward pass, the graph with the regions' values recomputed for
     * the backward pass ({@code Recompute}), made once.
     */
    public Graph build() {
        Graph g = b.build();
        if (regions.isEmpty() || backward.isEmpty()) return g;
        if (recomputed == null) recomputed = Recompute.apply(g, regions, backward);
        return recomputed;
    }

    /** {@code t}'s value as a new node (a reshape to its own shape: a view, no copy) that no gradient passes through. */
    Tensor detach(Tensor t) {
        check(t, "detach");
        Tensor d = op(new Op.Reshape(t.shape()), t);
        detached.add(d.node().id());
        return d;
    }

    /** Whether node {@code id} was made by {@link Tensor#detach} (for {@link Gradients}). */
    boolean isDetached(int id) { return detached.contains(id); }

    Tensor op(Op op, Tensor... args) {
        for (Tensor t : args) check(t, op.opName());
        return wrap(b.add(op, Tensor.nodes(args)));
    }

    private void check(Tensor t, String opName) {
        if (t == null) throw new GraphException(opName + ": a tensor argument is null");
        if (t.graph() != this)
            throw new GraphException(opName + ": tensor " + t.describe() + " belongs to graph '" + t.graph().name()
                    + "', not to graph '" + name() + "'");
    }

    /** The process group {@code name} declared so far, or null (for {@link GradientRules}). */
    ProcessGroup group(String name) { return b.group(name); }

    /** The declared world size, or null. */
    Integer worldSize() { return b.worldSize(); }

    /** Node {@code id} of the graph being built (for {@link Gradients}). */
    Node node(int id) { return b.node(id); }

    Tensor wrap(Node n) {
        nodeCount = Math.max(nodeCount, n.id() + 1);
        return new Tensor(this, n);
    }

    /** The graph once built; while open, the nodes and outputs so far, in the graph's own format. */
    @Override public String toString() {
        if (b.isBuilt()) return build().toString();
        var sb = new StringBuilder("graph \"").append(name()).append("\"  (open: being built)\n");
        for (int i = 0; i < nodeCount; i++) sb.append("  ").append(b.node(i).format()).append('\n');
        var parts = new ArrayList<String>();
        outputs.forEach((k, v) -> parts.add(k + "=%" + v));
        return sb.append("  return ").append(parts.isEmpty() ? "(no outputs yet)" : String.join(", ", parts)).toString();
    }
}
