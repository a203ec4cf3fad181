package dev.gatun.runtime.reference;

import dev.gatun.ir.graph.ScalarMath;
import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.AllToAllCounts;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.OpSpec;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.graph.TypeInference;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.runtime.DTypes;
import dev.gatun.runtime.NDArray;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;

/**
 * Evaluates a {@link Graph} directly, node by node, for a world of simulated ranks: no lowering, no
 * planning, no buffer reuse. It is the oracle the compiled paths are tested against, so it favours being
 * obviously right over being fast.
 *
 * <p>Semantics:
 * <ul>
 * <li>Floating nodes compute in double precision and round their result to the node's dtype, so float16 and
 *     bfloat16 results are rounded after every op. Integer (and bool) values are Java {@code long}s, exact to all
 *     64 bits: integer arithmetic, reductions and collectives wrap as Java's {@code long} does, then to the
 *     dtype's width (int32 as {@code int}); comparisons of integers compare them exactly; casts from floats
 *     truncate toward zero ({@link dev.gatun.runtime.DTypes}).</li>
 * <li>Pointwise ops broadcast as NumPy does; operands promote as {@link TypeInference} says; {@code div} is
 *     true division; gelu is the exact erf form; maximum/minimum propagate NaN.</li>
 * <li>Collectives combine the group members' values in ascending rank order (bit-identical on every rank).
 *     reduce_scatter splits dimension 0 and gives chunk i to group rank i; all_gather concatenates along
 *     dimension 0 in group-rank order; broadcast sends group rank {@code root}'s value; all_to_all gives group rank
 *     i part i of every member's rows (dimension 0 split evenly, or by the row counts each member holds at run time,
 *     packed into the capacity's rows with zeros after them; counts past the capacity are refused). Group rank i is the
 *     i-th rank the group lists ("world": rank i).</li>
 * <li><b>A rank that is not a member of a collective's group passes its input through unchanged</b> (for
 *     reduce_scatter and all_gather that value keeps the input's shape, not the node's).</li>
 * <li>User ops run their {@link dev.gatun.ir.graph.HostKernel}; one without is an error.</li>
 * <li>Symbolic dimensions bind from the actual input shapes on each rank; a symbol must get one size.</li>
 * </ul>
 */
public final class ReferenceInterpreter {
    private final Graph graph;

    public ReferenceInterpreter(Graph graph) { this.graph = graph; }

    public Graph graph() { return graph; }

    /** Evaluates {@code graph} once; shorthand for {@code new ReferenceInterpreter(graph).run(inputsPerRank)}. */
    public static List<Map<String, NDArray>> evaluate(Graph graph, List<Map<String, NDArray>> inputsPerRank) {
        return new ReferenceInterpreter(graph).run(inputsPerRank);
    }

    /** A world of one rank. */
    public Map<String, NDArray> run(Map<String, NDArray> inputs) { return run(List.of(inputs)).getFirst(); }

    /**
     * Runs the graph on {@code inputsPerRank.size()} ranks; element r of the result holds rank r's outputs by
     * name, in the graph's output order.
     */
    public List<Map<String, NDArray>> run(List<Map<String, NDArray>> inputsPerRank) {
        int world = inputsPerRank.size();
        if (world < 1) throw new GraphException("graph '" + graph.name() + "': give inputs for at least one rank");
        if (graph.worldSize() != null && graph.worldSize() != world)
            throw new GraphException("graph '" + graph.name() + "' is built for a world of " + graph.worldSize()
                    + " ranks, but inputs were given for " + world);
        for (ProcessGroup g : graph.groups().values())
            for (int r : g.ranks())
                if (r >= world) throw new GraphException("group '" + g.name() + "' has rank " + r + ", outside a world of " + world);

        var ranks = new ArrayList<RankState>();
        for (int r = 0; r < world; r++) ranks.add(new RankState(r, inputsPerRank.get(r), bindInputs(r, inputsPerRank.get(r))));

        for (Node n : graph.nodes()) {
            try {
                if (n.op() instanceof Op.Collective c) collective(n, c, ranks);
                else for (RankState s : ranks) s.values[n.id()] = eval(n, s, world);
            } catch (GraphException e) {
                throw e;
            } catch (RuntimeException e) {
                throw new GraphException("reference interpreter, " + n.format() + ": " + e.getMessage(), e);
            }
        }

        var out = new ArrayList<Map<String, NDArray>>();
        for (RankState s : ranks) {
            var m = new LinkedHashMap<String, NDArray>();
            graph.outputs().forEach((name, node) -> m.put(name, s.values[node.id()].toNDArray()));
            out.add(m);
        }
        return out;
    }

