package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.LaunchChoice;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.NDArray;
import org.junit.jupiter.api.Test;

import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/** The CUDA source of a row kernel in its two forms (a block a row, a warp a row), as the plan chooses or forces them. */
class RowFormsTest {

    /** A planned row kernel and the form its launch was given. */
    record Planned(Graph graph, Kernel kernel, LaunchChoice.Rows rows) {
        KernelSource source() { return CudaCodegen.generate(kernel, rows); }
    }

    static Planned planned(PlanOptions.RowForm form, Consumer<GraphBuilder> body) {
        var g = Gatun.graph("row");
        body.accept(g);
        Graph graph = g.build();
        Plan plan = Planner.plan(Lowering.lower(graph, LoweringOptions.world(1)), PlanOptions.DEFAULT.withRowForm(form));
        var launches = plan.steps().stream().filter(s -> s instanceof Step.Launch).map(s -> (Step.Launch) s).toList();
        assertThat(launches).as("%s", plan).hasSize(1);
        return new Planned(graph, launches.getFirst().kernel(), plan.choice(launches.getFirst()).rows());
    }

    static Consumer<GraphBuilder> layerNorm(DType t, long rows, long cols) {
        return g -> {
            var x = g.input("x", t, rows, cols);
            var d = x.sub(x.mean(true, -1));
            g.output("y", d.mul(d.mul(d).mean(true, -1).add(1e-5).rsqrt()).mul(g.input("w", t, cols)).add(g.input("b", t, cols)));
        };
    }

    static Consumer<GraphBuilder> rmsNorm(DType t, long rows, long cols) {
        return g -> {
            var x = g.input("x", t, rows, cols);
            g.output("y", x.mul(x.mul(x).mean(true, -1).add(1e-6).rsqrt()).mul(g.input("w", t, cols)));
        };
    }

    static Consumer<GraphBuilder> softmax(DType t, long rows, long cols) {
        return g -> {
            var x = g.input("x", t, rows, cols);
            var e = x.sub(x.max(true, -1)).exp();
            g.output("y", e.div(e.sum(true, -1)));
        };
    }

    static final PlanOptions.RowForm BLOCK = PlanOptions.RowForm.BLOCK, WARP = PlanOptions.RowForm.WARP, AHEAD = PlanOptions.RowForm.WARP_AHEAD;

    @Test
    void aWarpARowReducesByShufflesAloneWithoutSharedMemoryOrBarriers() {
        var p = planned(PlanOptions.RowForm.WARP, layerNorm(DType.BF16, 4096, 4096));
        assertThat(p.rows().describe()).isEqualTo("rows[warp]");
        KernelSource s = p.source();
        String code = CudaCodegenTest.code(s);
        assertThat(s.source()).contains("(row kernel: mean, mean; a warp a row, 4 warps a block, rows held in registers, 32 lanes x 16 x 8)");
        // 4096 bf16: 512 vectors of 8, 16 a lane, packed (two values a register)
        assertThat(code).contains("__launch_bounds__(128)", "gt_vec<__nv_bfloat16, 8> gt_c0[16];", "const long long r0 = ((long long) j * 32 + lane) * 8;",
                "for (long long o = (long long) blockIdx.x * warps + warp; o < total; o += (long long) gridDim.x * warps) {",
                "acc = __shfl_sync(0xffffffffu, acc, 0);", "gt_opaque(gt_c0[j]);");
        assertThat(code).doesNotContain("__shared__", "__syncthreads", "gt_part", "threadIdx.x == 0", "gt_n0");
        // a block of 4 warps takes 4 rows; the grid is at most the blocks resident at once (3 a multiprocessor here)
        assertThat(s.persistent()).isTrue();
        assertThat(s.rowsPerBlock()).isEqualTo(4);
        assertThat(s.geometry(Map.of(), 132, 3)).isEqualTo(new KernelSource.Geometry(396, 128, 0, 4096));
        assertThat(s.geometry(Map.of(), 132, 0)).isEqualTo(new KernelSource.Geometry(1024, 128, 0, 4096));
    }

    @Test
    void theBlockFormIsTodaysAndTheFormsDifferOnlyInTheirLaunch() {
        var p = planned(BLOCK, layerNorm(DType.BF16, 4096, 4096));
        assertThat(p.rows().describe()).isEqualTo("rows[block]");
        KernelSource s = p.source();
        assertThat(s.source()).isEqualTo(CudaCodegen.generate(p.kernel()).source());
        assertThat(CudaCodegenTest.code(s)).contains("__shared__ float gt_part0[32];", "__syncthreads();", "gt_vec<__nv_bfloat16, 8> gt_c0[2];")
                .doesNotContain("__shfl_sync(", "gt_opaque");
        assertThat(s.rowsPerBlock()).isEqualTo(1);
        assertThat(s.block()).isEqualTo(256);
    }

