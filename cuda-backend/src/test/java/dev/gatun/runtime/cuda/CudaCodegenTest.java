package dev.gatun.runtime.cuda;

import dev.gatun.runtime.cuda.CudaCodegenFixtures.Case;
import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.ir.graph.ReduceFn;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.runtime.cuda.CudaCodegenFixtures.Spec;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import static dev.gatun.runtime.cuda.CudaCodegenFixtures.N;
import static dev.gatun.runtime.cuda.CudaCodegenFixtures.c;
import static dev.gatun.runtime.cuda.CudaCodegenFixtures.load;
import static dev.gatun.runtime.cuda.CudaCodegenFixtures.pointwise;
import static dev.gatun.runtime.cuda.CudaCodegenFixtures.reduction;
import static dev.gatun.runtime.cuda.CudaCodegenFixtures.rowMajor;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The shape of generated sources: ABI, symbols, includes, vector paths, reductions, op semantics, geometry. */
class CudaCodegenTest {

    /** The kernel's parameter list, comments and line breaks removed. */
    static String signature(KernelSource s) {
        String src = s.source().replaceAll("//[^\n]*", "");
        var m = Pattern.compile("extern \"C\" __global__ void __launch_bounds__\\(\\d+\\) " + s.name() + "\\(([^)]*)\\)").matcher(src);
        assertThat(m.find()).as("entry point in\n" + s.source()).isTrue();
        return m.group(1).replaceAll("\\s+", " ").trim();
    }

    /** The code only, without comments. */
    static String code(KernelSource s) { return s.source().replaceAll("//[^\n]*", ""); }

    @Test
    void abiListsInputsThenOutputsThenSortedSymbols() {
        SymInt m = SymInt.symbol("m"), b = SymInt.symbol("batch");
        var ranges = List.of(b, N);
        var k = new Spec("fused_add_mul_0", ranges, null, List.of(), List.of("x", "w"),
                List.of(new KExpr.Apply(PointwiseFn.ADD, List.of(new KExpr.Load(0, m, List.of(N.times(2), SymInt.ONE), DType.FLOAT32),
                                new KExpr.Cast(load(1, rowMajor(ranges, 0), DType.FLOAT16), DType.FLOAT32)), DType.FLOAT32),
                        new KExpr.Apply(PointwiseFn.MUL, List.of(new KExpr.Local(0, DType.FLOAT32), new KExpr.Const(2, DType.FLOAT32)), DType.FLOAT32)),
                List.of(new Spec.Store("y", 1), new Spec.Store("z", 0)), List.of("add", "mul"));
        var s = CudaCodegenFixtures.generate(k, Map.of("x", DType.FLOAT32, "w", DType.FLOAT16, "y", DType.FLOAT32, "z", DType.BFLOAT16)::get);
        assertThat(s.name()).isEqualTo("fused_add_mul_0");
        assertThat(s.symbols()).containsExactly("batch", "m", "n");
        assertThat(signature(s)).isEqualTo("const float* in0, const __half* in1, float* out0, __nv_bfloat16* out1, long long batch, long long m, long long n");
        assertThat(s.source()).doesNotContain("__restrict__").contains("#include <cuda_fp16.h>", "#include <cuda_bf16.h>");
        assertThat(s.reduction()).isFalse();
        // one line per local, commented with the planner's text
        assertThat(s.source()).contains("const float t0 = ", "const float t1 = __fmul_rn(t0, 2.0f);", "// t1 = (t0 * 2.0)", "// fused_add_mul_0: add, mul");
        // the non-contiguous load of x rules the vector path out
        assertThat(s.vectorWidth()).isEqualTo(1);
        assertThat(s.source()).doesNotContain("gt_vec");
    }

    @Test
    void symbolsThatCollideWithGeneratedNamesOrKeywordsAreRenamed() {
        var k = new Spec("k_0", List.of(SymInt.symbol("total"), SymInt.symbol("int"), SymInt.symbol("i3")), null, List.of(), List.of("x"),
                List.of(load(0, List.of(SymInt.symbol("int").times(SymInt.symbol("i3")), SymInt.symbol("i3"), SymInt.ONE), DType.FLOAT32)),
                List.of(new Spec.Store("y", 0)), List.of("copy"));
        var s = CudaCodegenFixtures.generate(k, Map.of("x", DType.FLOAT32, "y", DType.FLOAT32)::get);
        assertThat(s.symbols()).containsExactly("i3", "int", "total");
        assertThat(signature(s)).isEqualTo("const float* in0, float* out0, long long sym_i3, long long sym_int, long long sym_total");
    }

