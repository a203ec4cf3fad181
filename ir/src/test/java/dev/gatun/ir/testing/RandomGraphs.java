package dev.gatun.ir.testing;

import dev.gatun.ir.DType;
import dev.gatun.ir.Dim;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.TypeInference;
import dev.gatun.ir.graph.UserOp;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.TreeMap;

/**
 * Seeded random graphs for property and differential tests. Every graph is valid (built through
 * {@link Graph.Builder}, so type-checked) and numerically tame: inputs from {@link #inputs} lie in [-2, 2],
 * values that grew large are squashed with tanh before ops that amplify them, and log/sqrt/rsqrt/pow/div see
 * {@code abs(x) + 1} so no NaN or infinity appears unless a test builds one on purpose.
 *
 * <p>The same seed and options always give the same graph. Features switch on and off through {@link Options}.
 */
public final class RandomGraphs {
    private RandomGraphs() {}

    /**
     * What the generator may use. Start from {@link #defaults()} and change with the {@code with} methods.
     * {@code maxNodes} is where the generator stops starting new steps; the last step's helper expressions
     * (abs + 1, tanh) may add up to 8 more nodes.
     */
    public record Options(int worldSize, int maxNodes, int outputs, Set<DType> dtypes, boolean collectives,
                          boolean subgroups, boolean symbolic, boolean userOps, boolean matmul, boolean reductions,
                          boolean views, boolean comparisons, boolean symmetricRegions, List<Integer> mesh, boolean concat,
                          boolean stridedConcat, boolean allToAll) {
        public Options {
            if (worldSize < 1) throw new IllegalArgumentException("world size must be at least 1");
            if (maxNodes < 2) throw new IllegalArgumentException("maxNodes must be at least 2");
            if (outputs < 1) throw new IllegalArgumentException("outputs must be at least 1");
            dtypes = Collections.unmodifiableSet(new LinkedHashSet<>(dtypes));
            if (!dtypes.contains(DType.FLOAT32)) throw new IllegalArgumentException("the dtype set must contain f32 (the main dtype)");
            mesh = List.copyOf(mesh);
            if (!mesh.isEmpty() && mesh.stream().reduce(1, (a, b) -> a * b) != worldSize)
                throw new IllegalArgumentException("a mesh of " + mesh + " is not a world of " + worldSize);
        }

        /** World of 2, up to 24 nodes, 2 outputs, every feature, dtypes f32 (mostly), f64, f16, bf16, i32. */
        public static Options defaults() {
            return new Options(2, 24, 2, Set.of(DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16, DType.INT32),
                    true, true, true, true, true, true, true, true, true, List.of(), true, true, false);
        }

        public Options withWorldSize(int w) { return new Options(w, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, userOps, matmul, reductions, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withMaxNodes(int n) { return new Options(worldSize, n, outputs, dtypes, collectives, subgroups, symbolic, userOps, matmul, reductions, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withOutputs(int n) { return new Options(worldSize, maxNodes, n, dtypes, collectives, subgroups, symbolic, userOps, matmul, reductions, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withDTypes(DType... ts) { return new Options(worldSize, maxNodes, outputs, Set.of(ts), collectives, subgroups, symbolic, userOps, matmul, reductions, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withCollectives(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, on, subgroups, symbolic, userOps, matmul, reductions, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withSubgroups(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, on, symbolic, userOps, matmul, reductions, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withSymbolic(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, subgroups, on, userOps, matmul, reductions, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withUserOps(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, on, matmul, reductions, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withMatmul(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, userOps, on, reductions, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withReductions(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, userOps, matmul, on, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withViews(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, userOps, matmul, reductions, on, comparisons, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withComparisons(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, userOps, matmul, reductions, views, on, symmetricRegions, mesh, concat, stridedConcat, allToAll); }
        public Options withSymmetricRegions(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, userOps, matmul, reductions, views, comparisons, on, mesh, concat, stridedConcat, allToAll); }

        /**
         * A device mesh of these axis sizes (axes "ax0", "ax1", ...; the world size becomes their product): collectives
         * of every kind then also run along each axis.
         */
        public Options withMesh(Integer... sizes) {
            int w = 1;
            for (int s : sizes) w *= s;
            return new Options(w, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, userOps, matmul, reductions, views, comparisons, symmetricRegions, List.of(sizes), concat, stridedConcat, allToAll);
        }

        /**
         * Concatenations along a dimension after a leading one of size above 1 on or off: their parts are strided slices,
         * which kernels store at strides (the CUDA code generator does not yet; the GPU tests turn these off until it does).
         */
        public Options withStridedConcat(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, userOps, matmul, reductions, views, comparisons, symmetricRegions, mesh, concat, on, allToAll); }

        /** Concatenations (cat) on or off. */
        public Options withConcat(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, userOps, matmul, reductions, views, comparisons, symmetricRegions, mesh, on, stridedConcat, allToAll); }

        /**
         * all_to_all on or off (off by default, so the graphs of the other options' seeds stay what they were): even
         * splits, and uneven ones whose row counts are an i64 constant that fits (the same on every rank).
         */
        public Options withAllToAll(boolean on) { return new Options(worldSize, maxNodes, outputs, dtypes, collectives, subgroups, symbolic, userOps, matmul, reductions, views, comparisons, symmetricRegions, mesh, concat, stridedConcat, on); }

        /** No symbolic dimensions anywhere (the shapes symmetric-memory lowering can take). */
        public Options staticOnly() { return withSymbolic(false); }
    }

    // ------------------------------------------------------------------ user ops

    /** {@code out = x + 0.5 * y} on f32 matrices, with a host implementation and a CUDA kernel. */
    public static final UserOp SCALED_ADD = UserOp.builder("scaled_add")
            .input(TensorSpec.of("x", DType.FLOAT32, "a", "b"))
            .input(TensorSpec.of("y", DType.FLOAT32, "a", "b"))
            .output(TensorSpec.of("out", DType.FLOAT32, "a", "b"))
            .cuda("scaled_add", """
                    extern "C" __global__ void scaled_add(const float* x, const float* y, float* out, long long n) {
                        for (long long i = blockIdx.x * (long long) blockDim.x + threadIdx.x; i < n; i += (long long) gridDim.x * blockDim.x)
                            out[i] = x[i] + 0.5f * y[i];
                    }
                    """)
            .host((in, out, rank, world) -> {
                for (long i = 0; i < out.getFirst().numel(); i++) out.getFirst().set(i, in.get(0).get(i) + 0.5 * in.get(1).get(i));
            })
            .build();

    /**
     * {@code (relu(x), relu(-x))} for f32 tensors of any shape: two outputs whose types come from an output
     * function, and an input declared symmetric (used on static shapes only).
     */
    public static final UserOp SPLIT_SIGN = UserOp.builder("split_sign")
            .input(new TensorSpec("x", DType.FLOAT32, null))
            .output(TensorSpec.any("pos"))
            .output(TensorSpec.any("neg"))
            .symmetricInput(0)
            .outputTypes(ts -> List.of(ts.getFirst(), ts.getFirst()))
            .cuda("split_sign", """
                    extern "C" __global__ void split_sign(const float* x, float* pos, float* neg, long long n) {
                        for (long long i = blockIdx.x * (long long) blockDim.x + threadIdx.x; i < n; i += (long long) gridDim.x * blockDim.x) {
                            pos[i] = fmaxf(x[i], 0.0f);
                            neg[i] = fmaxf(-x[i], 0.0f);
                        }
                    }
                    """)
            .blockSize(128)
            .host((in, out, rank, world) -> {
                for (long i = 0; i < in.getFirst().numel(); i++) {
                    double v = in.getFirst().get(i);
                    out.get(0).set(i, Math.max(v, 0));
                    out.get(1).set(i, Math.max(-v, 0));
                }
            })
            .build();

    /** The user ops random graphs may call, by name: the registry to read their JSON with. */
    public static Map<String, UserOp> userOps() { return Map.of(SCALED_ADD.name(), SCALED_ADD, SPLIT_SIGN.name(), SPLIT_SIGN); }

    // ------------------------------------------------------------------ graphs

    public static Graph generate(long seed) { return generate(seed, Options.defaults()); }

    public static Graph generate(long seed, Options options) { return new Generator(seed, options).run(); }

    /** Several graphs from consecutive seeds. */
    public static List<Graph> generate(long firstSeed, int count, Options options) {
        var out = new ArrayList<Graph>();
        for (int i = 0; i < count; i++) out.add(generate(firstSeed + i, options));
        return out;
    }

    // ------------------------------------------------------------------ inputs

    /** Input values in row-major order, as doubles; convert to the runtime's tensor type. */
    public record InputData(DType dtype, long[] shape, double[] values) {}

    /** The size every symbol gets for a seed (the same on every rank, as collectives need). */
    public static Map<String, Long> symbolSizes(Graph g, long seed) {
        var out = new TreeMap<String, Long>();
        var rnd = new Random(seed * 31 + 7);
        for (Node in : g.inputs().values())
            for (Dim d : in.type().shape().dims())
                if (!d.isStatic()) out.computeIfAbsent(((Dim.Sym) d).name(), k -> 1L + rnd.nextInt(5));
        return out;
    }

    /**
     * Values for every input of {@code g} on {@code rank}: floating in [-2, 2] (multiples of 1/64, exact in
     * every float dtype), integers in [-4, 4], bools at random; different per rank so collectives matter.
     */
    public static Map<String, InputData> inputs(Graph g, long seed, int rank) {
        var sizes = symbolSizes(g, seed);
        var out = new LinkedHashMap<String, InputData>();
        var rnd = new Random(seed * 1_000_003L + rank * 7919L + 1);
        for (var e : g.inputs().entrySet()) {
            TensorType t = e.getValue().type();
            long[] shape = t.shape().sizes(sizes);
            long n = 1;
            for (long s : shape) n *= s;
            double[] v = new double[Math.toIntExact(n)];
            for (int i = 0; i < v.length; i++) {
                v[i] = switch (t.dtype().kind()) {
                    case FLOAT -> (rnd.nextInt(257) - 128) / 64.0;
                    case INT -> rnd.nextInt(9) - 4;
                    case BOOL -> rnd.nextBoolean() ? 1 : 0;
                };
            }
            out.put(e.getKey(), new InputData(t.dtype(), shape, v));
        }
        return out;
    }

    // ------------------------------------------------------------------ the generator

    private static final class Generator {
        private static final double SQUASH_ABOVE = 16; // magnitudes above this are tanh'ed before amplifying ops
        private static final long MAX_NUMEL = 2048;    // keeps interpreters fast

        private final Random rnd;
        private final Options o;
        private final Graph.Builder b;
        private final List<Node> pool = new ArrayList<>();
        private final Map<Node, Double> bound = new HashMap<>(); // rough upper bound of |value|
        private final String symbol;
        private String subgroup;
        private String region;      // open symmetric region's group, or null
        private int regionLeft;
        private int inputs;
        private int count; // nodes added so far
        private final List<String> axes = new ArrayList<>();

        Generator(long seed, Options o) {
            this.rnd = new Random(seed);
            this.o = o;
            this.b = Graph.builder("random_" + seed);
            this.symbol = o.symbolic && rnd.nextInt(3) == 0 ? "n" : null;
        }

        Graph run() {
            b.worldSize(o.worldSize);
            if (!o.mesh.isEmpty()) {
                var names = new ArrayList<String>();
                for (int i = 0; i < o.mesh.size(); i++) names.add("ax" + i);
                b.mesh(names, o.mesh);
                axes.addAll(names);
            }
            if (o.collectives && o.subgroups && o.worldSize >= 2 && rnd.nextBoolean()) {
                var ranks = new ArrayList<Integer>();
                for (int r = 0; r < o.worldSize; r++) ranks.add(r);
                Collections.shuffle(ranks, rnd);
                int size = 1 + rnd.nextInt(o.worldSize - 1);
                var chosen = new ArrayList<>(ranks.subList(0, Math.max(1, size)));
                subgroup = "sub";
                b.group(new ProcessGroup(subgroup, chosen));
            }
            if (o.userOps) {
                b.register(SCALED_ADD);
                b.register(SPLIT_SIGN);
            }
            int nInputs = 1 + rnd.nextInt(2);
            for (int i = 0; i < nInputs; i++) newInput(pickDType(), randomShape(true));
            int attempts = 0;
            while (count < o.maxNodes && attempts++ < o.maxNodes * 20) step();
            chooseOutputs();
            return b.build();
        }

        // ---- one random op
        private void step() {
            if (o.symmetricRegions && region == null && rnd.nextInt(12) == 0) {
                region = subgroup != null && rnd.nextBoolean() ? subgroup : ProcessGroup.WORLD_NAME;
                regionLeft = 1 + rnd.nextInt(3);
            }
            int k = rnd.nextInt(100);
            boolean ok;
            if (k < 20) ok = unary();
            else if (k < 38) ok = binary();
            else if (k < 43) ok = o.comparisons && compareAndWhere();
            else if (k < 48) ok = cast();
            else if (k < 56) ok = o.reductions && reduce();
            else if (k < 67) ok = o.views && view();
            else if (k < 70) ok = copy();
            else if (k < 76) ok = o.matmul && matmul();
            else if (k < 88) ok = o.collectives && collective();
            else if (k < 92) ok = o.userOps && userOp();
            else if (k < 98) ok = o.concat && concat();
            else ok = newInputStep();
            if (ok && region != null && --regionLeft <= 0) region = null;
        }

        private boolean newInputStep() {
            if (inputs >= 4) return false;
            newInput(pickDType(), randomShape(true));
            return true;
        }

        private boolean unary() {
            Node x = pick(n -> isNumeric(n));
            if (x == null) return false;
            PointwiseFn fn = pickOf(PointwiseFn.NEG, PointwiseFn.ABS, PointwiseFn.EXP, PointwiseFn.LOG, PointwiseFn.SQRT, PointwiseFn.RSQRT,
                    PointwiseFn.SIN, PointwiseFn.COS, PointwiseFn.TANH, PointwiseFn.SIGMOID, PointwiseFn.RELU, PointwiseFn.GELU, PointwiseFn.SILU);
            double bx = bound(x);
            return switch (fn) {
                case EXP -> { Node t = squash(x, 3); yield add(new Op.Pointwise(fn), Math.exp(bound(t)), t) != null; }
                case LOG, SQRT, RSQRT -> {
                    Node a = absPlusOne(x);
                    double r = fn == PointwiseFn.LOG ? Math.log(bound(a)) : fn == PointwiseFn.SQRT ? Math.sqrt(bound(a)) : 1;
                    yield a != null && add(new Op.Pointwise(fn), r, a) != null;
                }
                case SIN, COS, TANH, SIGMOID -> add(new Op.Pointwise(fn), 1, x) != null;
                default -> add(new Op.Pointwise(fn), bx, x) != null;
            };
        }

        private boolean binary() {
            Node a = pick(this::isNumeric);
            if (a == null) return false;
            PointwiseFn fn = pickOf(PointwiseFn.ADD, PointwiseFn.ADD, PointwiseFn.SUB, PointwiseFn.MUL, PointwiseFn.MUL, PointwiseFn.DIV,
                    PointwiseFn.POW, PointwiseFn.MAXIMUM, PointwiseFn.MINIMUM);
            Node c = partner(a);
            if (c == null) return false;
            return switch (fn) {
                case MUL -> {
                    Node x = squash(a, SQUASH_ABOVE), y = squash(c, SQUASH_ABOVE);
                    yield add(new Op.Pointwise(fn), bound(x) * bound(y), x, y) != null;
                }
                case DIV -> {
                    Node d = absPlusOne(c);
                    yield d != null && add(new Op.Pointwise(fn), bound(a), a, d) != null;
                }
                case POW -> {
                    // base >= 1 keeps pow real; the exponent is a small constant or a tanh'ed tensor
                    Node base = absPlusOne(squash(a, 4));
                    if (base == null) yield false;
                    Node e = rnd.nextBoolean() ? scalar(pickOf(0.5, 2.0, 3.0, -1.0), base.type().dtype()) : tanh(c);
                    if (e == null) yield false;
                    yield add(new Op.Pointwise(fn), Math.pow(bound(base), 3), base, e) != null;
                }
                case ADD, SUB -> add(new Op.Pointwise(fn), bound(a) + bound(c), a, c) != null;
                default -> add(new Op.Pointwise(fn), Math.max(bound(a), bound(c)), a, c) != null;
            };
        }

        private boolean compareAndWhere() {
            Node a = pick(this::isNumeric);
            if (a == null) return false;
            Node c = partner(a);
            if (c == null) return false;
            PointwiseFn fn = pickOf(PointwiseFn.EQ, PointwiseFn.NE, PointwiseFn.LT, PointwiseFn.LE, PointwiseFn.GT, PointwiseFn.GE);
            Node cond = add(new Op.Pointwise(fn), 1, a, c);
            if (cond == null) return false;
            if (rnd.nextInt(4) == 0) return true; // leave the bool as a value of its own
            Node x = partner(cond);
            if (x == null) return true;
            Node y = partner(cond, Shape.broadcast(cond.type().shape(), x.type().shape())); // where broadcasts all three
            if (y == null) return true;
            add(new Op.Pointwise(PointwiseFn.WHERE), Math.max(bound(x), bound(y)), cond, x, y);
            return true;
        }

        private boolean cast() {
            Node x = pick(n -> true);
            if (x == null) return false;
            DType to = rnd.nextInt(6) == 0 ? DType.BOOL : pickDType();
            if (to == x.type().dtype()) to = DType.FLOAT32;
            Node in = to.isIntegral() || to.isHalf() ? squash(x, 100) : x; // stay inside the target's range
            return add(new Op.Cast(to), to == DType.BOOL ? 1 : bound(in), in) != null;
        }

        private boolean reduce() {
            Node x = pick(n -> isNumeric(n) && n.type().rank() >= 1);
            if (x == null) return false;
            ReduceFn fn = pickOf(ReduceFn.values());
            int r = x.type().rank();
            var dims = new ArrayList<Integer>();
            for (int d = 0; d < r; d++) if (rnd.nextInt(2) == 0) dims.add(rnd.nextBoolean() ? d : d - r);
            if (dims.isEmpty() && rnd.nextBoolean()) dims.add(rnd.nextInt(r));
            Collections.shuffle(dims, rnd);
            Node in = fn == ReduceFn.SUM ? squash(x, SQUASH_ABOVE) : x;
            double bx = fn == ReduceFn.SUM ? bound(in) * reducedCount(in, dims) : bound(in);
            return add(new Op.Reduce(fn, dims, rnd.nextBoolean()), bx, in) != null;
        }

        private boolean view() {
            Node x = pick(n -> true);
            if (x == null) return false;
            Shape s = x.type().shape();
            int r = s.rank();
            switch (rnd.nextInt(4)) {
                case 0 -> { // reshape: refactor a static shape, or add/drop size-1 dims of a symbolic one
                    Shape to = reshapeTarget(s);
                    return to != null && add(new Op.Reshape(to), bound(x), x) != null;
                }
                case 1 -> {
                    if (r < 2) return false;
                    var perm = new ArrayList<Integer>();
                    for (int i = 0; i < r; i++) perm.add(i);
                    Collections.shuffle(perm, rnd);
                    return add(new Op.Permute(perm), bound(x), x) != null;
                }
                case 2 -> {
                    var candidates = new ArrayList<Integer>();
                    for (int d = 0; d < r; d++) if (s.dim(d).isStatic() && s.dim(d).size() >= 2) candidates.add(d);
                    if (candidates.isEmpty()) return false;
                    int d = candidates.get(rnd.nextInt(candidates.size()));
                    long size = s.dim(d).size();
                    long start = rnd.nextInt((int) size - 1);
                    long end = start + 1 + rnd.nextInt((int) (size - start));
                    long step = 1 + rnd.nextInt(3);
                    int dimArg = rnd.nextBoolean() ? d : d - r;
                    return add(new Op.Slice(dimArg, start, end, step), bound(x), x) != null;
                }
                default -> {
                    var dims = new ArrayList<Dim>();
                    if (r < 3 && rnd.nextBoolean()) dims.add(Dim.of(1 + rnd.nextInt(3)));
                    for (Dim d : s.dims()) dims.add(d.isStatic() && d.size() == 1 && rnd.nextBoolean() ? Dim.of(2 + rnd.nextInt(3)) : d);
                    Shape to = new Shape(dims);
                    if (to.equals(s)) return false;
                    return add(new Op.Expand(to), bound(x), x) != null;
                }
            }
        }

        /**
         * A concatenation of a value with one to three others along a dimension of static size: values of the pool that
         * fit, the value itself again, a new input, a pointwise function of it or a slice of it; so some parts are
         * written in place by their producers and others copied (inputs, views, a value in two places).
         */
        private boolean concat() {
            Node x = pick(n -> n.type().rank() >= 1 && n.type().shape().dim(0).isStatic() || o.stridedConcat && n.type().shape().dims().stream().anyMatch(Dim::isStatic));
            if (x == null) return false;
            Shape s = x.type().shape();
            int r = s.rank();
            var candidates = new ArrayList<Integer>();
            for (int k = 0; k < r; k++) {
                if (s.dim(k).isStatic()) candidates.add(k);
                if (!o.stridedConcat && !(s.dim(k).isStatic() && s.dim(k).size() == 1)) break;   // slices stay contiguous
            }
            if (candidates.isEmpty()) return false;
            int d = candidates.get(rnd.nextInt(candidates.size()));
            var parts = new ArrayList<Node>();
            parts.add(x);
            int more = 1 + rnd.nextInt(3);
            for (int i = 0; i < more; i++) {
                Node p = switch (rnd.nextInt(5)) {
                    case 0 -> pick(n -> n != x && fits(n, x, d));
                    case 1 -> x;
                    case 2 -> {
                        var dims = new ArrayList<>(s.dims());
                        dims.set(d, Dim.of(1 + rnd.nextInt(4)));
                        yield newInput(x.type().dtype(), new Shape(dims));
                    }
                    case 3 -> s.dim(d).size() >= 2 ? add(new Op.Slice(d, 0, 1 + rnd.nextInt((int) s.dim(d).size() - 1), 1), bound(x), x) : null;
                    default -> isNumeric(x) ? add(new Op.Pointwise(x.type().dtype().isFloating() ? PointwiseFn.TANH : PointwiseFn.NEG),
                            x.type().dtype().isFloating() ? 1 : bound(x), x) : add(new Op.Pointwise(PointwiseFn.IDENTITY), bound(x), x);
                };
                parts.add(p == null ? x : p);
            }
            Collections.shuffle(parts, rnd);
            double bx = 0;
            for (Node p : parts) bx = Math.max(bx, bound(p));
            return add(new Op.Cat(rnd.nextBoolean() ? d : d - r), bx, parts.toArray(Node[]::new)) != null;
        }

        /** Whether {@code n} can join {@code x} in a concatenation along {@code d}. */
        private static boolean fits(Node n, Node x, int d) {
            if (n.type().dtype() != x.type().dtype() || n.type().rank() != x.type().rank()) return false;
            for (int k = 0; k < x.type().rank(); k++)
                if (k == d ? !n.type().shape().dim(k).isStatic() : !n.type().shape().dim(k).equals(x.type().shape().dim(k))) return false;
            return true;
        }

        private boolean copy() {
            Node x = pick(n -> true);
            return x != null && add(new Op.Pointwise(PointwiseFn.IDENTITY), bound(x), x) != null;
        }

        private boolean matmul() {
            Node a = pick(n -> n.type().dtype().isFloating() && n.type().rank() >= 2 && n.type().rank() <= 3);
            if (a == null) return false;
            a = squash(a, 4);
            Shape s = a.type().shape();
            Dim k = s.dim(s.rank() - 1);
            Node w;
            if (rnd.nextBoolean()) { // a @ a^T
                var perm = new ArrayList<Integer>();
                for (int i = 0; i < s.rank(); i++) perm.add(i);
                Collections.swap(perm, s.rank() - 1, s.rank() - 2);
                w = add(new Op.Permute(perm), bound(a), a);
            } else { // a @ w with a new weight, 2-D or batched
                var dims = new ArrayList<Dim>();
                if (s.rank() == 3 && rnd.nextBoolean()) dims.add(s.dim(0));
                dims.add(k);
                dims.add(Dim.of(1 + rnd.nextInt(4)));
                w = newInput(a.type().dtype(), new Shape(dims));
            }
            if (w == null) return false;
            double kk = k.isStatic() ? k.size() : 5;
            return add(new Op.Matmul(), bound(a) * bound(w) * kk, a, w) != null;
        }

        private boolean collective() {
            CollectiveKind kind = pickOf(CollectiveKind.ALL_REDUCE, CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER,
                    CollectiveKind.ALL_GATHER, CollectiveKind.BROADCAST);
            if (o.allToAll && rnd.nextInt(3) == 0) kind = CollectiveKind.ALL_TO_ALL;
            // Subgroups only get shape-preserving collectives: ranks outside a group pass their input through
            // (the reference interpreter's rule), which would leave them a differently shaped value otherwise.
            boolean shapeKept = kind == CollectiveKind.ALL_REDUCE || kind == CollectiveKind.BROADCAST;
            String group = subgroup != null && shapeKept && rnd.nextInt(2) == 0 ? subgroup : ProcessGroup.WORLD_NAME;
            // a mesh axis holds every rank in one slice: every kind of collective may run along it
            if (!axes.isEmpty() && rnd.nextInt(3) != 0) group = axes.get(rnd.nextInt(axes.size()));
            int size = b.group(group).size(o.worldSize);
            return switch (kind) {
                case ALL_REDUCE -> {
                    Node x = pick(this::isNumeric);
                    if (x == null) yield false;
                    ReduceOp op = pickOf(ReduceOp.values());
                    if (op == ReduceOp.AVG && !x.type().dtype().isFloating()) op = ReduceOp.SUM;
                    if (op == ReduceOp.SUM) x = squash(x, SQUASH_ABOVE);
                    yield add(new Op.Collective(kind, op, group, 0), op == ReduceOp.SUM ? bound(x) * size : bound(x), x) != null;
                }
                case REDUCE_SCATTER -> {
                    Node x = pick(n -> isNumeric(n) && n.type().rank() >= 1 && n.type().shape().dim(0).isStatic()
                            && n.type().shape().dim(0).size() % size == 0 && n.type().shape().dim(0).size() > 0);
                    if (x == null) yield false;
                    ReduceOp op = pickOf(ReduceOp.values());
                    if (op == ReduceOp.AVG && !x.type().dtype().isFloating()) op = ReduceOp.MAX;
                    if (op == ReduceOp.SUM) x = squash(x, SQUASH_ABOVE);
                    yield add(new Op.Collective(kind, op, group, 0), op == ReduceOp.SUM ? bound(x) * size : bound(x), x) != null;
                }
                case ALL_GATHER -> {
                    Node x = pick(n -> n.type().rank() >= 1 && n.type().shape().dim(0).isStatic());
                    yield x != null && add(new Op.Collective(kind, null, group, 0), bound(x), x) != null;
                }
                case BROADCAST -> {
                    Node x = pick(n -> true);
                    yield x != null && add(new Op.Collective(kind, null, group, rnd.nextInt(size)), bound(x), x) != null;
                }
                case ALL_TO_ALL -> allToAll(group, size);
            };
        }

        /**
         * An all_to_all along {@code group} (every rank in a slice): even where dimension 0 splits into {@code size}
         * parts, else (or at random) uneven with an i64 constant of counts that fits every rank, and a capacity of
         * the most rows a rank receives plus 0 to 2 spare rows.
         */
        private boolean allToAll(String group, int size) {
            if (group.equals(subgroup)) return false;
            Node x = pick(n -> n.type().rank() >= 1 && n.type().shape().dim(0).isStatic());
            if (x == null) return false;
            long rows = x.type().shape().dim(0).size();
            if (rows % size == 0 && rnd.nextBoolean()) return add(new Op.Collective(CollectiveKind.ALL_TO_ALL, null, group, 0), bound(x), x) != null;
            double[] counts = new double[size];
            long left = rows, most = 0;
            for (int d = 0; d < size; d++) {
                long c = left == 0 || rnd.nextInt(4) == 0 ? 0 : rnd.nextLong(left + 1);
                counts[d] = c;
                left -= c;
                most = Math.max(most, c);
            }
            Node k = b.constant(counts, new TensorType(DType.INT64, new Shape(List.of(Dim.of(size)))));
            count++;
            long capacity = most * size + rnd.nextInt(3);
            return add(new Op.Collective(CollectiveKind.ALL_TO_ALL, null, group, 0, capacity), bound(x), x, k) != null;
        }

        private boolean userOp() {
            if (rnd.nextBoolean()) {
                Node x = pick(n -> n.type().dtype() == DType.FLOAT32 && n.type().rank() == 2);
                if (x == null) return false;
                Node y = pick(n -> n.type().equals(x.type()) && n != x);
                if (y == null) y = add(new Op.Pointwise(PointwiseFn.SIN), 1, x);
                if (y == null) return false;
                return call(SCALED_ADD, bound(x) + bound(y), x, y);
            }
            Node x = pick(n -> n.type().dtype() == DType.FLOAT32 && n.type().shape().isStatic());
            return x != null && call(SPLIT_SIGN, bound(x), x);
        }

        // ---- helpers that build small sub-expressions

        /** tanh(x) when |x| may exceed {@code limit}: keeps values finite through amplifying ops. */
        private Node squash(Node x, double limit) {
            if (bound(x) <= limit || x.type().dtype() == DType.BOOL) return x;
            Node t = tanh(x);
            return t == null ? x : t;
        }

        private Node tanh(Node x) { return add(new Op.Pointwise(PointwiseFn.TANH), 1, x); }

        /** abs(x) + 1, at least 1: the safe argument of log, sqrt, rsqrt, pow and divisors. */
        private Node absPlusOne(Node x) {
            Node a = add(new Op.Pointwise(PointwiseFn.ABS), bound(x), squash(x, 1e4));
            if (a == null) return null;
            Node one = scalar(1, a.type().dtype());
            return add(new Op.Pointwise(PointwiseFn.ADD), bound(a) + 1, a, one);
        }

        /** A second operand that broadcasts with {@code a}: another value, or a scalar constant. */
        private Node partner(Node a) { return partner(a, a.type().shape()); }

        /** Like {@link #partner(Node)}, broadcasting with {@code shape} instead of a's own. */
        private Node partner(Node a, Shape shape) {
            if (rnd.nextInt(3) > 0) {
                Node c = pick(n -> isNumeric(n) && Shape.broadcast(shape, n.type().shape()) != null);
                if (c != null) return c;
            }
            DType t = a.type().dtype() == DType.BOOL ? DType.FLOAT32 : a.type().dtype();
            return scalar((rnd.nextInt(17) - 8) / 4.0, t);
        }

        /** A scalar constant that keeps {@code like}'s dtype where it can (as the DSL's scalars do). */
        private Node scalar(double v, DType like) {
            DType t = like.isFloating() || (like.isIntegral() && v == Math.rint(v)) ? like : DType.FLOAT32;
            Node n = b.constant(new double[]{v}, new TensorType(t, Shape.SCALAR));
            count++;
            bound.put(n, Math.abs(v));
            return n; // constants are not put in the pool: they would crowd out real values
        }

        private Node newInput(DType t, Shape s) {
            Node n = b.input("x" + inputs++, new TensorType(t, s));
            count++;
            bound.put(n, t == DType.BOOL ? 1.0 : t.isIntegral() ? 4.0 : 2.0);
            pool.add(n);
            return n;
        }

        /**
         * Adds an op if its result is small enough, recording a bound of its magnitude; null when skipped.
         * Inside a symmetric region static results get the region's mark.
         */
        private Node add(Op op, double resultBound, Node... args) {
            for (Node a : args) if (a == null) return null;
            List<Node> list = List.of(args);
            TensorType t = TypeInference.infer(op, list, b); // throws on a generator bug: we build valid ops only
            if (numelGuess(t.shape()) > MAX_NUMEL) return null;
            // Refuse values that could overflow their dtype (half types end at 65504).
            if (resultBound > (t.dtype().isHalf() ? 1e4 : 1e7)) return null;
            Node n = b.add(op, list, region != null && t.shape().isStatic() ? region : null);
            count++;
            bound.put(n, t.dtype() == DType.BOOL ? 1.0 : Double.isFinite(resultBound) ? resultBound : 1e30);
            pool.add(n);
            return n;
        }

        private boolean call(UserOp u, double resultBound, Node... args) {
            Node first = add(new Op.Custom(u.name()), resultBound, args);
            if (first == null) return false;
            for (int i = 1; i < u.outputs().size(); i++) add(new Op.CustomOutput(i), resultBound, first);
            return true;
        }

        // ---- random choices

        /** Mostly recent values, so graphs grow deep as well as wide. */
        private Node pick(java.util.function.Predicate<Node> ok) {
            var c = pool.stream().filter(ok).toList();
            if (c.isEmpty()) return null;
            if (rnd.nextBoolean()) return c.get(Math.max(0, c.size() - 1 - rnd.nextInt(Math.min(3, c.size()))));
            return c.get(rnd.nextInt(c.size()));
        }

        private boolean isNumeric(Node n) { return n.type().dtype() != DType.BOOL; }

        private double bound(Node n) { return bound.getOrDefault(n, 1e30); }

        private DType pickDType() {
            var others = o.dtypes.stream().filter(t -> t != DType.FLOAT32).sorted().toList();
            if (others.isEmpty() || rnd.nextInt(10) < 7) return DType.FLOAT32;
            return others.get(rnd.nextInt(others.size()));
        }

        @SafeVarargs
        private <T> T pickOf(T... xs) { return xs[rnd.nextInt(xs.length)]; }

        private Shape randomShape(boolean allowSymbol) {
            int r = switch (rnd.nextInt(20)) { case 0 -> 0; case 1, 2, 3, 4, 5 -> 1; case 6, 7, 8, 9, 10, 11, 12, 13, 14 -> 2; default -> 3; };
            var dims = new ArrayList<Dim>();
            for (int i = 0; i < r; i++) dims.add(Dim.of(1 + rnd.nextInt(5)));
            if (r >= 1 && o.collectives && rnd.nextBoolean()) dims.set(0, Dim.of((long) o.worldSize * (1 + rnd.nextInt(3))));
            if (allowSymbol && symbol != null && r >= 1 && rnd.nextInt(3) > 0) dims.set(rnd.nextInt(r), Dim.sym(symbol));
            return new Shape(dims);
        }

        private Shape reshapeTarget(Shape s) {
            if (s.isStatic()) {
                long n = s.numel();
                var dims = new ArrayList<Dim>();
                long left = n;
                int rank = 1 + rnd.nextInt(3);
                for (int i = 0; i < rank - 1 && left > 1; i++) {
                    var divisors = new ArrayList<Long>();
                    for (long d = 1; d <= left; d++) if (left % d == 0) divisors.add(d);
                    long d = divisors.get(rnd.nextInt(divisors.size()));
                    dims.add(Dim.of(d));
                    left /= d;
                }
                dims.add(Dim.of(left));
                Collections.shuffle(dims, rnd);
                return new Shape(dims);
            }
            var dims = new ArrayList<>(s.dims());
            int ones = -1;
            for (int i = 0; i < dims.size(); i++) if (dims.get(i).isStatic() && dims.get(i).size() == 1) ones = i;
            if (ones >= 0 && rnd.nextBoolean()) dims.remove(ones);
            else if (dims.size() < 4) dims.add(rnd.nextInt(dims.size() + 1), Dim.of(1));
            else return null;
            return new Shape(dims);
        }

        private static long numelGuess(Shape s) {
            long n = 1;
            for (Dim d : s.dims()) n *= d.isStatic() ? d.size() : 5;
            return n;
        }

        private static double reducedCount(Node x, List<Integer> dims) {
            Shape s = x.type().shape();
            double n = 1;
            for (int i = 0; i < s.rank(); i++)
                if (dims.isEmpty() || dims.contains(i) || dims.contains(i - s.rank())) n *= s.dim(i).isStatic() ? s.dim(i).size() : 5;
            return n;
        }

        private void chooseOutputs() {
            var candidates = pool.stream().filter(n -> !(n.op() instanceof Op.Input)).toList();
            if (candidates.isEmpty()) candidates = List.copyOf(pool);
            var chosen = new LinkedHashSet<Node>();
            chosen.add(candidates.getLast());
            int want = Math.min(o.outputs, candidates.size());
            while (chosen.size() < want) chosen.add(candidates.get(rnd.nextInt(candidates.size())));
            int i = 0;
            for (Node n : chosen) b.output("out" + i++, n);
        }
    }
}