    @Test
    void aheadAWarpLoadsItsNextRowBeforeItReducesThisOne() {
        var p = planned(PlanOptions.RowForm.WARP_AHEAD, rmsNorm(DType.BF16, 32768, 1024));
        assertThat(p.rows().describe()).isEqualTo("rows[warp, ahead]");
        String code = CudaCodegenTest.code(p.source());
        assertThat(p.source().source()).contains("a warp a row, 4 warps a block, rows held in registers, 32 lanes x 4 x 8, the next row loaded while one is worked on");
        assertThat(code).contains("if ((long long) blockIdx.x * warps + warp < total) {", "gt_vec<__nv_bfloat16, 8> gt_n0[4];",
                "if (o + (long long) gridDim.x * warps < total) {", "gt_c0[j] = gt_n0[j];");
        // the next row's loads come before the first reduction's shuffles
        assertThat(code.indexOf("gt_n0[j] = *reinterpret_cast")).isLessThan(code.indexOf("__shfl_down_sync"));
    }

    @Test
    void perRowValuesAreStoredByLaneZeroAndLongRowsAreLoopedByTheLanes() {
        // a row sum stored per row; f32 4096 columns forced into a warp: 1024 vectors, over 16 a lane, looped over
        var p = planned(WARP, g -> g.output("s", g.input("x", DType.F32, 64, 4096).exp().sum(-1)));
        String code = CudaCodegenTest.code(p.source());
        assertThat(code).contains("if (lane == 0) {", "for (long long r = lane; r < count; r += 32) {").doesNotContain("__syncthreads", "gt_c0[");
        assertThat(p.source().source()).contains("a warp a row, 4 warps a block, rows looped");
        // forced ahead with 8 KB rows: two do not fit, so the plan says a warp without ahead
        var q = planned(AHEAD, softmax(DType.BF16, 64, 4096));
        assertThat(q.rows().describe()).isEqualTo("rows[warp]");
        assertThat(q.rows().why()).contains("not ahead");
    }

