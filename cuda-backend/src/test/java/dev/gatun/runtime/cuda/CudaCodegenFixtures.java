package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.Shape;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/** Hand-built and planned kernels for the code generator's tests, and an nvcc driver. */
final class CudaCodegenFixtures {
    private CudaCodegenFixtures() {}

    static final SymInt N = SymInt.symbol("n");

    static SymInt c(long v) { return SymInt.of(v); }

    /** A kernel as the tests write it: buffers by name; {@link #toKernel} gives them their dtypes. */
    record Spec(String name, List<SymInt> ranges, ReduceFn reduce, List<SymInt> reductionRanges, List<String> inputs,
                List<KExpr> locals, List<Store> stores, List<String> ops) {
        record Store(String buffer, int local) {}

        boolean isReduction() { return reduce != null; }

        /** A planner kernel of at most one reduction, stored per row, as a spec (its folded local stored). */
        static Spec from(Kernel k) {
            if (!k.isReduction())
                return new Spec(k.name(), k.ranges(), null, List.of(), k.inputs().stream().map(PlanBuffer::name).toList(),
                        k.locals(), k.stores().stream().map(s -> new Store(s.buffer().name(), s.local())).toList(), k.ops());
            var r = k.reductions().getFirst();
            return new Spec(k.name(), k.ranges(), r.fn(), k.reductionRanges(), k.inputs().stream().map(PlanBuffer::name).toList(),
                    k.locals().subList(0, r.local() + 1), List.of(new Store(k.stores().getFirst().buffer().name(), r.local())), k.ops());
        }

        Kernel toKernel(Function<String, DType> dtypes) {
            Function<String, PlanBuffer> b = n -> PlanBuffer.standalone(n, new TensorType(require(dtypes, n), Shape.of(new long[0])));
            if (reduce == null)
                return Kernel.pointwise(name, ranges, inputs.stream().map(b).toList(), locals,
                        stores.stream().map(s -> new Kernel.Store(b.apply(s.buffer()), s.local())).toList(), ops);
            var out = b.apply(stores.getFirst().buffer());
            var all = new ArrayList<>(locals);
            all.add(new KExpr.Reduced(0, out.dtype()));
            return new Kernel(name, ranges, reductionRanges, inputs.stream().map(b).toList(), all,
                    List.of(new Kernel.Reduction(reduce, stores.getFirst().local(), out.dtype())),
                    List.of(Kernel.Store.perRow(out, all.size() - 1)), ops);
        }

        private static DType require(Function<String, DType> dtypes, String name) {
            DType t = dtypes.apply(name);
            if (t == null) throw new IllegalArgumentException("no dtype for buffer " + name);
            return t;
        }
    }

    static KernelSource generate(Spec k, Function<String, DType> dtypes) { return CudaCodegen.generate(k.toKernel(dtypes)); }

    /** A kernel together with the dtypes of its buffers. */
    record Case(Spec kernel, Map<String, DType> dtypes) {
        KernelSource generate() { return CudaCodegenFixtures.generate(kernel, dtypes::get); }
        @Override public String toString() { return kernel.name(); }
    }

    /** Row-major strides of {@code ranges}, padded with {@code extra} zero strides. */
    static List<SymInt> rowMajor(List<SymInt> ranges, int extra) {
        var out = new ArrayList<SymInt>();
        SymInt s = SymInt.ONE;
        for (int d = ranges.size() - 1; d >= 0; d--) {
            out.addFirst(s);
            s = s.times(ranges.get(d));
        }
        for (int i = 0; i < extra; i++) out.add(SymInt.ZERO);
        return out;
    }

    static KExpr.Load load(int input, List<SymInt> strides, DType t) { return new KExpr.Load(input, SymInt.ZERO, strides, t); }