    @Test
    void noArgumentsAtAll() {
        var k = new Spec("fill_0", List.of(c(3)), null, List.of(), List.of(), List.of(new KExpr.Const(1.5, DType.FLOAT32)),
                List.of(new Spec.Store("y", 0)), List.of("const"));
        var s = CudaCodegenFixtures.generate(k, Map.of("y", DType.FLOAT32)::get);
        assertThat(signature(s)).isEqualTo("float* out0");
        assertThat(s.symbols()).isEmpty();
    }

    @ParameterizedTest
    @EnumSource(DType.class)
    void elementTypesAndIncludes(DType t) {
        var s = pointwise("copy_" + t.shortName(), PointwiseFn.IDENTITY, t, List.of(N)).generate();
        String type = switch (t) {
            case FLOAT16 -> "__half"; case BFLOAT16 -> "__nv_bfloat16"; case FLOAT32 -> "float"; case FLOAT64 -> "double";
            case INT8 -> "signed char"; case INT32 -> "int"; case INT64 -> "long long"; case BOOL -> "bool";
        };
        assertThat(signature(s)).isEqualTo("const " + type + "* in0, " + type + "* out0, long long n");
        assertThat(s.source().contains("#include <cuda_fp16.h>")).isEqualTo(t == DType.FLOAT16);
        assertThat(s.source().contains("#include <cuda_bf16.h>")).isEqualTo(t == DType.BFLOAT16);
        // a contiguous copy always takes the vector path: 16 bytes per access
        assertThat(s.vectorWidth()).isEqualTo(16 / t.byteSize());
        assertThat(s.source()).contains("gt_vec<" + type + ", " + 16 / t.byteSize() + ">");
    }

    @Test
    void vectorPathTakesContiguousAndBroadcastLoads() {
        var ranges = List.of(N, c(64));
        var k = new Spec("fused_mul_add_0", ranges, null, List.of(), List.of("x", "s", "bias"),
                List.of(new KExpr.Apply(PointwiseFn.MUL, List.of(load(0, rowMajor(ranges, 0), DType.FLOAT32),
                                new KExpr.Load(1, c(3), List.of(SymInt.ZERO, SymInt.ZERO), DType.FLOAT32)), DType.FLOAT32),
                        new KExpr.Apply(PointwiseFn.ADD, List.of(new KExpr.Local(0, DType.FLOAT32),
                                new KExpr.Load(2, SymInt.ZERO, List.of(SymInt.ZERO, SymInt.ONE), DType.FLOAT32)), DType.FLOAT32)),
                List.of(new Spec.Store("y", 1)), List.of("mul", "add"));
        // the row bias (strides [0, 1]) is neither, but walks the innermost dimension element for element (an inner
        // load): a vector of it at each vector's first element, the indices unravelled once a vector; the scalar tail
        // reads it by element
        var s = CudaCodegenFixtures.generate(k, Map.of("x", DType.FLOAT32, "s", DType.FLOAT32, "bias", DType.FLOAT32, "y", DType.FLOAT32)::get);
        assertThat(s.vectorWidth()).isEqualTo(4);
        assertThat(code(s)).contains("*reinterpret_cast<const gt_vec<float, 4>*>(in2 + (i1))", "x1.e[l]", "in2[i1]", "in0[o]", "in1[3]");
        // a row of 66 is not whole vectors of 4: the bias would cross rows inside a vector, so no vector path
        var o66 = new Spec("fused_mul_add_0", List.of(N, c(66)), null, List.of(), List.of("x", "s", "bias"),
                List.of(new KExpr.Apply(PointwiseFn.MUL, List.of(load(0, rowMajor(List.of(N, c(66)), 0), DType.FLOAT32),
                                new KExpr.Load(1, c(3), List.of(SymInt.ZERO, SymInt.ZERO), DType.FLOAT32)), DType.FLOAT32),
                        k.locals().get(1)), List.of(new Spec.Store("y", 1)), List.of("mul", "add"));
        assertThat(CudaCodegenFixtures.generate(o66, Map.of("x", DType.FLOAT32, "s", DType.FLOAT32, "bias", DType.FLOAT32, "y", DType.FLOAT32)::get).vectorWidth())
                .isEqualTo(1);

        // without it: a vector path, the scalar x[3] read once per lane, alignment checked at run time, a scalar tail
        var k2 = new Spec("fused_mul_0", ranges, null, List.of(), List.of("x", "s"), List.of(k.locals().getFirst()),
                List.of(new Spec.Store("y", 0)), List.of("mul"));
        var s2 = CudaCodegenFixtures.generate(k2, Map.of("x", DType.FLOAT32, "s", DType.FLOAT32, "y", DType.FLOAT32)::get);
        assertThat(s2.vectorWidth()).isEqualTo(4);
        assertThat(code(s2)).contains("gt_vec<float, 4>", "reinterpret_cast<unsigned long long>(in0) % 16 == 0",
                "reinterpret_cast<unsigned long long>(out0) % 16 == 0", "__fmul_rn(x0.e[l], in1[3])", "start = nvec * 4", "for (long long o = start + tid;");
        // every load of a vector happens before its store
        String c2 = code(s2);
        assertThat(c2.indexOf("*reinterpret_cast<const gt_vec<float, 4>*>(in0 + o)")).isLessThan(c2.indexOf("*reinterpret_cast<gt_vec<float, 4>*>(out0 + o) = y0"));
    }

