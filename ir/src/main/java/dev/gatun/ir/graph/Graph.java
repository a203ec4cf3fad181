package dev.gatun.ir.graph;

import dev.gatun.ir.Dim;

import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A frozen computation graph: a DAG of {@link Node}s with named inputs and outputs, the user ops it calls and
 * the process groups its collectives use. Built with {@link Builder}; printable; {@link GraphJson} reads and
 * writes it.
 */
public final class Graph {
    private final String name;
    private final List<Node> nodes;
    private final Map<String, Node> inputs, outputs;
    /** The inputs that are states (a subset of {@link #inputs}'s names, in declaration order). */
    private final java.util.Set<String> states;
    private final Map<String, UserOp> userOps;
    private final Map<String, ProcessGroup> groups;
    private final Integer worldSize;
    /** Users of each node, by node id. */
    private final List<List<Node>> users;
    /** Choices made while building the graph (activation recomputation), one line each: printed with it and its plan. */
    private final List<String> notes;

    private Graph(Builder b) {
        this.name = b.name;
        this.nodes = List.copyOf(b.nodes);
        this.inputs = Collections.unmodifiableMap(new LinkedHashMap<>(b.inputs));
        this.outputs = Collections.unmodifiableMap(new LinkedHashMap<>(b.outputs));
        this.states = Collections.unmodifiableSet(new java.util.LinkedHashSet<>(b.states));
        this.userOps = Collections.unmodifiableMap(new LinkedHashMap<>(b.userOps));
        this.groups = Collections.unmodifiableMap(new LinkedHashMap<>(b.groups));
        this.worldSize = b.worldSize;
        this.notes = List.copyOf(b.notes);
        var u = new ArrayList<List<Node>>(nodes.size());
        for (int i = 0; i < nodes.size(); i++) u.add(new ArrayList<>(2));
        // each user once, even when it reads a node twice: n can only be the last user recorded so far (nodes come in
        // order), so compare with that instead of scanning the list (quadratic for a weight read by every layer)
        for (Node n : nodes) for (Node in : n.inputs()) {
            var seen = u.get(in.id());
            if (seen.isEmpty() || seen.getLast() != n) seen.add(n);
        }
        for (int i = 0; i < u.size(); i++) u.set(i, Collections.unmodifiableList(u.get(i)));
        this.users = u;
        checkStates();
    }

    /**
     * A version of a state that an op writes over in place ({@link OpSpec#inPlace}: {@code update_slice}) is read by
     * nothing else and is no output (the further outputs of the call that made it, {@code snapshot}'s copy, are other
     * buffers and read nothing of it):
     * once the update has run its old contents are gone. (Read the update's result instead.)
     */
    private void checkStates() {
        for (Node n : nodes) {
            String state = stateOf(n);
            if (state == null) continue;
            // another output of the call that makes this version (snapshot's copy) is no read of its contents
            var readers = users(n).stream().filter(r -> !(r.op() instanceof Op.CustomOutput)).toList();
            Node writer = null;
            for (Node r : readers) if (writesInPlace(r) && r.input(0) == n) writer = r;
            if (writer == null) continue;
            if (readers.size() > 1 || writer.inputs().subList(1, writer.inputs().size()).contains(n))
                throw new GraphException("graph '" + name + "': state '" + state + "' is read by " + (readers.size() > 1 ? readers.get(readers.get(0) == writer ? 1 : 0).label()
                        : writer.label()) + " as well as updated in place by " + writer.label() + "; read the update's result " + writer.label()
                        + " instead (the old contents are gone once it runs)");
            if (outputs.containsValue(n))
                throw new GraphException("graph '" + name + "': state '" + state + "' is an output as it was before " + writer.label()
                        + " updates it in place; output the update's result instead");
        }
    }

    /** Whether {@code n} is a call of a registered op that writes its input 0 in place ({@link OpSpec#inPlace}). */
    public static boolean writesInPlace(Node n) { return n.op() instanceof Op.Registered r && r.spec().inPlace(); }