    /** A pointwise kernel out = fn(in0, in1, in2) of one dtype over {@code ranges}, contiguous operands. */
    static Case pointwise(String name, PointwiseFn fn, DType t, List<SymInt> ranges) {
        DType argType = t;
        DType result = fn.isComparison() ? DType.BOOL : t;
        var strides = rowMajor(ranges, 0);
        var args = new ArrayList<KExpr>();
        var types = new LinkedHashMap<String, DType>();
        var inputs = new ArrayList<String>();
        for (int i = 0; i < fn.arity(); i++) {
            DType at = fn == PointwiseFn.WHERE && i == 0 ? DType.BOOL : argType;
            args.add(load(i, strides, at));
            inputs.add("x" + i);
            types.put("x" + i, at);
        }
        types.put("y", result);
        var k = new Spec(name, ranges, null, List.of(), inputs, List.of(new KExpr.Apply(fn, args, result)),
                List.of(new Spec.Store("y", 0)), List.of(fn.opName()));
        return new Case(k, types);
    }

    /** {@code y = reduce(x)} over the last dimension of a [rows, cols] tensor of dtype {@code t}. */
    static Case reduction(String name, ReduceFn fn, DType t, DType out, SymInt rows, SymInt cols) {
        var k = new Spec(name, List.of(rows), fn, List.of(cols), List.of("x"),
                List.of(new KExpr.Load(0, SymInt.ZERO, List.of(cols, SymInt.ONE), t)),
                List.of(new Spec.Store("y", 0)), List.of(fn.opName()));
        return new Case(k, Map.of("x", t, "y", out));
    }

    /** Every pointwise function at every dtype it makes sense for, plus reductions of every kind and dtype. */
    static List<Case> handBuilt() {
        var out = new ArrayList<Case>();
        var ranges = List.of(N, c(16));
        for (DType t : DType.values()) {
            for (PointwiseFn fn : PointwiseFn.values()) {
                if (fn.needsFloat() && !t.isFloating()) continue;
                if (t == DType.BOOL && fn != PointwiseFn.WHERE && !fn.isComparison() && fn != PointwiseFn.IDENTITY
                        && fn != PointwiseFn.MAXIMUM && fn != PointwiseFn.MINIMUM && fn != PointwiseFn.ADD && fn != PointwiseFn.MUL) continue;
                out.add(pointwise(fn.opName() + "_" + t.shortName(), fn, t, ranges));
            }
            for (ReduceFn fn : ReduceFn.values()) {
                DType o = fn == ReduceFn.MEAN && !t.isFloating() ? DType.FLOAT32 : t == DType.BOOL && fn == ReduceFn.SUM ? DType.INT64 : t;
                out.add(reduction(fn.opName() + "_rows_" + t.shortName(), fn, t, o, N, c(100)));
            }
            // casts from every dtype to every other
            for (DType to : DType.values()) {
                if (to == t) continue;
                var k = new Spec("cast_" + t.shortName() + "_" + to.shortName(), List.of(c(1000)), null, List.of(), List.of("x"),
                        List.of(new KExpr.Cast(load(0, List.of(SymInt.ONE), t), to)), List.of(new Spec.Store("y", 0)), List.of("cast"));
                out.add(new Case(k, Map.of("x", t, "y", to)));
            }
        }
        out.addAll(special());
        return out;
    }