    @Test
    void offsetLoadsCheckTheAlignmentOfTheirFirstElement() {
        var ranges = List.of(N);
        var k = new Spec("copy_0", ranges, null, List.of(), List.of("x"),
                List.of(new KExpr.Load(0, N.plus(1), List.of(SymInt.ONE), DType.FLOAT16)), List.of(new Spec.Store("y", 0)), List.of("copy"));
        var s = CudaCodegenFixtures.generate(k, Map.of("x", DType.FLOAT16, "y", DType.FLOAT16)::get);
        assertThat(s.vectorWidth()).isEqualTo(8);
        assertThat(code(s)).contains("reinterpret_cast<unsigned long long>(in0 + (1 + n)) % 16 == 0", "in0[(1 + n) + o]");
    }

    @Test
    void mixedElementSizesUseTheWidestForTheVectorWidth() {
        var cases = CudaCodegenFixtures.special();
        var mixed = cases.stream().filter(x -> x.kernel().name().equals("fused_cast_add_6")).findFirst().orElseThrow().generate();
        assertThat(mixed.vectorWidth()).isEqualTo(2);
        assertThat(code(mixed)).contains("gt_vec<signed char, 2>", "gt_vec<double, 2>", "gt_vec<__half, 2>",
                "reinterpret_cast<unsigned long long>(in0) % 2 == 0", "reinterpret_cast<unsigned long long>(in1) % 16 == 0",
                "reinterpret_cast<unsigned long long>(out0) % 4 == 0");
    }

    @Test
    void noVectorPathForTransposesTinyKernelsAndReductions() {
        var transpose = CudaCodegenFixtures.special().getFirst().generate();
        assertThat(transpose.vectorWidth()).isEqualTo(1);
        assertThat(code(transpose)).contains("in0[i0 + m * i1]").doesNotContain("gt_vec");
        assertThat(pointwise("add_0", PointwiseFn.ADD, DType.FLOAT32, List.of(c(3))).generate().vectorWidth()).isEqualTo(1);
        assertThat(pointwise("add_0", PointwiseFn.ADD, DType.FLOAT32, List.of()).generate().vectorWidth()).isEqualTo(1);
        assertThat(reduction("sum_0", ReduceFn.SUM, DType.FLOAT32, DType.FLOAT32, N, c(1024)).generate().vectorWidth()).isEqualTo(1);
    }

