package dev.gatun.lowering;

import dev.gatun.ir.CompilationException;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.CommBufferType;
import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.Layout;
import dev.gatun.ir.AllocatorType;
import dev.gatun.ir.Shape;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.ir.graph.UserOp;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Lowers a {@link Graph} to buffers: one loop ({@link ComputedBuffer}) per pointwise op or reduction, views
 * as strided reinterpretations, extern calls for collectives, matmul and user ops. For each op that needs
 * symmetric memory it chooses an algorithm and realizes the input as a communication buffer by the first
 * of docs/DESIGN.md's three paths that applies, recording why.
 */
public final class Lowering {
    private final Graph graph;
    private final LoweringOptions options;
    private final List<Buffer> buffers = new ArrayList<>();
    /** Each node's lowered value, by node id (ids are positions in the graph's node list). */
    private final Value[] values;
    private final Map<String, InputBuffer> inputs = new LinkedHashMap<>();
    private final Map<Buffer, String> fixedBecause = new IdentityHashMap<>();
    private final List<Realization> realizations = new ArrayList<>();
    private final List<String> decisions = new ArrayList<>();
    private final Set<String> inputNames = new HashSet<>();
    /** The first buffer (a loop, a view, a call, a copy) that read each buffer read so far, by name; by {@link Buffer#id()}. */
    private final List<String> firstReader = new ArrayList<>();
    private int counter;
    /** The three paths to a communication buffer, and the symmetric regions' placements. */
    private final SymmetricPaths paths;

    /** A lowered node: a buffer, or a scalar constant that loops inline. */
    private sealed interface Value {}

    private record BufferValue(Buffer buffer) implements Value {}

    private record ScalarValue(double value, DType dtype) implements Value {}

    /**
     * A concatenation not made: every reader is a pointwise loop of its shape, and each computes the parts' slices of its
     * own result instead ({@link #throughCat}). Part {@code k} has shape {@code shapes[k]} and begins at {@code starts[k]}
     * along {@code dim}; {@code node} is the op whose result this is (the cat, or a pointwise op computed through one).
     */
    private record CatValue(Node node, int dim, List<Value> parts, long[] starts, List<Shape> shapes) implements Value {}

    /**
     * A reshape not made: every reader is a pointwise loop of its shape, and each runs over the shape of {@code source}
     * instead, reading it as it lies, its result reshaped back ({@link #throughReshape}); {@code node} is the op whose
     * result this is (the reshape, or a pointwise op computed through one).
     */
    private record ReshapeValue(Node node, Value source, Shape shape) implements Value {}

    /**
     * A value not made ({@link #recomputable}): a widening float cast of a computed value, or a short chain of pointwise
     * ops over one and small operands (a row's max); a pointwise loop reading it computes it from those itself
     * ({@link #loadsOf}); anything else makes it ({@link #materialize(RecomputedValue)}), once ({@code made} holds the
     * buffer), and later pointwise readers still compute it. {@code ops}: the ops it takes.
     */
    private record RecomputedValue(Node node, int ops, Buffer[] made) implements Value {
        RecomputedValue(Node node, int ops) { this(node, ops, new Buffer[1]); }
    }

    /** The most ops a {@link RecomputedValue} chain takes (each reader computes them all again). */
    static final int RECOMPUTE_MAX_OPS = 3;

    private Lowering(Graph graph, LoweringOptions options) {
        this.graph = graph;
        this.options = options;
        this.values = new Value[graph.nodes().size()];
        this.paths = new SymmetricPaths(graph, options, realizations, decisions, fixedBecause, (in, layout) ->
                register(new ComputedBuffer(next(), "copy", layout, load(new BufferValue(in), in.type().shape()), null, List.of(), -1)));
    }

    public static LoweredGraph lower(Graph graph, LoweringOptions options) {
        return new Lowering(graph, options).run();
    }

    private LoweredGraph run() {
        LoweringChecks.checkWorld(graph, options);
        boolean[] live = LoweringChecks.liveNodes(graph);
        ScatterInto into = ScatterInto.find(graph, live);
        for (Node n : graph.nodes()) {
            if (!live[n.id()]) {
                decisions.add("%" + n.id() + " " + n.op().opName() + ": dropped, no output depends on it");
                continue;
            }
            if (into.skipped(n)) {
                decisions.add("%" + n.id() + " " + n.op().opName() + ": not made; " + into.why(n));
                continue;
            }
            Value v = into.rewrites(n) ? scatterInto(n, into) : lowerNode(n);
            values[n.id()] = v;
            if (n.symmetricGroup() != null && v instanceof BufferValue(Buffer b)) paths.placeInRegion(n, b);
        }
        var outputs = new LinkedHashMap<String, Buffer>();
        graph.outputs().forEach((name, node) -> outputs.put(name, outputBuffer(name, node)));
        return new LoweredGraph(graph, options, buffers, inputs, outputs, realizations, decisions);
    }

    // ---------------------------------------------------------------- nodes

    private Value lowerNode(Node n) {
        return switch (n.op()) {
            case Op.Input in -> {
                var b = register(new InputBuffer(inputName(in.name()), in.name(), Layout.contiguous(n.type().dtype(), n.type().shape()), n.id(),
                        graph.states().contains(in.name())));
                inputs.put(in.name(), (InputBuffer) b);
                yield new BufferValue(b);
            }
            case Op.Constant c -> n.type().rank() == 0
                    ? new ScalarValue(c.value(0), n.type().dtype())
                    : new BufferValue(register(new ConstantBuffer(next(), c.values(), Layout.contiguous(n.type().dtype(), n.type().shape()), n.id())));
            case Op.Pointwise p -> elementwise(n);
            case Op.Cast c -> elementwise(n);
            case Op.Reduce r -> new BufferValue(reduction(n, r));
            case Op.Matmul m -> matmul(n);
            case Op.Registered r -> new BufferValue(registered(n, r));
            case Op.Collective c -> oneRank(c) && !c.uneven() ? identity(n, c) : new BufferValue(collective(n, c));
            case Op.Reshape r -> reshapeValue(n, r);
            case Op.Permute p -> new BufferValue(permute(n, p));
            case Op.Slice s -> new BufferValue(slice(n, s));
            case Op.Expand e -> new BufferValue(expand(n, e));
            case Op.Cat c -> cat(n, c);
            case Op.Custom c -> new BufferValue(userOp(n, c));
            case Op.CustomOutput o -> {
                var call = (ExternBuffer) ((BufferValue) arg(n, 0)).buffer();
                yield new BufferValue(call.extraOutputs().get(o.index() - 1));
            }
        };
    }

    /** A pointwise op or a cast: through a concatenation or a reshape it reads that is not made, else one loop. */
    private Value elementwise(Node n) {
        if (catRead(n) instanceof CatValue cat) return throughCat(n, cat);
        if (reshapeRead(n) instanceof ReshapeValue r) return throughReshape(n, r);
        if (summedNarrowly(n) instanceof RecomputedValue r) {
            decisions.add("%" + n.id() + " " + n.op().opName() + ": not made; the narrow sum that alone reads it computes it from " + sources(n)
                    + " at each element it sums (one launch, no " + n.type().dtype().shortName() + " buffer of " + n.type().shape() + ")");
            return r;
        }
        if (broadcastOnly(n) instanceof RecomputedValue r) {
            decisions.add("%" + n.id() + " " + n.op().opName() + ": not made; its readers, pointwise loops at least " + BROADCAST_RATIO
                    + " times its size that read it broadcast (or a short chain to them), each compute it from "
                    + (sources(n).isEmpty() ? "its constants" : sources(n)) + " themselves (a launch fewer)");
            return r;
        }
        if (recomputable(n) instanceof RecomputedValue r) {
            decisions.add("%" + n.id() + " " + n.op().opName() + ": not made for pointwise loops; each computes it from " + sources(n)
                    + " itself, so no " + n.type().dtype().shortName() + " copy of it is kept for them (made where a reduction reads it)");
            return r;
        }
        return new BufferValue(plainElementwise(n));
    }

    /** How many times its size every reader of a {@link #broadcastOnly} value is, at least. */
    static final long BROADCAST_RATIO = 16;

    /**
     * Cast or pointwise {@code n} as a value its readers compute themselves, where every reader is a pointwise loop at
     * least {@link #BROADCAST_RATIO} times its size (it reads each element broadcast, many times: a router's weights
     * cast to the tokens' type and multiplied into [tokens, k, hidden], a per-row scale), none an output or in a
     * symmetric region, and the chain takes at most {@link #RECOMPUTE_MAX_OPS} ops of scalars and of buffers that no
     * kernel makes and nothing changes while they live ({@link #unchanging}: a product's or registered op's result, a
     * graph input that is not a state; no collective's result or symmetric buffer). The value is tiny beside its readers, so recomputing it
     * costs nothing measurable, and its own launch (a few microseconds in a captured graph) goes. Null otherwise.
     */
    private RecomputedValue broadcastOnly(Node n) {
        if (!readBroadcast(n, 0)) return null;
        int ops = 1;
        for (int i = 0; i < (n.op() instanceof Op.Pointwise ? n.inputs().size() : 1); i++) {
            switch (values[n.input(i).id()]) {
                case RecomputedValue r -> ops += r.ops();
                case ScalarValue c -> { }
                case BufferValue(Buffer b) -> {
                    if (!unchanging(b)) return null;
                }
                default -> { return null; }
            }
        }
        return ops <= RECOMPUTE_MAX_OPS ? new RecomputedValue(n, ops) : null;
    }

