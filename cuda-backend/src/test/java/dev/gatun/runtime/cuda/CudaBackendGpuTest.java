package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.fail;

/** The CUDA backend against the reference interpreter, on one GPU; skipped where there is none. */
@RequiresGpu
class CudaBackendGpuTest {

    static Map<String, NDArray> inputs(Graph g, long seed) {
        var m = new LinkedHashMap<String, NDArray>();
        RandomGraphs.inputs(g, seed, 0).forEach((k, v) -> m.put(k, NDArray.of(v.dtype(), v.values(), v.shape())));
        return m;
    }

    static void assertMatches(String what, Graph g, Map<String, NDArray> want, Map<String, NDArray> got) {
        for (var e : want.entrySet()) {
            NDArray w = e.getValue(), x = got.get(e.getKey());
            double tol = w.dtype().isHalf() ? 2e-2 : w.dtype() == DType.FLOAT32 ? 1e-5 : w.dtype() == DType.FLOAT64 ? 1e-12 : 0;
            String why = w.mismatch(x, tol, tol);
            if (why != null) fail(what + " output '" + e.getKey() + "': " + why + "\n" + g);
        }
    }

    @Test
    void randomGraphsMatchTheReferenceWithAndWithoutGraphs() {
        int graphs = Integer.getInteger("gatun.gpu.graphs", 60);
        for (long seed = 0; seed < graphs; seed++) {
            // concatenations along dimension 0 only until the CUDA code generator stores at strides
            Graph g = RandomGraphs.generate(seed, RandomGraphs.Options.defaults().withWorldSize(1));
            var in = inputs(g, seed);
            var want = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst();
            for (boolean cudaGraphs : new boolean[]{false, true}) {
                try (var s = Session.compile(g, CompileOptions.world(1).backend("cuda").cudaGraphs(cudaGraphs).roundEachOp())) {
                    for (int call = 0; call < 3; call++) assertMatches("seed " + seed + " graphs " + cudaGraphs + " call " + call, g, want, s.runToHost(in));
                }
            }
        }
    }

    /**
     * The default plans (f16/bf16 values held in float inside kernels, folds) on the GPU against the host backend's
     * default plans of the same graphs: the same kernels and arithmetic but for the GPU's fast exponential and
     * reciprocal and the order of its sums (the pools may differ: the backends' allocation granularities do).
     */
    @Test
    void randomGraphsHeldInFloatMatchTheHostsSamePlans() {
        int graphs = Integer.getInteger("gatun.gpu.graphs", 60);
        for (long seed = 0; seed < graphs; seed++) {
            Graph g = RandomGraphs.generate(seed, RandomGraphs.Options.defaults().withWorldSize(1).withDTypes(DType.F32, DType.F16, DType.BF16));
            var in = inputs(g, seed);
            Map<String, NDArray> want;
            List<String> kernels;
            try (var h = Session.compile(g, CompileOptions.world(1).backend("host"))) {
                want = h.runToHost(in);
                kernels = h.plan().kernels().stream().map(k -> k.source()).toList();
            }
            try (var s = Session.compile(g, CompileOptions.world(1).backend("cuda"))) {
                assertThat(s.plan().kernels().stream().map(k -> k.source()).toList()).as("seed %d: the same kernels", seed).isEqualTo(kernels);
                for (int call = 0; call < 2; call++) {
                    var got = s.runToHost(in);
                    for (var e : want.entrySet()) {
                        NDArray w = e.getValue();
                        double tol = w.dtype().isHalf() ? 2e-2 : w.dtype() == DType.FLOAT32 ? 1e-4 : w.dtype() == DType.FLOAT64 ? 1e-12 : 0;
                        String why = w.mismatch(got.get(e.getKey()), tol, tol);
                        if (why != null) fail("seed " + seed + " call " + call + " output '" + e.getKey() + "': " + why + "\n" + g);
                    }
                }
            }
        }
    }

    @Test
    void seedsGraphReplaysAThousandTimes() {
        var g = Gatun.graph("seeds");
        var x = g.input("x", F32, 64, 64);
        g.output("d", x.add(1).allReduce(SUM).add(x.add(2).allReduce(SUM)).add(x.add(3).allReduce(SUM)).allReduce(SUM));
        try (var s = Session.compile(g.build(), CompileOptions.world(1))) {
            assertThat(s.backendName()).isEqualTo("cuda");
            assertThat(s.plan().partitions()).hasSize(1);
            for (int i = 0; i < 1000; i++) {
                float v = i % 7;
                var out = s.runToHost(Map.of("x", NDArray.full(F32, v, 64, 64))).get("d");
                assertThat(out.toFloatArray()).containsOnly(3 * v + 6);
            }
        }
    }

