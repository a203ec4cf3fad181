package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.DType;
import dev.gatun.ir.lower.Lowering;
import dev.gatun.ir.lower.LoweringOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.kernel.Kernel;
import org.junit.jupiter.api.Test;

import java.util.Map;
import java.util.function.Consumer;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/** The CUDA source of row kernels as the planner makes them: the row held in registers, phases, stores. */
class RowCodegenTest {

    static Kernel kernel(Consumer<GraphBuilder> body) {
        var g = Gatun.graph("row");
        body.accept(g);
        var plan = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)));
        assertThat(plan.kernels()).as(plan.toString()).hasSize(1);
        return plan.kernels().getFirst();
    }

    static Kernel layerNorm(DType t, long rows, long cols) {
        return kernel(g -> {
            var x = g.input("x", t, rows, cols);
            var d = x.sub(x.mean(true, -1));
            g.output("y", d.mul(d.mul(d).mean(true, -1).add(1e-5).rsqrt()).mul(g.input("w", t, cols)).add(g.input("b", t, cols)));
        });
    }

    static int count(String text, String what) { return (int) Pattern.compile(Pattern.quote(what)).matcher(text).results().count(); }

    @Test
    void aLayerNormRowIsReadFromMemoryOnceWithVectors() {
        var s = CudaCodegen.generate(layerNorm(DType.F32, 4096, 4096));
        String code = CudaCodegenTest.code(s);
        // 4096 floats: 256 threads, each 4 vectors of 4
        assertThat(s.block()).isEqualTo(256);
        assertThat(s.geometry(Map.of(), 132)).isEqualTo(new KernelSource.Geometry(4096, 256, 0, 4096));
        assertThat(code).contains("__launch_bounds__(256)", "float gt_c0[16];", "gt_vec<float, 4>", "gt_rd0", "gt_rd1");
        // x is read from memory in the one loading loop (vector and misaligned fallback), never in a phase
        assertThat(count(code, "in0 + 4096 * i0 + r0")).isEqualTo(2);
        assertThat(code).doesNotContain("in0[");
        // the output goes out as vectors where aligned
        assertThat(code).contains("*reinterpret_cast<gt_vec<float, 4>*>(out0 + o * count + r0) = gt_y0;");
    }

    @Test
    void bf16RowsUseEightElementVectorsAndSmallBlocks() {
        var s = CudaCodegen.generate(layerNorm(DType.BF16, 32768, 1024));
        assertThat(s.block()).isEqualTo(32);
        assertThat(CudaCodegenTest.code(s)).contains("gt_vec<__nv_bfloat16, 8>", "__nv_bfloat16 gt_c0[32];");
    }

    @Test
    void symbolicOrVeryLongRowsAreLooped() {
        var s = CudaCodegen.generate(kernel(g -> {
            var x = g.input("x", DType.F32, "n", 100_000);
            var e = x.sub(x.max(true, -1)).exp();
            g.output("y", e.div(e.sum(true, -1)));
        }));
        assertThat(s.block()).isZero();
        assertThat(CudaCodegenTest.code(s)).contains("for (long long r = threadIdx.x; r < count; r += blockDim.x)").doesNotContain("gt_c0");
        assertThat(s.geometry(Map.of("n", 3L), 132).block()).isEqualTo(KernelSource.MAX_REDUCTION_BLOCK);
    }

    @Test
    void perRowValuesAreStoredByOneThreadAfterThePhases() {
        var s = CudaCodegen.generate(kernel(g -> {
            var x = g.input("x", DType.F32, 8, 64);
            g.output("s", x.sum(-1));
            g.output("m", x.max(-1));
        }));
        String code = CudaCodegenTest.code(s);
        assertThat(code).contains("if (threadIdx.x == 0) {", "out0[o] = ", "out1[o] = ");
    }

    @Test
    void aReorderedCopyStoresThroughStrides() {
        var s = CudaCodegen.generate(kernel(g -> g.output("y", g.input("x", DType.F32, 6, 10).add(1).t().copy())));
        assertThat(s.vectorWidth()).isEqualTo(1);
        assertThat(CudaCodegenTest.code(s)).contains("out0[i0 + 6 * i1] = ");
    }
}