    /** One simulated rank: its symbol sizes, node values and user-op outputs. */
    private final class RankState {
        final int rank;
        final Map<String, NDArray> inputs;
        final Map<String, Long> env;
        final Dense[] values = new Dense[graph.nodes().size()];
        final Map<Integer, List<Dense>> callOutputs = new HashMap<>();

        RankState(int rank, Map<String, NDArray> inputs, Map<String, Long> env) {
            this.rank = rank;
            this.inputs = inputs;
            this.env = env;
        }
    }

    // ------------------------------------------------------------------ inputs

    /** Checks the rank's inputs against the declarations and binds symbols; the error names input and dim. */
    private Map<String, Long> bindInputs(int rank, Map<String, NDArray> given) {
        for (String k : given.keySet())
            if (!graph.inputs().containsKey(k))
                throw new GraphException("rank " + rank + ": graph '" + graph.name() + "' has no input '" + k + "' (its inputs are " + graph.inputs().keySet() + ")");
        var env = new LinkedHashMap<String, Long>();
        var origin = new HashMap<String, String>();
        for (var e : graph.inputs().entrySet()) {
            String name = e.getKey();
            TensorType want = e.getValue().type();
            NDArray a = given.get(name);
            if (a == null) throw new GraphException("rank " + rank + ": input '" + name + "' " + want + " is missing");
            if (a.dtype() != want.dtype())
                throw new GraphException("rank " + rank + ": input '" + name + "' is " + a.dtype() + Arrays.toString(a.shape())
                        + " but the graph declares " + want);
            long[] s = a.shape();
            if (s.length != want.rank())
                throw new GraphException("rank " + rank + ": input '" + name + "' has shape " + Arrays.toString(s) + " (rank " + s.length
                        + ") but the graph declares " + want);
            for (int d = 0; d < s.length; d++) {
                Dim dim = want.shape().dim(d);
                if (dim.isStatic()) {
                    if (dim.size() != s[d])
                        throw new GraphException("rank " + rank + ": input '" + name + "' dimension " + d + " is " + s[d]
                                + " but the graph declares " + want);
                } else {
                    String sym = ((Dim.Sym) dim).name();
                    Long prev = env.putIfAbsent(sym, s[d]);
                    if (prev != null && prev != s[d])
                        throw new GraphException("rank " + rank + ": input '" + name + "' dimension " + d + " is " + s[d] + " but symbol '"
                                + sym + "' is already " + prev + " (from " + origin.get(sym) + ")");
                    origin.putIfAbsent(sym, "input '" + name + "' dimension " + d);
                }
            }
        }
        return env;
    }

    // ------------------------------------------------------------------ per-rank ops

