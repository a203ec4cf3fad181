package dev.gatun.runtime.reference;

import dev.gatun.ir.graph.ScalarMath;
import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.graph.TypeInference;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.runtime.NDArray;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.stream.LongStream;

/**
 * Evaluates a {@link Graph} directly, node by node, for a world of simulated ranks: no lowering, no
 * planning, no buffer reuse. It is the oracle the compiled paths are tested against, so it favours being
 * obviously right over being fast.
 *
 * <p>Semantics:
 * <ul>
 * <li>Every node computes in double precision and its result is rounded to the node's dtype, so float16 and
 *     bfloat16 results are rounded after every op, integers truncate toward zero (casts) and wrap.</li>
 * <li>Pointwise ops broadcast as NumPy does; operands promote as {@link TypeInference} says; {@code div} is
 *     true division; gelu is the exact erf form; maximum/minimum propagate NaN.</li>
 * <li>Collectives combine the group members' values in ascending rank order (bit-identical on every rank).
 *     reduce_scatter splits dimension 0 and gives chunk i to group rank i; all_gather concatenates along
 *     dimension 0 in group-rank order; broadcast sends group rank {@code root}'s value. Group rank i is the
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
            case Op.Constant c -> new Dense(t, n.type().shape().sizes(), c.values()).roundedTo(t);
            case Op.Pointwise p -> pointwise(p.fn(), in, t, n);
            case Op.Cast c -> in.getFirst().roundedTo(c.to());
            case Op.Reduce r -> reduce(r, TypeInference.reductionDims(r.opName(), n.input(0), r.dims()), in.getFirst(), t);
            case Op.Matmul m -> matmul(in.get(0), in.get(1), t, n);
            case Op.IndexSelect x -> indexSelect(in.get(0), in.get(1), n);
            case Op.Argmax a -> argmax(in.getFirst(), n);
            case Op.UpdateSlice u -> updateSlice(in.get(0), in.get(1), in.get(2), u, n);
            case Op.Attention a -> attention(in.get(0), in.get(1), in.get(2), in.get(3), a.scale(), n);
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
                yield new Dense(in.getFirst().dtype(), to, in.getFirst().broadcastTo(to));
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
        double[][] args = new double[3][];
        for (int i = 0; i < in.size(); i++) args[i] = in.get(i).broadcastTo(shape);
        double[] out = new double[Dense.size(shape)];
        for (int i = 0; i < out.length; i++)
            out[i] = ScalarMath.apply(fn, args[0][i], args[1] == null ? 0 : args[1][i], args[2] == null ? 0 : args[2][i]);
        return new Dense(t, shape, out).roundedTo(t);
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
        // strides of the output for the kept dims, 0 for reduced ones: input index -> output index
        long[] outStridesFull = new long[shape.length];
        long acc = 1;
        for (int d = shape.length - 1; d >= 0; d--) {
            if (reduced[d]) continue;
            outStridesFull[d] = acc;
            acc *= shape[d];
        }
        int outN = Dense.size(outShape);
        double[] res = new double[outN];
        boolean[] seen = new boolean[outN];
        long[] idx = new long[shape.length];
        for (int i = 0; i < x.numel(); i++) {
            int o = 0;
            for (int d = 0; d < shape.length; d++) o += (int) (idx[d] * outStridesFull[d]);
            double v = x.data()[i];
            if (!seen[o]) { res[o] = v; seen[o] = true; }
            else res[o] = switch (r.fn()) {
                case SUM, MEAN -> res[o] + v;
                case MAX -> Math.max(res[o], v);
                case MIN -> Math.min(res[o], v);
            };
            for (int d = shape.length - 1; d >= 0; d--) {
                if (++idx[d] < shape[d]) break;
                idx[d] = 0;
            }
        }
        long count = 1;
        for (int d : dims) count *= shape[d];
        for (int o = 0; o < outN; o++) {
            if (!seen[o]) {
                if (r.fn() == ReduceFn.MAX || r.fn() == ReduceFn.MIN)
                    throw new GraphException(r.opName() + ": reducing " + x + " over dims " + dims + " that hold no elements");
                res[o] = r.fn() == ReduceFn.MEAN ? Double.NaN : 0; // empty sum 0, empty mean NaN, as in PyTorch
            } else if (r.fn() == ReduceFn.MEAN) res[o] /= count;
        }
        return new Dense(t, outShape, res).roundedTo(t);
    }

    /** The first position of each row's largest element (a NaN counts as the largest). */
    private static Dense argmax(Dense x, Node n) {
        int cols = (int) x.shape()[x.rank() - 1], rows = x.numel() / Math.max(1, cols);
        double[] out = new double[rows];
        for (int r = 0; r < rows; r++) {
            int best = 0;
            for (int j = 1; j < cols; j++) {
                double v = x.data()[r * cols + j], b = x.data()[r * cols + best];
                if (!Double.isNaN(b) && (Double.isNaN(v) || v > b)) best = j;
            }
            out[r] = best;
        }
        return new Dense(DType.INT64, Arrays.copyOf(x.shape(), x.rank() - 1), out);   // from the data: shapes may be symbolic
    }

    /**
     * {@code x} with {@code update} written along {@code u.dim()} from the position {@code at} holds (a new value: the
     * reference never writes in place); a position where the update does not fit names itself.
     */
    private static Dense updateSlice(Dense x, Dense update, Dense at, Op.UpdateSlice u, Node n) {
        int rank = x.rank(), dim = u.dim() < 0 ? u.dim() + rank : u.dim();
        long size = x.shape()[dim], len = update.shape()[dim];
        double start = at.data()[0];
        if (start < 0 || start > size - len)
            throw new GraphException("update_slice: position " + (long) start + " of " + n.input(2).label() + " puts the " + len + " elements of "
                    + n.input(1).label() + " along dimension " + dim + " outside " + n.input(0).label() + "'s " + size + "; it must be 0 to " + (size - len));
        double[] out = x.data().clone();
        long inner = 1;
        for (int d = dim + 1; d < rank; d++) inner *= x.shape()[d];
        long outer = x.numel() / Math.max(1, size * inner);
        for (long o = 0; o < outer; o++)
            for (long j = 0; j < len; j++)
                System.arraycopy(update.data(), (int) ((o * len + j) * inner), out, (int) ((o * size + (long) start + j) * inner), (int) inner);
        return new Dense(x.dtype(), x.shape(), out);
    }

    /**
     * {@code softmax(scale * q kT) v} over the positions 0 to {@code at}'s, in float64, rounded once to q's dtype; a
     * position outside the cache names itself.
     */
    private static Dense attention(Dense q, Dense kT, Dense v, Dense at, double scale, Node n) {
        int batch = (int) q.shape()[0], rows = (int) q.shape()[1], d = (int) q.shape()[2], len = (int) kT.shape()[2];
        double position = at.data()[0];
        if (position < 0 || position >= len)
            throw new GraphException("attention: position " + (long) position + " of " + n.input(3).label() + " is outside the " + len
                    + " positions of " + n.input(1).label() + "; it must be 0 to " + (len - 1));
        int last = (int) position;
        double[] out = new double[q.numel()];
        for (int b = 0; b < batch; b++)
            for (int r = 0; r < rows; r++) {
                double[] score = new double[last + 1];
                double max = Double.NEGATIVE_INFINITY, sum = 0;
                for (int s = 0; s <= last; s++) {
                    double dot = 0;
                    for (int e = 0; e < d; e++) dot += q.data()[(b * rows + r) * d + e] * kT.data()[(b * d + e) * len + s];
                    score[s] = scale * dot;
                    max = Math.max(max, score[s]);
                }
                for (int s = 0; s <= last; s++) sum += score[s] = Math.exp(score[s] - max);
                for (int e = 0; e < d; e++) {
                    double acc = 0;
                    for (int s = 0; s <= last; s++) acc += score[s] * v.data()[(b * len + s) * d + e];
                    out[(b * rows + r) * d + e] = acc / sum;
                }
            }
        return new Dense(q.dtype(), q.shape(), out).roundedTo(q.dtype());
    }

    /** Rows of {@code table} at {@code ids} (dimension 0); an index out of range names itself. */
    private static Dense indexSelect(Dense table, Dense ids, Node n) {
        long rows = table.shape()[0];
        int row = (int) (table.numel() / Math.max(1, rows));
        long[] shape = LongStream.concat(Arrays.stream(ids.shape()), Arrays.stream(table.shape()).skip(1)).toArray();   // shapes may be symbolic
        double[] out = new double[ids.numel() * row];
        for (int k = 0; k < ids.numel(); k++) {
            double id = ids.data()[k];
            if (id < 0 || id >= rows)
                throw new GraphException("index_select: index " + (long) id + " at position " + k + " is outside the " + rows + " rows of " + n.input(0).label());
            System.arraycopy(table.data(), (int) id * row, out, k * row, row);
        }
        return new Dense(table.dtype(), shape, out);
    }

    private static Dense matmul(Dense a, Dense b, DType t, Node n) {
        int ra = a.rank(), rb = b.rank();
        long m = a.shape()[ra - 2], k = a.shape()[ra - 1], k2 = b.shape()[rb - 2], nn = b.shape()[rb - 1];
        if (k != k2) throw new GraphException("matmul: inner dimensions " + k + " and " + k2 + " of " + a + " and " + b + " differ");
        long[] batchA = Arrays.copyOf(a.shape(), ra - 2), batchB = Arrays.copyOf(b.shape(), rb - 2);
        long[] batch = broadcastShape(batchA, batchB);
        if (batch == null) throw new GraphException("matmul: batch dimensions of " + a + " and " + b + " do not broadcast");
        // batch offsets (in matrices) of each operand for every output batch index
        double[] offA = new Dense(DType.FLOAT64, batchA, iota(Dense.size(batchA))).broadcastTo(batch);
        double[] offB = new Dense(DType.FLOAT64, batchB, iota(Dense.size(batchB))).broadcastTo(batch);
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
                    for (int p = 0; p < k; p++) sum += a.data()[baseA + i * (int) k + p] * b.data()[baseB + p * (int) nn + j];
                    out[baseO + i * (int) nn + j] = sum;
                }
        }
        return new Dense(t, outShape, out).roundedTo(t);
    }

    private static double[] iota(int n) {
        double[] r = new double[n];
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
        return new Dense(x.dtype(), outShape, gather(x.data(), outShape, st, 0));
    }

    private static Dense slice(Dense x, Op.Slice s) {
        int r = x.rank();
        int dim = s.dim() < 0 ? s.dim() + r : s.dim();
        long[] inStrides = Dense.strides(x.shape());
        long[] outShape = x.shape().clone(), st = inStrides.clone();
        outShape[dim] = Math.max(0, (s.end() - s.start() + s.step() - 1) / s.step());
        st[dim] = inStrides[dim] * s.step();
        return new Dense(x.dtype(), outShape, gather(x.data(), outShape, st, s.start() * inStrides[dim]));
    }

    /** The inputs one after the other along {@code dim}: each output element copied from the input whose range holds it. */
    private static Dense cat(List<Dense> in, int dim, DType t) {
        long[] shape = in.getFirst().shape().clone();
        shape[dim] = 0;
        for (Dense x : in) shape[dim] += x.shape()[dim];
        double[] out = new double[Dense.size(shape)];
        long outer = 1, inner = 1;
        for (int d = 0; d < dim; d++) outer *= shape[d];
        for (int d = dim + 1; d < shape.length; d++) inner *= shape[d];
        long row = shape[dim] * inner; // elements of one outer index in the output
        long at = 0;                   // where the current input starts inside a row
        for (Dense x : in) {
            long part = x.shape()[dim] * inner;
            for (long o = 0; o < outer; o++)
                for (long e = 0; e < part; e++) out[(int) (o * row + at + e)] = x.data()[(int) (o * part + e)];
            at += part;
        }
        return new Dense(t, shape, out);
    }

    /** Reads a strided view (the same arithmetic a backend's view does) into a contiguous array. */
    private static double[] gather(double[] src, long[] shape, long[] strides, long offset) {
        double[] out = new double[Dense.size(shape)];
        long[] idx = new long[shape.length];
        for (int i = 0; i < out.length; i++) {
            long off = offset;
            for (int d = 0; d < shape.length; d++) off += idx[d] * strides[d];
            out[i] = src[(int) off];
            for (int d = shape.length - 1; d >= 0; d--) {
                if (++idx[d] < shape[d]) break;
                idx[d] = 0;
            }
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
                Dense r = combine(c.reduceOp(), members, ranks, n).roundedTo(t);
                for (int m : members) ranks.get(m).values[n.id()] = r;
            }
            case REDUCE_SCATTER -> {
                Dense r = combine(c.reduceOp(), members, ranks, n).roundedTo(t);
                long rows = r.shape()[0] / size;
                int chunk = r.numel() / size;
                long[] shape = r.shape().clone();
                shape[0] = rows;
                for (int i = 0; i < size; i++)
                    ranks.get(members.get(i)).values[n.id()] = new Dense(t, shape, Arrays.copyOfRange(r.data(), i * chunk, (i + 1) * chunk));
            }
            case ALL_GATHER -> {
                long[] shape = first.shape().clone();
                shape[0] *= size;
                double[] out = new double[first.numel() * size];
                for (int i = 0; i < size; i++) System.arraycopy(inputs.get(i).data(), 0, out, i * first.numel(), first.numel());
                Dense r = new Dense(t, shape, out);
                for (int m : members) ranks.get(m).values[n.id()] = r;
            }
            case BROADCAST -> {
                Dense r = inputs.get(c.root());
                for (int m : members) ranks.get(m).values[n.id()] = r;
            }
        }
    }

    /** Elementwise combination of the members' inputs, in ascending rank order so every rank agrees bit for bit. */
    private static Dense combine(ReduceOp op, List<Integer> members, List<RankState> ranks, Node n) {
        var order = new TreeSet<>(members);
        Dense acc = null;
        for (int r : order) {
            Dense v = ranks.get(r).values[n.input(0).id()];
            if (acc == null) {
                acc = new Dense(v.dtype(), v.shape(), v.data().clone());
                continue;
            }
            double[] a = acc.data();
            for (int i = 0; i < a.length; i++) {
                a[i] = switch (op) {
                    case SUM, AVG -> a[i] + v.data()[i];
                    case MAX -> Math.max(a[i], v.data()[i]);
                    case MIN -> Math.min(a[i], v.data()[i]);
                };
            }
        }
        if (op == ReduceOp.AVG) for (int i = 0; i < acc.data().length; i++) acc.data()[i] /= order.size();
        return acc;
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
