package dev.gatun.ir.graph;

import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.StringJoiner;

/** Result types of ops, with the checks that reject bad graphs early and say why. */
public final class TypeInference {
    private TypeInference() {}

    /** What inference needs from the graph being built: its user ops, groups and (maybe) world size. */
    public interface Context {
        Map<String, UserOp> userOps();

        ProcessGroup group(String name);

        /** The world size if the graph declares it, else null. */
        Integer worldSize();
    }

    /** The type of {@code op} applied to {@code args}. */
    public static TensorType infer(Op op, List<Node> args, Context ctx) {
        Map<String, UserOp> userOps = ctx.userOps();
        return switch (op) {
            case Op.Input in -> throw new IllegalStateException("inputs are typed by their declaration");
            case Op.Constant c -> throw new IllegalStateException("constants are typed by their declaration");
            case Op.Pointwise p -> pointwise(p.fn(), args);
            case Op.Cast c -> new TensorType(c.to(), one(op, args).type().shape());
            case Op.Reduce r -> reduce(r, one(op, args));
            case Op.Matmul m -> matmul(args);
            case Op.Registered r -> registered(r, args).getFirst();
            case Op.Collective c -> c.uneven() ? allToAllUneven(c, args, ctx) : collective(c, one(op, args), ctx);
            case Op.Reshape r -> reshape(r, one(op, args));
            case Op.Permute p -> permute(p, one(op, args));
            case Op.Slice s -> slice(s, one(op, args));
            case Op.Expand e -> expand(e, one(op, args));
            case Op.Cat c -> cat(c, args);
            case Op.Custom c -> custom(c, args, userOps).getFirst();
            case Op.CustomOutput o -> {
                Node call = one(op, args);
                var outs = switch (call.op()) {
                    case Op.Custom c -> custom(c, call.inputs(), userOps);
                    case Op.Registered r -> registered(r, call.inputs());
                    default -> throw new GraphException(op.opName() + ": input " + call.label() + " is not a call of a user op or a registered op");
                };
                if (o.index() < 1 || o.index() >= outs.size())
                    throw new GraphException((call.op() instanceof Op.Custom ? "user op '" : "op '") + call.op().opName() + "' has no output " + o.index()
                            + " (it has " + outs.size() + ")");
                yield outs.get(o.index());
            }
        };
    }

    static List<TensorType> custom(Op.Custom c, List<Node> args, Map<String, UserOp> userOps) {
        UserOp u = userOps.get(c.name());
        if (u == null) throw new GraphException("unknown user op '" + c.name() + "'; register it with the graph first");
        return u.outputTypes(args.stream().map(Node::type).toList());
    }

    /** A registered op's outputs, as its {@link OpSpec} infers them. */
    static List<TensorType> registered(Op.Registered r, List<Node> args) {
        return r.spec().infer(args.stream().map(OpSpec.Operand::of).toList(), r.attrs());
    }

    private static Node one(Op op, List<Node> args) {
        if (args.size() != 1) throw new GraphException(op.opName() + " takes one tensor, got " + args.size());
        return args.getFirst();
    }

    static String describe(List<Node> args) {
        var j = new StringJoiner(", ");
        for (Node n : args) j.add(n.describe());
        return j.toString();
    }

    private static TensorType pointwise(PointwiseFn fn, List<Node> args) {
        if (args.size() != fn.arity())
            throw new GraphException(fn.opName() + " takes " + fn.arity() + " tensors, got " + args.size() + ": " + describe(args));
        Shape shape = args.getFirst().type().shape();
        for (Node n : args.subList(1, args.size())) {
            Shape b = Shape.broadcast(shape, n.type().shape());
            if (b == null)
                throw new GraphException(fn.opName() + "(" + describe(args) + "): shapes " + shape + " and " + n.type().shape() + " do not broadcast");
            shape = b;
        }
        if (fn == PointwiseFn.WHERE) {
            if (args.get(0).type().dtype() != DType.BOOL)
                throw new GraphException("where(" + describe(args) + "): the condition " + args.getFirst().label() + " must be bool, not " + args.getFirst().type().dtype());
            return new TensorType(resultType(args.subList(1, 3)), shape);
        }
        DType t = resultType(args);
        if (fn.isComparison()) return new TensorType(DType.BOOL, shape);
        if (fn.needsFloat() && !t.isFloating()) t = DType.FLOAT32;
        if (t == DType.BOOL && fn != PointwiseFn.IDENTITY && fn != PointwiseFn.MAXIMUM && fn != PointwiseFn.MINIMUM)
            throw new GraphException(fn.opName() + "(" + describe(args) + "): arithmetic on bool tensors is not supported; cast them first");
        return new TensorType(t, shape);
    }