    private Dense eval(Node n, RankState s, int world) {
        List<Dense> in = new ArrayList<>();
        for (Node i : n.inputs()) in.add(s.values[i.id()]);
        DType t = n.type().dtype();
        return switch (n.op()) {
            case Op.Input i -> Dense.of(s.inputs.get(i.name()));
            case Op.Constant c -> Dense.rounded(t, n.type().shape().sizes(), c.values());
            case Op.Pointwise p -> pointwise(p.fn(), in, t, n);
            case Op.Cast c -> in.getFirst().roundedTo(c.to());
            case Op.Reduce r -> reduce(r, TypeInference.reductionDims(r.opName(), n.input(0), r.dims()), in.getFirst(), t);
            case Op.Matmul m -> matmul(in.get(0), in.get(1), t, n);
            case Op.Registered r -> {
                var outs = registered(n, r, in);
                s.callOutputs.put(n.id(), outs);
                yield outs.getFirst();
            }
            case Op.Reshape r -> {
                long[] to = r.shape().sizes(s.env);
                if (Dense.size(to) != in.getFirst().numel())
                    throw new GraphException("reshape: " + in.getFirst() + " cannot become " + Arrays.toString(to) + " on rank " + s.rank);
                yield in.getFirst().withShape(to);
            }
            case Op.Permute p -> permute(in.getFirst(), p.perm());
            case Op.Slice sl -> slice(in.getFirst(), sl);
            case Op.Cat c -> cat(in, TypeInference.catDim("cat", c.dim(), n.type().rank()), t);
            case Op.Expand e -> {
                long[] to = e.shape().sizes(s.env);
                if (broadcastShape(in.getFirst().shape(), to) == null || !Arrays.equals(broadcastShape(in.getFirst().shape(), to), to))
                    throw new GraphException("expand: cannot broadcast " + in.getFirst() + " to " + Arrays.toString(to));
                yield in.getFirst().broadcastTo(to);
            }
            case Op.Custom c -> {
                var outs = callUserOp(n, c, in, s.rank, world);
                s.callOutputs.put(n.id(), outs);
                yield outs.getFirst();
            }
            case Op.CustomOutput o -> s.callOutputs.get(n.input(0).id()).get(o.index());
            case Op.Collective c -> throw new IllegalStateException("collectives run across ranks");
        };
    }

    private static Dense pointwise(PointwiseFn fn, List<Dense> in, DType t, Node n) {
        long[] shape = in.getFirst().shape();
        for (Dense d : in.subList(1, in.size())) {
            shape = broadcastShape(shape, d.shape());
            if (shape == null) throw new GraphException(fn.opName() + ": actual shapes " + in + " do not broadcast");
        }
        var args = new ArrayList<Dense>();
        for (Dense d : in) args.add(d.broadcastTo(shape));
        // integer operands of an integer result or of a comparison compute exactly in long; everything else in double
        boolean exact = args.stream().allMatch(Dense::isExact) && (fn.isComparison() || DTypes.isExact(t));
        int size = Dense.size(shape);
        if (exact) {
            long[][] x = new long[3][];
            for (int i = 0; i < args.size(); i++) x[i] = args.get(i).longs();
            long[] out = new long[size];
            for (int i = 0; i < size; i++)
                out[i] = DTypes.wrap(ScalarMath.applyLong(fn, x[0][i], x[1] == null ? 0 : x[1][i], x[2] == null ? 0 : x[2][i]), t);
            return Dense.ints(t, shape, out);
        }
        double[][] x = new double[3][];
        for (int i = 0; i < args.size(); i++) x[i] = args.get(i).doubles();
        double[] out = new double[size];
        for (int i = 0; i < size; i++)
            out[i] = ScalarMath.apply(fn, x[0][i], x[1] == null ? 0 : x[1][i], x[2] == null ? 0 : x[2][i]);
        return Dense.rounded(t, shape, out);
    }

    private static Dense reduce(Op.Reduce r, List<Integer> dims, Dense x, DType t) {
        long[] shape = x.shape();
        boolean[] reduced = new boolean[shape.length];
        for (int d : dims) reduced[d] = true;
        var outDims = new ArrayList<Long>();
        for (int d = 0; d < shape.length; d++) {
            if (!reduced[d]) outDims.add(shape[d]);
            else if (r.keepdim()) outDims.add(1L);
        }
        long[] outShape = outDims.stream().mapToLong(Long::longValue).toArray();
        // strides of the output for the kept dims, 0 for reduced ones: input position -> output position
        long[] outStrides = new long[shape.length];
        long acc = 1;
        for (int d = shape.length - 1; d >= 0; d--) {
            if (reduced[d]) continue;
            outStrides[d] = acc;
            acc *= shape[d];
        }
        int[] into = Dense.positions(shape, outStrides, 0);
        int outN = Dense.size(outShape);
        boolean[] seen = new boolean[outN];
        for (int o : into) seen[o] = true;
        for (int o = 0; o < outN; o++)
            if (!seen[o] && (r.fn() == ReduceFn.MAX || r.fn() == ReduceFn.MIN))
                throw new GraphException(r.opName() + ": reducing " + x + " over dims " + dims + " that hold no elements");
        long count = 1;
        for (int d : dims) count *= shape[d];
        return x.isExact() && DTypes.isExact(t) ? reduceExactly(r.fn(), x.longs(), into, t, outShape)
                : reduceInDouble(r.fn(), x.doubles(), into, count, t, outShape);
    }