    /**
     * Whether every reader of {@code n} (no output, outside symmetric regions) is a pointwise loop at least
     * {@link #BROADCAST_RATIO} times its size, or a cast or pointwise op of its shape whose readers are (a chain of at
     * most {@link #RECOMPUTE_MAX_OPS}: {@code ids + 1} cast to the rows' type, then the product).
     */
    private boolean readBroadcast(Node n, int depth) {
        if (graph.isOutput(n) || n.symmetricGroup() != null || !n.type().shape().isStatic() || graph.users(n).isEmpty()) return false;
        long size = n.type().shape().numel();
        for (Node u : graph.users(n)) {
            if (u.symmetricGroup() != null || !u.type().shape().isStatic()) return false;
            boolean broadcast = u.op() instanceof Op.Pointwise && u.type().shape().numel() >= BROADCAST_RATIO * Math.max(1, size);
            boolean chained = depth + 1 < RECOMPUTE_MAX_OPS && (u.op() instanceof Op.Pointwise || u.op() instanceof Op.Cast)
                    && u.type().shape().equals(n.type().shape()) && readBroadcast(u, depth + 1);
            if (!broadcast && !chained) return false;
        }
        return true;
    }

    /**
     * A value no kernel of the graph makes and nothing changes while it lives: a product's or registered op's result (not
     * one written in place), a graph input that is not a state (nothing writes one during a call), a constant; never
     * symmetric but for an all_to_all's result: peers write a receive buffer only inside the all_to_all's step, between
     * its barriers, and the planner holds its slot from the barrier before until its last reader, the loops that now
     * compute the value included (an expert's scale of its received ids). Other collectives' results (a barrier-free
     * all-reduce's rotating slots) are left out. A loop's result is left out too: the value would join that loop's
     * kernel (a norm's rsqrt, a row member of its row kernel) at no launch of its own.
     */
    private static boolean unchanging(Buffer b) {
        if (b.storage() instanceof ExternBuffer e && e.call() instanceof ExternCall.Collective c && c.kind() == dev.gatun.ir.graph.CollectiveKind.ALL_TO_ALL) return true;
        if (b.isSymmetric()) return false;
        return switch (b.storage()) {
            case ExternBuffer e -> computed(b);
            case InputBuffer in -> !in.isState();
            case ConstantBuffer c -> true;
            default -> false;
        };
    }

    /**
     * Cast or pointwise {@code n} as a value computed inside the {@link #narrowSum} that is its only reader, or null: the
     * sum computes it at each element it sums (each element of {@code n} once, so nothing is computed twice), and
     * neither its launch nor its buffer is made (a mixture's combine: the weighted [tokens, k, hidden] products summed
     * over k in the sum's one launch). Not for an output or inside a symmetric region.
     */
    private RecomputedValue summedNarrowly(Node n) {
        if (!endsInNarrowSum(n, 0)) return null;
        for (int i = 0; i < (n.op() instanceof Op.Pointwise ? n.inputs().size() : 1); i++)
            if (!(values[n.input(i).id()] instanceof RecomputedValue || values[n.input(i).id()] instanceof ScalarValue
                    || values[n.input(i).id()] instanceof BufferValue)) return null;
        return new RecomputedValue(n, RECOMPUTE_MAX_OPS);
    }

    /**
     * Whether {@code n}'s one reader is a {@link #narrowSum} of it, or a pointwise op or cast of its shape (at most
     * {@link #RECOMPUTE_MAX_OPS} of them) whose one reader is: a chain the sum computes at each element it sums.
     */
    private boolean endsInNarrowSum(Node n, int depth) {
        if (graph.isOutput(n) || n.symmetricGroup() != null || !n.type().shape().isStatic()) return false;
        var users = graph.users(n);
        if (users.size() != 1 || users.getFirst().symmetricGroup() != null) return false;
        Node u = users.getFirst();
        if (u.op() instanceof Op.Reduce r)
            return u.input(0) == n && takesNarrowSum(u, r, n, dev.gatun.ir.graph.TypeInference.reductionDims(r.opName(), n, r.dims()));
        return depth < RECOMPUTE_MAX_OPS && (u.op() instanceof Op.Pointwise || u.op() instanceof Op.Cast) && u.type().shape().equals(n.type().shape())
                && endsInNarrowSum(u, depth + 1);
    }

    /**
     * Cast or pointwise {@code n} as a value its pointwise readers compute themselves, or null. A cast that widens a float
     * (bf16 or f16 to f32 or f64, f32 to f64: exact) of a value computed in the graph (a loop's or a product's or a
     * registered op's result, or a view of one; no input, state, collective's result or symmetric buffer, which an update
     * or a peer may change); or a pointwise op of such a value (a chain of at most {@link #RECOMPUTE_MAX_OPS}) whose other
     * operands are scalars or tensors at most a sixteenth its size (a row's max or sum, broadcast). Its readers must all
     * be pointwise loops, casts or reductions (a reduction makes it, inside its own row kernel), none an output. Each
     * pointwise reader then reads the narrow source (half the bytes, or less) and the wide value is never stored for a
     * reader in another kernel: an optimizer step reading a gradient's f32 cast, a cross-entropy's backward pass reading
     * the exponentials of f32 logits cast from bf16 (1 GB a [2048, 128256] buffer).
     */
    private RecomputedValue recomputable(Node n) {
        if (!n.type().dtype().isFloating() || !readByLoopsOnly(n)) return null;
        if (n.op() instanceof Op.Cast) {
            DType from = n.input(0).type().dtype(), to = n.type().dtype();
            if (!from.isFloating() || to.byteSize() <= from.byteSize() || !(values[n.input(0).id()] instanceof BufferValue(Buffer b))) return null;
            return computed(b) ? new RecomputedValue(n, 1) : null;
        }
        if (!(n.op() instanceof Op.Pointwise) || !n.type().shape().isStatic()) return null;
        int ops = 1;
        boolean chained = false;
        for (Node x : n.inputs()) {
            Value v = values[x.id()];
            if (v instanceof RecomputedValue r) {
                ops += r.ops();
                chained = true;
            } else if (!(v instanceof ScalarValue) && !(v instanceof BufferValue && x.type().shape().isStatic()
                    && x.type().shape().numel() * 16 <= n.type().shape().numel())) return null;
        }
        return chained && ops <= RECOMPUTE_MAX_OPS ? new RecomputedValue(n, ops) : null;
    }

    /** A loop's, product's or registered op's result (or a view of one) that no update or peer changes while it lives. */
    private static boolean computed(Buffer b) {
        boolean made = b.storage() instanceof ComputedBuffer || b.storage() instanceof ExternBuffer e && switch (e.call()) {
            case ExternCall.Matmul m -> true;
            case ExternCall.Registered r -> !r.spec().inPlace();
            default -> false;   // a collective's result (peers write it), a user op's
        };
        return made && !b.isSymmetric();
    }

    /** Whether every reader of {@code n} is a pointwise loop, a cast or a reduction outside symmetric regions, and {@code n} no output. */
    private boolean readByLoopsOnly(Node n) {
        if (graph.isOutput(n) || n.symmetricGroup() != null) return false;
        for (Node u : graph.users(n))
            if (!(u.op() instanceof Op.Pointwise || u.op() instanceof Op.Cast || u.op() instanceof Op.Reduce) || u.symmetricGroup() != null) return false;
        return true;
    }

    /** The buffers a recomputed {@code n} reads, for the decisions. */
    private String sources(Node n) {
        var names = new java.util.LinkedHashSet<String>();
        for (Node x : n.inputs())
            switch (values[x.id()]) {
                case RecomputedValue r -> names.add(sources(r.node()));
                case BufferValue(Buffer b) -> names.add(b.name() + " (" + b.type().dtype().shortName() + ")");
                default -> { }
            }
        return String.join(", ", names);
    }

    private Buffer materialize(RecomputedValue r) {
        Node n = r.node();
        if (r.made()[0] == null) r.made()[0] = elementwiseLoop(n, n.type().shape(), loadsOf(n, n.type().shape()));
        return r.made()[0];
    }

    private Buffer plainElementwise(Node n) { return elementwiseLoop(n, n.type().shape(), loadsOf(n, n.type().shape())); }

    /** The loads of pointwise or cast {@code n}'s inputs over {@code iter}, each recomputed value computed in place. */
    private List<Expr> loadsOf(Node n, Shape iter) {
        var loads = new ArrayList<Expr>();
        for (int i = 0; i < (n.op() instanceof Op.Pointwise ? n.inputs().size() : 1); i++)
            loads.add(values[n.input(i).id()] instanceof RecomputedValue r ? bodyOf(r.node(), loadsOf(r.node(), iter)) : load(arg(n, i), iter));
        return loads;
    }

    /** {@code n}'s value (a pointwise op, or a cast) of its inputs' {@code loads}. */
    private static Expr bodyOf(Node n, List<Expr> loads) {
        return n.op() instanceof Op.Pointwise p ? pointwiseBody(n, p.fn(), loads) : castTo(loads.getFirst(), n.type().dtype());
    }