    /**
     * PyTorch's rule: dimensioned operands decide the type; zero-dim operands (scalars) only matter when their
     * kind is higher (a float scalar with an int tensor), and then only among themselves.
     */
    public static DType resultType(List<Node> args) {
        DType dims = null, scalars = null;
        for (Node n : args) {
            DType t = n.type().dtype();
            if (n.type().rank() > 0) dims = dims == null ? t : DType.promote(dims, t);
            else scalars = scalars == null ? t : DType.promote(scalars, t);
        }
        if (dims == null) return scalars;
        if (scalars == null || scalars.kind().ordinal() <= dims.kind().ordinal()) return dims;
        return scalars;
    }

    /** Normalized, sorted, distinct reduction dims; an error names the op and the tensor. */
    public static List<Integer> reductionDims(String opName, Node x, List<Integer> dims) {
        int r = x.type().rank();
        if (dims.isEmpty()) {
            var all = new ArrayList<Integer>();
            for (int i = 0; i < r; i++) all.add(i);
            return all;
        }
        var seen = new HashSet<Integer>();
        var out = new ArrayList<Integer>();
        for (int d : dims) {
            int n = d < 0 ? d + r : d;
            if (n < 0 || n >= r)
                throw new GraphException(opName + "(" + x.describe() + "): dimension " + d + " does not exist (rank " + r + ")");
            if (!seen.add(n)) throw new GraphException(opName + "(" + x.describe() + "): dimension " + d + " is given twice");
            out.add(n);
        }
        out.sort(null);
        return out;
    }

    private static TensorType reduce(Op.Reduce r, Node x) {
        var dims = reductionDims(r.opName(), x, r.dims());
        var out = new ArrayList<Dim>();
        for (int i = 0; i < x.type().rank(); i++) {
            if (!dims.contains(i)) out.add(x.type().shape().dim(i));
            else if (r.keepdim()) out.add(Dim.of(1));
        }
        DType t = x.type().dtype();
        if (r.fn() == ReduceFn.MEAN && !t.isFloating()) t = DType.FLOAT32;
        if (r.fn() == ReduceFn.SUM && (t == DType.BOOL || t.isIntegral())) t = DType.INT64; // as torch.sum does
        return new TensorType(t, new Shape(out));
    }

    private static TensorType matmul(List<Node> args) {
        if (args.size() != 2) throw new GraphException("matmul takes two tensors, got " + args.size());
        Node a = args.get(0), b = args.get(1);
        Shape sa = a.type().shape(), sb = b.type().shape();
        if (sa.rank() < 2 || sb.rank() < 2)
            throw new GraphException("matmul(" + describe(args) + "): both operands need at least 2 dimensions");
        if (!a.type().dtype().isFloating() || a.type().dtype() != b.type().dtype())
            throw new GraphException("matmul(" + describe(args) + "): operands must have the same floating dtype, got "
                    + a.type().dtype() + " and " + b.type().dtype());
        Dim k1 = sa.dim(sa.rank() - 1), k2 = sb.dim(sb.rank() - 2);
        if (!k1.equals(k2))
            throw new GraphException("matmul(" + describe(args) + "): inner dimensions " + k1 + " and " + k2 + " differ");
        Shape batchA = new Shape(sa.dims().subList(0, sa.rank() - 2)), batchB = new Shape(sb.dims().subList(0, sb.rank() - 2));
        Shape batch = Shape.broadcast(batchA, batchB);
        if (batch == null)
            throw new GraphException("matmul(" + describe(args) + "): batch dimensions " + batchA + " and " + batchB + " do not broadcast");
        var out = new ArrayList<>(batch.dims());
        out.add(sa.dim(sa.rank() - 2));
        out.add(sb.dim(sb.rank() - 1));
        return new TensorType(a.type().dtype(), new Shape(out));
    }