    /** An integer reduction in wrapping long arithmetic: empty sums are 0. */
    private static Dense reduceExactly(ReduceFn fn, long[] x, int[] into, DType t, long[] outShape) {
        long[] res = new long[Dense.size(outShape)];
        if (fn == ReduceFn.MAX) Arrays.fill(res, Long.MIN_VALUE);
        if (fn == ReduceFn.MIN) Arrays.fill(res, Long.MAX_VALUE);
        for (int i = 0; i < x.length; i++) {
            int o = into[i];
            res[o] = switch (fn) {
                case SUM, MEAN -> res[o] + x[i];
                case MAX -> Math.max(res[o], x[i]);
                case MIN -> Math.min(res[o], x[i]);
            };
        }
        for (int o = 0; o < res.length; o++) res[o] = DTypes.wrap(res[o], t);
        return Dense.ints(t, outShape, res);
    }

    /** A reduction in double, rounded once to {@code t}: an empty sum is 0, an empty mean NaN, as in PyTorch. */
    private static Dense reduceInDouble(ReduceFn fn, double[] x, int[] into, long count, DType t, long[] outShape) {
        int outN = Dense.size(outShape);
        double[] res = new double[outN];
        boolean[] seen = new boolean[outN];
        for (int i = 0; i < x.length; i++) {
            int o = into[i];
            double v = x[i];
            if (!seen[o]) { res[o] = v; seen[o] = true; }
            else res[o] = switch (fn) {
                case SUM, MEAN -> res[o] + v;
                case MAX -> Math.max(res[o], v);
                case MIN -> Math.min(res[o], v);
            };
        }
        for (int o = 0; o < outN; o++) {
            if (!seen[o]) res[o] = fn == ReduceFn.MEAN ? Double.NaN : 0;
            else if (fn == ReduceFn.MEAN) res[o] /= count;
        }
        return Dense.rounded(t, outShape, res);
    }

    private static Dense matmul(Dense a, Dense b, DType t, Node n) {
        int ra = a.rank(), rb = b.rank();
        long m = a.shape()[ra - 2], k = a.shape()[ra - 1], k2 = b.shape()[rb - 2], nn = b.shape()[rb - 1];
        if (k != k2) throw new GraphException("matmul: inner dimensions " + k + " and " + k2 + " of " + a + " and " + b + " differ");
        long[] batchA = Arrays.copyOf(a.shape(), ra - 2), batchB = Arrays.copyOf(b.shape(), rb - 2);
        long[] batch = broadcastShape(batchA, batchB);
        if (batch == null) throw new GraphException("matmul: batch dimensions of " + a + " and " + b + " do not broadcast");
        // batch offsets (in matrices) of each operand for every output batch index
        long[] offA = Dense.ints(DType.INT64, batchA, iota(Dense.size(batchA))).broadcastTo(batch).longs();
        long[] offB = Dense.ints(DType.INT64, batchB, iota(Dense.size(batchB))).broadcastTo(batch).longs();
        double[] as = a.doubles(), bs = b.doubles();
        long[] outShape = Arrays.copyOf(batch, batch.length + 2);
        outShape[batch.length] = m;
        outShape[batch.length + 1] = nn;
        double[] out = new double[Dense.size(outShape)];
        int mk = (int) (m * k), kn = (int) (k * nn), mn = (int) (m * nn);
        for (int bi = 0; bi < offA.length; bi++) {
            int baseA = (int) offA[bi] * mk, baseB = (int) offB[bi] * kn, baseO = bi * mn;
            for (int i = 0; i < m; i++)
                for (int j = 0; j < nn; j++) {
                    double sum = 0;
                    for (int p = 0; p < k; p++) sum += as[baseA + i * (int) k + p] * bs[baseB + p * (int) nn + j];
                    out[baseO + i * (int) nn + j] = sum;
                }
        }
        return Dense.rounded(t, outShape, out);
    }