    /** Elementwise {@code n} (a pointwise op, or a cast of {@code loads}' one) as one loop over {@code shape}. */
    private Buffer elementwiseLoop(Node n, Shape shape, List<Expr> loads) {
        Expr body = bodyOf(n, loads);
        String label = n.op() instanceof Op.Pointwise p ? (p.fn() == PointwiseFn.IDENTITY ? "copy" : p.fn().opName()) : "cast";
        return register(new ComputedBuffer(next(), label, Layout.flexible(n.type().dtype(), shape), body, null, List.of(), n.id()));
    }

    /** {@code fn} of {@code loads} (one per input of {@code n}), each cast to the type the arithmetic happens in. */
    private static Expr pointwiseBody(Node n, PointwiseFn fn, List<Expr> loads) {
        DType compute = computeType(n, fn);
        var args = new ArrayList<Expr>(loads.size());
        for (int i = 0; i < loads.size(); i++) {
            boolean isCondition = fn == PointwiseFn.WHERE && i == 0;
            args.add(isCondition ? loads.get(i) : castTo(loads.get(i), compute));
        }
        return new Expr.Apply(fn, args, n.type().dtype());
    }

    /** The type arithmetic happens in: promoted inputs (float for transcendental functions), as TypeInference decides. */
    private static DType computeType(Node n, PointwiseFn fn) {
        if (fn == PointwiseFn.WHERE) return n.type().dtype();
        DType t = dev.gatun.ir.graph.TypeInference.resultType(n.inputs());
        if (fn.needsFloat() && !t.isFloating()) t = DType.FLOAT32;
        return t;
    }

    private Buffer reduction(Node n, Op.Reduce r) {
        Node x = n.input(0);
        var dims = dev.gatun.ir.graph.TypeInference.reductionDims(r.opName(), x, r.dims());
        if (values[x.id()] instanceof RecomputedValue v && v.made()[0] == null && takesNarrowSum(n, r, x, dims)) return narrowSumOf(n, r, x, dims);
        Strided src = strided(arg(n, 0));
        Buffer narrow = narrowSum(n, r, x, dims, src);
        if (narrow != null) return narrow;
        Buffer wide = splitWide(n, r, x, dims, src);
        if (wide != null) return wide;
        var strides = outputStrides(x, r, dims, src);
        var reductionRanges = new ArrayList<SymInt>();
        for (int d : dims) {
            strides.add(src.strides.get(d));
            reductionRanges.add(x.type().shape().dim(d).asSymInt());
        }
        Expr body = castTo(new Expr.Load(src.storage, src.offset, strides, x.type().dtype()), n.type().dtype());
        return register(new ComputedBuffer(next(), r.fn().opName(), Layout.flexible(n.type().dtype(), n.type().shape()), body,
                r.fn(), reductionRanges, n.id()));
    }

    /** {@code src}'s strides over reduction {@code r}'s output dimensions (a kept reduced dimension's 0). */
    private static ArrayList<SymInt> outputStrides(Node x, Op.Reduce r, List<Integer> dims, Strided src) {
        var strides = new ArrayList<SymInt>();
        for (int d = 0; d < x.type().rank(); d++) {
            if (dims.contains(d)) {
                if (r.keepdim()) strides.add(SymInt.ZERO);
            } else strides.add(src.strides.get(d));
        }
        return strides;
    }

    /** The most elements an output of a reduction over dimensions other than the last may sum for {@link #narrowSum}. */
    static final long NARROW_MAX = 8;
    /**
     * The fewest outputs for {@link #narrowSum}: below, the reduction's launch is a few waves of blocks, and as a row
     * kernel it takes its pointwise producers in (written out, the sum reads them at other elements than its own, so
     * they would be stored first).
     */
    static final long NARROW_MIN_OUTPUTS = 1 << 16;

    /**
     * A sum or mean over dimensions other than the last, of at most {@link #NARROW_MAX} elements an output (a mixture's
     * weighted sum over its k choices, [tokens, k, hidden] over k): as a reduction, each output is a row of a block, so
     * a block of 32 threads sums two elements, hundreds of thousands of blocks; written out instead as a pointwise sum
     * of its elements' loads, one thread an output (MoeBench's combine of 128 tokens of 4096, top 2, was a row kernel
     * of 524,288 rows of two), where it has at least {@link #NARROW_MIN_OUTPUTS} outputs. Floating
     * types and static reduced extents; the sum in float32 for half types (as a reduction's), in the elements' order.
     * Returns null where the rule does not apply.
     */
    private Buffer narrowSum(Node n, Op.Reduce r, Node x, List<Integer> dims, Strided src) {
        if (!takesNarrowSum(n, r, x, dims)) return null;
        DType t = n.type().dtype();
        var strides = outputStrides(x, r, dims, src);
        return narrowSum(n, r, x, dims, at -> new Expr.Load(src.storage, at.apply(src.offset, src.strides), strides, t));
    }

    /** Whether reduction {@code n} (rule {@code r} over {@code dims} of {@code x}) is written out by {@link #narrowSum}. */
    private static boolean takesNarrowSum(Node n, Op.Reduce r, Node x, List<Integer> dims) {
        DType t = n.type().dtype();
        int rank = x.type().rank();
        if (r.fn() != ReduceFn.SUM && r.fn() != ReduceFn.MEAN || !t.isFloating() || x.type().dtype() != t || dims.isEmpty() || dims.contains(rank - 1))
            return false;
        long count = 1;
        for (int d : dims) {
            if (!x.type().shape().dim(d).isStatic()) return false;
            count *= x.type().shape().dim(d).size();
        }
        return count >= 2 && count <= NARROW_MAX && n.type().shape().isStatic() && n.type().shape().numel() >= NARROW_MIN_OUTPUTS;
    }

    /** Where element i of the reduced dimensions lies: an offset and strides to the offset of that element. */
    private interface Element { SymInt apply(SymInt offset, List<SymInt> strides); }

    /**
     * The narrow sum of {@code count} terms, {@code term} giving the value at the i-th reduced element (row-major over the
     * reduced dimensions) from an {@link Element} that moves an offset there.
     */
    private Buffer narrowSum(Node n, Op.Reduce r, Node x, List<Integer> dims, java.util.function.Function<Element, Expr> term) {
        DType t = n.type().dtype();
        long count = 1;
        for (int d : dims) count *= x.type().shape().dim(d).size();
        DType acc = t.isHalf() ? DType.FLOAT32 : t;
        Expr sum = null;
        for (long i = 0; i < count; i++) {   // the i-th element in row-major order over the reduced dimensions
            long element = i;
            Expr value = castTo(term.apply((offset, strides) -> {
                SymInt at = offset;
                long rest = element;
                for (int j = dims.size() - 1; j >= 0; j--) {
                    long size = x.type().shape().dim(dims.get(j)).size();
                    at = at.plus(strides.get(dims.get(j)).times(rest % size));
                    rest /= size;
                }
                return at;
            }), acc);
            sum = sum == null ? value : new Expr.Apply(PointwiseFn.ADD, List.of(sum, value), acc);
        }
        if (r.fn() == ReduceFn.MEAN) sum = new Expr.Apply(PointwiseFn.DIV, List.of(sum, new Expr.Constant(count, acc)), acc);
        decisions.add("%" + n.id() + " " + r.opName() + ": " + count + " elements an output over dimension" + (dims.size() == 1 ? " " + dims.getFirst() : "s " + dims)
                + ", not the last: written out as a pointwise sum of " + count + " loads, one thread an output (a reduction would give each output a block)");
        return register(new ComputedBuffer(next(), r.fn().opName(), Layout.flexible(t, n.type().shape()), castTo(sum, t), null, List.of(), n.id()));
    }

    /**
     * {@link #narrowSum} of a value {@link #summedNarrowly} computes inside it: {@code x}'s expression over its own
     * shape, each term with every load moved to the term's element and the reduced dimensions' strides dropped (kept as
     * 0 under keepdim), as the sum's own loads are.
     */
    private Buffer narrowSumOf(Node n, Op.Reduce r, Node x, List<Integer> dims) {
        Expr body = bodyOf(x, loadsOf(x, x.type().shape()));
        return narrowSum(n, r, x, dims, at -> moved(body, at, dims, r.keepdim()));
    }

    /** {@code e} with each load at the element {@code at} gives, its reduced dimensions' strides dropped (0 under keepdim). */
    private static Expr moved(Expr e, Element at, List<Integer> dims, boolean keepdim) {
        return switch (e) {
            case Expr.Load l -> {
                var strides = new ArrayList<SymInt>();
                for (int d = 0; d < l.strides().size(); d++) {
                    if (!dims.contains(d)) strides.add(l.strides().get(d));
                    else if (keepdim) strides.add(SymInt.ZERO);
                }
                yield new Expr.Load(l.storage(), at.apply(l.offset(), l.strides()), strides, l.dtype());
            }
            case Expr.Apply a -> new Expr.Apply(a.fn(), a.args().stream().map(x -> moved(x, at, dims, keepdim)).toList(), a.dtype());
            case Expr.Cast c -> new Expr.Cast(moved(c.x(), at, dims, keepdim), c.dtype());
            case Expr.Constant c -> c;
        };
    }

