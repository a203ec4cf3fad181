package dev.gatun.ir.graph;

import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.json.Json;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Function;

/**
 * Reads and writes graphs as JSON, so graphs can be exchanged, stored and benchmarked.
 *
 * <p>The document holds the name, world size, process groups, user ops (name, specs, symmetric inputs, CUDA
 * source, kernel name, block size; never the host implementation, which is Java code), the nodes in
 * topological order, the named outputs and the builder's notes (where there are any). Node types are written as {@code "f32[4,n]"}; constants keep
 * exact doubles, with NaN and infinities as the strings {@code "NaN"}, {@code "Infinity"},
 * {@code "-Infinity"}. Writing is deterministic: equal graphs give equal text.
 *
 * <p>Reading rebuilds the graph through {@link Graph.Builder}, so every node is type-checked again and the
 * recorded types are verified against what the ops compute. Malformed text fails with the line and column;
 * a well-formed document that does not describe a graph fails naming the node (or section) and the field.
 *
 * <p>A graph file may come from anywhere, so every size it declares is bounded before anything is built or allocated
 * from it: a world of at most {@value #MAX_WORLD_SIZE} ranks; a declared type or shape of at most 2^48 bytes (the
 * largest tensor Gatun plans) whose element count is computed without overflow; a constant's declared element count
 * equal to the number of values the file holds, compared before the values are read. Reading a graph written by
 * {@link #toJson} takes time linear in its size.
 */
public final class GraphJson {
    static final String FORMAT = "gatun.graph";
    static final int VERSION = 1;
    /** The most ranks a graph file may declare (a million: more than any machine, fewer than would exhaust memory). */
    static final int MAX_WORLD_SIZE = 1 << 20;

    private GraphJson() {}

    // ------------------------------------------------------------------ writing

    public static String toJson(Graph g) {
        var doc = new LinkedHashMap<String, Json>();
        doc.put("format", Json.of(FORMAT));
        doc.put("version", Json.of(VERSION));
        doc.put("name", Json.of(g.name()));
        doc.put("world_size", g.worldSize() == null ? Json.Null.INSTANCE : Json.of(g.worldSize()));
        var groups = new ArrayList<Json>();
        for (var pg : g.groups().values()) {
            if (pg.isWorld()) continue;
            if (pg.isMeshAxis()) {
                var slices = new ArrayList<Json>();
                for (var slice : pg.slices()) slices.add(longs(slice.stream().mapToLong(Integer::longValue).toArray()));
                groups.add(obj("name", Json.of(pg.name()), "slices", new Json.Arr(slices)));
            } else {
                groups.add(obj("name", Json.of(pg.name()), "ranks", longs(pg.ranks().stream().mapToLong(Integer::longValue).toArray())));
            }
        }
        doc.put("groups", new Json.Arr(groups));
        var ops = new ArrayList<Json>();
        for (UserOp u : g.userOps().values()) ops.add(userOp(u, g));
        doc.put("user_ops", new Json.Arr(ops));
        var nodes = new ArrayList<Json>();
        for (Node n : g.nodes()) nodes.add(node(n, g));
        doc.put("nodes", new Json.Arr(nodes));
        var outs = new LinkedHashMap<String, Json>();
        g.outputs().forEach((k, v) -> outs.put(k, Json.of(v.id())));
        doc.put("outputs", new Json.Obj(outs));
        // the choices made while building (a recomputed region's note, say): written where there are any
        if (!g.notes().isEmpty()) doc.put("notes", new Json.Arr(g.notes().stream().map(n -> (Json) Json.of(n)).toList()));
        return Json.write(new Json.Obj(doc));
    }