    private static long[] iota(int n) {
        long[] r = new long[n];
        for (int i = 0; i < n; i++) r[i] = i;
        return r;
    }

    private static Dense permute(Dense x, List<Integer> perm) {
        int r = x.rank();
        long[] inStrides = Dense.strides(x.shape());
        long[] outShape = new long[r], st = new long[r];
        for (int d = 0; d < r; d++) {
            int p = perm.get(d) < 0 ? perm.get(d) + r : perm.get(d);
            outShape[d] = x.shape()[p];
            st[d] = inStrides[p];
        }
        return x.pick(outShape, Dense.positions(outShape, st, 0));
    }

    private static Dense slice(Dense x, Op.Slice s) {
        int r = x.rank();
        int dim = s.dim() < 0 ? s.dim() + r : s.dim();
        long[] inStrides = Dense.strides(x.shape());
        long[] outShape = x.shape().clone(), st = inStrides.clone();
        outShape[dim] = Math.max(0, (s.end() - s.start() + s.step() - 1) / s.step());
        st[dim] = inStrides[dim] * s.step();
        return x.pick(outShape, Dense.positions(outShape, st, s.start() * inStrides[dim]));
    }

    /** The inputs one after the other along {@code dim}: each output element copied from the input whose range holds it. */
    private static Dense cat(List<Dense> in, int dim, DType t) {
        long[] shape = in.getFirst().shape().clone();
        shape[dim] = 0;
        for (Dense x : in) shape[dim] += x.shape()[dim];
        Dense out = Dense.zeros(t, shape);
        long outer = 1, inner = 1;
        for (int d = 0; d < dim; d++) outer *= shape[d];
        for (int d = dim + 1; d < shape.length; d++) inner *= shape[d];
        long row = shape[dim] * inner; // elements of one outer index in the output
        long at = 0;                   // where the current input starts inside a row
        for (Dense x : in) {
            long part = x.shape()[dim] * inner;
            for (long o = 0; o < outer; o++) x.copyTo((int) (o * part), out, (int) (o * row + at), (int) part);
            at += part;
        }
        return out;
    }

    private List<Dense> callUserOp(Node n, Op.Custom c, List<Dense> in, int rank, int world) {
        UserOp u = graph.userOps().get(c.name());
        if (u == null) throw new GraphException("user op '" + c.name() + "' (" + n.label() + ") is not registered with graph '" + graph.name() + "'");
        if (u.host() == null)
            throw new GraphException("user op '" + c.name() + "' (" + n.label() + ") has no host implementation; the reference interpreter"
                    + " needs one: register the op with .host(...)");
        var types = in.stream().map(d -> new TensorType(d.dtype(), Shape.of(d.shape()))).toList();
        List<TensorType> outTypes = u.outputTypes(types);
        var ins = new ArrayList<HostTensor>();
        for (Dense d : in) ins.add(d.toNDArray()); // copies: a host kernel cannot change the graph's values
        var outs = new ArrayList<NDArray>();
        for (TensorType t : outTypes) outs.add(NDArray.zeros(t.dtype(), t.shape().sizes()));
        u.host().run(List.copyOf(ins), List.copyOf(outs), rank, world);
        var result = new ArrayList<Dense>();
        for (NDArray o : outs) result.add(Dense.of(o));
        return result;
    }

