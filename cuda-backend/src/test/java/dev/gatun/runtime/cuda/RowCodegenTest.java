package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.kernel.Kernel;
import org.junit.jupiter.api.Test;

import java.util.Map;
import java.util.function.Consumer;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;

/** The CUDA source of row kernels as the planner makes them: the row held in registers, phases, stores. */
class RowCodegenTest {

    static dev.gatun.ir.graph.Graph graph(Consumer<GraphBuilder> body) {
        var g = Gatun.graph("g");
        body.accept(g);
        return g.build();
    }

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
        assertThat(code).contains("__launch_bounds__(256)", "gt_vec<float, 4> gt_c0[4];", "gt_vec<float, 4>", "gt_part0", "gt_part1");
        // x is read from memory in the one loading loop (vector and misaligned fallback), never in a phase
        assertThat(count(code, "in0 + 4096 * i0 + r0")).isEqualTo(2);
        assertThat(code).doesNotContain("in0[");
        // the output goes out as vectors where aligned
        assertThat(code).contains("*reinterpret_cast<gt_vec<float, 4>*>(out0 + o * count + r0) = gt_y0;");
    }

    @Test
    void bf16RowsUseEightElementVectorsAndSmallBlocks() {
        // 1024 bf16: 128 vectors of 8, 2 a thread (16 elements, as many as a float row's thread holds): 64 threads
        var s = CudaCodegen.generate(layerNorm(DType.BF16, 32768, 1024));
        assertThat(s.block()).isEqualTo(64);
        assertThat(CudaCodegenTest.code(s)).contains("gt_vec<__nv_bfloat16, 8> gt_c0[2];", "gt_c0[j].e[l]");
    }

    /**
     * A short row held as vectors with no value kept for a later phase (RMSNorm over 1024 bf16: 2 KB) is loaded ahead:
     * the block loops over its rows, the next row's vectors come in while this one is reduced, and the grid is the
     * blocks resident at once. A longer row (f32: 4 KB) and a row with a kept value (softmax's exponentials) are not.
     */
    @Test
    void shortRowsAreLoadedAheadByAGridOfResidentBlocks() {
        var rms = CudaCodegen.generate(kernel(g -> {
            var x = g.input("x", DType.BF16, 32768, 1024);
            g.output("y", x.mul(x.mul(x).mean(true, -1).add(1e-6).rsqrt()).mul(g.input("w", DType.BF16, 1024)));
        }));
        String code = CudaCodegenTest.code(rms);
        assertThat(rms.persistent()).isTrue();
        assertThat(code).contains("gt_vec<__nv_bfloat16, 8> gt_n0[2];", "if (o + gridDim.x < total) {", "gt_c0[j] = gt_n0[j];");
        // x is read from memory twice in the source: the block's first row, then each next one
        assertThat(count(code, "*reinterpret_cast<const gt_vec<__nv_bfloat16, 8>*>(in0 + 1024 * i0 + r0)")).isEqualTo(2);
        assertThat(rms.geometry(Map.of(), 132, 0).grid()).isEqualTo(32768);
        assertThat(rms.geometry(Map.of(), 132, 12).grid()).isEqualTo(132 * 12);
        assertThat(rms.geometry(Map.of(), 132, 1000).grid()).isEqualTo(32768);
        var f32 = CudaCodegen.generate(kernel(g -> {
            var x = g.input("x", DType.F32, 32768, 1024);
            g.output("y", x.mul(x.mul(x).mean(true, -1).add(1e-6).rsqrt()));
        }));
        assertThat(f32.persistent()).isFalse();
        assertThat(f32.geometry(Map.of(), 132, 12).grid()).isEqualTo(32768);
        var softmax = CudaCodegen.generate(kernel(g -> {
            var x = g.input("x", DType.BF16, 32768, 1024);
            var e = x.sub(x.max(true, -1)).exp();
            g.output("y", e.div(e.sum(true, -1)));
        }));
        assertThat(softmax.persistent()).isFalse();
        assertThat(CudaCodegenTest.code(softmax)).doesNotContain("gt_n0");
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

    /** The loop-ordering seed's row kernel: the sum and the transposed z of 32 rows per block, z written through a tile. */
    @Test
    void aTransposedStoreGoesThroughASharedTileOfWholeSectors() {
        var plan = Planner.plan(Lowering.lower(NormWorkloads.loopOrder(DType.F32, 4096, 4096), LoweringOptions.world(1)));
        var s = CudaCodegen.generate(plan.kernels().getFirst());
        String code = CudaCodegenTest.code(s);
        assertThat(s.block()).isEqualTo(256);
        // 4096 rows of f32, 8 to a block (a column of the tile is 32 bytes): 512 blocks
        assertThat(s.geometry(Map.of(), 132)).isEqualTo(new KernelSource.Geometry(512, 256, 0, 4096));
        // rows 4 words apart modulo the 32 banks: a warp reads 8 rows of 4 columns from 32 banks
        assertThat(code).contains("__shared__ float gt_tile1[8][260];", "gt_tile1[warp + 8 * m][e * 32 + lane] = t2;",
                "const long long r = c0 + warp * 4 + lane / 8 + 32 * m, o = o0 + lane % 8;",
                "out1[i0 + 4096 * i1] = gt_tile1[lane % 8][warp * 4 + lane / 8 + 32 * m];");
        // x is read into registers before any element is used (t0 and t1 read the same element): the first pass
        // before the loop, each next one while the tile goes out; the row sum is finished by shuffles
        assertThat(count(code, "in0[")).isEqualTo(2);
        assertThat(code).contains("const long long r = c0 + 256 + e * 32 + lane;");
        assertThat(code).contains("gt_x0[m][e] = in0[4096 * i0 + r];", "const float t0 = gt_x0[m][e];", "__shfl_down_sync").doesNotContain("gt_part");
        // bf16: 16 rows a block (32 bytes a column); rows not a multiple of 16: the geometry rounds up and the kernel
        // guards the last tile
        var odd = CudaCodegen.generate(Planner.plan(Lowering.lower(NormWorkloads.loopOrder(DType.BF16, 33, 1000), LoweringOptions.world(1))).kernels().getFirst());
        assertThat(odd.geometry(Map.of(), 132).grid()).isEqualTo(3);
        assertThat(CudaCodegenTest.code(odd)).contains("__shared__ __nv_bfloat16 gt_tile1[16][260];", "if (r < count && o < total) {",
                "gt_tile1[lane % 16][warp * 2 + lane / 16 + 16 * m]");
    }

    @Test
    void aRowKernelThatReadsItsReductionBeforeATransposedStoreKeepsOneRowPerBlock() {
        // the element store needs the row's max first: two passes over the row would be needed, so no tile
        var s = CudaCodegen.generate(kernel(g -> {
            var x = g.input("x", DType.F32, 64, 64);
            g.output("y", x.sub(x.max(true, -1)).t().copy());
        }));
        assertThat(CudaCodegenTest.code(s)).doesNotContain("gt_tile");
    }

    /** Weights shared by every row come in as vectors; exp and division rounded to bf16 at once take the fast forms. */
    @Test
    void bf16RowsReadWeightsAsVectorsAndUseFastFormsWhereRoundingHidesThem() {
        String ln = CudaCodegenTest.code(CudaCodegen.generate(layerNorm(DType.BF16, 4096, 4096)));
        assertThat(ln).contains("gt_w0 = *reinterpret_cast<const gt_vec<__nv_bfloat16, 8>*>(in1 + 0 + r0);", "gt_w0.e[l]", "gt_w1.e[l]")
                .doesNotContain("in1[0 + r]");
        var softmax = kernel(g -> {
            var x = g.input("x", DType.BF16, 64, 1024);
            var e = x.sub(x.max(true, -1)).exp();
            g.output("y", e.div(e.sum(true, -1)));
        });
        // by default the kernel holds its bf16 intermediates in float: fast forms, no rounding between ops, a float kept row
        String sm = CudaCodegenTest.code(CudaCodegen.generate(softmax));
        assertThat(sm).contains("gt_hexp(t1)", "gt_hdiv(t2, rd1)", "gt_vec<float, 8> gt_k2[2];", "max.NaN.f32").doesNotContain("gt_bf16(");
        // rounding each op: every result goes through bf16, and the kept row is held as bf16 (exactly representable)
        String rounded = CudaCodegenTest.code(CudaCodegen.generate(softmax.withRoundEachOp()));
        assertThat(rounded).contains("gt_bf16(gt_hexp(t1))", "gt_bf16(gt_hdiv(t2, rd1))", "gt_vec<__nv_bfloat16, 8> gt_k2[2];", "max.NaN.f32");

        // a 4096-column bf16 row with the exponentials kept in float beside it asks for 5 blocks a multiprocessor; a
        // layer norm keeps nothing and is left to the compiler
        String wide = CudaCodegenTest.code(CudaCodegen.generate(kernel(g -> {
            var x = g.input("x", DType.BF16, 8, 4096);
            var e = x.sub(x.max(true, -1)).exp();
            g.output("y", e.div(e.sum(true, -1)));
        })));
        assertThat(wide).contains("__launch_bounds__(256, 5)");
        assertThat(ln).contains("__launch_bounds__(256)");
        // held in float, a quotient that is cast to an integer or compared comes from the exact division: 41 * rcp(41)
        // is a float ulp below 1 and would truncate to 0
        var cast = Planner.plan(Lowering.lower(graph(g -> {
            var a = g.input("a", DType.BF16, 4);
            var q = a.div(g.input("b", DType.BF16, 4));
            g.output("i", q.cast(DType.I32));
            g.output("e", q.eq(1));
        }), LoweringOptions.world(1)));
        for (var k : cast.kernels()) assertThat(CudaCodegenTest.code(CudaCodegen.generate(k))).doesNotContain("gt_hdiv").contains(" / ");
        // f32 keeps the exact forms
        String f32 = CudaCodegenTest.code(CudaCodegen.generate(kernel(g -> {
            var x = g.input("x", DType.F32, 64, 1024);
            var e = x.sub(x.max(true, -1)).exp();
            g.output("y", e.div(e.sum(true, -1)));
        })));
        assertThat(f32).contains("expf(t1)", "t2 / rd1").doesNotContain("gt_hexp", "gt_hdiv");
    }
}