    private static Json node(Node n, Graph g) {
        var m = new LinkedHashMap<String, Json>();
        m.put("id", Json.of(n.id()));
        Op op = n.op();
        m.put("op", Json.of(jsonOpName(op)));
        if (!n.inputs().isEmpty()) m.put("inputs", longs(n.inputs().stream().mapToLong(Node::id).toArray()));
        switch (op) {
            case Op.Input in -> {
                m.put("name", Json.of(in.name()));
                if (g.states().contains(in.name())) m.put("state", Json.of(true));
            }
            case Op.Constant c -> {
                var vals = new ArrayList<Json>();
                for (double v : c.values()) vals.add(number(v));
                m.put("values", new Json.Arr(vals));
            }
            case Op.Pointwise p -> {}
            case Op.Cast c -> m.put("to", Json.of(c.to().shortName()));
            case Op.Reduce r -> {
                m.put("dims", longs(r.dims().stream().mapToLong(Integer::longValue).toArray()));
                m.put("keepdim", Json.of(r.keepdim()));
            }
            case Op.Matmul mm -> {}
            case Op.Registered r -> r.attrs().values().forEach((k, v) -> m.put(k, v instanceof Long l ? Json.of(l) : number(v.doubleValue())));
            case Op.Collective c -> {
                if (c.reduceOp() != null) m.put("reduce_op", Json.of(c.reduceOp().opName()));
                m.put("group", Json.of(c.group()));
                if (c.kind() == CollectiveKind.BROADCAST) m.put("root", Json.of(c.root()));
                if (c.uneven()) m.put("capacity", Json.of(c.capacity()));
            }
            case Op.Reshape r -> m.put("shape", shape(r.shape()));
            case Op.Permute p -> m.put("perm", longs(p.perm().stream().mapToLong(Integer::longValue).toArray()));
            case Op.Slice s -> {
                m.put("dim", Json.of(s.dim()));
                m.put("start", Json.of(s.start()));
                m.put("end", Json.of(s.end()));
                m.put("step", Json.of(s.step()));
            }
            case Op.Expand e -> m.put("shape", shape(e.shape()));
            case Op.Cat c -> m.put("dim", Json.of(c.dim()));
            case Op.Custom c -> m.put("user_op", Json.of(c.name()));
            case Op.CustomOutput o -> m.put("index", Json.of(o.index()));
        }
        m.put("type", Json.of(n.type().toString()));
        if (n.symmetricGroup() != null) m.put("symmetric_group", Json.of(n.symmetricGroup()));
        return new Json.Obj(m);
    }

    /** Op names in JSON; user-op calls use "custom" so a user op may share a name with a built-in. */
    private static String jsonOpName(Op op) {
        return switch (op) {
            case Op.Custom c -> "custom";
            case Op.CustomOutput o -> "custom_output";
            default -> op.opName();
        };
    }

    private static Json userOp(UserOp u, Graph g) {
        var m = new LinkedHashMap<String, Json>();
        m.put("name", Json.of(u.name()));
        m.put("inputs", new Json.Arr(u.inputs().stream().map(GraphJson::spec).toList()));
        m.put("outputs", new Json.Arr(u.outputs().stream().map(GraphJson::spec).toList()));
        m.put("symmetric_inputs", longs(u.symmetricInputs().stream().sorted().mapToLong(Integer::longValue).toArray()));
        m.put("kernel_name", Json.of(u.kernelName()));
        m.put("block_size", Json.of(u.blockSize()));
        m.put("cuda_source", Json.of(u.cudaSource()));
        // The output types of every distinct call, so a reader without the op's Java output function can
        // still type the calls this graph makes.
        var sigs = new LinkedHashMap<List<TensorType>, List<TensorType>>();
        for (Node n : g.nodes())
            if (n.op() instanceof Op.Custom c && c.name().equals(u.name())) {
                var in = n.inputs().stream().map(Node::type).toList();
                sigs.computeIfAbsent(in, u::outputTypes);
            }
        var arr = new ArrayList<Json>();
        sigs.forEach((in, out) -> arr.add(obj("inputs", types(in), "outputs", types(out))));
        m.put("signatures", new Json.Arr(arr));
        return new Json.Obj(m);
    }

    private static Json spec(TensorSpec s) {
        return obj("name", Json.of(s.name()), "dtype", s.dtype() == null ? Json.Null.INSTANCE : Json.of(s.dtype().shortName()),
                "shape", s.shape() == null ? Json.Null.INSTANCE : shape(s.shape()));
    }

    private static Json types(List<TensorType> ts) { return new Json.Arr(ts.stream().map(t -> Json.of(t.toString())).toList()); }

