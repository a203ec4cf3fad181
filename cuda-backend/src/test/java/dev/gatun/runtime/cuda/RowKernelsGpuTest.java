package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import dev.gatun.runtime.testing.RowPrograms;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Row kernels (softmax, norms, sibling reductions, reordered loops, size-1 dimensions, NaN) generated for the GPU,
 * against the reference interpreter: the small shapes of the host's test and rows long enough for every path of the
 * generated code (held on chip, looped, not a multiple of the vector width).
 */
@RequiresGpu
class RowKernelsGpuTest {

    static void check(List<RowPrograms.Case> cases) { check(cases, CompileOptions.world(1).backend("cuda").roundEachOp()); }

    static void check(List<RowPrograms.Case> cases, CompileOptions options) {
        for (var c : cases) {
            var want = ReferenceInterpreter.evaluate(c.graph(), List.of(c.inputs())).getFirst();
            try (var s = Session.compile(c.graph(), options)) {
                for (int call = 0; call < 2; call++) CudaBackendGpuTest.assertMatches(c + " call " + call, c.graph(), want, s.runToHost(c.inputs()));
            }
        }
    }

    @Test
    void smallRowProgramsMatchTheReference() {
        check(RowPrograms.cases(11, 88, List.of(DType.F32, DType.BF16, DType.F16, DType.F64)));
    }

    @Test
    void longRowsMatchTheReference() {
        long[][] shapes = {{64, 4096}, {33, 1000}, {3, 20000}, {130, 1024}, {8, 1, 2048}, {2, 65536}};
        check(RowPrograms.cases(12, 33, List.of(DType.F32, DType.BF16), shapes));
    }

    /**
     * Short rows held as vectors (at most 2 KB), many more than the blocks resident at once: each block loops over its
     * rows and loads the next while it works on one; odd row counts leave some blocks a row more than others.
     */
    @Test
    void rowsLoadedAheadMatchTheReference() {
        long[][] shapes = {{20_003, 1024}, {50_001, 128}, {4_099, 512}};
        check(RowPrograms.cases(14, 16, List.of(DType.F32, DType.BF16), shapes));
    }

    /**
     * Every row kernel forced into each form (a block a row, a warp a row, a warp a row loading ahead; {@code
     * PlanOptions.RowForm}): the small programs and long rows (held in registers, looped, not a multiple of the vector,
     * fewer rows than a block's warps, many more rows than the warps resident at once).
     */
    @Test
    void everyRowFormMatchesTheReference() {
        long[][] shapes = {{64, 4096}, {33, 1000}, {3, 2048}, {130, 1024}, {8, 1, 2048}, {20_003, 1024}, {4_099, 512}, {2, 20000}};
        for (var form : List.of(dev.gatun.planner.PlanOptions.RowForm.BLOCK, dev.gatun.planner.PlanOptions.RowForm.WARP,
                dev.gatun.planner.PlanOptions.RowForm.WARP_AHEAD)) {
            var o = CompileOptions.world(1).backend("cuda").roundEachOp();
            o = o.planning(o.planning().withRowForm(form));
            check(RowPrograms.cases(15, 22, List.of(DType.F32, DType.BF16, DType.F16, DType.F64)), o);
            check(RowPrograms.cases(16, 16, List.of(DType.F32, DType.BF16), shapes), o);
        }
    }

    /** The bf16 norms and softmax of issue 37's cells in the warp form (held in float): within one bf16 step of float64. */
    @Test
    void bf16NormsInAWarpARowAreWithinOneStepOfFloat64() {
        for (var form : List.of(dev.gatun.planner.PlanOptions.RowForm.WARP, dev.gatun.planner.PlanOptions.RowForm.WARP_AHEAD)) {
            var o = CompileOptions.world(1).backend("cuda");
            o = o.planning(o.planning().withRowForm(form));
            for (int[] shape : new int[][]{{8, 96}, {4096, 4096}, {32768, 1024}, {300, 1000}})
                dev.gatun.runtime.host.FloatIntermediatesTest.bf16NormsWithinOneStep(o, shape[0], shape[1]);
        }
    }

