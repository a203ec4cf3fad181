package dev.gatun.lowering;

import dev.gatun.ir.CompilationException;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Layout;
import dev.gatun.ir.CommBufferType;
import dev.gatun.ir.AllocatorType;
import dev.gatun.ir.ByteSize;
import dev.gatun.ir.Shape;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.CollectiveKind;
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

    /** A lowered node: a buffer, or a scalar constant that loops inline. */
    private sealed interface Value {}

    private record BufferValue(Buffer buffer) implements Value {}

    private record ScalarValue(double value, DType dtype) implements Value {}

    private Lowering(Graph graph, LoweringOptions options) {
        this.graph = graph;
        this.options = options;
        this.values = new Value[graph.nodes().size()];
    }

    public static LoweredGraph lower(Graph graph, LoweringOptions options) {
        return new Lowering(graph, options).run();
    }

    private LoweredGraph run() {
        checkWorld();
        boolean[] live = liveNodes();
        for (Node n : graph.nodes()) {
            if (!live[n.id()]) {
                decisions.add("%" + n.id() + " " + n.op().opName() + ": dropped, no output depends on it");
                continue;
            }
            Value v = lowerNode(n);
            values[n.id()] = v;
            if (n.symmetricGroup() != null && v instanceof BufferValue(Buffer b)) placeInRegion(n, b);
        }
        var outputs = new LinkedHashMap<String, Buffer>();
        graph.outputs().forEach((name, node) -> outputs.put(name, outputBuffer(name, node)));
        return new LoweredGraph(graph, options, buffers, inputs, outputs, realizations, decisions);
    }

    // ---------------------------------------------------------------- checks and dead code

    private void checkWorld() {
        Integer declared = graph.worldSize();
        if (declared != null && declared != options.worldSize()) {
            var axes = graph.groups().values().stream().filter(ProcessGroup::isMeshAxis).map(ProcessGroup::name).toList();
            throw new CompilationException("graph '" + graph.name() + "' was built for a world of " + declared + " ranks"
                    + (axes.isEmpty() ? "" : " (its mesh of axes " + axes + ")") + " but is compiled for " + options.worldSize());
        }
        for (ProcessGroup g : graph.groups().values())
            for (int r : g.ranks())
                if (r >= options.worldSize())
                    throw new CompilationException("group '" + g.name() + "' has rank " + r + ", outside a world of " + options.worldSize());
        // what the graph could not check before the world size was known
        for (Node n : graph.nodes()) {
            if (!(n.op() instanceof Op.Collective c)) continue;
            ProcessGroup g = graph.groups().get(c.group());
            if (!g.coversEveryRank(options.worldSize()))   // describing the operand is only for the error: not per collective
                dev.gatun.ir.graph.TypeInference.checkCoversEveryRank(c, n.input(0).describe(), g, options.worldSize());
            int size = g.size(options.worldSize());
            if (c.kind() == CollectiveKind.BROADCAST && c.root() >= size)
                throw new CompilationException(n.format() + ": broadcast root " + c.root() + " is not a rank of group '" + g.name() + "', which has "
                        + size + " rank" + (size == 1 ? "" : "s") + " in a world of " + options.worldSize());
        }
    }

    /** Whether each node (by id) is needed: an output depends on it, or it updates a state. */
    private boolean[] liveNodes() {
        var live = new boolean[graph.nodes().size()];
        var work = new ArrayDeque<>(graph.outputs().values());
        // an update of a state is kept whether or not an output reads it: the state holds it after the call
        for (Node n : graph.nodes()) if (Graph.writesInPlace(n) && graph.stateOf(n) != null) work.add(n);
        while (!work.isEmpty()) {
            Node n = work.pop();
            if (!live[n.id()]) {
                live[n.id()] = true;
                work.addAll(n.inputs());
            }
        }
        return live;
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
            case Op.Pointwise p -> new BufferValue(pointwise(n, p.fn()));
            case Op.Cast c -> new BufferValue(computed(n, "cast", castTo(load(arg(n, 0), n.type().shape()), n.type().dtype())));
            case Op.Reduce r -> new BufferValue(reduction(n, r));
            case Op.Matmul m -> matmul(n);
            case Op.Registered r -> new BufferValue(registered(n, r));
            case Op.Collective c -> oneRank(c) && !c.uneven() ? identity(n, c) : new BufferValue(collective(n, c));
            case Op.Reshape r -> new BufferValue(reshape(n, r));
            case Op.Permute p -> new BufferValue(permute(n, p));
            case Op.Slice s -> new BufferValue(slice(n, s));
            case Op.Expand e -> new BufferValue(expand(n, e));
            case Op.Cat c -> cat(n, c);
            case Op.Custom c -> new BufferValue(userOp(n, c));
            case Op.CustomOutput o -> {
                var call = (ExternBuffer) ((BufferValue) values[n.input(0).id()]).buffer();
                yield new BufferValue(call.extraOutputs().get(o.index() - 1));
            }
        };
    }

    private Buffer pointwise(Node n, PointwiseFn fn) {
        DType compute = computeType(n, fn);
        var args = new ArrayList<Expr>();
        for (int i = 0; i < n.inputs().size(); i++) {
            Expr e = load(arg(n, i), n.type().shape());
            boolean isCondition = fn == PointwiseFn.WHERE && i == 0;
            args.add(isCondition ? e : castTo(e, compute));
        }
        String label = fn == PointwiseFn.IDENTITY ? "copy" : fn.opName();
        return computed(n, label, new Expr.Apply(fn, args, n.type().dtype()));
    }

    /** The type arithmetic happens in: promoted inputs (float for transcendental functions), as TypeInference decides. */
    private static DType computeType(Node n, PointwiseFn fn) {
        if (fn == PointwiseFn.WHERE) return n.type().dtype();
        DType t = dev.gatun.ir.graph.TypeInference.resultType(n.inputs());
        if (fn.needsFloat() && !t.isFloating()) t = DType.FLOAT32;
        return t;
    }

    private Buffer computed(Node n, String label, Expr body) {
        return register(new ComputedBuffer(next(), label, Layout.flexible(n.type().dtype(), n.type().shape()), body, null, List.of(), n.id()));
    }

    private Buffer reduction(Node n, Op.Reduce r) {
        Node x = n.input(0);
        var dims = dev.gatun.ir.graph.TypeInference.reductionDims(r.opName(), x, r.dims());
        Strided src = strided(values[x.id()]);
        var strides = new ArrayList<SymInt>();
        for (int d = 0; d < x.type().rank(); d++) {
            if (dims.contains(d)) {
                if (r.keepdim()) strides.add(SymInt.ZERO);
            } else strides.add(src.strides.get(d));
        }
        var reductionRanges = new ArrayList<SymInt>();
        for (int d : dims) {
            strides.add(src.strides.get(d));
            reductionRanges.add(x.type().shape().dim(d).asSymInt());
        }
        Expr body = castTo(new Expr.Load(src.storage, src.offset, strides, x.type().dtype()), n.type().dtype());
        return register(new ComputedBuffer(next(), r.fn().opName(), Layout.flexible(n.type().dtype(), n.type().shape()), body,
                r.fn(), reductionRanges, n.id()));
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

    private Buffer reshape(Node n, Op.Reshape r) {
        Buffer b = asBuffer(n.input(0));
        Layout.Fixed src = viewSource(n, b);
        if (!src.strides().equals(src.shape().contiguousStrides()) && !rowMajorIgnoringOnes(src.shape(), src.strides())) {
            decisions.add("%" + n.id() + " reshape: " + b.name() + " is not contiguous, so it is copied first");
            b = register(new ComputedBuffer(next(), "copy", Layout.flexible(b.type().dtype(), b.type().shape()),
                    load(new BufferValue(b), b.type().shape()), null, List.of(), -1));
            src = viewSource(n, b);
        }
        return view(n, b, new Layout.Fixed(src.dtype(), r.shape(), r.shape().contiguousStrides(), src.offset(), src.allocator()));
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
        Value v = values[n.id()];
        if (v instanceof BufferValue(Buffer b)) return b;
        var s = (ScalarValue) v;
        Buffer b = register(new ComputedBuffer(next(), "scalar", Layout.flexible(s.dtype(), Shape.SCALAR), new Expr.Constant(s.value(), s.dtype()),
                null, List.of(), n.id()));
        values[n.id()] = new BufferValue(b);
        return b;
    }

    private Value arg(Node n, int i) { return values[n.input(i).id()]; }

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
    private Buffer operand(Node n, Op.Registered r, int i) {
        Value v = arg(n, i);
        if (v instanceof BufferValue(Buffer b) && readsStrided(b, r, i)) return b;
        return contiguous(v, r.opName());
    }

    private static boolean readsStrided(Buffer b, Op.Registered r, int input) {
        if (b.layout().isFlexible()) return false;   // packed as it is (contiguous() keeps it)
        Shape s = b.type().shape();
        var strides = b.layout().fix().strides();
        if (!s.isStatic() || !strides.stream().allMatch(SymInt::isConstant)) return false;
        long[] sizes = new long[s.rank()], st = new long[s.rank()];
        for (int d = 0; d < sizes.length; d++) {
            sizes[d] = s.dim(d).size();
            st[d] = strides.get(d).eval(java.util.Map.of());
        }
        return r.spec().readsStrided(input, sizes, st, r.attrs());
    }

    /**
     * Whether a static shape's elements lie one after the other in row-major order at these strides, whatever the
     * strides of its size-1 dimensions (a run of heads sliced from a product of batch 1, a key transposed to
     * [.., head_dim, 1]): then it is packed memory from its offset on.
     */
    private static boolean rowMajorIgnoringOnes(Shape s, List<SymInt> strides) {
        if (!s.isStatic()) return false;
        long want = 1;
        for (int d = s.rank() - 1; d >= 0; d--) {
            long size = s.dim(d).size();
            if (size != 1 && !strides.get(d).equals(SymInt.of(want))) return false;
            want *= size;
        }
        return true;
    }

    /**
     * A matrix product: an operand that is the transposed view of packed memory (its last two dimensions swapped, as
     * {@code w.transpose(-2, -1)} of a packed {@code w} is) is read as it lies with the product's transpose flag;
     * anything else not packed is copied, as for every extern call.
     */
    private Value matmul(Node n) {
        var operands = new ArrayList<Buffer>();
        boolean[] trans = new boolean[2];
        for (int i = 0; i < 2; i++) {
            Value v = arg(n, i);
            if (v instanceof BufferValue(Buffer b) && !packed(b) && transposedPacked(b)) {
                trans[i] = true;
                operands.add(b);
                decisions.add("%" + n.id() + " matmul: " + b.name() + " is read transposed as it lies (its last two dimensions are swapped), with no copy");
            } else {
                operands.add(contiguous(v, "matmul"));
            }
        }
        return externCall(n, new ExternCall.Matmul(trans[0], trans[1]), operands);
    }

    /** Whether {@code b}'s strides are the packed strides of its shape with the last two dimensions swapped. */
    private static boolean transposedPacked(Buffer b) {
        if (b.layout().isFlexible() || b.type().shape().rank() < 2) return false;
        Shape s = b.type().shape();
        int r = s.rank();
        var dims = new ArrayList<>(s.dims());
        java.util.Collections.swap(dims, r - 2, r - 1);
        var strides = new ArrayList<>(new Shape(dims).contiguousStrides());
        java.util.Collections.swap(strides, r - 2, r - 1);
        return b.layout().fix().strides().equals(strides);
    }

    /** Extern calls read packed row-major memory (a view may still start at an offset); anything else is copied. */
    private Buffer contiguous(Value v, String why) {
        Buffer b = v instanceof BufferValue(Buffer x) ? x : null;
        if (b != null && packed(b)) return b;
        TensorType t = b != null ? b.type() : new TensorType(((ScalarValue) v).dtype(), Shape.SCALAR);
        Buffer copy = register(new ComputedBuffer(next(), "copy", Layout.flexible(t.dtype(), t.shape()), load(v, t.shape()), null, List.of(), -1));
        decisions.add(copy.name() + ": copy of " + (b == null ? "a scalar" : b.name()) + " because " + why + " reads packed row-major memory");
        return copy;
    }

    /**
     * Row-major strides (a view may start at an offset; a slice of a concatenation is addressed from its start). A
     * dimension of size 1 is never stepped, so its stride does not matter: a slice of whole heads of a one-sequence
     * batch is packed.
     */
    private static boolean packed(Buffer b) {
        if (b.layout().isFlexible()) return true;
        Shape s = b.type().shape();
        var want = s.contiguousStrides();
        var have = b.layout().fix().strides();
        for (int d = 0; d < s.rank(); d++)
            if (!(s.dim(d).isStatic() && s.dim(d).size() == 1) && !have.get(d).equals(want.get(d))) return false;
        return true;
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
        Shape shape = n.type().shape();
        DType dtype = n.type().dtype();
        int d = dev.gatun.ir.graph.TypeInference.catDim("cat", c.dim(), shape.rank());
        Layout.Fixed layout = Layout.contiguous(dtype, shape);
        boolean contiguousSlices = true;
        for (int k = 0; k < d; k++) contiguousSlices &= shape.dim(k).isStatic() && shape.dim(k).size() == 1;
        var pending = new ArrayList<ConcatBuffer.Pending>();
        var taken = java.util.Collections.newSetFromMap(new IdentityHashMap<Buffer, Boolean>());
        long start = 0;
        for (Node x : n.inputs()) {
            Buffer b = asBuffer(x);
            Shape part = x.type().shape();
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
        return new BufferValue(cat);
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
        if (!b.layout().isFlexible() && !packed(b)) return b.name() + " has a strided layout of its own";
        if (b instanceof ConcatBuffer && !contiguousSlice)
            return b.name() + " is a concatenation itself, which goes inside another only where its slice is contiguous";
        if (!contiguousSlice && firstReader.get(b.id()) != null)
            return b.name() + " is already read row-major by " + firstReader.get(b.id()) + ", and its slice along dimension " + dim + " is strided";
        return null;
    }

    // ---------------------------------------------------------------- collectives and symmetric memory

    private Buffer collective(Node n, Op.Collective c) {
        TensorType t = n.input(0).type();
        var choice = oneRank(c) ? new Choice(Algorithm.NCCL, "over \"" + c.group() + "\", a group of one rank: the rows are copied through, no peer")
                : chooseAlgorithm(n, c, t);
        String out = next();
        String op = c.kind().opName() + "." + choice.algorithm.opName();
        // an uneven all_to_all's peers read its row counts as they read its rows: both take the same path
        var operands = new ArrayList<Buffer>();
        for (int i = 0; i < n.inputs().size(); i++) operands.add(operand(n, i, c, choice, out, op));
        decisions.add(out + ": " + op + " (" + choice.why + ")");
        var call = new ExternCall.Collective(c.kind(), c.reduceOp(), c.group(), c.root(), choice.algorithm);
        return register(new ExternBuffer(out, Layout.contiguous(n.type().dtype(), n.type().shape()), call, operands, n.id()));
    }

    /** Input {@code i} of collective {@code n} made what its algorithm reads: a communication buffer, or packed memory. */
    private Buffer operand(Node n, int i, Op.Collective c, Choice choice, String out, String op) {
        Buffer in = asBuffer(n.input(i));
        if (choice.algorithm.isSymmetric()) {
            // two-shot reduces into its input's slot, so that input must be private to the collective
            String shared = choice.algorithm == Algorithm.TWO_SHOT ? sharedInput(n.input(i)) : null;
            return realize(in, c.group(), out, op, choice.algorithm, choice.why, shared);
        }
        if (choice.algorithm == Algorithm.BARRIER_FREE) {
            realizations.add(new Realization(out, op, choice.algorithm, choice.why, in.name(), Realization.Path.PUSHED, null, List.of()));
            return contiguous(new BufferValue(in), "the barrier-free push");
        }
        realizations.add(new Realization(out, op, choice.algorithm, choice.why, in.name(), Realization.Path.NONE, null,
                List.of("no communication buffer: " + choice.algorithm.opName() + " runs through NCCL's own buffers")));
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

    private record Choice(Algorithm algorithm, String why) {}

    private Choice chooseAlgorithm(Node n, Op.Collective c, TensorType t) {
        Choice choice = preferredAlgorithm(c, t);
        String noNccl = options.ncclUnavailable();
        if (choice.algorithm != Algorithm.NCCL || noNccl == null) return choice;
        // NCCL cannot run here: a symmetric algorithm serves the collective where one can, else a clear refusal
        // all-gather and broadcast only move data: any dtype; the reductions have f32, f16 and bf16 kernels
        boolean movesOnly = c.kind().movesOnly();
        boolean symmetricPossible = options.symmetricMemory() && t.shape().isStatic()
                && (movesOnly || t.dtype() == DType.FLOAT32 || t.dtype().isHalf())
                && (c.kind() != CollectiveKind.ALL_REDUCE || options.forceAllReduce() != Algorithm.NCCL);
        if (!symmetricPossible)
            throw new CompilationException(n.format() + ": " + c.kind().opName() + " would run through NCCL (" + choice.why + "), but NCCL cannot run here: "
                    + noNccl + ". Give it a static shape and an f32, f16 or bf16 dtype (the symmetric kernels' cases), or run one rank per GPU");
        Algorithm a = c.kind() == CollectiveKind.ALL_REDUCE ? Algorithm.TWO_SHOT : Algorithm.SYMM_MEM;
        return new Choice(a, choice.why + ", but NCCL cannot run here (" + noNccl + "): " + a.opName() + " instead");
    }

    private Choice preferredAlgorithm(Op.Collective c, TensorType t) {
        if (!options.symmetricMemory()) return new Choice(Algorithm.NCCL, "symmetric memory is switched off");
        if (!t.shape().isStatic()) return new Choice(Algorithm.NCCL, "shape " + t.shape() + " is symbolic");
        if (!(t.dtype() == DType.FLOAT32 || t.dtype().isHalf()) && c.kind() != CollectiveKind.ALL_TO_ALL)
            return new Choice(Algorithm.NCCL, "dtype " + t.dtype() + " has no symmetric-memory kernel (f32, f16, bf16 do)");
        long bytes = t.byteSize();
        String size = ByteSize.format(bytes);
        return switch (c.kind()) {
            case BROADCAST -> new Choice(Algorithm.NCCL, "broadcast runs through NCCL");
            case REDUCE_SCATTER, ALL_GATHER, ALL_TO_ALL -> bytes <= options.twoShotMaxBytes()
                    ? new Choice(Algorithm.SYMM_MEM, size + " <= " + ByteSize.format(options.twoShotMaxBytes()) + " symmetric threshold")
                    : new Choice(Algorithm.NCCL, size + " > " + ByteSize.format(options.twoShotMaxBytes()) + " symmetric threshold");
            case ALL_REDUCE -> {
                if (options.forceAllReduce() != null) yield new Choice(options.forceAllReduce(), "forced by options");
                if (bytes <= options.barrierFreeMaxBytes())
                    yield new Choice(Algorithm.BARRIER_FREE, size + " <= barrier-free threshold " + ByteSize.format(options.barrierFreeMaxBytes()));
                if (bytes <= options.oneShotMaxBytes())
                    yield new Choice(Algorithm.ONE_SHOT, size + " <= one-shot threshold " + ByteSize.format(options.oneShotMaxBytes()));
                if (bytes <= options.twoShotMaxBytes())
                    yield new Choice(Algorithm.TWO_SHOT, size + " <= two-shot threshold " + ByteSize.format(options.twoShotMaxBytes()));
                yield new Choice(Algorithm.NCCL, size + " > two-shot threshold " + ByteSize.format(options.twoShotMaxBytes()));
            }
        };
    }

    /**
     * Makes {@code in} available as a communication buffer of {@code group} by the first path that applies:
     * (1) a computed buffer with a flexible layout and static shape takes a communication-buffer layout;
     * (2) a graph input with a static shape gets the SYMM_MEM allocator; (3) otherwise an identity copy.
     */
    private Buffer realize(Buffer in, String group, String consumer, String op, Algorithm algorithm, String why) {
        return realize(in, group, consumer, op, algorithm, why, null);
    }

    /** {@code shared} (when set) says why the input may not be modified in place: paths 1 and 2 are then closed. */
    private Buffer realize(Buffer in, String group, String consumer, String op, Algorithm algorithm, String why, String shared) {
        var notTaken = new ArrayList<String>();
        String p1 = shared != null ? shared : pathOneBlocker(in, group);
        if (p1 == null) {
            if (!(in.layout() instanceof Layout.CommBuffer)) in.setLayout(Layout.CommBuffer.of(in.layout(), CommBufferType.SYMM_MEM, group));
            realizations.add(new Realization(consumer, op, algorithm, why, in.name(), Realization.Path.ZERO_COPY, in.name(), notTaken));
            return in;
        }
        notTaken.add("path 1 not taken: " + p1);
        String p2 = shared != null ? shared : pathTwoBlocker(in, group);
        if (p2 == null) {
            in.setLayout(in.layout().withAllocator(AllocatorType.symmMem(group)));
            realizations.add(new Realization(consumer, op, algorithm, why, in.name(), Realization.Path.SYMMETRIC_INPUT, in.name(), notTaken));
            return in;
        }
        notTaken.add("path 2 not taken: " + p2);
        var layout = Layout.CommBuffer.of(Layout.contiguous(in.type().dtype(), in.type().shape()), CommBufferType.SYMM_MEM, group);
        Buffer copy = register(new ComputedBuffer(next(), "copy", layout, load(new BufferValue(in), in.type().shape()), null, List.of(), -1));
        realizations.add(new Realization(consumer, op, algorithm, why, in.name(), Realization.Path.IDENTITY_COPY, copy.name(), notTaken));
        return copy;
    }

    /** Null when only the collective reads {@code x}'s value; else a reason naming another reader. */
    private String sharedInput(Node x) {
        if (graph.isOutput(x)) return "two-shot reduces in place and " + x.label() + " is also a graph output";
        if (graph.users(x).size() > 1)
            return "two-shot reduces in place and " + x.label() + " is also read by " + graph.users(x).stream().map(Node::label).toList();
        return null;
    }

    private String pathOneBlocker(Buffer in, String group) {
        if (in instanceof ViewBuffer v) return in.name() + " is a view (" + v.viewOp() + ") of " + v.base().name();
        if (in instanceof InputBuffer) return in.name() + " is a graph input, not a computed buffer";
        if (in instanceof ExternBuffer || in instanceof ExternOutputBuffer) return in.name() + " is the output of an extern kernel";
        if (in instanceof ConstantBuffer) return in.name() + " is a constant";
        if (in instanceof ConcatBuffer) return in.name() + " is a concatenation, which its parts write in regular memory";
        if (!in.type().shape().isStatic()) return in.name() + " has a symbolic shape " + in.type().shape();
        if (in.layout() instanceof Layout.CommBuffer cb)
            return cb.group().equals(group) ? null : in.name() + " is already a communication buffer of group '" + cb.group() + "'";
        if (!in.layout().isFlexible())
            return in.name() + " has a fixed layout" + (fixedBecause.containsKey(in) ? " because " + fixedBecause.get(in) : "");
        if (isGraphOutput(in)) return in.name() + " must also stay a graph output (a regular buffer)";
        return null;
    }

    /** Graph outputs are known before lowering reaches them, so a buffer is matched by the node it came from. */
    private boolean isGraphOutput(Buffer b) {
        return b.origin() >= 0 && graph.outputs().values().stream().anyMatch(n -> n.id() == b.origin());
    }

    private String pathTwoBlocker(Buffer in, String group) {
        if (!(in instanceof InputBuffer)) return in.name() + " is not a graph input";
        if (!options.symmetricInputs()) return "symmetric graph inputs are switched off by the lowering options";
        if (!in.type().shape().isStatic()) return in.name() + " has a symbolic shape " + in.type().shape();
        AllocatorType a = in.layout().allocator();
        if (a.isSymmetric() && !a.group().equals(group))
            return in.name() + " is already symmetric memory of group '" + a.group() + "'";
        return null;
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
                operands.add(realize(in, group, out, u.name() + " input " + i, null, null));
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

    /** A node made inside a symmetric region: its result goes to that group's pool where possible. */
    private void placeInRegion(Node n, Buffer b) {
        String group = n.symmetricGroup();
        String why = null;
        if (b instanceof ViewBuffer) why = "it is a view";
        else if (b instanceof InputBuffer || b instanceof ConstantBuffer) why = "it is not computed by the graph";
        else if (b instanceof ConcatBuffer) why = "it is a concatenation, which its parts write in regular memory";
        else if (!b.type().shape().isStatic()) why = "its shape " + b.type().shape() + " is symbolic";
        else if (b.layout() instanceof Layout.CommBuffer cb && !cb.group().equals(group)) why = "it is already in group '" + cb.group() + "'";
        else if (b instanceof ComputedBuffer && !b.layout().isFlexible() && !(b.layout() instanceof Layout.CommBuffer)) why = "its layout is fixed";
        if (why != null) {
            decisions.add(b.name() + ": symmetric region \"" + group + "\" cannot place it in symmetric memory: " + why);
            return;
        }
        if (!(b.layout() instanceof Layout.CommBuffer)) b.setLayout(Layout.CommBuffer.of(b.layout(), CommBufferType.SYMM_MEM, group));
        realizations.add(new Realization(b.name(), "symmetric region \"" + group + "\"", null, null, b.name(), Realization.Path.ZERO_COPY, b.name(), List.of()));
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