    private static Json shape(Shape s) {
        var dims = new ArrayList<Json>();
        for (Dim d : s.dims()) dims.add(d.isStatic() ? Json.of(d.size()) : Json.of(((Dim.Sym) d).name()));
        return new Json.Arr(dims);
    }

    private static Json number(double v) {
        if (Double.isNaN(v)) return Json.of("NaN");
        if (Double.isInfinite(v)) return Json.of(v > 0 ? "Infinity" : "-Infinity");
        return Json.Num.of(v);
    }

    private static Json longs(long[] vs) {
        var out = new ArrayList<Json>(vs.length);
        for (long v : vs) out.add(Json.of(v));
        return new Json.Arr(out);
    }

    private static Json obj(Object... kv) {
        var m = new LinkedHashMap<String, Json>();
        for (int i = 0; i < kv.length; i += 2) m.put((String) kv[i], (Json) kv[i + 1]);
        return new Json.Obj(m);
    }

    // ------------------------------------------------------------------ reading

    /** Reads a graph; user ops are rebuilt from the JSON without host implementations. */
    public static Graph fromJson(String json) { return fromJson(json, Map.of()); }

    /**
     * Reads a graph. A user op found in {@code registry} (by name) is used as registered, so it keeps its host
     * implementation and output function; its declared specs must match the JSON's. Other user ops are
     * rebuilt from the JSON without a host implementation.
     */
    public static Graph fromJson(String json, Map<String, UserOp> registry) {
        Objects.requireNonNull(json, "json");
        return new GraphReader(registry).read(Json.parse(json));
    }

    /** Reads one document, keeping track of where it is so errors can name the node and field. */
    private static final class GraphReader {
        private final Map<String, UserOp> registry;

        GraphReader(Map<String, UserOp> registry) { this.registry = registry == null ? Map.of() : registry; }

        Graph read(Json root) {
            Json.Obj doc = asObj(root, "graph JSON", "the document");
            onlyKnown(doc, "graph JSON", "format", "version", "name", "world_size", "groups", "user_ops", "nodes", "outputs", "notes");
            String format = str(doc, "format", "graph JSON");
            if (!FORMAT.equals(format))
                throw new GraphException("graph JSON: field 'format' is \"" + format + "\", expected \"" + FORMAT + "\"");
            long version = integer(doc, "version", "graph JSON");
            if (version != VERSION)
                throw new GraphException("graph JSON: field 'version' is " + version + ", this reader understands version " + VERSION);
            String name = str(doc, "name", "graph JSON");
            var b = Graph.builder(name);
            Json ws = doc.get("world_size");
            if (ws != null && !(ws instanceof Json.Null)) {
                long w = asLong(ws, "graph JSON", "world_size");
                if (w < 1 || w > MAX_WORLD_SIZE)
                    throw new GraphException("graph JSON: field 'world_size': " + w + " ranks; a graph declares a world of 1 to " + MAX_WORLD_SIZE);
                b.worldSize((int) w);
            }

            for (Json gj : arr(doc, "groups", "graph JSON").items()) {
                Json.Obj go = asObj(gj, "graph JSON: groups", "a group");
                String gname = str(go, "name", "graph JSON: a group");
                String where = "graph JSON: group '" + gname + "'";
                onlyKnown(go, where, "name", "ranks", "slices");
                var ranks = new ArrayList<Integer>();
                var slices = new ArrayList<List<Integer>>();
                if (go.get("slices") != null) {
                    for (Json sj : arr(go, "slices", where).items()) {
                        var slice = new ArrayList<Integer>();
                        for (Json r : asArr(sj, where, "slices").items()) slice.add(toInt(asLong(r, where, "slices"), where, "slices"));
                        slices.add(slice);
                    }
                } else {
                    for (Json r : arr(go, "ranks", where).items()) ranks.add(toInt(asLong(r, where, "ranks"), where, "ranks"));
                }
                try {
                    b.group(new ProcessGroup(gname, ranks, slices));
                } catch (GraphException e) {
                    throw new GraphException(where + ": " + e.getMessage(), e);
                }
            }

            for (Json uj : arr(doc, "user_ops", "graph JSON").items()) b.register(userOp(asObj(uj, "graph JSON: user_ops", "a user op")));

            var byId = new HashMap<Long, Node>();
            int index = 0;
            for (Json nj : arr(doc, "nodes", "graph JSON").items()) {
                Json.Obj no = asObj(nj, "graph JSON: nodes[" + index + "]", "a node");
                onlyKnown(no, "graph JSON: nodes[" + index + "]", NODE_FIELD_SET, NODE_FIELDS);
                node(b, no, byId, index++);
            }

            Json.Obj outs = obj(doc, "outputs", "graph JSON");
            for (var e : outs.fields().entrySet()) {
                String where = "graph JSON: output '" + e.getKey() + "'";
                long id = asLong(e.getValue(), where, "outputs");
                Node n = byId.get(id);
                if (n == null) throw new GraphException(where + " refers to node " + id + ", which does not exist");
                b.output(e.getKey(), n);
            }
            if (doc.fields().get("notes") instanceof Json j)
                for (Json note : asArr(j, "graph JSON", "notes").items()) b.note(asStr(note, "graph JSON", "notes"));
            return b.build();
        }