    /** The fewest elements a reduction must fold into each of its outputs before {@link #splitWide} splits it. */
    static final long SPLIT_MIN_ELEMENTS = 1 << 16;
    /** The most outputs of a reduction {@link #splitWide} splits (more give the GPU a block each already). */
    static final long SPLIT_MAX_OUTPUTS = 8;

    /**
     * A reduction of many elements into a few outputs over two or more dimensions (a weight gradient's squared norm:
     * 16 million elements into one) is a row kernel of a few rows, one block each: one multiprocessor streams the whole
     * tensor. It is lowered as two instead: over its last reduced dimension first (one row each, all the other
     * dimensions), then over those results; the planner folds the second into the first's launch. Sums, maxima and
     * minima of float32, float64 and integers (a half type's partial sums would be rounded to it; a mean's parts would
     * divide twice). The order of a float sum changes (rows first), the same on every backend; returns null where the
     * rule does not apply.
     */
    private Buffer splitWide(Node n, Op.Reduce r, Node x, List<Integer> dims, Strided src) {
        DType t = n.type().dtype();
        boolean type = t == DType.FLOAT32 || t == DType.FLOAT64 || !t.isFloating() && t != DType.BOOL;
        if (r.fn() == ReduceFn.MEAN || !type || x.type().dtype() != t || dims.size() < 2 || !x.type().shape().isStatic()) return null;
        long[] xs = x.type().shape().sizes();
        long reduced = 1, outputs = 1;
        for (int d = 0; d < xs.length; d++) if (dims.contains(d)) reduced *= xs[d]; else outputs *= xs[d];
        int last = dims.getLast();
        if (outputs > SPLIT_MAX_OUTPUTS || reduced < SPLIT_MIN_ELEMENTS || xs[last] < 32) return null;
        // rows: every dimension but the last reduced one, in order; each reduced over that one
        var rowSizes = new ArrayList<Long>();
        var rowStrides = new ArrayList<SymInt>();
        for (int d = 0; d < xs.length; d++)
            if (d != last) {
                rowSizes.add(xs[d]);
                rowStrides.add(src.strides.get(d));
            }
        rowStrides.add(src.strides.get(last));
        Shape rowShape = Shape.of(rowSizes.stream().mapToLong(Long::longValue).toArray());
        Buffer rows = register(new ComputedBuffer(next(), r.fn().opName(), Layout.flexible(t, rowShape),
                new Expr.Load(src.storage, src.offset, rowStrides, t), r.fn(), List.of(SymInt.of(xs[last])), n.id()));
        long chunk = outputs == 1 ? chunkOf(rowShape.numel()) : 0;
        if (chunk > 0) return wholeInChunks(n, r, rows, chunk, reduced, last);
        // then the rows' results over the other reduced dimensions, into the reduction's own shape
        Strided part = strided(new BufferValue(rows));
        var strides = new ArrayList<SymInt>();
        var ranges = new ArrayList<SymInt>();
        var reducedStrides = new ArrayList<SymInt>();
        for (int d = 0, k = 0; d < xs.length; d++) {
            if (d == last) {
                if (r.keepdim()) strides.add(SymInt.ZERO);   // the last reduced dimension's place in the output
                continue;
            }
            if (dims.contains(d)) {
                if (r.keepdim()) strides.add(SymInt.ZERO);
                reducedStrides.add(part.strides.get(k));
                ranges.add(SymInt.of(xs[d]));
            } else strides.add(part.strides.get(k));
            k++;
        }
        strides.addAll(reducedStrides);
        decisions.add("%" + n.id() + " " + r.opName() + ": " + reduced + " elements into " + outputs + " reduced over dimension " + last
                + " first (" + rows.name() + ", " + rowShape.numel() + " rows), then over those rows: one block a row streams it, where one"
                + " block an output could not");
        return register(new ComputedBuffer(next(), r.fn().opName(), Layout.flexible(t, n.type().shape()),
                new Expr.Load(part.storage, part.offset, strides, t), r.fn(), ranges, n.id()));
    }

    /**
     * The most rows whose results {@link #splitWide}'s second reduction may fold in one block (the planner folds it into
     * the rows' launch up to as many, {@code GridFolds.MAX_ROWS}); more are summed in chunks first ({@link #wholeInChunks}).
     */
    static final long FOLD_MAX_ROWS = 16384;

    /**
     * The chunk {@code rows} row results are summed in before the last fold, where they are more than {@link #FOLD_MAX_ROWS}:
     * the divisor of {@code rows} nearest its square root (as many chunks as elements a chunk, about) that leaves at most
     * {@link #FOLD_MAX_ROWS} chunks and is at least 32 long; 0 where none is (a prime count: the second reduction stays one).
     */
    static long chunkOf(long rows) {
        if (rows <= FOLD_MAX_ROWS) return 0;
        long best = 0, root = (long) Math.sqrt((double) rows);
        for (long d = 1; d * d <= rows; d++) {
            if (rows % d != 0) continue;
            for (long c : new long[]{d, rows / d})   // each divisor pair, smaller first (so a tie keeps the smaller chunk)
                if (c >= 32 && c <= rows / 2 && rows / c <= FOLD_MAX_ROWS && (best == 0 || Math.abs(c - root) < Math.abs(best - root))) best = c;
        }
        return best;
    }

    /**
     * A whole reduction whose first stage made more row results ({@code rows}) than one block should fold: those are
     * reduced in {@code chunk}s (a row kernel of {@code rows / chunk} rows, a block each), and the chunks' results into
     * the output, which the planner folds into the chunks' launch. A vocabulary-sized gradient's squared norm (128256 row
     * sums) is two launches where the last was one block reading half a megabyte.
     */
    private Buffer wholeInChunks(Node n, Op.Reduce r, Buffer rows, long chunk, long reduced, int last) {
        DType t = n.type().dtype();
        long count = rows.type().shape().numel() / chunk;
        Strided part = strided(new BufferValue(rows));
        Buffer chunks = register(new ComputedBuffer(next(), r.fn().opName(), Layout.flexible(t, Shape.of(count)),
                new Expr.Load(part.storage, part.offset, List.of(SymInt.of(chunk), SymInt.ONE), t), r.fn(), List.of(SymInt.of(chunk)), n.id()));
        decisions.add("%" + n.id() + " " + r.opName() + ": " + reduced + " elements into 1 reduced over dimension " + last + " first (" + rows.name() + ", "
                + rows.type().shape().numel() + " rows), then those rows in " + count + " chunks of " + chunk + " (" + chunks.name()
                + "), then the chunks: one block a row streams it, and no block reads more than " + FOLD_MAX_ROWS + " rows' results");
        // a scalar, so the planner folds it into the chunks' launch (a kept [1, 1] would loop over two dimensions of one); kept dims are a view
        Buffer whole = register(new ComputedBuffer(next(), r.fn().opName(), Layout.flexible(t, Shape.SCALAR),
                new Expr.Load(chunks, SymInt.ZERO, List.of(SymInt.ONE), t), r.fn(), List.of(SymInt.of(count)), n.id()));
        if (!r.keepdim()) return whole;
        Layout.Fixed src = viewSource(n, whole);
        return view(n, whole, new Layout.Fixed(t, n.type().shape(), java.util.Collections.nCopies(n.type().rank(), SymInt.ZERO), src.offset(), src.allocator()));
    }

    // ---------------------------------------------------------------- loads and views

    /** A buffer's storage, offset and strides as a view of it addresses them. */
    private record Strided(Buffer storage, SymInt offset, List<SymInt> strides) {}

    private Strided strided(Value v) {
        if (!(v instanceof BufferValue(Buffer b))) throw new IllegalStateException("not a buffer: " + v);
        if (b instanceof ViewBuffer view) return new Strided(view.base(), view.layout().offset(), view.layout().strides());
        Layout.Fixed f = b.layout().fix(); // a flexible buffer read by a loop is row-major; reading it does not fix it
        return new Strided(b, f.offset(), f.strides());
    }

    /** A load of {@code v} broadcast into an iteration space of shape {@code iter}. */
    private Expr load(Value v, Shape iter) {
        if (v instanceof ScalarValue(double value, DType dtype)) return new Expr.Constant(value, dtype);
        Buffer b = ((BufferValue) v).buffer();
        Strided s = strided(v);
        Shape src = b.type().shape();
        int r = iter.rank(), sr = src.rank();
        var strides = new ArrayList<SymInt>(r);
        for (int k = 0; k < r; k++) {
            int j = k - (r - sr);
            if (j < 0) { strides.add(SymInt.ZERO); continue; }
            Dim d = src.dim(j);
            strides.add(d.isStatic() && d.size() == 1 ? SymInt.ZERO : s.strides.get(j));
        }
        return new Expr.Load(s.storage, s.offset, strides, b.type().dtype());
    }

    private static Expr castTo(Expr e, DType t) { return e.dtype() == t ? e : new Expr.Cast(e, t); }

    /** The layout a view starts from; viewing a flexible buffer fixes its layout (the allocator is kept). */
    private Layout.Fixed viewSource(Node view, Buffer b) {
        if (b instanceof ViewBuffer v) return v.layout();
        if (b.layout().isFlexible()) {
            b.setLayout(b.layout().fix());
            fixedBecause.put(b, "%" + view.id() + " (" + view.op().opName() + ") views it");
            decisions.add(b.name() + ": layout fixed row-major because %" + view.id() + " (" + view.op().opName() + ") views it");
        }
        return b.layout().fix();
    }