    /**
     * Reduce-scatter and all-gather change their result's shape, and all-to-all exchanges rows among the members,
     * so a rank outside the group would have no defined result: over a group that misses a rank they are refused (a
     * mesh axis puts every rank in one slice).
     * All-reduce and broadcast keep the shape, and a rank outside the group passes its input through.
     */
    public static void checkCoversEveryRank(Op.Collective c, String operand, ProcessGroup g, int worldSize) {
        if (c.kind() != CollectiveKind.REDUCE_SCATTER && c.kind() != CollectiveKind.ALL_GATHER && c.kind() != CollectiveKind.ALL_TO_ALL) return;
        if (g.coversEveryRank(worldSize)) return;
        var outside = new ArrayList<Integer>();
        for (int r = 0; r < worldSize; r++) if (!g.ranks().contains(r)) outside.add(r);
        throw new GraphException(c.opName() + "(" + operand + "): group '" + g.name() + "' " + g.ranks() + " leaves out ranks " + outside
                + " of the world of " + worldSize + ", which would have no " + c.opName() + " result of the new shape. Use a mesh axis,"
                + " so every rank is in one slice (e.g. g.mesh(\"dp\", " + Math.max(1, worldSize / Math.max(1, g.ranks().size())) + ", \"tp\", "
                + g.ranks().size() + ") and " + c.opName() + "(..., \"tp\")), or all_reduce / broadcast, which pass the input through outside the group");
    }

    private static TensorType collective(Op.Collective c, Node x, Context ctx) {
        if (c.group() == null || c.group().isBlank()) throw new GraphException(c.opName() + "(" + x.describe() + "): a group is required");
        ProcessGroup g = ctx.group(c.group());
        if (g == null) throw new GraphException(c.opName() + "(" + x.describe() + "): unknown group '" + c.group() + "'; declare it on the graph first");
        if ((c.kind() == CollectiveKind.ALL_REDUCE || c.kind() == CollectiveKind.REDUCE_SCATTER) && c.reduceOp() == null)
            throw new GraphException(c.opName() + "(" + x.describe() + "): a reduce op is required");
        Integer size = g.size(ctx.worldSize());
        if (c.kind() == CollectiveKind.BROADCAST && (c.root() < 0 || (size != null && c.root() >= size)))
            throw new GraphException("broadcast(" + x.describe() + "): root " + c.root() + " is not a rank of group '" + g.name() + "'"
                    + (size == null ? "" : " of size " + size));
        if (ctx.worldSize() != null) checkCoversEveryRank(c, x.describe(), g, ctx.worldSize());
        var dims = new ArrayList<>(x.type().shape().dims());
        if (c.kind() == CollectiveKind.REDUCE_SCATTER || c.kind() == CollectiveKind.ALL_GATHER || c.kind() == CollectiveKind.ALL_TO_ALL) {
            if (x.type().rank() == 0) throw new GraphException(c.opName() + "(" + x.describe() + "): needs at least one dimension");
            if (size == null)
                throw new GraphException(c.opName() + "(" + x.describe() + "): the size of group '" + g.name()
                        + "' must be known when the graph is built; declare the world size on the graph");
            Dim d0 = dims.getFirst();
            if (!d0.isStatic())
                throw new GraphException(c.opName() + "(" + x.describe() + "): dimension 0 is symbolic (" + d0 + "); it must be static to split across ranks");
            if (c.kind() == CollectiveKind.REDUCE_SCATTER || c.kind() == CollectiveKind.ALL_TO_ALL) {
                if (d0.size() % size != 0)
                    throw new GraphException(c.opName() + "(" + x.describe() + "): dimension 0 of size " + d0.size()
                            + " is not divisible by the size " + size + " of group '" + g.name() + "'"
                            + (c.kind() == CollectiveKind.ALL_TO_ALL ? "; for parts of different sizes give the row counts per destination"
                               + " (x.allToAll(group, counts, capacity))" : ""));
                if (c.kind() == CollectiveKind.REDUCE_SCATTER) dims.set(0, Dim.of(d0.size() / size));
            } else {
                dims.set(0, Dim.of(d0.size() * size));
            }
        }
        if (x.type().dtype() == DType.BOOL && !c.kind().movesOnly())
            throw new GraphException(c.opName() + "(" + x.describe() + "): cannot reduce bool tensors");
        if (c.reduceOp() == ReduceOp.AVG && !x.type().dtype().isFloating())
            throw new GraphException(c.opName() + "(" + x.describe() + "): avg needs a floating dtype");
        return new TensorType(x.type().dtype(), new Shape(dims));
    }