    /**
     * The state {@code n} is a version of: the state input itself, or an op's update of a version of it written in place
     * ({@link OpSpec#inPlace}: {@code update_slice}); null for any other node.
     */
    public String stateOf(Node n) {
        while (true) {
            if (n.op() instanceof Op.Input in) return states.contains(in.name()) ? in.name() : null;
            if (!writesInPlace(n)) return null;
            n = n.input(0);
        }
    }

    /**
     * The names of the inputs that are states: persistent tensors of a session, zeros at first, set with
     * {@code bind}, kept from call to call and written in place by {@code update_slice}.
     */
    public java.util.Set<String> states() { return states; }

    public static Builder builder(String name) { return new Builder(name); }

    public String name() { return name; }
    /** Every node, in order: a node's id is its index. */
    public List<Node> nodes() { return nodes; }
    public Node node(int id) { return nodes.get(id); }
    public Map<String, Node> inputs() { return inputs; }
    public Map<String, Node> outputs() { return outputs; }
    public Map<String, UserOp> userOps() { return userOps; }
    public Map<String, ProcessGroup> groups() { return groups; }

    /** The world size the graph was declared for, or null when any world size will do. */
    public Integer worldSize() { return worldSize; }

    /** Nodes that read {@code n}, in graph order. */
    public List<Node> users(Node n) { return users.get(n.id()); }

    public boolean isOutput(Node n) { return outputs.containsValue(n); }

    /**
     * Choices made while building the graph, one line each ("recompute layer.0: 23 nodes again in the backward pass"):
     * printed under the graph and in its plan. Not kept by {@link GraphJson} (the graph it writes already holds the
     * choices' nodes).
     */
    public List<String> notes() { return notes; }

    @Override public String toString() {
        var sb = new StringBuilder("graph \"").append(name).append('"');
        if (worldSize != null) sb.append("  world=").append(worldSize);
        var extra = groups.values().stream().filter(g -> !g.isWorld()).toList();
        if (!extra.isEmpty()) sb.append("  groups=").append(extra);
        sb.append('\n');
        for (Node n : nodes)
            sb.append("  ").append(n.op() instanceof Op.Input in && states.contains(in.name()) ? n.format().replaceFirst("= input\\(", "= state(") : n.format()).append('\n');
        for (String note : notes) sb.append("  # ").append(note).append('\n');
        sb.append("  return ");
        var parts = new ArrayList<String>();
        outputs.forEach((k, v) -> parts.add(k + "=%" + v.id()));
        sb.append(String.join(", ", parts));
        return sb.toString();
    }

    /** Builds a graph node by node, checking types as it goes; {@link #build()} freezes it. */
    public static final class Builder implements TypeInference.Context {
        private final String name;
        private final List<Node> nodes = new ArrayList<>();
        private final Map<String, Node> inputs = new LinkedHashMap<>(), outputs = new LinkedHashMap<>();
        private final java.util.Set<String> states = new java.util.LinkedHashSet<>();
        private final Map<String, UserOp> userOps = new LinkedHashMap<>();
        private final Map<String, ProcessGroup> groups = new LinkedHashMap<>();
        private Integer worldSize;
        private final List<String> symmetricScopes = new ArrayList<>();
        private final List<String> notes = new ArrayList<>();
        private Graph built;

        private Builder(String name) {
            if (name == null || name.isBlank()) throw new GraphException("a graph needs a name");
            checkName("a graph name", name);
            this.name = name;
            groups.put(ProcessGroup.WORLD_NAME, ProcessGroup.WORLD);
        }

        public String name() { return name; }

        @Override public Map<String, UserOp> userOps() { return userOps; }
        @Override public ProcessGroup group(String n) { return groups.get(n); }
        @Override public Integer worldSize() { return worldSize; }