        private void node(Graph.Builder b, Json.Obj no, Map<Long, Node> byId, int index) {
            String where0 = "graph JSON: node at position " + index;
            long id = integer(no, "id", where0);
            String opName = str(no, "op", "graph JSON: node " + id);
            String where = "graph JSON: node " + id + " (" + opName + ")";
            if (byId.containsKey(id)) throw new GraphException(where + ": field 'id': node " + id + " is defined twice");
            TensorType declared = type(str(no, "type", where), where, "type");
            var inputs = new ArrayList<Node>();
            Json ins = no.get("inputs");
            if (ins != null) {
                for (Json r : asArr(ins, where, "inputs").items()) {
                    long ref = asLong(r, where, "inputs");
                    Node n = byId.get(ref);
                    if (n == null)
                        throw new GraphException(where + ": field 'inputs' refers to node " + ref + ", which is not defined before it");
                    inputs.add(n);
                }
            }
            String symm = no.get("symmetric_group") == null || no.get("symmetric_group") instanceof Json.Null
                    ? null : str(no, "symmetric_group", where);
            Node n;
            try {
                n = switch (opName) {
                    case "input" -> {
                        noInputs(inputs, where);
                        boolean state = no.get("state") != null && bool(no, "state", where);
                        yield state ? b.state(str(no, "name", where), declared) : b.input(str(no, "name", where), declared);
                    }
                    case "constant" -> {
                        noInputs(inputs, where);
                        var vals = arr(no, "values", where);
                        if (!declared.shape().isStatic())
                            throw new GraphException(where + ": field 'type': a constant's type must be static, not " + declared);
                        long count = declared.shape().numel();   // bounded: type() checked the declared size
                        if (count != vals.size())
                            throw new GraphException(where + ": field 'values' holds " + vals.size() + (vals.size() == 1 ? " value" : " values")
                                    + ", but field 'type' declares " + declared + " (" + count + " elements)");
                        double[] v = new double[vals.size()];
                        for (int i = 0; i < v.length; i++) v[i] = dbl(vals.get(i), where, "values");
                        yield b.constant(v, declared);
                    }
                    default -> b.add(op(opName, no, where), inputs, symm);
                };
            } catch (GraphException e) {
                if (e.getMessage().startsWith("graph JSON:")) throw e;
                throw new GraphException(where + ": " + e.getMessage(), e);
            }
            if (!n.type().equals(declared))
                throw new GraphException(where + ": field 'type' says " + declared + " but the op computes " + n.type());
            byId.put(id, n);
        }