    /** The norms' warp-form kernels at the rule's largest rows compile for sm_90 without spilling (nvcc -Xptxas -v); skipped without nvcc. */
    @Test
    void warpFormKernelsDoNotSpill(@org.junit.jupiter.api.io.TempDir Path dir) throws Exception {
        Path nvcc = CudaCodegenFixtures.nvcc().orElse(null);
        org.junit.jupiter.api.Assumptions.assumeTrue(nvcc != null, "nvcc is not on the PATH");
        var sources = new ArrayList<KernelSource>();
        for (DType t : List.of(DType.BF16, DType.F32))
            for (long cols : t == DType.BF16 ? new long[]{1024, 2048, 4096} : new long[]{512, 1024, 2048})
                for (var f : List.of(WARP, AHEAD))
                    for (var body : List.of(layerNorm(t, 8192, cols), rmsNorm(t, 8192, cols), softmax(t, 8192, cols)))
                        sources.add(planned(f, body).source());
        var unit = CudaCodegenFixtures.batch(sources);
        Files.writeString(dir.resolve("all.cu"), unit.getKey());
        Process p = new ProcessBuilder(nvcc.toString(), "-cubin", "-arch=sm_90", "-std=c++17", "-Xptxas", "-v", "-o", "all.cubin", "all.cu")
                .directory(dir.toFile()).redirectErrorStream(true).start();
        String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(600, TimeUnit.SECONDS)).isTrue();
        assertThat(p.exitValue()).as(log).isZero();
        var spills = Pattern.compile("(\\d+) bytes spill stores").matcher(log).results().map(m -> Integer.parseInt(m.group(1))).toList();
        assertThat(spills).as(log).hasSize(sources.size()).containsOnly(0);
    }

    // ------------------------------------------------------------------ the values, emulated

    /** gt_hexp's one instruction, which a host computes with exp2 instead. */
    static final String HEX2 = "asm(\"ex2.approx.f32 %0, %1;\" : \"=f\"(r) : \"f\"(a * 1.44269504088896341f));";

    /** One emulated case: the op, its planned kernel and form, its inputs (by name), the float64 values expected. */
    record Case(String op, DType t, long rows, long cols, PlanOptions.RowForm form, Planned planned, Map<String, NDArray> inputs, double[] want) {
        @Override public String toString() { return op + " " + t + " [" + rows + ", " + cols + "] " + form + " (" + planned.rows().describe() + ")"; }
    }

    static Case emulatedCase(String op, DType t, long rows, long cols, PlanOptions.RowForm form, SplittableRandom rnd) {
        var body = switch (op) {
            case "layer_norm" -> layerNorm(t, rows, cols);
            case "rms_norm" -> rmsNorm(t, rows, cols);
            default -> softmax(t, rows, cols);
        };
        Planned p = planned(form, body);
        var in = new LinkedHashMap<String, NDArray>();
        double[] x = new double[(int) (rows * cols)], w = new double[(int) cols], b = new double[(int) cols];
        for (int i = 0; i < x.length; i++) x[i] = rnd.nextGaussian() * 2 + 0.5;
        for (int i = 0; i < cols; i++) { w[i] = rnd.nextDouble() * 2 - 1; b[i] = rnd.nextDouble() - 0.5; }
        in.put("x", NDArray.of(t, x, rows, cols));
        in.put("w", NDArray.of(t, w, cols));
        in.put("b", NDArray.of(t, b, cols));
        // float64 plain loops over the values as stored (rounded to t)
        double[] xs = in.get("x").toDoubleArray(), ws = in.get("w").toDoubleArray(), bs = in.get("b").toDoubleArray(), want = new double[xs.length];
        for (int r = 0; r < rows; r++) {
            int o = (int) (r * cols);
            switch (op) {
                case "layer_norm" -> {
                    double mean = 0, var = 0;
                    for (int c = 0; c < cols; c++) mean += xs[o + c];
                    mean /= cols;
                    for (int c = 0; c < cols; c++) var += (xs[o + c] - mean) * (xs[o + c] - mean);
                    double rstd = 1 / Math.sqrt(var / cols + 1e-5);
                    for (int c = 0; c < cols; c++) want[o + c] = (xs[o + c] - mean) * rstd * ws[c] + bs[c];
                }
                case "rms_norm" -> {
                    double ms = 0;
                    for (int c = 0; c < cols; c++) ms += xs[o + c] * xs[o + c];
                    double rstd = 1 / Math.sqrt(ms / cols + 1e-6);
                    for (int c = 0; c < cols; c++) want[o + c] = xs[o + c] * rstd * ws[c];
                }
                default -> {
                    double m = Double.NEGATIVE_INFINITY, sum = 0;
                    for (int c = 0; c < cols; c++) m = Math.max(m, xs[o + c]);
                    for (int c = 0; c < cols; c++) sum += Math.exp(xs[o + c] - m);
                    for (int c = 0; c < cols; c++) want[o + c] = Math.exp(xs[o + c] - m) / sum;
                }
            }
        }
        return new Case(op, t, rows, cols, form, p, in, want);
    }

    /**
     * LayerNorm, RMSNorm and softmax in both forms (and the warp form loading ahead) run as host C++ ({@code emulate.h}:
     * a block's threads as threads, a warp's shuffles through its own barrier) with the backend's launch geometry on 2
     * multiprocessors of one resident block (so a warp goes over several rows, and some warps over none), against float64
     * loops: f32 within float32's sums, bf16 within one bf16 step (float64's value rounded once). Rows shorter than a
     * warp's vectors, not a multiple of the vector, fewer rows than a block's warps.
     */
    @Test
    void normsAndSoftmaxInEveryFormComputeWhatFloat64Computes(@org.junit.jupiter.api.io.TempDir Path dir) throws Exception {
        Path gxx = HostCompiler.gxx();
        org.junit.jupiter.api.Assumptions.assumeTrue(gxx != null && Files.exists(KernelEmulationTest.CUDA_INCLUDE.resolve("cuda_fp16.h")), "g++ or CUDA's headers are absent");
        HostCompiler.copy(dir, "/emulation/", "emulate.h");
        var rnd = new SplittableRandom(37);
        var cases = new ArrayList<Case>();
        long[][] shapes = {{1, 8}, {3, 100}, {9, 1000}, {37, 1024}, {5, 777}, {6, 2048}};
        int n = 0;
        for (String op : List.of("layer_norm", "rms_norm", "softmax"))
            for (DType t : List.of(DType.F32, DType.BF16))
                for (var form : List.of(BLOCK, WARP, AHEAD)) {
                    long[] s = shapes[n++ % shapes.length];
                    cases.add(emulatedCase(op, t, s[0], s[1], form, rnd));
                }
        // one program for all: each kernel in its own namespace (the CudaCodegenFixtures batch), run one after another
        var sources = cases.stream().map(c -> c.planned().source()).toList();
        var unit = CudaCodegenFixtures.batch(sources);
        var main = new StringBuilder(HostCompiler.GENERATED_KERNELS_PRELUDE + """
                // the device's fast units, as host functions (within their few ulps of the exact value)
                inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
                inline float __frcp_rn(float a) { return 1.0f / a; }
                static std::vector<char> load(const std::string& name) {
                    std::ifstream f(name, std::ios::binary);
                    std::vector<char> v((std::istreambuf_iterator<char>(f)), {});
                    v.resize(v.size() + 16);
                    return v;
                }
                static void save(const std::string& name, const std::vector<char>& v) {
                    std::ofstream f(name, std::ios::binary);
                    f.write(v.data(), (std::streamsize) v.size() - 16);
                }
                """).append(unit.getKey().replace("extern \"C\" ", "").replace(HEX2, "r = std::exp2(a * 1.44269504088896341f);").replaceAll("(?m)^#include .*$", "")).append("int main() {\n");
        for (int i = 0; i < cases.size(); i++) {
            Case c = cases.get(i);
            Kernel k = c.planned().kernel();
            KernelSource src = sources.get(i);
            var g = src.geometry(Map.of(), 2, 1);
            var args = new ArrayList<String>();
            main.append("  {\n");
            for (int q = 0; q < k.inputs().size(); q++) {
                var buf = k.inputs().get(q);
                Files.write(dir.resolve("c" + i + "_in" + q + ".bin"), c.inputs().get(buf.name()).segment().toArray(ValueLayout.JAVA_BYTE));
                main.append("    auto in").append(q).append(" = load(\"c").append(i).append("_in").append(q).append(".bin\");\n");
                args.add("(const " + CudaCodegen.storageType(buf.dtype()) + "*) in" + q + ".data()");
            }
            assertThat(k.stores()).hasSize(1);
            var out = k.stores().getFirst().buffer();
            Files.write(dir.resolve("c" + i + "_out.bin"), new byte[(int) (out.shape().numel() * out.dtype().byteSize())]);
            main.append("    auto out = load(\"c").append(i).append("_out.bin\");\n");
            args.add("(" + CudaCodegen.storageType(out.dtype()) + "*) out.data()");
            main.append("    emu_launch(").append(g.grid()).append(", 1, ").append(g.block()).append(", true, [&] { b").append(i).append("::")
                    .append(unit.getValue().get(i)).append("(").append(String.join(", ", args)).append("); });\n");
            main.append("    save(\"c").append(i).append("_out.bin\", out);\n  }\n");
        }
        main.append("  return 0;\n}\n");
        Files.writeString(dir.resolve("main.cpp"), main);
        Process cc = new ProcessBuilder(gxx.toString(), "-std=c++20", "-O1", "-ffp-contract=off", "-pthread", "-I" + KernelEmulationTest.CUDA_INCLUDE, "-I" + dir,
                "main.cpp", "-o", "main").directory(dir.toFile()).redirectErrorStream(true).start();
        String log = new String(cc.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(cc.waitFor(600, TimeUnit.SECONDS)).as("g++ finished").isTrue();
        assertThat(cc.exitValue()).as(log).isZero();
        Process run = new ProcessBuilder(dir.resolve("main").toString()).directory(dir.toFile()).redirectErrorStream(true).start();
        String printed = new String(run.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(run.waitFor(300, TimeUnit.SECONDS)).as("the emulation finished").isTrue();
        assertThat(run.exitValue()).as(printed).isZero();
        for (int i = 0; i < cases.size(); i++) {
            Case c = cases.get(i);
            var got = NDArray.zeros(c.t(), c.rows(), c.cols());
            byte[] bytes = Files.readAllBytes(dir.resolve("c" + i + "_out.bin"));
            java.lang.foreign.MemorySegment.copy(java.lang.foreign.MemorySegment.ofArray(bytes), 0, got.segment(), 0, got.byteSize());
            double[] g = got.toDoubleArray();
            for (int e = 0; e < g.length; e++) {
                double w = c.want()[e];
                double tol = c.t() == DType.BF16 ? dev.gatun.runtime.host.FloatIntermediatesTest.bf16Step(w) : 1e-5 * (1 + Math.abs(w));
                assertThat(Math.abs(g[e] - w)).as("%s: element %d (row %d): %s vs %s", c, e, e / c.cols(), g[e], w).isLessThanOrEqualTo(tol);
            }
        }
    }
}