    @Test
    void transposedMatmulOperandsAreReadAsTheyLie() {
        for (DType t : List.of(DType.F64, DType.F32, DType.BF16))
            for (Graph g : dev.gatun.runtime.host.TransposedMatmulTest.graphs(t))
                try (var s = Session.compile(g, CompileOptions.world(1).backend("cuda"))) {
                    assertThat(s.plan().kernels()).isEmpty();
                    dev.gatun.runtime.host.TransposedMatmulTest.assertRight(s, g, t, t == DType.F32 ? 1e-4 : 1e-12);
                }
    }

    @Test
    void profileTimesEveryWorkingStepOnTheDevice() {
        var g = Gatun.graph("profiled");
        var a = g.input("a", F32, 2048, 2048);
        g.output("big", a.matmul(a).matmul(a));
        g.output("small", g.input("s", F32, 4).add(1).mul(2));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
            var in = Map.of("a", NDArray.full(F32, 0.5f, 2048, 2048), "s", NDArray.full(F32, 1, 4));
            s.runToHost(in);
            var p = s.profile(in);
            var steps = s.plan().steps();
            long working = steps.stream().filter(dev.gatun.runtime.Profile::timed).count();
            assertThat(p.entries()).hasSize((int) working);
            var slowest = p.entries().stream().max(java.util.Comparator.comparingDouble(dev.gatun.runtime.Profile.Entry::micros)).orElseThrow();
            assertThat(steps.get(slowest.step())).isInstanceOf(dev.gatun.planner.Step.Matmul.class);
            // two 2048^3 matmuls are 34 GFLOP: more than 10 µs on any GPU, and the graph-less call is still right
            assertThat(p.byKind().get("matmul")).isGreaterThan(10);
            assertThat(s.runToHost(in).get("small").toFloatArray()).containsOnly(4f);
        }
    }

    @Test
    void autoChoiceIsCudaForOneRankAndHostForSimulatedRanks() {
        var g = Gatun.graph("pick");
        g.output("y", g.input("x", F32, 4).allReduce(SUM));
        try (var one = Session.compile(g.build(), CompileOptions.world(1)); var two = Session.compile(g.build(), CompileOptions.world(2))) {
            assertThat(one.backendName()).isEqualTo("cuda");
            assertThat(two.backendName()).isEqualTo("host");
        }
    }

    @Test
    void aKernelThatFailsToCompileNamesTheLogAndSavesTheSource() throws Exception {
        var bad = UserOp.builder("broken")
                .input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .cuda("broken", "extern \"C\" __global__ void broken(const float* x, float* y, long long n) { this is not C; }")
                .build();
        var g = Gatun.graph("bad").register(bad);
        g.output("y", g.call1("broken", g.input("x", F32, 8)));
        assertThatThrownBy(() -> Session.compile(g.build(), CompileOptions.world(1).backend("cuda")))
                .isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("'broken'").hasMessageContaining("failed to compile").hasMessageContaining("error")
                .satisfies(e -> {
                    var m = Pattern.compile("source saved to (\\S+\\.cu)").matcher(e.getMessage());
                    assertThat(m.find()).isTrue();
                    assertThat(Files.readString(Path.of(m.group(1)))).contains("this is not C");
                });
    }

    @Test
    void outOfMemoryNamesTheBytesAskedAndFree() {
        var g = Gatun.graph("huge");
        g.output("y", g.input("x", F32, 1L << 40).add(1));   // a 4 TiB input
        assertThatThrownBy(() -> Session.compile(g.build(), CompileOptions.world(1).backend("cuda")))
                .isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("4398046511104 bytes").hasMessageContaining("bytes free");
        // the device is still usable afterwards
        var ok = Gatun.graph("ok");
        ok.output("y", ok.input("x", F32, 4).mul(2));
        try (var s = Session.compile(ok.build(), CompileOptions.world(1).backend("cuda"))) {
            assertThat(s.runToHost(Map.of("x", NDArray.full(F32, 3, 4))).get("y").toFloatArray()).containsOnly(6f);
        }
    }

    @Test
    void userOpRunsItsCudaKernel() {
        var op = UserOp.builder("axpb")
                .input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .cuda("axpb", """
                        extern "C" __global__ void axpb(const float* x, float* y, long long n) {
                            long long i = blockIdx.x * (long long) blockDim.x + threadIdx.x;
                            if (i < n) y[i] = 2.0f * x[i] + 1.0f;
                        }""")
                .blockSize(128)
                .build();
        var g = Gatun.graph("user").register(op);
        g.output("y", g.call1("axpb", g.input("x", F32, 1000).add(1)));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
            assertThat(s.runToHost(Map.of("x", NDArray.full(F32, 1, 1000))).get("y").toFloatArray()).containsOnly(5f);
        }
    }
}