        private Op op(String opName, Json.Obj no, String where) {
            for (PointwiseFn fn : PointwiseFn.values()) if (fn.opName().equals(opName)) return new Op.Pointwise(fn);
            OpSpec spec = OpRegistry.find(opName);
            if (spec != null) {
                var attrs = new LinkedHashMap<String, Number>();
                for (OpSpec.Attribute a : spec.attributes())
                    attrs.put(a.name(), switch (a.kind()) {
                        case INT -> integer(no, a.name(), where);
                        case REAL -> dbl(field(no, a.name(), where), where, a.name());
                    });
                return new Op.Registered(spec, OpAttrs.of(spec, attrs));
            }
            for (ReduceFn fn : ReduceFn.values())
                if (fn.opName().equals(opName)) {
                    var dims = new ArrayList<Integer>();
                    for (Json d : arr(no, "dims", where).items()) dims.add(toInt(asLong(d, where, "dims"), where, "dims"));
                    return new Op.Reduce(fn, dims, bool(no, "keepdim", where));
                }
            for (CollectiveKind k : CollectiveKind.values())
                if (k.opName().equals(opName)) {
                    ReduceOp rop = null;
                    if (k == CollectiveKind.ALL_REDUCE || k == CollectiveKind.REDUCE_SCATTER)
                        rop = enumField(ReduceOp.values(), ReduceOp::opName, str(no, "reduce_op", where), where, "reduce_op");
                    int root = k == CollectiveKind.BROADCAST ? toInt(integer(no, "root", where), where, "root") : 0;
                    long capacity = no.get("capacity") != null ? integer(no, "capacity", where) : Op.Collective.EVEN;
                    if (capacity != Op.Collective.EVEN && k != CollectiveKind.ALL_TO_ALL)
                        throw new GraphException(where + ": field 'capacity' belongs to an uneven all_to_all, not to " + k.opName());
                    if (capacity != Op.Collective.EVEN && capacity < 0)
                        throw new GraphException(where + ": all_to_all capacity " + capacity + " is negative; give the most rows a rank may receive");
                    return new Op.Collective(k, rop, str(no, "group", where), root, capacity);
                }
            return switch (opName) {
                case "cast" -> new Op.Cast(dtype(str(no, "to", where), where, "to"));
                case "matmul" -> new Op.Matmul();
                case "reshape" -> new Op.Reshape(shape(arr(no, "shape", where), where, "shape"));
                case "expand" -> new Op.Expand(shape(arr(no, "shape", where), where, "shape"));
                case "permute" -> {
                    var p = new ArrayList<Integer>();
                    for (Json d : arr(no, "perm", where).items()) p.add(toInt(asLong(d, where, "perm"), where, "perm"));
                    yield new Op.Permute(p);
                }
                case "slice" -> new Op.Slice(toInt(integer(no, "dim", where), where, "dim"), integer(no, "start", where),
                        integer(no, "end", where), integer(no, "step", where));
                case "cat" -> new Op.Cat(toInt(integer(no, "dim", where), where, "dim"));
                case "custom" -> new Op.Custom(str(no, "user_op", where));
                case "custom_output" -> new Op.CustomOutput(toInt(integer(no, "index", where), where, "index"));
                default -> throw new GraphException(where + ": field 'op': unknown op '" + opName + "'");
            };
        }

