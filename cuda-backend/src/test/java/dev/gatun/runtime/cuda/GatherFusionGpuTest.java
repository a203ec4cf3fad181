package dev.gatun.runtime.cuda;

import dev.gatun.runtime.testing.GatherShapes;
import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Gather fusion ({@code CompileOptions.gatherFusion}) on a GPU: the kernels that read an {@code index_select}'s result
 * read the table's rows through the indices ({@link GatherFusionCodegenTest} checks their source), against the reference
 * interpreter. Random table and index shapes, i32 and i64 indices, f32, bf16 and i64 tables, indices at the table's
 * first and last rows and repeated, readers that are pointwise chains, a transposed read, a row reduction, a softmax
 * along the picked rows and a sum across them. An index outside the table stops the call naming the step, the kernel
 * and the op ({@link TrapCheck} {@code gather_fused}, in a JVM of its own: a trap leaves the CUDA context unusable).
 *
 * <pre>./run-gpu-tests.sh --include-classname '.*GatherFusionGpuTest'</pre>
 */
@RequiresGpu
class GatherFusionGpuTest {

    private static CompileOptions cuda(boolean gatherFusion) {
        return CompileOptions.world(1).backend("cuda").gatherFusion(gatherFusion).roundEachOp();
    }

    @Test
    void randomGathersThroughTheirReadersMatchTheReference() {
        var rnd = new Random(37);
        var kinds = new boolean[6];
        for (int trial = 0; trial < 36; trial++) {
            DType t = List.of(DType.F32, DType.BF16, DType.I64).get(trial % 3);
            DType it = trial % 2 == 0 ? DType.I32 : DType.I64;
            int reader = (trial / 6) % 6;
            kinds[reader] = true;
            long rows = 1 + rnd.nextInt(60);
            long[] table = rnd.nextBoolean() ? new long[]{rows, 1 + rnd.nextInt(300)} : new long[]{rows, 1 + rnd.nextInt(6), 1 + rnd.nextInt(40)};
            long[] ids = rnd.nextBoolean() ? new long[]{1 + rnd.nextInt(70)} : new long[]{1 + rnd.nextInt(5), 1 + rnd.nextInt(9)};
            var g = Gatun.graph("gather_gpu_" + trial);
            Tensor y = g.input("x", t, GatherShapes.dims(table)).indexSelect(0, g.input("idx", it, GatherShapes.dims(ids)));
            long[] picked = GatherShapes.picked(ids, table);
            y = switch (reader) {
                case 0 -> y.add(1);
                case 1 -> y.mul(y).sub(3).add(g.input("b", t, GatherShapes.dims(picked)));
                case 2 -> y.transpose(0, y.rank() - 1).add(2);
                case 3 -> y.add(1).sum(y.rank() - 1);
                case 4 -> t == DType.I64 ? y.mul(2).sum(0) : y.softmax(y.rank() - 1);
                default -> y.add(1).sum(0);   // across the picked rows: the index moves along the reduction
            };
            g.output("y", y);
            check(g.build(), rnd, rows, t);
        }
        for (boolean k : kinds) assertThat(k).isTrue();
    }

    /** Random inputs (indices at the first and last rows, repeated); a session with the option against the reference. */
    private static void check(Graph g, Random rnd, long rows, DType t) {
        var in = new HashMap<String, NDArray>();
        g.inputs().forEach((name, node) -> {
            long[] shape = node.type().shape().dims().stream().mapToLong(d -> d.size()).toArray();
            int n = (int) Arrays.stream(shape).reduce(1, (a, b) -> a * b);
            if (name.equals("idx")) {
                long[] v = new long[n];
                for (int i = 0; i < n; i++) v[i] = i % 3 == 0 ? rows - 1 : i % 3 == 1 ? 0 : rnd.nextInt((int) rows);
                in.put(name, node.type().dtype() == DType.I32 ? NDArray.of(Arrays.stream(v).mapToInt(x -> (int) x).toArray(), shape) : NDArray.of(v, shape));
            } else {
                double[] v = new double[n];
                for (int i = 0; i < n; i++) v[i] = t == DType.I64 ? rnd.nextInt(9) - 4 : rnd.nextDouble() * 2 - 1;
                in.put(name, NDArray.of(node.type().dtype(), v, shape));
            }
        });
        var want = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst();
        try (var s = Session.compile(g, cuda(true))) {
            assertThat(s.plan().kernels()).as("%s", s.plan()).anyMatch(k -> k.gathers());
            assertThat(s.plan().steps()).as("%s", s.plan()).noneMatch(st -> st instanceof Step.OpCall);
            var got = s.runToHost(in);
            // a row sum may add in another order than the reference; bf16 rounds each op
            double tol = t == DType.BF16 ? 2e-2 : t == DType.F32 ? 1e-5 : 0;
            for (var e : want.entrySet())
                assertThat(e.getValue().mismatch(got.get(e.getKey()), tol, tol)).as("output %s of\n%s\n%s", e.getKey(), g, s.plan()).isNull();
        }
    }

    /** The same graph with and without the option: one launch fewer with it, the same values (pointwise: exactly). */
    @Test
    void withAndWithoutTheOptionTheValuesAgreeWithOneLaunchFewer() {
        var g = Gatun.graph("gather_add");
        g.output("y", g.input("x", DType.F32, 37, 5).indexSelect(0, g.input("idx", DType.I32, 3, 7)).mul(2).add(1));
        var graph = g.build();
        double[] ids = new double[21];
        for (int k = 0; k < ids.length; k++) ids[k] = (k * 11) % 37;
        ids[0] = 36;
        ids[1] = 0;
        ids[2] = 36;
        var in = Map.of("x", NDArray.random(DType.F32, 5, 37, 5), "idx", NDArray.of(DType.I32, ids, 3, 7));
        var want = ReferenceInterpreter.evaluate(graph, List.of(in)).getFirst().get("y");
        try (var on = Session.compile(graph, cuda(true)); var off = Session.compile(graph, cuda(false))) {
            assertThat(on.plan().kernels()).hasSize(1);
            assertThat(on.plan().steps().stream().filter(Step::isDeviceWork).count()).isEqualTo(off.plan().steps().stream().filter(Step::isDeviceWork).count() - 1);
            assertThat(want.mismatch(on.runToHost(in).get("y"), 0, 0)).isNull();
            assertThat(want.mismatch(off.runToHost(in).get("y"), 0, 0)).isNull();
        }
    }

    /** An index outside the table stops the call, naming the step, the kernel and the op, in a JVM of its own. */
    @Test
    void anIndexOutsideTheTableStopsTheCallNamingTheStepTheKernelAndTheOp() throws Exception {
        var child = ChildJvm.run(TrapCheck.class, "gather_fused", 120);
        String log = child.log();
        assertThat(log).as("the check's output").contains("gather_fused: TRAP CHECK PASSED")
                .contains("index 300 at position 1 of the indices is outside the 10 rows of the table");
        assertThat(child.exit()).as(log).isZero();
    }
}