    private Buffer view(Node n, Buffer b, Layout.Fixed layout) {
        return register(new ViewBuffer(next(), layout, b.storage(), n.op().opName(), n.id()));
    }

    /**
     * A reshape whose readers are all pointwise loops of its shape is not made ({@link ReshapeValue}): where its source is
     * a strided view this saves the copy a reshape of it needs, and a contiguous one the second loop shape, which keeps
     * its reader from joining the source's producer ({@code x.mul(2).permute(0, 2, 1, 3).reshape(8, 6, 8).exp()} is one
     * kernel). Static shapes only.
     */
    private Value reshapeValue(Node n, Op.Reshape r) {
        Value src = arg(n, 0);
        if (src instanceof BufferValue(Buffer b) && n.type().shape().isStatic() && b.type().shape().isStatic()
                && (!Strides.packed(b) || !Strides.sameIgnoringOnes(b.type().shape(), r.shape())) && readOnlyPointwise(n) && chainPays(n, true)) {
            decisions.add("%" + n.id() + " reshape: not made; its readers are pointwise loops of its shape, which run over "
                    + b.name() + "'s shape " + b.type().shape() + " instead");
            return new ReshapeValue(n, src, r.shape());
        }
        return new BufferValue(reshape(n, asBuffer(n.input(0)), r.shape()));
    }

    /** How many ops {@link #chainPays} looks at before it gives up (keeps lowering linear on long chains). */
    private static final int CHAIN_LIMIT = 64;

    /**
     * Whether computing the pointwise readers of {@code n} (a concatenation or a reshape) through it pays. They, and their
     * readers while they stay unmade, are computed through it; where that chain ends its result is made, and there no
     * pointwise op, collective or user op may read it: the first would read it in a pass of its own (where without this
     * rule it would have joined the chain's kernel), the others need a buffer of their own layout (symmetric memory, a
     * buffer a user op writes), which a concatenation is not. Through a reshape, every other operand must also have the
     * reshape's whole shape or be a scalar ({@link #reshapedLoad}; a broadcast one would make the reshape after all).
     */
    private boolean chainPays(Node n, boolean reshape) {
        var work = new ArrayDeque<Node>(List.of(n));
        int seen = 0;
        while (!work.isEmpty()) {
            Node v = work.pop();
            if (++seen > CHAIN_LIMIT) return false;
            for (Node u : graph.users(v)) {
                if (reshape)
                    for (Node x : u.inputs())
                        if (x != v && x.type().rank() > 0 && !x.type().shape().equals(n.type().shape())) return false;
                if (readOnlyPointwise(u)) work.push(u);
                else for (Node w : graph.users(u))
                    if (w.op() instanceof Op.Pointwise || w.op() instanceof Op.Cast || w.op() instanceof Op.Collective
                            || w.op() instanceof Op.Custom || w.symmetricGroup() != null) return false;
            }
        }
        return true;
    }

    /** {@code r} made: a view of its source where that is contiguous, of a copy otherwise; its node's value from now on. */
    private Buffer materialize(ReshapeValue r) {
        Buffer made = reshape(r.node(), ((BufferValue) made(r.source())).buffer(), r.shape());
        values[r.node().id()] = new BufferValue(made);
        return made;
    }

    /** The first input of {@code n} that is a reshape not made, of {@code n}'s shape; null if none. */
    private ReshapeValue reshapeRead(Node n) {
        for (Node x : n.inputs())
            if (values[x.id()] instanceof ReshapeValue r && x.type().shape().equals(n.type().shape())) return r;
        return null;
    }

    /**
     * Pointwise {@code n} of a reshape not made, {@code r}: one loop over the shape of {@code r}'s source, reading the
     * source as it lies (strided or not) and every other operand, which has {@code n}'s whole shape and is packed, at the
     * same row-major position (a reshape of packed memory is its row-major order). The loop's result is reshaped back
     * (not made either, when {@code n}'s readers are pointwise too). Any other operand (broadcast, strided) makes the
     * reshape after all, and {@code n} is one loop of its own shape as without this rule.
     */
    private Value throughReshape(Node n, ReshapeValue r) {
        Buffer source = ((BufferValue) r.source()).buffer();
        Shape shape = source.type().shape();
        for (Node x : n.inputs()) if (!(values[x.id()] instanceof ReshapeValue o && sameSource(o, r))) made(values[x.id()]);   // as in throughCat
        var loads = new ArrayList<Expr>(n.inputs().size());
        for (Node x : n.inputs()) {
            Expr e = reshapedLoad(values[x.id()], r, shape);
            if (e == null) {
                decisions.add("%" + n.id() + " " + n.op().opName() + ": " + x.label() + " is broadcast or strided, so the reshape "
                        + r.node().label() + " it reads is made after all");
                materialize(r);
                return new BufferValue(plainElementwise(n));
            }
            loads.add(e);
        }
        Buffer loop = elementwiseLoop(n, shape, loads);
        decisions.add("%" + n.id() + " " + n.op().opName() + ": computed over " + source.name() + "'s shape " + shape + " (" + loop.name()
                + ") through the reshape " + r.node().label() + ", and reshaped back");
        var out = new ReshapeValue(n, new BufferValue(loop), r.shape());
        return readOnlyPointwise(n) ? out : new BufferValue(materialize(out));
    }

    /** Operand {@code v} of a pointwise op through reshape {@code r}, loaded over the source's shape; null when it cannot be. */
    private Expr reshapedLoad(Value v, ReshapeValue r, Shape shape) {
        if (v instanceof ReshapeValue o && sameSource(o, r)) return load(o.source(), shape);
        if (v instanceof RecomputedValue m) v = new BufferValue(materialize(m));   // made above: read where it lies
        if (v instanceof ScalarValue) return load(v, shape);
        Buffer b = ((BufferValue) v).buffer();
        if (!b.type().shape().equals(r.shape()) || !Strides.packed(b)) return null;
        Strided s = strided(v);
        var strides = new ArrayList<>(shape.contiguousStrides());
        for (int d = 0; d < shape.rank(); d++) if (shape.dim(d).size() == 1) strides.set(d, SymInt.ZERO);   // as load() writes a size-1 dimension
        return new Expr.Load(s.storage(), s.offset(), strides, b.type().dtype());
    }

    /** Whether two reshapes not made reshape sources of one shape to one shape (their sources are buffers). */
    private static boolean sameSource(ReshapeValue a, ReshapeValue b) {
        return a.shape().equals(b.shape()) && ((BufferValue) a.source()).buffer().type().shape().equals(((BufferValue) b.source()).buffer().type().shape());
    }

    private Buffer reshape(Node n, Buffer b, Shape shape) {
        Layout.Fixed src = viewSource(n, b);
        if (!Strides.rowMajorIgnoringOnes(src.shape(), src.strides())) {
            decisions.add("%" + n.id() + " reshape: " + b.name() + " is not contiguous, so it is copied first");
            b = register(new ComputedBuffer(next(), "copy", Layout.flexible(b.type().dtype(), b.type().shape()),
                    load(new BufferValue(b), b.type().shape()), null, List.of(), -1));
            src = viewSource(n, b);
        }
        return view(n, b, new Layout.Fixed(src.dtype(), shape, shape.contiguousStrides(), src.offset(), src.allocator()));
    }

    private Buffer permute(Node n, Op.Permute p) {
        Buffer b = asBuffer(n.input(0));
        Layout.Fixed src = viewSource(n, b);
        var strides = new ArrayList<SymInt>();
        int rank = src.shape().rank();
        for (int d : p.perm()) strides.add(src.strides().get(d < 0 ? d + rank : d));
        return view(n, b, new Layout.Fixed(src.dtype(), n.type().shape(), strides, src.offset(), src.allocator()));
    }

    private Buffer slice(Node n, Op.Slice s) {
        Buffer b = asBuffer(n.input(0));
        Layout.Fixed src = viewSource(n, b);
        int d = s.dim() < 0 ? s.dim() + src.shape().rank() : s.dim();
        var strides = new ArrayList<>(src.strides());
        SymInt offset = src.offset().plus(src.strides().get(d).times(s.start()));
        strides.set(d, src.strides().get(d).times(s.step()));
        return view(n, b, new Layout.Fixed(src.dtype(), n.type().shape(), strides, offset, src.allocator()));
    }

    private Buffer expand(Node n, Op.Expand e) {
        Buffer b = asBuffer(n.input(0));
        Layout.Fixed src = viewSource(n, b);
        int r = e.shape().rank(), sr = src.shape().rank();
        var strides = new ArrayList<SymInt>();
        for (int k = 0; k < r; k++) {
            int j = k - (r - sr);
            if (j < 0) strides.add(SymInt.ZERO);
            else {
                Dim d = src.shape().dim(j);
                strides.add(d.isStatic() && d.size() == 1 && !e.shape().dim(k).equals(d) ? SymInt.ZERO : src.strides().get(j));
            }
        }
        return view(n, b, new Layout.Fixed(src.dtype(), e.shape(), strides, src.offset(), src.allocator()));
    }