        private UserOp userOp(Json.Obj uo) {
            String name = str(uo, "name", "graph JSON: a user op");
            onlyKnown(uo, "graph JSON: user op '" + name + "'", "name", "inputs", "outputs", "symmetric_inputs", "cuda_source", "kernel_name",
                    "block_size", "signatures");
            String where = "graph JSON: user op '" + name + "'";
            var inputs = specs(arr(uo, "inputs", where), where, "inputs");
            var outputs = specs(arr(uo, "outputs", where), where, "outputs");
            var symm = new ArrayList<Integer>();
            for (Json j : arr(uo, "symmetric_inputs", where).items()) symm.add(toInt(asLong(j, where, "symmetric_inputs"), where, "symmetric_inputs"));
            UserOp known = registry.get(name);
            if (known != null) {
                if (!known.inputs().equals(inputs) || !known.outputs().equals(outputs) || !known.symmetricInputs().equals(java.util.Set.copyOf(symm)))
                    throw new GraphException(where + ": the registered op declares " + known.inputs() + " -> " + known.outputs()
                            + " symmetric inputs " + known.symmetricInputs() + " but the JSON declares " + inputs + " -> " + outputs
                            + " symmetric inputs " + symm);
                return known;
            }
            Json src = uo.get("cuda_source");
            String source = src == null || src instanceof Json.Null ? null : str(uo, "cuda_source", where);
            String kernel = str(uo, "kernel_name", where);
            int block = toInt(integer(uo, "block_size", where), where, "block_size");
            var sigs = new LinkedHashMap<List<TensorType>, List<TensorType>>();
            Json sj = uo.get("signatures");
            if (sj != null) {
                for (Json s : asArr(sj, where, "signatures").items()) {
                    Json.Obj so = asObj(s, where + ": signatures", "a signature");
                    onlyKnown(so, where + ": a signature", "inputs", "outputs");
                    sigs.put(typeList(arr(so, "inputs", where), where), typeList(arr(so, "outputs", where), where));
                }
            }
            Function<UserOp.Builder, UserOp.Builder> base = ub -> {
                inputs.forEach(ub::input);
                outputs.forEach(ub::output);
                symm.forEach(ub::symmetricInput);
                return ub.cuda(kernel, source).blockSize(block);
            };
            try {
                UserOp plain = base.apply(UserOp.builder(name)).build();
                // Ops whose outputs follow from their specs need no output function; others get one that
                // answers the calls recorded in the file.
                boolean specsSuffice = sigs.entrySet().stream().allMatch(e -> {
                    try {
                        return plain.outputTypes(e.getKey()).equals(e.getValue());
                    } catch (GraphException ex) {
                        return false;
                    }
                });
                if (specsSuffice) return plain;
                return base.apply(UserOp.builder(name)).outputTypes(in -> {
                    var out = sigs.get(in);
                    if (out == null)
                        throw new GraphException("user op '" + name + "' was read from JSON without its output function; it has no recorded output types for inputs " + in);
                    return out;
                }).build();
            } catch (GraphException e) {
                throw new GraphException(where + ": " + e.getMessage(), e);
            }
        }

        private List<TensorSpec> specs(Json.Arr a, String where, String field) {
            var out = new ArrayList<TensorSpec>();
            for (Json j : a.items()) {
                Json.Obj so = asObj(j, where, field);
                String sname = str(so, "name", where + ": " + field);
                String w = where + ": " + field + " '" + sname + "'";
                onlyKnown(so, w, "name", "dtype", "shape");
                Json dt = so.get("dtype"), sh = so.get("shape");
                if (dt == null) throw missing(w, "dtype");
                if (sh == null) throw missing(w, "shape");
                DType dtype = dt instanceof Json.Null ? null : dtype(asStr(dt, w, "dtype"), w, "dtype");
                Shape shape = sh instanceof Json.Null ? null : shape(asArr(sh, w, "shape"), w, "shape");
                out.add(new TensorSpec(sname, dtype, shape));
            }
            return out;
        }

        private List<TensorType> typeList(Json.Arr a, String where) {
            var out = new ArrayList<TensorType>();
            for (Json j : a.items()) out.add(type(asStr(j, where, "signatures"), where, "signatures"));
            return out;
        }

        // ---- typed field access; every failure names where and which field

        private static void noInputs(List<Node> inputs, String where) {
            if (!inputs.isEmpty()) throw new GraphException(where + ": field 'inputs': this op takes no inputs");
        }

        private static GraphException missing(String where, String field) {
            return new GraphException(where + ": missing field '" + field + "'");
        }

        private static GraphException wrong(String where, String field, String expected, Json got) {
            return new GraphException(where + ": field '" + field + "': expected " + expected + ", found " + describe(got));
        }

        private static String describe(Json j) {
            return switch (j) {
                case Json.Str s -> "the string \"" + s.value() + "\"";
                case Json.Num n -> "the number " + n.text();
                case Json.Bool b -> b.value() ? "true" : "false";
                default -> j.kind();
            };
        }

        /** Every field any node may carry (which ones an op needs is checked as it is read). */
        private static final String[] NODE_FIELDS = {"id", "op", "inputs", "type", "name", "state", "values", "dims", "keepdim", "shape", "perm",
                "dim", "start", "end", "step", "reduce_op", "group", "root", "to", "user_op", "index", "scale", "symmetric_group", "capacity"};