        public Builder worldSize(int n) {
            checkOpen();
            if (n < 1) throw new GraphException("graph '" + name + "': world size must be at least 1, got " + n);
            if (!nodes.isEmpty() && worldSize != null && worldSize != n)
                throw new GraphException("graph '" + name + "': world size is already " + worldSize);
            for (var g : groups.values()) {
                for (int r : g.ranks()) if (r >= n) throw new GraphException("group '" + g.name() + "' has rank " + r + ", outside a world of " + n);
                if (g.isMeshAxis() && g.meshWorldSize() != n)
                    throw new GraphException("graph '" + name + "': the mesh (axis '" + g.name() + "') is a world of " + g.meshWorldSize() + ", not " + n);
            }
            this.worldSize = n;
            return this;
        }

        /** Declares an explicit group (or a mesh axis, as {@link #mesh} makes them). */
        public Builder group(ProcessGroup g) {
            checkOpen();
            if (g.isWorld() && !g.name().equals(ProcessGroup.WORLD_NAME))
                throw new GraphException("group '" + g.name() + "' needs explicit ranks");
            var prev = groups.get(g.name());
            if (prev != null && !prev.equals(g)) throw new GraphException("group '" + g.name() + "' is already declared as " + prev);
            if (worldSize != null)
                for (int r : g.ranks()) if (r >= worldSize) throw new GraphException("group '" + g.name() + "' has rank " + r + ", outside a world of " + worldSize);
            if (g.isMeshAxis()) {
                if (worldSize != null && worldSize.intValue() != g.meshWorldSize())
                    throw new GraphException("graph '" + name + "': the mesh (axis '" + g.name() + "') is a world of " + g.meshWorldSize()
                            + " but the graph is declared for " + worldSize);
                worldSize = g.meshWorldSize();
            }
            groups.put(g.name(), g);
            return this;
        }

        /**
         * Declares a device mesh: one group per axis, named after it, ranks laid out row-major (see
         * {@link ProcessGroup#meshAxes}); fixes the world size to the product of the axis sizes.
         */
        public Builder mesh(List<String> axes, List<Integer> sizes) {
            checkOpen();
            List<ProcessGroup> groupsOfMesh;
            try {
                groupsOfMesh = ProcessGroup.meshAxes(axes, sizes);
            } catch (GraphException | ArithmeticException e) {
                throw new GraphException("graph '" + name + "': mesh " + axes + " x " + sizes + ": " + e.getMessage(), e);
            }
            for (ProcessGroup g : groupsOfMesh)
                if (groups.containsKey(g.name()))
                    throw new GraphException("graph '" + name + "': mesh axis '" + g.name() + "' clashes with the group '" + g.name()
                            + "' declared already; name the axis differently");
            for (ProcessGroup g : groupsOfMesh) group(g);
            return this;
        }

        public Builder register(UserOp op) {
            checkOpen();
            var prev = userOps.putIfAbsent(op.name(), op);
            if (prev != null && prev != op) throw new GraphException("a different user op named '" + op.name() + "' is already registered");
            return this;
        }

        /** Opens a region whose every computed result must live in symmetric memory of {@code group}. */
        public void pushSymmetric(String group) {
            if (!groups.containsKey(group)) throw new GraphException("symmetric region: unknown group '" + group + "'");
            symmetricScopes.add(group);
        }

        public void popSymmetric() {
            if (symmetricScopes.isEmpty()) throw new GraphException("no symmetric region is open: close only what symmetric(...) opened");
            symmetricScopes.removeLast();
        }

        public Node input(String inputName, TensorType type) {
            checkOpen();
            if (inputName == null || inputName.isBlank()) throw new GraphException("graph '" + name + "': an input needs a name");
            checkName("graph '" + name + "': an input name", inputName);
            if (type == null) throw new GraphException("graph '" + name + "': input '" + inputName + "' needs a dtype and a shape");
            checkSize(type, () -> "input '" + inputName + "'");
            if (inputs.containsKey(inputName)) throw new GraphException("graph '" + name + "' already has an input named '" + inputName + "'");
            Node n = new Node(nodes.size(), new Op.Input(inputName), List.of(), type, null, this);
            nodes.add(n);
            inputs.put(inputName, n);
            return n;
        }