    /** A registered op by its {@link OpSpec#reference}, on copies of the inputs, its outputs typed for the actual shapes. */
    private static List<Dense> registered(Node n, Op.Registered r, List<Dense> in) {
        var operands = new ArrayList<OpSpec.Operand>();
        var ins = new ArrayList<HostTensor>();
        for (int i = 0; i < in.size(); i++) {
            Dense d = in.get(i);
            operands.add(new OpSpec.Operand(n.input(i).label(), new TensorType(d.dtype(), Shape.of(d.shape()))));
            ins.add(d.toNDArray()); // copies: a body cannot change the graph's values
        }
        var outs = new ArrayList<NDArray>();
        for (TensorType t : r.spec().infer(operands, r.attrs())) outs.add(NDArray.zeros(t.dtype(), t.shape().sizes()));
        // an op that writes input 0 in place finds output 0 holding input 0's values (a new value: the reference never writes in place)
        if (r.spec().inPlace()) ins.getFirst().copyTo(0, outs.getFirst(), 0, ins.getFirst().numel());
        if (r.spec().checksValues()) {
            String why = r.spec().refusal(List.copyOf(ins), r.attrs());
            if (why != null) throw new GraphException(r.opName() + "(" + n.inputs().stream().map(Node::label).collect(java.util.stream.Collectors.joining(", ")) + "): " + why);
        }
        r.spec().reference(List.copyOf(ins), List.copyOf(outs), r.attrs());
        var result = new ArrayList<Dense>();
        for (NDArray o : outs) result.add(Dense.of(o));
        return result;
    }

    // ------------------------------------------------------------------ collectives

    private void collective(Node n, Op.Collective c, List<RankState> ranks) {
        int world = ranks.size();
        ProcessGroup g = graph.groups().get(c.group());
        // non-members (of an explicit group) pass their input through unchanged (documented in the class comment)
        var inSome = new boolean[world];
        for (List<Integer> slice : g.slices(world)) for (int r : slice) inSome[r] = true;
        for (RankState s : ranks) if (!inSome[s.rank]) s.values[n.id()] = s.values[n.input(0).id()];
        // a mesh axis runs in every slice at once, each among its own ranks
        for (List<Integer> slice : g.slices(world)) collective(n, c, ranks, slice);
    }

    private void collective(Node n, Op.Collective c, List<RankState> ranks, List<Integer> members) {
        int size = members.size();
        var inputs = new ArrayList<Dense>();
        for (int r : members) inputs.add(ranks.get(r).values[n.input(0).id()]);
        Dense first = inputs.getFirst();
        for (int i = 1; i < size; i++)
            if (!Arrays.equals(inputs.get(i).shape(), first.shape()))
                throw new GraphException(n.format() + ": rank " + members.get(i) + " contributes " + inputs.get(i) + " but rank "
                        + members.getFirst() + " contributes " + first);
        DType t = n.type().dtype();

        switch (c.kind()) {
            case ALL_REDUCE -> {
                Dense r = combine(c.reduceOp(), members, ranks, n, t);
                for (int m : members) ranks.get(m).values[n.id()] = r;
            }
            case REDUCE_SCATTER -> {
                Dense r = combine(c.reduceOp(), members, ranks, n, t);
                long rows = r.shape()[0] / size;
                int chunk = r.numel() / size;
                long[] shape = r.shape().clone();
                shape[0] = rows;
                for (int i = 0; i < size; i++) {
                    Dense part = Dense.zeros(t, shape);
                    r.copyTo(i * chunk, part, 0, chunk);
                    ranks.get(members.get(i)).values[n.id()] = part;
                }
            }
            case ALL_GATHER -> {
                long[] shape = first.shape().clone();
                shape[0] *= size;
                Dense r = Dense.zeros(t, shape);
                for (int i = 0; i < size; i++) inputs.get(i).copyTo(0, r, i * first.numel(), first.numel());
                for (int m : members) ranks.get(m).values[n.id()] = r;
            }
            case BROADCAST -> {
                Dense r = inputs.get(c.root());
                for (int m : members) ranks.get(m).values[n.id()] = r;
            }
            case ALL_TO_ALL -> allToAll(n, c, ranks, members, inputs);
        }
    }