    @ParameterizedTest
    @EnumSource(ReduceFn.class)
    void reductionsUseABlockTreeWithWarpShuffles(ReduceFn fn) {
        for (DType t : DType.values()) {
            DType out = fn == ReduceFn.MEAN && !t.isFloating() ? DType.FLOAT32 : t;
            var s = reduction(fn.opName() + "_rows_0", fn, t, out, N, SymInt.symbol("k")).generate();
            String code = code(s);
            assertThat(s.reduction()).isTrue();
            assertThat(s.symbols()).containsExactly("k", "n");
            assertThat(code).contains("__shfl_down_sync(0xffffffffu, acc, d)", "__shared__", "gt_part0[warp] = acc", "__syncthreads();",
                    "for (long long o = blockIdx.x; o < total; o += gridDim.x)", "for (long long r = threadIdx.x; r < count; r += blockDim.x)");
            String acc = t == DType.FLOAT64 ? "double" : t.isFloating() ? "float" : "long long";
            assertThat(code).contains(acc + " acc = ");
            if (fn == ReduceFn.MEAN) assertThat(code).contains("count == 0 ?");
            if ((fn == ReduceFn.MAX || fn == ReduceFn.MIN) && t.isFloating()) assertThat(code).contains("a != a ? a : b != b ? b");
            if (fn == ReduceFn.MAX) assertThat(code).contains(t.isFloating() ? "acc = (-__" : "acc = (-9223372036854775807LL - 1)");
        }
    }

    @Test
    void fullReductionsAndScalarKernels() {
        var sumAll = CudaCodegenFixtures.special().stream().filter(x -> x.kernel().name().equals("sum_all_3")).findFirst().orElseThrow().generate();
        assertThat(code(sumAll)).contains("const long long total = 1;", "const long long count = n0 * n1;", "float acc = 0.0f;",
                "rd0 = gt_bf16(acc)", "out0[o] = __float2bfloat16_rn(t", "gt_bf16(__fmul_rn(__bfloat162float(");
        var scalar = CudaCodegenFixtures.special().stream().filter(x -> x.kernel().name().equals("scalar_add_2")).findFirst().orElseThrow().generate();
        assertThat(code(scalar)).contains("const long long total = 1;", "in0[0] + 1.0");
    }

    /** The C each op turns into, per dtype: the function semantics the reference has. */
    @Test
    void opSemantics() {
        var r = List.of(N);
        assertThat(code(pointwise("g", PointwiseFn.GELU, DType.FLOAT32, r).generate())).contains("erff(", "0.5f * a * (1.0f + erff(");
        assertThat(code(pointwise("g", PointwiseFn.GELU, DType.FLOAT64, r).generate())).contains("0.5 * a * (1.0 + erf(a / 1.4142135623730951))");
        assertThat(code(pointwise("s", PointwiseFn.SILU, DType.FLOAT32, r).generate())).contains("gt_sigmoid(a)", "expf(-a)");
        assertThat(code(pointwise("m", PointwiseFn.MAXIMUM, DType.FLOAT32, r).generate())).contains("a != a ? a : b != b ? b : fmaxf(a, b)");
        assertThat(code(pointwise("m", PointwiseFn.MINIMUM, DType.FLOAT64, r).generate())).contains("fmin(a, b)");
        assertThat(code(pointwise("m", PointwiseFn.MAXIMUM, DType.INT32, r).generate())).contains("long long gt_max(long long a, long long b)");
        assertThat(code(pointwise("r", PointwiseFn.RELU, DType.FLOAT32, r).generate())).contains("a != a ? a : a > 0.0f ? a : 0.0f");
        assertThat(code(pointwise("r", PointwiseFn.RSQRT, DType.FLOAT32, r).generate())).contains("rsqrtf(");
        assertThat(code(pointwise("p", PointwiseFn.POW, DType.FLOAT16, r).generate())).contains("gt_f16(powf(");
        assertThat(code(pointwise("p", PointwiseFn.POW, DType.INT32, r).generate())).contains("(int) (long long) pow((double) ");
        assertThat(code(pointwise("m", PointwiseFn.MUL, DType.FLOAT64, r).generate())).contains("__dmul_rn(in0[o], in1[o])");
        assertThat(code(pointwise("m", PointwiseFn.MUL, DType.INT32, r).generate())).contains("(int) ((long long) in0[o] * (long long) in1[o])");
        assertThat(code(pointwise("d", PointwiseFn.DIV, DType.FLOAT32, r).generate())).contains(" / ");
        assertThat(code(pointwise("a", PointwiseFn.ADD, DType.INT32, r).generate())).contains("(int) ((long long) in0[o] + (long long) in1[o])");
        assertThat(code(pointwise("a", PointwiseFn.ADD, DType.INT64, r).generate())).contains("const long long t0 = in0[o] + in1[o];");
        assertThat(code(pointwise("a", PointwiseFn.ADD, DType.BFLOAT16, r).generate())).contains("gt_bf16(__bfloat162float(in0[o]) + __bfloat162float(in1[o]))");
        assertThat(code(pointwise("a", PointwiseFn.ADD, DType.BOOL, r).generate())).contains("const bool t0 = ((long long) in0[o] + (long long) in1[o]) != 0;");
        var lt = pointwise("lt", PointwiseFn.LT, DType.FLOAT16, r).generate();
        assertThat(signature(lt)).isEqualTo("const __half* in0, const __half* in1, bool* out0, long long n");
        assertThat(code(lt)).contains("const bool t0 = __half2float(in0[o]) < __half2float(in1[o]);");
        assertThat(code(pointwise("w", PointwiseFn.WHERE, DType.FLOAT32, r).generate())).contains("const float t0 = in0[o] ? in1[o] : in2[o];");
        // every op of every dtype generates
        assertThat(CudaCodegenFixtures.handBuilt()).allSatisfy(x -> assertThat(x.generate().source()).contains(x.kernel().name() + "("));
    }