    /** The value as a buffer; a scalar constant becomes a one-element loop. */
    private Buffer asBuffer(Node n) {
        Value v = made(values[n.id()]);
        if (v instanceof BufferValue(Buffer b)) return b;
        var s = (ScalarValue) v;
        Buffer b = register(new ComputedBuffer(next(), "scalar", Layout.flexible(s.dtype(), Shape.SCALAR), new Expr.Constant(s.value(), s.dtype()),
                null, List.of(), n.id()));
        values[n.id()] = new BufferValue(b);
        return b;
    }

    /** Input {@code i}'s value; a concatenation not made is made now (only pointwise readers go through one, {@link #throughCat}). */
    private Value arg(Node n, int i) { return made(values[n.input(i).id()]); }

    private Value made(Value v) {
        return switch (v) {
            case CatValue c -> new BufferValue(materialize(c));
            case ReshapeValue r -> new BufferValue(materialize(r));
            case RecomputedValue r -> new BufferValue(materialize(r));
            default -> v;
        };
    }

    /** {@code call} of {@code operands} into a contiguous result of {@code n}'s type. */
    private Value externCall(Node n, ExternCall call, List<Buffer> operands) {
        return new BufferValue(register(new ExternBuffer(next(), Layout.contiguous(n.type().dtype(), n.type().shape()), call, List.copyOf(operands), n.id())));
    }

    /**
     * Input 0 of a call that writes it in place ({@link dev.gatun.ir.graph.OpSpec#inPlace}): the state's slot where the
     * operand is a version of a state (the graph checked that nothing else reads that version); otherwise a copy of the
     * operand made for the call, so the operand itself is never written.
     */
    private Buffer inPlaceTarget(Node n, String op) {
        String state = graph.stateOf(n.input(0));
        if (state != null) {
            decisions.add("%" + n.id() + " " + op + ": written in place into state '" + state + "'");
            return ((BufferValue) arg(n, 0)).buffer();
        }
        Value v = arg(n, 0);
        TensorType t = n.input(0).type();
        Buffer target = register(new ComputedBuffer(next(), "copy", Layout.contiguous(t.dtype(), t.shape()), load(v, t.shape()), null, List.of(), -1));
        decisions.add(target.name() + ": copy of the operand of %" + n.id() + " " + op + ", which writes into it (the operand is no state)");
        return target;
    }

    /**
     * Input {@code i} of a registered op's call: where it lies, when the op reads it strided there
     * ({@link dev.gatun.ir.graph.OpSpec#readsStrided}: update_slice's update, a key transposed to [.., head_dim, 1], a
     * value head of the fused product), or of a flexible layout (fixed packed later); else packed row-major, copied first
     * where it is not.
     */
    private Buffer operand(Node n, Op.Registered r, int i) { return operand(arg(n, i), r, i); }

    private Buffer operand(Value v, Op.Registered r, int i) {
        if (v instanceof BufferValue(Buffer b) && Strides.readsStrided(b, r, i)) return b;
        return contiguous(v, r.opName());
    }

    /**
     * {@code add}, the sum of x and a scatter_add into zeros ({@link ScatterInto}), as one scatter_add into x: the call
     * copies x into its result and adds the source's rows there, where the zeros would have been filled, copied and the
     * sum read them back in a pass of its own.
     */
    private Value scatterInto(Node add, ScatterInto into) {
        Node scatter = into.scatterOf(add), x = into.targetOf(add);
        var r = (Op.Registered) scatter.op();
        var operands = new ArrayList<Buffer>();
        operands.add(operand(made(values[x.id()]), r, 0));
        for (int i = 1; i < scatter.inputs().size(); i++) operands.add(operand(scatter, r, i));
        Buffer call = register(new ExternBuffer(next(), Layout.contiguous(add.type().dtype(), add.type().shape()), new ExternCall.Registered(r.spec(), r.attrs()),
                operands, add.id()));
        decisions.add("%" + add.id() + " add: computed as scatter_add(" + operands.getFirst().name() + ", ...) of %" + scatter.id() + "'s index and source into "
                + call.name() + ": %" + x.id() + " takes the zeros' place, so no zeros are made and no pass adds them (x gets the source's"
                + " rows added after it, not before)");
        return new BufferValue(call);
    }

    /**
     * A matrix product: an operand that is the transposed view of packed memory (its last two dimensions swapped, as
     * {@code w.transpose(-2, -1)} of a packed {@code w} is) is read as it lies with the product's transpose flag;
     * anything else not packed is copied, as for every extern call.
     */
    private Value matmul(Node n) {
        if (readOnlyTransposed(n)) return transposedProduct(n);
        var operands = new ArrayList<Buffer>();
        boolean[] trans = new boolean[2];
        for (int i = 0; i < 2; i++) operands.add(productOperand(n, arg(n, i), trans, i));
        return externCall(n, new ExternCall.Matmul(trans[0], trans[1]), operands);
    }

    /** Operand {@code i} of product {@code n}: a transposed view of packed memory as it lies (flag set), else packed. */
    private Buffer productOperand(Node n, Value v, boolean[] trans, int i) {
        if (v instanceof BufferValue(Buffer b) && !Strides.packed(b) && Strides.transposedPacked(b)) {
            trans[i] = true;
            decisions.add("%" + n.id() + " matmul: " + b.name() + " is read transposed as it lies (its last two dimensions are swapped), with no copy");
            return b;
        }
        return contiguous(v, "matmul");
    }

    /**
     * Whether every reader of product {@code n} (two matrices, no batch) reads it transposed ({@code permute [1, 0]}), and
     * it is no graph output: a weight's gradient {@code (x^T dy)^T} of {@code y = x w^T}. Computed as it is, each reader
     * would read it column by column (a row kernel over a transposed tensor reads one element per 32-byte sector).
     */
    private boolean readOnlyTransposed(Node n) {
        if (n.type().rank() != 2 || n.input(0).type().rank() != 2 || n.input(1).type().rank() != 2 || graph.isOutput(n)
                || n.symmetricGroup() != null || graph.users(n).isEmpty()) return false;
        for (Node u : graph.users(n))
            if (!(u.op() instanceof Op.Permute p) || u.symmetricGroup() != null || !Integer.valueOf(1).equals(n.type().shape().normalizeDim(p.perm().get(0))))
                return false;
        return true;
    }

    /**
     * Product {@code n = A B}, read only transposed ({@link #readOnlyTransposed}), computed transposed: {@code B^T A^T}
     * into a packed buffer of the transposed shape, and {@code n} a transposed view of it, so each reader's transpose
     * is packed again and read row by row. Each operand's transpose is a view (a transposed operand's is packed, a
     * packed one's is read with the product's transpose flag); the same products and sums, so the same values.
     */
    private Value transposedProduct(Node n) {
        Buffer a = asBuffer(n.input(0)), b = asBuffer(n.input(1));
        boolean[] trans = new boolean[2];
        var operands = List.of(productOperand(n, new BufferValue(transposedView(n, b)), trans, 0),
                productOperand(n, new BufferValue(transposedView(n, a)), trans, 1));
        Shape s = n.type().shape();
        Shape swapped = new Shape(List.of(s.dim(1), s.dim(0)));
        Buffer product = register(new ExternBuffer(next(), Layout.contiguous(n.type().dtype(), swapped), new ExternCall.Matmul(trans[0], trans[1]),
                operands, n.id()));
        decisions.add("%" + n.id() + " matmul: every reader reads it transposed, so it is computed transposed, " + operands.get(0).name()
                + (trans[0] ? ".mT" : "") + " x " + operands.get(1).name() + (trans[1] ? ".mT" : "") + " into " + product.name() + " " + swapped
                + ", and its readers read that row by row");
        return new BufferValue(transposedView(n, product));
    }

    /** A view of {@code b} with its two dimensions swapped. */
    private Buffer transposedView(Node n, Buffer b) {
        Layout.Fixed src = viewSource(n, b);
        Shape s = src.shape();
        var layout = new Layout.Fixed(src.dtype(), new Shape(List.of(s.dim(1), s.dim(0))), List.of(src.strides().get(1), src.strides().get(0)),
                src.offset(), src.allocator());
        return register(new ViewBuffer(next(), layout, b.storage(), "transpose", n.id()));
    }

    /** Extern calls read packed row-major memory (a view may still start at an offset); anything else is copied. */
    private Buffer contiguous(Value v, String why) {
        Buffer b = v instanceof BufferValue(Buffer x) ? x : null;
        if (b != null && Strides.packed(b)) return b;
        TensorType t = b != null ? b.type() : new TensorType(((ScalarValue) v).dtype(), Shape.SCALAR);
        Buffer copy = register(new ComputedBuffer(next(), "copy", Layout.flexible(t.dtype(), t.shape()), load(v, t.shape()), null, List.of(), -1));
        decisions.add(copy.name() + ": copy of " + (b == null ? "a scalar" : b.name()) + " because " + why + " reads packed row-major memory");
        return copy;
    }

    // ---------------------------------------------------------------- concatenation