        /** The fixed fields and every registered op's attributes. */
        private static final java.util.Set<String> NODE_FIELD_SET = nodeFields();

        private static java.util.Set<String> nodeFields() {
            var all = new java.util.TreeSet<>(java.util.Set.of(NODE_FIELDS));
            all.addAll(OpRegistry.attributeNames());
            return java.util.Set.copyOf(all);
        }

        /** A misspelled or foreign field is an error, not something silently dropped. */
        private static void onlyKnown(Json.Obj o, String where, String... known) { onlyKnown(o, where, java.util.Set.of(known), known); }

        private static void onlyKnown(Json.Obj o, String where, java.util.Set<String> allowed, String[] known) {
            for (String k : o.fields().keySet()) {
                if (allowed.contains(k)) continue;
                String close = null;
                for (String a : known) if (close == null && editDistance(k, a) <= 2) close = a;
                throw new GraphException(where + ": unknown field '" + (k.length() > 64 ? k.substring(0, 64) + "…" : k) + "'"
                        + (close != null ? "; did you mean '" + close + "'?" : "") + " (fields here: " + String.join(", ", known) + ")");
            }
        }

        private static int editDistance(String a, String b) {
            int[] prev = new int[b.length() + 1], cur = new int[b.length() + 1];
            for (int j = 0; j <= b.length(); j++) prev[j] = j;
            for (int i = 1; i <= a.length(); i++) {
                cur[0] = i;
                for (int j = 1; j <= b.length(); j++)
                    cur[j] = Math.min(Math.min(cur[j - 1], prev[j]) + 1, prev[j - 1] + (a.charAt(i - 1) == b.charAt(j - 1) ? 0 : 1));
                int[] t = prev; prev = cur; cur = t;
            }
            return prev[b.length()];
        }

        private static Json field(Json.Obj o, String f, String where) {
            Json v = o.get(f);
            if (v == null) throw missing(where, f);
            return v;
        }

        private static Json.Obj asObj(Json j, String where, String what) {
            if (j instanceof Json.Obj o) return o;
            throw new GraphException(where + ": expected " + what + " (an object), found " + describe(j));
        }

        private static Json.Arr asArr(Json j, String where, String field) {
            if (j instanceof Json.Arr a) return a;
            throw wrong(where, field, "an array", j);
        }

        private static String asStr(Json j, String where, String field) {
            if (j instanceof Json.Str s) return s.value();
            throw wrong(where, field, "a string", j);
        }

        private static long asLong(Json j, String where, String field) {
            if (j instanceof Json.Num n && n.isIntegral()) {
                try {
                    return Long.parseLong(n.text());
                } catch (NumberFormatException e) {
                    throw wrong(where, field, "an integer that fits in 64 bits", j);
                }
            }
            throw wrong(where, field, "an integer", j);
        }

        private static int toInt(long v, String where, String field) {
            if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE)
                throw new GraphException(where + ": field '" + field + "': " + v + " is out of range");
            return (int) v;
        }

        private static Json.Obj obj(Json.Obj o, String f, String where) {
            Json v = field(o, f, where);
            if (v instanceof Json.Obj r) return r;
            throw wrong(where, f, "an object", v);
        }

        private static Json.Arr arr(Json.Obj o, String f, String where) { return asArr(field(o, f, where), where, f); }

        private static String str(Json.Obj o, String f, String where) { return asStr(field(o, f, where), where, f); }

        private static long integer(Json.Obj o, String f, String where) { return asLong(field(o, f, where), where, f); }

        private static boolean bool(Json.Obj o, String f, String where) {
            Json v = field(o, f, where);
            if (v instanceof Json.Bool b) return b.value();
            throw wrong(where, f, "true or false", v);
        }