    /** Transposing row kernels (32 rows per block through a shared tile): partial tiles of rows and of elements, every dtype. */
    @Test
    void transposedStoresMatchTheReference() {
        long[][] shapes = {{33, 1000}, {130, 257}, {64, 4096}, {1, 300}, {2, 3, 40}, {32, 256}};
        check(RowPrograms.cases(13, List.of("loop_order"), List.of(DType.F32, DType.BF16, DType.F16, DType.F64), shapes));
    }

    /** Held in float (the default), bf16 norms on the GPU are their float64 values rounded once: within one bf16 step. */
    @Test
    void bf16NormsHeldInFloatAreWithinOneStepOfFloat64() {
        for (int[] shape : new int[][]{{8, 96}, {64, 4096}, {300, 1000}})
            dev.gatun.runtime.host.FloatIntermediatesTest.bf16NormsWithinOneStep(CompileOptions.world(1).backend("cuda"), shape[0], shape[1]);
    }

    /**
     * A bf16 softmax held in float (fast exponential, kept row, reciprocal division) on rows with -inf (all, half, all
     * but one), +inf and NaN: as float64 gives them, NaN where it gives NaN, else within one bf16 step.
     */
    @Test
    void bf16SoftmaxHeldInFloatOnInfinitiesAndNaN() {
        int rows = 7, cols = 4096;
        var g = dev.gatun.dsl.Gatun.graph("softmax");
        var x = g.input("x", DType.BF16, rows, cols);
        var e = x.sub(x.max(true, -1)).exp();
        g.output("y", e.div(e.sum(true, -1)));
        var graph = g.build();
        double[] v = dev.gatun.runtime.NDArray.randn(DType.BF16, 77, rows, cols).toDoubleArray();
        double inf = Double.POSITIVE_INFINITY;
        for (int c = 0; c < cols; c++) {
            v[cols + c] = -inf;                          // row 1: all -inf
            if (c < cols / 2) v[4 * cols + c] = -inf;    // row 4: a half of -inf (whole threads of it)
            v[5 * cols + c] = c == 1234 ? 3.0 : -inf;    // row 5: one finite element
        }
        v[2 * cols + 99] = Double.NaN;                   // row 2: one NaN
        v[3 * cols + 4000] = inf;                        // row 3: one +inf
        var in = dev.gatun.runtime.NDArray.of(DType.BF16, v, rows, cols);
        double[] xs = in.toDoubleArray(), want = new double[xs.length];
        for (int r = 0; r < rows; r++) {
            double m = Double.NEGATIVE_INFINITY, sum = 0;
            for (int c = 0; c < cols; c++) m = Double.isNaN(m) || Double.isNaN(xs[r * cols + c]) ? Double.NaN : Math.max(m, xs[r * cols + c]);
            for (int c = 0; c < cols; c++) sum += Math.exp(xs[r * cols + c] - m);
            for (int c = 0; c < cols; c++) want[r * cols + c] = Math.exp(xs[r * cols + c] - m) / sum;
        }
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("cuda"))) {
            assertThat(s.plan().kernels()).hasSize(1).allMatch(k -> k.floatIntermediates());
            float[] got = s.runToHost(java.util.Map.of("x", in)).get("y").toFloatArray();
            for (int i = 0; i < got.length; i++) {
                if (Double.isNaN(want[i])) assertThat(got[i]).as("element %d (row %d)", i, i / cols).isNaN();
                else assertThat((double) Math.abs(got[i] - (float) want[i])).as("element %d (row %d): %s vs %s", i, i / cols, got[i], want[i])
                        .isLessThanOrEqualTo(dev.gatun.runtime.host.FloatIntermediatesTest.bf16Step(want[i]));
            }
        }
    }

    /** Folds of per-row results by the last block to finish, over three calls each, eager and replayed (the counter resets). */
    @Test
    void foldsOfRowResultsWithAndWithoutGraphs() {
        for (boolean graphs : new boolean[]{false, true})
            dev.gatun.runtime.host.GridFoldTest.foldsAreRight(CompileOptions.world(1).backend("cuda").cudaGraphs(graphs));
    }
}