    /**
     * A concatenation: one row-major storage ({@link ConcatBuffer}) that each part's producer writes straight into
     * where it can ({@link #inPlaceBlocker}); where it cannot, a copy loop writes the part, and the decision says why.
     * A part's writer gets the layout of its slice: its own row-major strides where the slice is contiguous (every
     * dimension before {@code dim} has size 1), the concatenation's otherwise; offset 0 at the slice's first element.
     */
    private Value cat(Node n, Op.Cat c) {
        if (n.inputs().size() == 1) {
            decisions.add(n.label() + " cat: of one tensor, which is the result itself");
            return arg(n, 0);
        }
        int d = dev.gatun.ir.graph.TypeInference.catDim("cat", c.dim(), n.type().rank());
        var parts = new ArrayList<Value>(n.inputs().size());
        var shapes = new ArrayList<Shape>(n.inputs().size());
        long[] starts = new long[n.inputs().size()];
        long start = 0;
        for (int k = 0; k < starts.length; k++) {
            parts.add(arg(n, k));
            shapes.add(n.input(k).type().shape());
            starts[k] = start;
            start += n.input(k).type().shape().dim(d).size();
        }
        var cat = new CatValue(n, d, parts, starts, shapes);
        // a matrix product (any extern call) writes its slice itself and its readers read the made concatenation in one pass:
        // computing them part by part would only take the product out of its slice into a buffer of its own
        boolean externPart = parts.stream().anyMatch(v -> v instanceof BufferValue(Buffer b) && (b instanceof ExternBuffer || b instanceof ExternOutputBuffer));
        if (externPart || !readOnlyPointwise(n) || !chainPays(n, false)) return new BufferValue(materialize(cat));
        decisions.add(n.label() + " cat: not made; its readers are pointwise loops of its shape, which compute each part's slice of their results");
        return cat;
    }

    /**
     * Whether every reader of {@code n} is a pointwise loop (or cast) of {@code n}'s shape outside symmetric regions, and
     * {@code n} no graph output: such readers go through a concatenation part by part ({@link #throughCat}).
     */
    private boolean readOnlyPointwise(Node n) {
        if (graph.isOutput(n) || n.symmetricGroup() != null) return false;
        for (Node u : graph.users(n))
            if (!(u.op() instanceof Op.Pointwise || u.op() instanceof Op.Cast) || u.symmetricGroup() != null
                    || !u.type().shape().equals(n.type().shape())) return false;
        return true;
    }

    /** The first input of {@code n} that is a concatenation not made, of {@code n}'s shape; null if none. */
    private CatValue catRead(Node n) {
        for (Node x : n.inputs())
            if (values[x.id()] instanceof CatValue c && x.type().shape().equals(n.type().shape())) return c;
        return null;
    }

    /**
     * Pointwise {@code n} of a concatenation not made, {@code cat}: one loop per part, over the part's slice of {@code n}'s
     * result, reading the part itself (or, for another such concatenation with the same parts' bounds, its part) and the
     * same slice of every other operand (the whole operand where it is broadcast along the joined dimension). The loops
     * make a concatenation again (not made either, when {@code n}'s readers are pointwise too): {@code cat(a + 1, b + 2) * 3}
     * is {@code cat((a + 1) * 3, (b + 2) * 3)}, each part a loop that fusion joins to the part's producer.
     */
    private Value throughCat(Node n, CatValue cat) {
        // whatever is made is made before any load is built: making a concatenation gives its parts the layout of their
        // slices, which a load of one built earlier would not see
        for (Node x : n.inputs()) if (!(values[x.id()] instanceof CatValue c && sameBounds(c, cat))) made(values[x.id()]);
        var pieces = new ArrayList<Value>(cat.parts().size());
        for (int k = 0; k < cat.parts().size(); k++) {
            Shape shape = cat.shapes().get(k);
            var loads = new ArrayList<Expr>(n.inputs().size());
            for (Node x : n.inputs()) loads.add(sliceLoad(values[x.id()], cat, k, shape));
            pieces.add(new BufferValue(elementwiseLoop(n, shape, loads)));
        }
        var out = new CatValue(n, cat.dim(), pieces, cat.starts(), cat.shapes());
        decisions.add("%" + n.id() + " " + n.op().opName() + ": computed part by part through " + cat.node().label() + " cat ("
                + String.join(", ", pieces.stream().map(v -> ((BufferValue) v).buffer().name()).toList()) + ")");
        return readOnlyPointwise(n) ? out : new BufferValue(materialize(out));
    }

    /** Operand {@code v} loaded over part {@code k} of {@code cat}, whose shape is {@code shape}. */
    private Expr sliceLoad(Value v, CatValue cat, int k, Shape shape) {
        if (v instanceof CatValue c && sameBounds(c, cat)) return load(c.parts().get(k), shape);
        if (v instanceof RecomputedValue r) v = new BufferValue(materialize(r));   // made above: read where it lies
        Expr e = load(v, shape);
        if (!(e instanceof Expr.Load l)) return e;   // a scalar
        SymInt step = l.strides().get(cat.dim());   // the operand broadcast into the concatenation's rank: zero where broadcast along it
        return step.equals(SymInt.ZERO) ? l : new Expr.Load(l.storage(), l.offset().plus(step.times(cat.starts()[k])), l.strides(), l.dtype());
    }

    private static boolean sameBounds(CatValue a, CatValue b) {
        return a.dim() == b.dim() && java.util.Arrays.equals(a.starts(), b.starts()) && a.node().type().shape().equals(b.node().type().shape());
    }

    /** {@code cat} made: one storage its parts write (see {@link #concat}); its node's value from now on. */
    private Buffer materialize(CatValue cat) {
        var parts = new ArrayList<Buffer>(cat.parts().size());
        for (Value v : cat.parts()) parts.add(v instanceof BufferValue(Buffer b) ? b : materialize((CatValue) v));
        Buffer made = concat(cat.node(), cat.dim(), parts);
        values[cat.node().id()] = new BufferValue(made);
        return made;
    }

    /**
     * The concatenation {@code n} of {@code parts} along {@code d}, each part written straight into its slice where its
     * producer can ({@link #inPlaceBlocker}), by a copy otherwise.
     */
    private Buffer concat(Node n, int d, List<Buffer> parts) {
        Shape shape = n.type().shape();
        DType dtype = n.type().dtype();
        Layout.Fixed layout = Layout.contiguous(dtype, shape);
        boolean contiguousSlices = true;
        for (int k = 0; k < d; k++) contiguousSlices &= shape.dim(k).isStatic() && shape.dim(k).size() == 1;
        var pending = new ArrayList<ConcatBuffer.Pending>();
        var taken = java.util.Collections.newSetFromMap(new IdentityHashMap<Buffer, Boolean>());
        long start = 0;
        for (Buffer b : parts) {
            Shape part = b.type().shape();
            long size = part.dim(d).size();
            SymInt offset = layout.strides().get(d).times(start);
            var at = new Layout.Fixed(dtype, part, contiguousSlices ? part.contiguousStrides() : layout.strides(), SymInt.ZERO, AllocatorType.DEFAULT);
            String why = taken.contains(b) ? b.name() + " is already written into an earlier slice of this concatenation"
                    : inPlaceBlocker(b, contiguousSlices, d);
            Buffer writer = b;
            if (why == null) {
                taken.add(b);
                b.setLayout(at);
                fixedBecause.put(b, "it is written straight into its slice of the concatenation " + n.label());
            } else {
                writer = register(new ComputedBuffer(next(), "copy", at, load(new BufferValue(b), part), null, List.of(), -1));
            }
            pending.add(new ConcatBuffer.Pending(writer, b, start, start + size, offset, why));
            start += size;
        }
        var cat = (ConcatBuffer) register(new ConcatBuffer(next(), layout, d, pending, n.id()));
        for (ConcatBuffer.Part p : cat.parts())
            decisions.add(p.inPlace()
                    ? p.writer().name() + ": written straight into its slice " + p.range() + " of " + n.label() + " cat"
                    : p.writer().name() + ": copy of " + p.source().name() + " into " + p.range() + " of " + n.label() + " cat because " + p.copied());
        return cat;
    }

    /**
     * Null when {@code b}'s producer can write it straight into its slice: a loop (pointwise or reduction) or a matrix
     * product, in regular memory, not yet placed in another concatenation; where the slice is strided, also not yet
     * read by anything (which would have addressed it row-major). Otherwise why not, for the copy's note.
     */
    private String inPlaceBlocker(Buffer b, boolean contiguousSlice, int dim) {
        if (b instanceof InputBuffer in) return b.name() + " is a graph input";
        if (b instanceof ConstantBuffer) return b.name() + " is a constant";
        if (b instanceof ViewBuffer v) return b.name() + (v.viewOp().matches("[aeiou].*") ? " is an " : " is a ") + v.viewOp() + " view of " + v.base().name();
        if (b.slice() != null) return b.name() + " is already written into " + b.slice().range();
        if (b instanceof ExternOutputBuffer o) return b.name() + " is written by " + (o.call().call() instanceof ExternCall.UserOpCall ? "user op '" : "op '")
                + o.call().call().opName() + "', which writes buffers of its own";
        if (b instanceof ExternBuffer e && e.call() instanceof ExternCall.UserOpCall)
            return b.name() + " is written by user op '" + e.call().opName() + "', which writes buffers of its own";
        if (b instanceof ExternBuffer e && !(e.call() instanceof ExternCall.Matmul))   // a collective, index_select, argmax
            return b.name() + " is the result of " + e.call().opName() + ", which writes a buffer of its own";
        if (b.isSymmetric() || b.layout() instanceof Layout.CommBuffer)
            return b.name() + " lives in symmetric memory of group '" + b.layout().allocator().group() + "', where a collective reads it";
        if (!b.layout().isFlexible() && !Strides.packed(b)) return b.name() + " has a strided layout of its own";
        if (b instanceof ConcatBuffer && !contiguousSlice)
            return b.name() + " is a concatenation itself, which goes inside another only where its slice is contiguous";
        if (!contiguousSlice && firstReader.get(b.id()) != null)
            return b.name() + " is already read row-major by " + firstReader.get(b.id()) + ", and its slice along dimension " + dim + " is strided";
        return null;
    }