        /**
         * A state: an input the session keeps between calls (zeros until {@code bind} sets it), which an
         * {@code update_slice} of it writes in place. It is never passed to a call.
         */
        public Node state(String stateName, TensorType type) {
            if (type != null && !type.shape().isStatic())
                throw new GraphException("graph '" + name + "': state '" + stateName + "' has shape " + type.shape() + "; a state's shape must be static");
            Node n = input(stateName, type);
            states.add(stateName);
            return n;
        }

        public Node constant(double[] values, TensorType type) {
            checkOpen();
            Shape s = type.shape();
            if (!s.isStatic()) throw new GraphException("constant: shape " + s + " must be static");
            checkSize(type, () -> "constant");
            if (values.length != s.numel())
                throw new GraphException("constant: " + values.length + " values for shape " + s + " (" + s.numel() + " elements)");
            checkValues(values, type.dtype());
            Node n = new Node(nodes.size(), new Op.Constant(values), List.of(), type, null, this);
            nodes.add(n);
            return n;
        }

        /** Adds {@code op} applied to {@code args}, inferring and checking its type. */
        public Node add(Op op, List<Node> args) {
            return add(op, args, symmetricScopes.isEmpty() ? null : symmetricScopes.getLast());
        }

        /**
         * Like {@link #add(Op, List)} with an explicit symmetric-region mark (null: none) instead of the open
         * region's; readers such as {@link GraphJson} restore marks this way.
         */
        public Node add(Op op, List<Node> args, String symm) {
            checkOpen();
            if (op instanceof Op.Input || op instanceof Op.Constant) throw new GraphException("graph '" + name + "': add inputs with input() and constants with constant(), not with add()");
            if (symm != null && !groups.containsKey(symm))
                throw new GraphException(op.opName() + ": symmetric region of unknown group '" + symm + "'");
            for (Node a : args) checkOwned(op, a);
            TensorType t = TypeInference.infer(op, args, this);
            checkSize(t, () -> op.opName() + "(" + String.join(", ", args.stream().map(Node::describe).toList()) + ")");
            Node n = new Node(nodes.size(), op, args, t, symm, this);
            nodes.add(n);
            return n;
        }

        /**
         * Calls the registered op {@code opName} ({@link OpRegistry}) with {@code attrs}; returns one node per output: the
         * call, then a {@link Op.CustomOutput} node for each further output.
         */
        public List<Node> apply(String opName, java.util.Map<String, ? extends Number> attrs, List<Node> args) {
            var op = Op.Registered.of(opName, attrs);
            Node first = add(op, args);
            var out = new ArrayList<Node>();
            out.add(first);
            int outputs = TypeInference.registered(op, args).size();
            for (int i = 1; i < outputs; i++) out.add(add(new Op.CustomOutput(i), List.of(first)));
            return out;
        }

        /** Calls a registered user op; returns one node per output. */
        public List<Node> call(String opName, List<Node> args) {
            UserOp u = userOps.get(opName);
            if (u == null) throw new GraphException("unknown user op '" + opName + "'; register it with the graph first");
            Node first = add(new Op.Custom(opName), args);
            var out = new ArrayList<Node>();
            out.add(first);
            for (int i = 1; i < u.outputs().size(); i++) out.add(add(new Op.CustomOutput(i), List.of(first)));
            return out;
        }

        public Builder output(String outputName, Node n) {
            checkOpen();
            checkOwned(null, n);
            if (outputName == null || outputName.isBlank()) throw new GraphException("graph '" + name + "': an output needs a name");
            checkName("graph '" + name + "': an output name", outputName);
            if (outputs.containsKey(outputName)) throw new GraphException("graph '" + name + "' already has an output named '" + outputName + "'");
            outputs.put(outputName, n);
            return this;
        }

        /** How many nodes the graph has so far: the next node's id. */
        public int size() { return nodes.size(); }

        /** Records a choice made while building ({@link Graph#notes()}). */
        public Builder note(String note) {
            checkOpen();
            notes.add(note);
            return this;
        }

        public Node node(int id) {
            if (id < 0 || id >= nodes.size()) throw new GraphException("graph '" + name + "' has no node %" + id);
            return nodes.get(id);
        }