    /** Kernels exercising layouts: transposes, broadcasts, offsets, scalars, symbolic strides, many outputs, constants. */
    static List<Case> special() {
        var out = new ArrayList<Case>();
        SymInt m = SymInt.symbol("m");
        // transpose: reads x[i1 * n + i0] into y[i0, i1] (no vector path)
        out.add(new Case(new Spec("transpose_0", List.of(m, N), null, List.of(), List.of("x"),
                List.of(new KExpr.Apply(PointwiseFn.IDENTITY, List.of(load(0, List.of(SymInt.ONE, m), DType.FLOAT32)), DType.FLOAT32)),
                List.of(new Spec.Store("y", 0)), List.of("identity")), Map.of("x", DType.FLOAT32, "y", DType.FLOAT32)));
        // broadcast row bias + scalar + constant, with an offset load, two outputs of different dtypes
        var ranges = List.of(N, c(64));
        var k = new Spec("fused_add_mul_relu_cast_1", ranges, null, List.of(), List.of("x", "bias", "scale"),
                List.of(
                        new KExpr.Apply(PointwiseFn.ADD, List.of(new KExpr.Load(0, N.times(2), rowMajor(ranges, 0), DType.FLOAT32),
                                load(1, List.of(SymInt.ZERO, SymInt.ONE), DType.FLOAT32)), DType.FLOAT32),
                        new KExpr.Apply(PointwiseFn.MUL, List.of(new KExpr.Local(0, DType.FLOAT32),
                                load(2, List.of(SymInt.ZERO, SymInt.ZERO), DType.FLOAT32)), DType.FLOAT32),
                        new KExpr.Apply(PointwiseFn.RELU, List.of(new KExpr.Apply(PointwiseFn.SUB, List.of(new KExpr.Local(1, DType.FLOAT32),
                                new KExpr.Const(-0.5, DType.FLOAT32)), DType.FLOAT32)), DType.FLOAT32),
                        new KExpr.Cast(new KExpr.Local(2, DType.FLOAT32), DType.FLOAT16)),
                List.of(new Spec.Store("y", 2), new Spec.Store("yh", 3)), List.of("add", "mul", "relu", "cast"));
        out.add(new Case(k, Map.of("x", DType.FLOAT32, "bias", DType.FLOAT32, "scale", DType.FLOAT32, "y", DType.FLOAT32, "yh", DType.FLOAT16)));
        // a scalar kernel (no ranges) and a full reduction (no output ranges), symbolic reduction length
        out.add(new Case(new Spec("scalar_add_2", List.of(), null, List.of(), List.of("x"),
                List.of(new KExpr.Apply(PointwiseFn.ADD, List.of(load(0, List.of(), DType.FLOAT64), new KExpr.Const(1, DType.FLOAT64)), DType.FLOAT64)),
                List.of(new Spec.Store("y", 0)), List.of("add")), Map.of("x", DType.FLOAT64, "y", DType.FLOAT64)));
        out.add(new Case(new Spec("sum_all_3", List.of(), ReduceFn.SUM, List.of(m, N), List.of("x"),
                List.of(new KExpr.Apply(PointwiseFn.MUL, List.of(load(0, List.of(N, SymInt.ONE), DType.BFLOAT16),
                        load(0, List.of(N, SymInt.ONE), DType.BFLOAT16)), DType.BFLOAT16)),
                List.of(new Spec.Store("y", 0)), List.of("mul", "sum")), Map.of("x", DType.BFLOAT16, "y", DType.BFLOAT16)));
        // a reduction over a middle dimension of [a, b, c] with a fused pointwise prologue (gelu), symbol names that
        // collide with the generated code's own names
        SymInt a = SymInt.symbol("total"), b = SymInt.symbol("i0"), cc = SymInt.symbol("int");
        out.add(new Case(new Spec("fused_gelu_max_4", List.of(a, cc), ReduceFn.MAX, List.of(b), List.of("x"),
                List.of(new KExpr.Load(0, SymInt.ZERO, List.of(b.times(cc), SymInt.ONE, cc), DType.FLOAT16),
                        new KExpr.Apply(PointwiseFn.GELU, List.of(new KExpr.Local(0, DType.FLOAT16)), DType.FLOAT16)),
                List.of(new Spec.Store("y", 1)), List.of("gelu", "max")), Map.of("x", DType.FLOAT16, "y", DType.FLOAT16)));
        // constants: NaN, infinities, -0, extreme integers
        var consts = new ArrayList<KExpr>();
        for (double v : new double[] {Double.NaN, Double.POSITIVE_INFINITY, Double.NEGATIVE_INFINITY, -0.0, 1e-5, 65504, 1e300})
            for (DType t : List.of(DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16)) consts.add(new KExpr.Const(v, t));
        for (double v : new double[] {Long.MIN_VALUE, Integer.MIN_VALUE, -128, 127, 1, 0})
            for (DType t : List.of(DType.INT8, DType.INT32, DType.INT64, DType.BOOL)) consts.add(new KExpr.Const(v, t));
        var stores = new ArrayList<Spec.Store>();
        var types = new HashMap<String, DType>();
        for (int i = 0; i < consts.size(); i++) {
            stores.add(new Spec.Store("c" + i, i));
            types.put("c" + i, consts.get(i).dtype());
        }
        out.add(new Case(new Spec("constants_5", List.of(c(8)), null, List.of(), List.of(), consts, stores, List.of("const")), types));
        // mixed dtypes: i8 and f64 inputs into an f16 output (vector width 2: 8-byte elements)
        var r1 = List.of(c(1024));
        out.add(new Case(new Spec("fused_cast_add_6", r1, null, List.of(), List.of("a", "b"),
                List.of(new KExpr.Apply(PointwiseFn.ADD, List.of(new KExpr.Cast(load(0, List.of(SymInt.ONE), DType.INT8), DType.FLOAT64),
                        load(1, List.of(SymInt.ONE), DType.FLOAT64)), DType.FLOAT64), new KExpr.Cast(new KExpr.Local(0, DType.FLOAT64), DType.FLOAT16)),
                List.of(new Spec.Store("y", 1)), List.of("cast", "add", "cast")), Map.of("a", DType.INT8, "b", DType.FLOAT64, "y", DType.FLOAT16)));
        return out;
    }