    @Test
    void castsRoundAndTruncateAsTheReference() {
        var cases = CudaCodegenFixtures.handBuilt();
        java.util.function.Function<String, String> src = name -> code(cases.stream().filter(x -> x.kernel().name().equals(name)).findFirst().orElseThrow().generate());
        assertThat(src.apply("cast_f32_i32")).contains("(int) (long long) in0[o]");
        assertThat(src.apply("cast_f64_i8")).contains("(signed char) (long long) in0[o]");
        assertThat(src.apply("cast_f32_i64")).contains("(long long) in0[o]");
        assertThat(src.apply("cast_f32_bool")).contains("const bool t0 = in0[o] != 0;");
        assertThat(src.apply("cast_f64_f16")).contains("gt_f16((float) in0[o])");
        assertThat(src.apply("cast_bf16_f32")).contains("const float t0 = __bfloat162float(in0[o]);");
        assertThat(src.apply("cast_i32_f32")).contains("(float) in0[o]");
        assertThat(src.apply("cast_i64_i32")).contains("(int) in0[o]");
    }

    @Test
    void constantsAreExact() {
        var s = CudaCodegenFixtures.special().stream().filter(x -> x.kernel().name().equals("constants_5")).findFirst().orElseThrow().generate();
        String code = code(s);
        assertThat(code).contains("const float t0 = __int_as_float(0x7fc00000);", "const double t1 = __longlong_as_double(0x7ff8000000000000LL);",
                "const float t4 = __int_as_float(0x7f800000);", "const float t8 = -__int_as_float(0x7f800000);", "const float t12 = -0.0f;",
                "const float t16 = 1.0E-5f;", "const float t18 = 1.001358E-5f;" /* 1e-5 rounded to f16 */, "const float t23 = 65536.0f;" /* bf16 */,
                "const float t24 = __int_as_float(0x7f800000);" /* 1e300 overflows f32 */, "const long long t30 = -9223372036854775807LL - 1;",
                "const int t33 = -2147483647 - 1;", "const bool t51 = false;");
        // unused locals stay visible as comments, and their loads are left out
        var k = new Spec("unused_0", List.of(N), null, List.of(), List.of("x"),
                List.of(new KExpr.Apply(PointwiseFn.EXP, List.of(load(0, List.of(SymInt.ONE), DType.FLOAT32)), DType.FLOAT32),
                        new KExpr.Const(2, DType.FLOAT32)), List.of(new Spec.Store("y", 1)), List.of("exp", "const"));
        var u = CudaCodegenFixtures.generate(k, Map.of("x", DType.FLOAT32, "y", DType.FLOAT32)::get);
        assertThat(u.source()).contains("// t0 = exp(x[i0])  (unused)");
        assertThat(code(u)).doesNotContain("in0[").doesNotContain("expf");
    }