    /**
     * An uneven all_to_all: input 0 the rows to send (at least one dimension; dimension 0 holds the parts for each
     * member in turn, {@code counts[j]} rows for member j, any rows after them unused), input 1 the row counts per
     * destination, an i64 vector of the group's size. The result has {@code capacity} rows, the rest as input 0.
     */
    private static TensorType allToAllUneven(Op.Collective c, List<Node> args, Context ctx) {
        String call = c.opName() + "(" + describe(args) + ", capacity=" + c.capacity() + ")";
        if (args.size() != 2)
            throw new GraphException(call + ": an uneven all_to_all takes two tensors, the rows and their counts per destination; got " + args.size());
        Node x = args.get(0), counts = args.get(1);
        if (c.group() == null || c.group().isBlank()) throw new GraphException(call + ": a group is required");
        ProcessGroup g = ctx.group(c.group());
        if (g == null) throw new GraphException(call + ": unknown group '" + c.group() + "'; declare it on the graph first");
        Integer size = g.size(ctx.worldSize());
        if (size == null)
            throw new GraphException(call + ": the size of group '" + g.name() + "' must be known when the graph is built; declare the world size on the graph");
        if (ctx.worldSize() != null) checkCoversEveryRank(c, x.describe(), g, ctx.worldSize());
        if (x.type().rank() == 0) throw new GraphException(call + ": the rows " + x.describe() + " need at least one dimension");
        if (!x.type().shape().dim(0).isStatic())
            throw new GraphException(call + ": dimension 0 of " + x.describe() + " is symbolic; the rows to send are a static buffer (pad it to its most rows)");
        if (counts.type().dtype() != DType.INT64 || counts.type().rank() != 1 || !counts.type().shape().isStatic()
                || counts.type().shape().dim(0).size() != size)
            throw new GraphException(call + ": the counts " + counts.describe() + " must be an i64 vector of " + size
                    + " row counts, one per rank of group '" + g.name() + "' (the rows sent to each)");
        var dims = new ArrayList<>(x.type().shape().dims());
        dims.set(0, Dim.of(c.capacity()));
        return new TensorType(x.type().dtype(), new Shape(dims));
    }

    private static TensorType reshape(Op.Reshape r, Node x) {
        Shape from = x.type().shape(), to = r.shape();
        if (!from.isStatic() || !to.isStatic()) {
            if (!from.symNumel().equals(to.symNumel()))
                throw new GraphException("reshape(" + x.describe() + "): cannot reshape " + from + " to " + to + ": element counts differ");
        } else if (from.numel() != to.numel()) {
            throw new GraphException("reshape(" + x.describe() + "): cannot reshape " + from + " (" + from.numel()
                    + " elements) to " + to + " (" + to.numel() + " elements)");
        }
        return new TensorType(x.type().dtype(), to);
    }

    private static TensorType permute(Op.Permute p, Node x) {
        int r = x.type().rank();
        if (p.perm().size() != r)
            throw new GraphException("permute(" + x.describe() + "): permutation " + p.perm() + " has " + p.perm().size() + " entries for rank " + r);
        var seen = new boolean[r];
        var dims = new ArrayList<Dim>();
        for (int d : p.perm()) {
            int n = d < 0 ? d + r : d;
            if (n < 0 || n >= r || seen[n])
                throw new GraphException("permute(" + x.describe() + "): " + p.perm() + " is not a permutation of 0.." + (r - 1));
            seen[n] = true;
            dims.add(x.type().shape().dim(n));
        }
        return new TensorType(x.type().dtype(), new Shape(dims));
    }