    // ---------------------------------------------------------------- collectives and symmetric memory

    private Buffer collective(Node n, Op.Collective c) {
        TensorType t = n.input(0).type();
        var choice = oneRank(c) ? new CollectiveChoice(Algorithm.NCCL, "over \"" + c.group() + "\", a group of one rank: the rows are copied through, no peer")
                : CollectiveChoice.of(n, c, t, options);
        String out = next();
        String op = c.kind().opName() + "." + choice.algorithm().opName();
        // an uneven all_to_all's peers read its row counts as they read its rows: both take the same path
        var operands = new ArrayList<Buffer>();
        for (int i = 0; i < n.inputs().size(); i++) operands.add(operand(n, i, c, choice, out, op));
        decisions.add(out + ": " + op + " (" + choice.why() + ")");
        var call = new ExternCall.Collective(c.kind(), c.reduceOp(), c.group(), c.root(), choice.algorithm());
        return register(new ExternBuffer(out, receiveLayout(n, c, choice, out), call, operands, n.id()));
    }

    /**
     * The layout of a collective's result: row-major in regular memory, but for an uneven all_to_all on symmetric memory
     * a communication buffer of its group, the receive buffer of {@code capacity} rows the senders write their rows
     * into (docs/DESIGN.md, "all-to-all"); a graph output stays regular, the members then reading the senders' rows.
     */
    private Layout receiveLayout(Node n, Op.Collective c, CollectiveChoice choice, String out) {
        Layout plain = Layout.contiguous(n.type().dtype(), n.type().shape());
        if (!c.uneven() || !choice.algorithm().isSymmetric() || !n.type().shape().isStatic()) return plain;
        String rows = n.type().shape().dim(0).size() + " rows (the capacity)";
        if (graph.isOutput(n)) {
            decisions.add(out + ": receive buffer of " + rows + " in regular memory because it is a graph output; each member reads the senders' rows");
            return plain;
        }
        decisions.add(out + ": receive buffer of " + rows + " in symmetric memory of group '" + c.group() + "': the senders write their rows into it");
        return Layout.CommBuffer.of(plain, CommBufferType.SYMM_MEM, c.group());
    }

    /** Input {@code i} of collective {@code n} made what its algorithm reads: a communication buffer, or packed memory. */
    private Buffer operand(Node n, int i, Op.Collective c, CollectiveChoice choice, String out, String op) {
        Buffer in = asBuffer(n.input(i));
        if (choice.algorithm().isSymmetric()) {
            // two-shot reduces into its input's slot, so that input must be private to the collective
            String shared = choice.algorithm() == Algorithm.TWO_SHOT ? paths.sharedInput(n.input(i)) : null;
            return paths.realize(in, c.group(), out, op, choice.algorithm(), choice.why(), shared);
        }
        if (choice.algorithm() == Algorithm.BARRIER_FREE) {
            realizations.add(new Realization(out, op, choice.algorithm(), choice.why(), in.name(), Realization.Path.PUSHED, null, List.of()));
            return contiguous(new BufferValue(in), "the barrier-free push");
        }
        realizations.add(new Realization(out, op, choice.algorithm(), choice.why(), in.name(), Realization.Path.NONE, null,
                List.of("no communication buffer: " + choice.algorithm().opName() + " runs through NCCL's own buffers")));
        return contiguous(new BufferValue(in), "NCCL");
    }

    /** Whether the collective runs among one rank (a world of one, or a group or mesh slice of one rank). */
    private boolean oneRank(Op.Collective c) {
        return graph.groups().get(c.group()).size(options.worldSize()) == 1;
    }

    /** A collective among one rank is the identity: its value is its input's, and nothing is planned for it. */
    private Value identity(Node n, Op.Collective c) {
        Value in = arg(n, 0);
        String input = in instanceof BufferValue(Buffer b) ? b.name() : "a scalar";
        String why = "over \"" + c.group() + "\", " + (options.worldSize() == 1 ? "a world of one rank" : "a group of one rank") + ": the identity";
        realizations.add(new Realization(input, c.kind().opName(), null, why, input, Realization.Path.IDENTITY, null, List.of()));
        decisions.add(n.label() + ": " + c.kind().opName() + " " + why);
        return in;
    }

    private Buffer userOp(Node n, Op.Custom c) {
        UserOp u = graph.userOps().get(c.name());
        String group = n.symmetricGroup() != null ? n.symmetricGroup() : ProcessGroup.WORLD_NAME;
        String out = next();
        var operands = new ArrayList<Buffer>();
        for (int i = 0; i < n.inputs().size(); i++) {
            Buffer in = asBuffer(n.input(i));
            if (u.requiresSymmetric(i)) {
                if (!in.type().shape().isStatic())
                    throw new CompilationException("user op '" + u.name() + "': input " + i + " (" + n.input(i).describe()
                            + ") must be in symmetric memory, which needs a static shape");
                operands.add(paths.realize(in, group, out, u.name() + " input " + i, null, null, null));
            } else {
                operands.add(contiguous(new BufferValue(in), "user op '" + u.name() + "'"));
            }
        }
        var call = new ExternBuffer(out, Layout.contiguous(n.type().dtype(), n.type().shape()), new ExternCall.UserOpCall(u, group), operands, n.id());
        register(call);
        // every output is written by the call, used or not, so each gets a buffer
        var types = u.outputTypes(n.inputs().stream().map(Node::type).toList());
        for (int i = 1; i < types.size(); i++) {
            var extra = new ExternOutputBuffer(next(), Layout.contiguous(types.get(i).dtype(), types.get(i).shape()), call, i, -1);
            call.addExtraOutput(extra);
            register(extra);
        }
        return call;
    }

    /**
     * A registered op's call ({@link dev.gatun.ir.graph.OpSpec}): its inputs packed row-major (copied where not), its
     * first output this call's buffer, each further one an {@link ExternOutputBuffer}, written whether used or not.
     */
    private Buffer registered(Node n, Op.Registered r) {
        var operands = new ArrayList<Buffer>();
        if (r.spec().inPlace()) operands.add(inPlaceTarget(n, r.opName()));
        for (int i = operands.size(); i < n.inputs().size(); i++) operands.add(operand(n, r, i));
        var call = new ExternBuffer(next(), Layout.contiguous(n.type().dtype(), n.type().shape()), new ExternCall.Registered(r.spec(), r.attrs()), operands, n.id());
        register(call);
        var types = r.spec().infer(n.inputs().stream().map(dev.gatun.ir.graph.OpSpec.Operand::of).toList(), r.attrs());
        for (int i = 1; i < types.size(); i++) {
            var extra = new ExternOutputBuffer(next(), Layout.contiguous(types.get(i).dtype(), types.get(i).shape()), call, i, -1);
            call.addExtraOutput(extra);
            register(extra);
        }
        return call;
    }

    /** Outputs never live in a communication pool (it is released before the call returns): copy them out. */
    private Buffer outputBuffer(String name, Node n) {
        Buffer b = asBuffer(n);
        if (!b.isSymmetric()) return b;
        Buffer copy = register(new ComputedBuffer(next(), "copy", Layout.flexible(b.type().dtype(), b.type().shape()),
                load(new BufferValue(b), b.type().shape()), null, List.of(), -1));
        decisions.add(copy.name() + ": output '" + name + "' is copied out of symmetric memory (" + b.name() + ")");
        return copy;
    }

    // ---------------------------------------------------------------- naming

    private Buffer register(Buffer b) {
        b.setId(buffers.size());   // its place in the lowered graph (which keeps the order of registering)
        buffers.add(b);
        firstReader.add(null);
        if (b instanceof ComputedBuffer c) noteReads(c.body(), b.name());   // a walk of the body, no set made: this runs for every buffer
        else for (Buffer r : b.reads()) noteRead(r, b.name());
        return b;
    }

    private void noteRead(Buffer read, String by) {
        if (firstReader.get(read.id()) == null) firstReader.set(read.id(), by);
    }

    private void noteReads(Expr e, String by) {
        switch (e) {
            case Expr.Load l -> noteRead(l.storage(), by);
            case Expr.Apply a -> { for (Expr x : a.args()) noteReads(x, by); }
            case Expr.Cast c -> noteReads(c.x(), by);
            case Expr.Constant c -> { }
        }
    }

    /** A new buffer's name: unique without a lookup, since {@link #inputName} never makes one of the form {@code bufN}. */
    private String next() { return "buf" + counter++; }

    private String inputName(String name) {
        String n = name.matches("[A-Za-z_][A-Za-z0-9_]*") && !name.matches("buf[0-9]+") ? name : "in_" + name.replaceAll("[^A-Za-z0-9_]", "_");
        while (!inputNames.add(n)) n = n + "_";
        return n;
    }
}