    @Test
    void loadsComeBeforeStoresInTheScalarLoop() {
        for (Case x : CudaCodegenFixtures.handBuilt()) {
            if (x.kernel().isReduction()) continue;
            String code = code(x.generate());
            int loop = code.indexOf("for (long long o = ");
            int firstStore = code.indexOf("out0[o] = ", loop);
            int lastLoad = Math.max(code.lastIndexOf("in0[", firstStore), code.lastIndexOf("in1[", firstStore));
            assertThat(lastLoad).as(x.kernel().name()).isLessThan(firstStore);
        }
    }

    @Test
    void geometry() {
        var add = pointwise("add_0", PointwiseFn.ADD, DType.FLOAT32, List.of(N)).generate();
        assertThat(add.geometry(Map.of("n", 1L << 24), 132)).isEqualTo(new KernelSource.Geometry(132 * 32, 256, 0, 1L << 24));
        assertThat(add.geometry(Map.of("n", 1000L), 132)).isEqualTo(new KernelSource.Geometry(1, 256, 0, 1000)); // 250 vectors
        assertThat(add.geometry(Map.of("n", 4097L), 132)).isEqualTo(new KernelSource.Geometry(5, 256, 0, 4097));
        assertThat(add.geometry(Map.of("n", 0L), 132)).isEqualTo(new KernelSource.Geometry(1, 256, 0, 0));
        var transpose = CudaCodegenFixtures.special().getFirst().generate();
        assertThat(transpose.geometry(Map.of("n", 100L, "m", 100L), 132)).isEqualTo(new KernelSource.Geometry(40, 256, 0, 10_000));

        var sum = reduction("sum_0", ReduceFn.SUM, DType.FLOAT32, DType.FLOAT32, N, SymInt.symbol("k")).generate();
        assertThat(sum.geometry(Map.of("n", 7L, "k", 0L), 132)).isEqualTo(new KernelSource.Geometry(7, 32, 0, 7));
        assertThat(sum.geometry(Map.of("n", 7L, "k", 1L), 132).block()).isEqualTo(32);
        assertThat(sum.geometry(Map.of("n", 7L, "k", 33L), 132).block()).isEqualTo(64);
        assertThat(sum.geometry(Map.of("n", 7L, "k", 100L), 132).block()).isEqualTo(128);
        assertThat(sum.geometry(Map.of("n", 7L, "k", 1L << 20), 132).block()).isEqualTo(256);
        assertThat(sum.geometry(Map.of("n", 0L, "k", 5L), 132)).isEqualTo(new KernelSource.Geometry(1, 32, 0, 0));
        assertThat(sum.source()).contains("__launch_bounds__(256)");
    }

    @Test
    void badKernelsAreRefused() {
        var k = new Spec("not a name", List.of(N), null, List.of(), List.of("x"), List.of(load(0, List.of(SymInt.ONE), DType.FLOAT32)),
                List.of(new Spec.Store("y", 0)), List.of("copy"));
        assertThatThrownBy(() -> CudaCodegenFixtures.generate(k, Map.of("x", DType.FLOAT32, "y", DType.FLOAT32)::get)).hasMessageContaining("not a C identifier");
        var k2 = new Spec("copy_0", List.of(N), null, List.of(), List.of("x"), List.of(load(0, List.of(SymInt.ONE), DType.FLOAT32)),
                List.of(new Spec.Store("y", 0)), List.of("copy"));
        assertThatThrownBy(() -> CudaCodegenFixtures.generate(k2, Map.of("x", DType.FLOAT32)::get)).hasMessageContaining("no dtype for buffer y");
    }

    @Test
    void plannedKernelsGenerate() {
        var cases = CudaCodegenFixtures.planned(0, 40);
        var names = new ArrayList<String>();
        for (Case x : cases) {
            var s = x.generate();
            names.add(s.name());
            assertThat(s.name()).isEqualTo(x.kernel().name());
            int params = x.kernel().inputs().size() + x.kernel().stores().size() + s.symbols().size();
            String sig = signature(s);
            assertThat(sig.isEmpty() ? 0 : sig.split(",").length).as(s.source()).isEqualTo(params);
        }
        assertThat(names).isNotEmpty();
    }
}