    /** Real kernels: random graphs (every feature), lowered and planned; one Case per distinct kernel source. */
    /** The kernels of planned random graphs exactly as the planner makes them (every phase and store), distinct sources once. */
    static List<KernelSource> plannedSources(long firstSeed, int graphs) {
        var out = new ArrayList<KernelSource>();
        var seen = new java.util.HashSet<String>();
        for (long seed = firstSeed; seed < firstSeed + graphs; seed++)
            for (Kernel k : Planner.plan(Lowering.lower(randomGraph(seed), LoweringOptions.world(1 + (int) (seed % 2)))).kernels()) {
                KernelSource src = CudaCodegen.generate(k);
                if (seen.add(src.source())) out.add(src);
            }
        return out;
    }

    private static Graph randomGraph(long seed) {
        var options = RandomGraphs.Options.defaults().withWorldSize(1 + (int) (seed % 2)).withMaxNodes(8 + (int) (seed % 4) * 8)
                .withDTypes(DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16, DType.INT32, DType.INT8, DType.INT64, DType.BOOL);
        try {
            return RandomGraphs.generate(seed, options);
        } catch (RuntimeException e) {
            return RandomGraphs.generate(seed, options.withDTypes(DType.FLOAT32, DType.FLOAT64, DType.FLOAT16, DType.BFLOAT16, DType.INT32));
        }
    }

    static List<Case> planned(long firstSeed, int graphs) {
        var out = new ArrayList<Case>();
        var seen = new HashMap<String, Boolean>();
        for (long seed = firstSeed; seed < firstSeed + graphs; seed++) {
            LoweredGraph lowered = Lowering.lower(randomGraph(seed), LoweringOptions.world(1 + (int) (seed % 2)));
            Plan plan = Planner.plan(lowered);
            for (Kernel k : plan.kernels()) {
                var types = new HashMap<String, DType>();
                for (PlanBuffer b : k.inputs()) types.put(b.name(), b.dtype());
                for (PlanBuffer b : k.outputs()) types.put(b.name(), b.dtype());
                var cs = new Case(Spec.from(k), types);
                if (seen.putIfAbsent(cs.generate().source(), true) == null) out.add(cs);
            }
        }
        return out;
    }