        private static double dbl(Json j, String where, String field) {
            return switch (j) {
                case Json.Num n -> {
                    double v = n.doubleValue();
                    // a literal past float64's range reads as an infinity: a value the file did not say
                    if (Double.isInfinite(v)) throw wrong(where, field, "a number within float64's range (\"Infinity\" for an infinity)", j);
                    yield v;
                }
                case Json.Str s when s.value().equals("NaN") -> Double.NaN;
                case Json.Str s when s.value().equals("Infinity") -> Double.POSITIVE_INFINITY;
                case Json.Str s when s.value().equals("-Infinity") -> Double.NEGATIVE_INFINITY;
                default -> throw wrong(where, field, "a number or one of \"NaN\", \"Infinity\", \"-Infinity\"", j);
            };
        }

        private static DType dtype(String s, String where, String field) {
            try {
                return DType.parse(s);
            } catch (GraphException e) {
                throw new GraphException(where + ": field '" + field + "': " + e.getMessage());
            }
        }

        private static <E> E enumField(E[] values, Function<E, String> name, String s, String where, String field) {
            for (E e : values) if (name.apply(e).equals(s)) return e;
            var names = new ArrayList<String>();
            for (E e : values) names.add(name.apply(e));
            throw new GraphException(where + ": field '" + field + "': unknown value '" + s + "' (expected one of " + names + ")");
        }

        private static Shape shape(Json.Arr a, String where, String field) {
            var dims = new ArrayList<Dim>();
            for (Json d : a.items()) {
                try {
                    dims.add(switch (d) {
                        case Json.Num n -> Dim.of(asLong(n, where, field));
                        case Json.Str s -> Dim.sym(s.value());
                        default -> throw wrong(where, field, "a dimension (a size or a symbol name)", d);
                    });
                } catch (GraphException e) {
                    if (e.getMessage() != null && e.getMessage().startsWith(where + ":")) throw e; // already says where
                    throw new GraphException(where + ": field '" + field + "': " + e.getMessage());
                }
            }
            Shape shape = new Shape(dims);
            checkDeclaredSize(shape, 1, shape.toString(), where, field);
            return shape;
        }

        /**
         * Refuses a declared shape whose static sizes multiply past 2^48 bytes at {@code elementBytes} each (the largest
         * tensor Gatun plans), without overflowing on the way: before anything is built or allocated from it.
         */
        private static void checkDeclaredSize(Shape shape, int elementBytes, String what, String where, String field) {
            long limit = Graph.Builder.MAX_TENSOR_BYTES / elementBytes, elements = 1;
            for (Dim d : shape.dims()) {
                if (!d.isStatic()) continue;
                long size = d.size();
                if (size == 0) return;   // no elements, whatever the other sizes
                if (size > limit / elements) {
                    long bytes = Graph.Builder.MAX_TENSOR_BYTES;
                    throw new GraphException(where + ": field '" + field + "': " + what + " declares more than " + limit + " elements ("
                            + (elementBytes == 1 ? "" : elementBytes + " bytes each, ") + "more than " + (bytes >> 40) + " TiB); Gatun plans tensors of at most "
                            + (bytes >> 40) + " TiB");
                }
                elements *= size;
            }
        }

        /** Parses a type written as {@code dtype[d0,d1,...]}, the form {@link TensorType#toString()} prints. */
        private static TensorType type(String s, String where, String field) {
            int open = s.indexOf('[');
            if (open < 0 || !s.endsWith("]"))
                throw new GraphException(where + ": field '" + field + "': expected a type like \"f32[4,n]\", found \"" + s + "\"");
            DType dt = dtype(s.substring(0, open), where, field);
            String body = s.substring(open + 1, s.length() - 1).strip();
            var dims = new ArrayList<Dim>();
            if (!body.isEmpty()) {
                for (String part : body.split(",", -1)) {
                    String p = part.strip();
                    try {
                        dims.add(!p.isEmpty() && Character.isDigit(p.charAt(0)) ? Dim.of(Long.parseLong(p)) : Dim.sym(p));
                    } catch (NumberFormatException | GraphException e) {   // Long.parseLong's, or Dim's own
                        throw new GraphException(where + ": field '" + field + "': bad dimension '" + p + "' in \"" + s + "\"");
                    }
                }
            }
            var shape = new Shape(dims);
            checkDeclaredSize(shape, dt.byteSize(), "\"" + s + "\"", where, field);
            return new TensorType(dt, shape);
        }
    }
}