        public Graph build() {
            if (built != null) return built;
            if (outputs.isEmpty()) throw new GraphException("graph '" + name + "' has no outputs; mark at least one with output(name, tensor)");
            built = new Graph(this);
            return built;
        }

        public boolean isBuilt() { return built != null; }

        /** Names go into every error message: a name longer than this is refused (and shown cut short). */
        static final int MAX_NAME = 256;

        /** The largest tensor Gatun plans (2^48 bytes, 256 TiB): anything larger is a mistake, and overflows offsets soon after. */
        static final long MAX_TENSOR_BYTES = 1L << 48;

        private static void checkName(String what, String name) {
            if (name.length() > MAX_NAME)
                throw new GraphException(what + " may have at most " + MAX_NAME + " characters, not " + name.length() + " ('" + name.substring(0, 32) + "…')");
        }

        /**
         * Refuses a tensor whose element count or bytes are past what Gatun can address, naming where it came from
         * ({@code where} is built only then: this runs for every node).
         */
        private static void checkSize(TensorType t, java.util.function.Supplier<String> where) {
            long elements = 1;
            for (Dim d : t.shape().dims()) {
                if (!d.isStatic()) continue;
                try {
                    elements = Math.multiplyExact(elements, d.size());
                } catch (ArithmeticException e) {
                    throw new GraphException(where.get() + ": " + t + " has more elements than 2^63; no tensor can be this large");
                }
            }
            double bytes = (double) elements * t.dtype().byteSize();
            if (bytes > MAX_TENSOR_BYTES)
                throw new GraphException(where.get() + ": " + t + " is " + elements + " elements (" + String.format("%.3g", bytes / (1L << 40))
                        + " TiB); Gatun plans tensors of at most 256 TiB");
        }

        /** Integer and bool constants must hold exactly the value given: no silent rounding, wrapping or NaN-to-zero. */
        private static void checkValues(double[] values, dev.gatun.ir.DType t) {
            if (t.isFloating()) return;
            double lo = switch (t) { case BOOL -> 0; case INT8 -> Byte.MIN_VALUE; case INT32 -> Integer.MIN_VALUE; default -> Long.MIN_VALUE; };
            double hi = switch (t) { case BOOL -> 1; case INT8 -> Byte.MAX_VALUE; case INT32 -> Integer.MAX_VALUE; default -> 0x1p63; };
            for (double v : values)
                if (!(v >= lo && v < hi + 1 && v == Math.rint(v)))
                    throw new GraphException("constant of " + t + ": " + v + " is not " + (t == dev.gatun.ir.DType.BOOL ? "0 or 1" : "an integer from "
                            + (long) lo + " to " + (long) Math.min(hi, Long.MAX_VALUE)) + "; combine with a floating tensor (cast it first) for such values");
            if (t == dev.gatun.ir.DType.INT64)
                for (double v : values)
                    if (Math.abs(v) >= 0x1p53)   // 2^53 itself is what 2^53 + 1 rounds to
                        throw new GraphException("constant of " + t + ": " + (long) v + " is not within 2^53 - 1 (9007199254740991) of zero: constants"
                                + " are carried as float64, which holds every integer only below 2^53, so this one may already be rounded; pass it as an"
                                + " i64 input instead");
        }

        private void checkOpen() {
            if (built != null) throw new GraphException("graph '" + name + "' is already built and cannot change; start a new one with Gatun.graph(\"name\") (graph(\"name\") in jshell)");
        }

        private void checkOwned(Op op, Node n) {
            if (n == null) throw new GraphException((op == null ? "output" : op.opName()) + ": a tensor argument is null");
            if (n.owner() != this) {
                String other = n.owner() instanceof Builder b ? "'" + b.name + "'" : "another graph";
                throw new GraphException((op == null ? "output" : op.opName()) + ": tensor " + n.describe()
                        + " belongs to graph " + other + ", not to graph '" + name + "'");
            }
        }
    }

    /** Convenience for tests and tools: the type of a node by id. */
    public TensorType type(int id) { return nodes.get(id).type(); }
}
