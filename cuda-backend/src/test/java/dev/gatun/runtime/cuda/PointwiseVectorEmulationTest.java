package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;

import java.util.List;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Pointwise kernels whose loads read slices of wider rows (a SwiGLU's two halves of one product's output, a block of
 * columns of a wider buffer beside a contiguous input and a broadcast row): where the innermost extent and the other
 * strides are whole 16-byte vectors the generated kernel takes them in vectors (its source says so), else it keeps the
 * element loop; either way its output, run as host C++ ({@link GatherKernelEmulationTest#emulate}, a block's threads
 * as threads), is the reference interpreter's, bit for bit in float32 and within one rounding in bfloat16.
 */
class PointwiseVectorEmulationTest {
    @TempDir static Path dir;

    @BeforeAll
    static void find() throws Exception {
        GatherKernelEmulationTest.dir = dir;
        GatherKernelEmulationTest.find();
    }

    /** silu(x[:, :h]) * x[:, h:] over x [rows, 2h]. */
    static Graph swiglu(DType t, long rows, long h) {
        var g = Gatun.graph("swiglu_" + t + "_" + rows + "x" + h);
        Tensor x = g.input("x", t, rows, 2 * h);
        g.output("y", x.slice(1, 0, h).silu().mul(x.slice(1, h, 2 * h)));
        return g.build();
    }

    /** x[:, from:from + w] * 2 + b + c[0] over x [rows, wide], b [rows, w] contiguous, c [1, w] broadcast over the rows. */
    static Graph columns(DType t, long rows, long wide, long from, long w) {
        var g = Gatun.graph("columns_" + t + "_" + rows + "x" + wide + "_" + from + "_" + w);
        Tensor x = g.input("x", t, rows, wide), b = g.input("b", t, rows, w), c = g.input("c", t, 1, w);
        g.output("y", x.slice(1, from, from + w).mul(2).add(b).add(c));
        return g.build();
    }

    static Kernel kernel(Graph g) {
        Plan p = Planner.plan(Lowering.lower(g, LoweringOptions.world(1)), PlanOptions.DEFAULT);
        var launches = p.steps().stream().filter(Step::isDeviceWork).toList();
        assertThat(launches).as("%s", p).hasSize(1);
        return ((Step.Launch) launches.getFirst()).kernel();
    }

    static void check(Graph g, boolean vectors, double tol, Random rnd) throws Exception {
        Kernel k = kernel(g);
        String source = CudaCodegen.generate(k).source();
        assertThat(source.contains("16-byte vectors")).as("%s: the vector path\n%s", g.name(), source).isEqualTo(vectors);
        var in = GatherKernelEmulationTest.inputs(g, rnd, 1, -1);
        var r = GatherKernelEmulationTest.emulate(k, in, 0x7F);
        NDArray want = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst().get("y");
        NDArray got = GatherKernelEmulationTest.array(want.dtype(), r.output(), want.shape());
        assertThat(want.mismatch(got, tol, tol)).as("%s\n%s", g.name(), source).isNull();
    }

    @Test
    void slicesOfWiderRowsAreReadInVectorsWhereTheyStayInsideARow() throws Exception {
        var rnd = new Random(5);
        check(swiglu(DType.BF16, 7, 64), true, 1e-2, rnd);          // 8 bf16 a vector; h = 64: 8 vectors a half-row
        check(swiglu(DType.F32, 5, 12), true, 1e-6, rnd);           // 4 f32 a vector; h = 12
        check(columns(DType.F32, 6, 40, 8, 16), true, 1e-6, rnd);   // columns 8..23 of 40; c's one row (stride 0 over the rows) in vectors too
        check(columns(DType.BF16, 3, 48, 16, 24), true, 1e-2, rnd); // 16 + 48 i: whole vectors of 8
    }

    @Test
    void rowsOrSlicesThatSplitAVectorKeepTheElementLoop() throws Exception {
        var rnd = new Random(6);
        check(swiglu(DType.BF16, 4, 20), false, 1e-2, rnd);         // h = 20: a vector of 8 would cross the half-row
        check(swiglu(DType.F32, 3, 6), false, 1e-6, rnd);           // h = 6 f32: rows of 12, not whole vectors of 4
        check(columns(DType.F32, 5, 42, 8, 16), false, 1e-6, rnd);  // a row stride of 42: not a whole number of vectors
    }

    @Test
    void aMisalignedStartFallsBackToTheElementLoopAndIsStillRight() throws Exception {
        // columns 4..19 of rows of 40 f32: the row stride is whole vectors, the start (4 floats) is checked in the kernel
        // (16-byte aligned: 16 bytes, so aligned) and 2..17 is not (8 bytes): that run takes the element loop
        var rnd = new Random(7);
        check(columns(DType.F32, 4, 40, 4, 16), true, 1e-6, rnd);
        check(columns(DType.F32, 4, 40, 2, 16), true, 1e-6, rnd);
    }
}