    private static TensorType slice(Op.Slice s, Node x) {
        int r = x.type().rank();
        int d = s.dim() < 0 ? s.dim() + r : s.dim();
        if (d < 0 || d >= r) throw new GraphException("slice(" + x.describe() + "): dimension " + s.dim() + " does not exist (rank " + r + ")");
        Dim size = x.type().shape().dim(d);
        if (!size.isStatic()) throw new GraphException("slice(" + x.describe() + "): dimension " + d + " is symbolic (" + size + "); slicing needs a static size");
        if (s.step() < 1) throw new GraphException("slice(" + x.describe() + "): step must be positive, got " + s.step());
        if (s.start() < 0 || s.end() > size.size() || s.start() > s.end())
            throw new GraphException("slice(" + x.describe() + "): range [" + s.start() + ", " + s.end() + ") is outside dimension " + d + " of size " + size);
        var dims = new ArrayList<>(x.type().shape().dims());
        dims.set(d, Dim.of((s.end() - s.start() + s.step() - 1) / s.step()));
        return new TensorType(x.type().dtype(), new Shape(dims));
    }

    /** The dimension a cat of rank-{@code rank} tensors joins along (a negative one counts from the end), or an error. */
    public static int catDim(String what, int dim, int rank) {
        int d = dim < 0 ? dim + rank : dim;
        if (d < 0 || d >= rank) throw new GraphException(what + ": dimension " + dim + " does not exist (rank " + rank + ")");
        return d;
    }

    private static TensorType cat(Op.Cat c, List<Node> args) {
        if (args.isEmpty()) throw new GraphException("cat(dim " + c.dim() + "): no tensors to concatenate; give at least one");
        String what = "cat(" + describe(args) + ")";
        Node first = args.getFirst();
        int r = first.type().rank();
        if (r == 0)
            throw new GraphException(what + ": " + first.label() + " has no dimensions to concatenate along; reshape it to [1] first");
        int d = catDim(what, c.dim(), r);
        long total = 0;
        for (Node x : args) {
            if (x.type().dtype() != first.type().dtype())
                throw new GraphException(what + ": " + x.label() + " is " + x.type().dtype() + " but " + first.label() + " is "
                        + first.type().dtype() + "; cast them to one dtype first");
            if (x.type().rank() != r)
                throw new GraphException(what + ": " + x.label() + " has rank " + x.type().rank() + " but " + first.label() + " has rank " + r
                        + "; every tensor needs the same rank");
            for (int k = 0; k < r; k++) {
                if (k == d) continue;
                if (!x.type().shape().dim(k).equals(first.type().shape().dim(k)))
                    throw new GraphException(what + ": along dimension " + d + ", " + x.label() + " has size " + x.type().shape().dim(k)
                            + " in dimension " + k + " where " + first.label() + " has " + first.type().shape().dim(k)
                            + "; the sizes must match outside dimension " + d);
            }
            Dim size = x.type().shape().dim(d);
            if (!size.isStatic())
                throw new GraphException(what + ": dimension " + d + " of " + x.label() + " is symbolic (" + size
                        + "); the sizes along the concatenated dimension must be static");
            total += size.size();
        }
        var dims = new ArrayList<>(first.type().shape().dims());
        dims.set(d, Dim.of(total));
        return new TensorType(first.type().dtype(), new Shape(dims));
    }

    private static TensorType expand(Op.Expand e, Node x) {
        Shape b = Shape.broadcast(x.type().shape(), e.shape());
        if (b == null || !b.equals(e.shape()))
            throw new GraphException("expand(" + x.describe() + "): cannot broadcast " + x.type().shape() + " to " + e.shape());
        return new TensorType(x.type().dtype(), e.shape());
    }
}