    /**
     * all_to_all: member d's result holds part d of every member's rows, in member order; even parts split dimension 0
     * equally, uneven ones follow the members' row counts (input 1), packed into {@code capacity} rows, zero after them.
     */
    private static void allToAll(Node n, Op.Collective c, List<RankState> ranks, List<Integer> members, List<Dense> inputs) {
        int size = members.size();
        Dense first = inputs.getFirst();
        DType t = n.type().dtype();
        long rows = first.shape()[0];
        int rowElems = 1;
        for (int i = 1; i < first.shape().length; i++) rowElems = Math.toIntExact(rowElems * first.shape()[i]);
        long[][] counts = new long[size][];
        for (int k = 0; k < size; k++)
            counts[k] = c.uneven() ? ranks.get(members.get(k)).values[n.input(1).id()].longs().clone() : evenCounts(size, rows / size);
        if (c.uneven()) {
            String why = AllToAllCounts.refusal(n.format(), counts, members, rows, c.capacity());
            if (why != null) throw new GraphException(why);
        }
        long[] shape = first.shape().clone();
        if (c.uneven()) shape[0] = c.capacity();
        for (int d = 0; d < size; d++) {
            Dense r = Dense.zeros(t, shape);
            int at = 0;
            for (int k = 0; k < size; k++) {
                int from = Math.toIntExact(AllToAllCounts.offset(counts[k], d) * rowElems), length = Math.toIntExact(counts[k][d] * rowElems);
                inputs.get(k).copyTo(from, r, at, length);
                at += length;
            }
            ranks.get(members.get(d)).values[n.id()] = r;
        }
    }

    private static long[] evenCounts(int size, long part) {
        long[] out = new long[size];
        Arrays.fill(out, part);
        return out;
    }

    /**
     * Elementwise combination of the members' inputs, in ascending rank order so every rank agrees bit for bit, as a
     * value of {@code t}: integers in wrapping long arithmetic (exact), floats in double rounded once.
     */
    private static Dense combine(ReduceOp op, List<Integer> members, List<RankState> ranks, Node n, DType t) {
        var values = new ArrayList<Dense>();
        for (int r : new TreeSet<>(members)) values.add(ranks.get(r).values[n.input(0).id()]);
        Dense first = values.getFirst();
        if (first.isExact()) {
            long[] acc = first.longs().clone();
            for (Dense v : values.subList(1, values.size())) {
                long[] x = v.longs();
                for (int i = 0; i < acc.length; i++) acc[i] = switch (op) {
                    case SUM, AVG -> acc[i] + x[i];   // avg of integers is refused by type inference
                    case MAX -> Math.max(acc[i], x[i]);
                    case MIN -> Math.min(acc[i], x[i]);
                };
            }
            for (int i = 0; i < acc.length; i++) acc[i] = DTypes.wrap(acc[i], t);
            return Dense.ints(t, first.shape(), acc);
        }
        double[] acc = first.doubles().clone();
        for (Dense v : values.subList(1, values.size())) {
            double[] x = v.doubles();
            for (int i = 0; i < acc.length; i++) acc[i] = switch (op) {
                case SUM, AVG -> acc[i] + x[i];
                case MAX -> Math.max(acc[i], x[i]);
                case MIN -> Math.min(acc[i], x[i]);
            };
        }
        if (op == ReduceOp.AVG) for (int i = 0; i < acc.length; i++) acc[i] /= values.size();
        return Dense.rounded(t, first.shape(), acc);
    }

    // ------------------------------------------------------------------ shapes

    /** NumPy broadcasting of concrete shapes; null when they do not broadcast. */
    static long[] broadcastShape(long[] a, long[] b) {
        int r = Math.max(a.length, b.length);
        long[] out = new long[r];
        for (int i = 0; i < r; i++) {
            int ia = a.length - r + i, ib = b.length - r + i;
            long da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
            if (da == db || db == 1) out[i] = da;
            else if (da == 1) out[i] = db;
            else return null;
        }
        return out;
    }
}