    // ------------------------------------------------------------------ nvcc

    static Optional<Path> nvcc() {
        for (String dir : (System.getenv("PATH") == null ? "" : System.getenv("PATH")).split(":")) {
            Path p = Path.of(dir, "nvcc");
            if (Files.isExecutable(p)) return Optional.of(p);
        }
        Path p = Path.of("/usr/local/cuda/bin/nvcc");
        return Files.isExecutable(p) ? Optional.of(p) : Optional.empty();
    }

    /** Result of one nvcc run: exit code, its log and the PTX (empty on failure). */
    record Compiled(int exit, String log, String ptx, Path source) {
        boolean ok() { return exit == 0; }
    }

    /** {@code nvcc -ptx -arch=sm_90 -I/usr/local/cuda/include} on {@code source}, in {@code dir}. */
    static Compiled compile(Path nvcc, Path dir, String fileName, String source) throws IOException, InterruptedException {
        Path ptx = dir.resolve(fileName + ".ptx");
        Compiled c = run(nvcc, dir, fileName, source, List.of("-ptx", "-Werror", "all-warnings"), ptx);
        return c.ok() ? new Compiled(c.exit(), c.log(), Files.readString(ptx), c.source()) : c;
    }

    /**
     * {@code nvcc -cubin -arch=sm_90 -Xptxas -v} on {@code source}, in {@code dir}: the log holds ptxas's report of each
     * entry's registers and spills (no PTX kept).
     */
    static Compiled cubin(Path nvcc, Path dir, String fileName, String source) throws IOException, InterruptedException {
        return run(nvcc, dir, fileName, source, List.of("-cubin", "-Xptxas", "-v"), dir.resolve(fileName + ".cubin"));
    }

    /** One nvcc run for sm_90 with {@code args}, writing {@code out}; at most 300 s. */
    private static Compiled run(Path nvcc, Path dir, String fileName, String source, List<String> args, Path out) throws IOException, InterruptedException {
        Path cu = dir.resolve(fileName + ".cu");
        Files.writeString(cu, source, StandardCharsets.UTF_8);
        var cmd = new ArrayList<>(List.of(nvcc.toString(), "-arch=sm_90", "-I/usr/local/cuda/include", "-std=c++17"));
        cmd.addAll(args);
        cmd.addAll(List.of(cu.toString(), "-o", out.toString()));
        Process p = new ProcessBuilder(cmd).directory(dir.toFile()).redirectErrorStream(true).start();
        String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!p.waitFor(300, TimeUnit.SECONDS)) {
            p.destroyForcibly();
            return new Compiled(-1, "nvcc timed out\n" + log, "", cu);
        }
        return new Compiled(p.exitValue(), log, "", cu);
    }

    /**
     * Many kernel sources as one translation unit (each in its own namespace, entry points renamed apart, the half
     * headers and the fault record's type hoisted), so that one nvcc run checks them all. Returns the unit and the renamed entry points.
     */
    static Map.Entry<String, List<String>> batch(List<KernelSource> sources) {
        var sb = new StringBuilder("#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n");
        // the fault record's type, which kernels that gather include once (an include guard): hoisted out of the namespaces too
        if (sources.stream().anyMatch(s -> s.source().contains(DeviceFault.SOURCE))) sb.append(DeviceFault.SOURCE);
        var names = new ArrayList<String>();
        for (int i = 0; i < sources.size(); i++) {
            KernelSource s = sources.get(i);
            String renamed = s.name() + "__b" + i;
            names.add(renamed);
            String body = s.source().replace(DeviceFault.SOURCE, "").replaceAll("(?m)^#include .*$", "")
                    .replace(" " + s.name() + "(\n", " " + renamed + "(\n");
            sb.append("namespace b").append(i).append(" {\n").append(body).append("}\n");
        }
        return Map.entry(sb.toString(), names);
    }
}
