package dev.gatun.runtime.host;

import dev.gatun.runtime.testing.GatherShapes;
import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.data.Offset.offset;

/**
 * Fusion across a gather ({@code PlanOptions.withGatherFusion}, on here): the kernels that read an {@code index_select}'s
 * result read the table's rows through the indices. Random tables, index shapes (repeated, first and last rows), index
 * types and readers (pointwise chains, a transposed read, a row reduction, a shifted read across rows) against the reference interpreter; one case
 * against plain loops; an index outside the table fails the launch naming the kernel and the op, as the op itself does.
 */
class GatherThroughPointwiseTest {

    private static CompileOptions gathering() {
        return CompileOptions.world(1).backend("host").gatherFusion(true);
    }

    /** {@code x[idx] * 2 + 1} against plain loops, with the table's first and last rows and a repeated index. */
    @Test
    void aGatherThenPointwiseOpsMatchesPlainLoops() {
        int rows = 7, cols = 5;
        long[] idx = {6, 0, 3, 3, 6, 1};
        var g = Gatun.graph("gather_loops");
        g.output("y", g.input("x", DType.F64, rows, cols).indexSelect(0, g.input("idx", DType.I64, idx.length)).mul(2).add(1));
        double[] x = new double[rows * cols];
        for (int i = 0; i < x.length; i++) x[i] = Math.sin(i);
        try (var s = Session.compile(g.build(), gathering())) {
            assertThat(s.plan().kernels()).as(s.plan().toString()).hasSize(1);
            assertThat(s.plan().steps()).noneMatch(st -> st instanceof Step.OpCall);
            double[] y = s.runToHost(Map.of("x", NDArray.of(x, rows, cols), "idx", NDArray.of(idx, idx.length))).get("y").toDoubleArray();
            for (int i = 0; i < idx.length; i++)
                for (int j = 0; j < cols; j++) assertThat(y[i * cols + j]).isCloseTo(x[(int) idx[i] * cols + j] * 2 + 1, offset(1e-12));
        }
    }

    /** An index outside the table fails the launch, naming the kernel, the fused op, the index, its position and the rows. */
    @Test
    void anIndexOutsideTheTableFailsNamingTheKernelAndTheOp() {
        for (DType it : List.of(DType.I32, DType.I64))
            for (long bad : new long[]{4, -1}) {
                var g = Gatun.graph("gather_bad");
                g.output("y", g.input("x", DType.F32, 4, 3).indexSelect(0, g.input("idx", it, 5)).add(1));
                long[] ids = {0, 1, 3, bad, 2};
                NDArray idx = it == DType.I32 ? NDArray.of(new int[]{0, 1, 3, (int) bad, 2}, 5) : NDArray.of(ids, 5);
                try (var s = Session.compile(g.build(), gathering())) {
                    String kernel = s.plan().kernels().getFirst().name();
                    assertThat(s.plan().kernels().getFirst().gathers()).isTrue();
                    assertThatThrownBy(() -> s.runToHost(Map.of("x", NDArray.zeros(DType.F32, 4, 3), "idx", idx)))
                            .isInstanceOf(GatunRuntimeException.class)
                            .hasMessageContaining(kernel).hasMessageContaining("index_select(")
                            .hasMessageContaining("index " + bad + " at position 3 of the indices is outside the 4 rows of the table (valid: 0 to 3)");
                }
            }
    }

    @Property(tries = 120)
    void randomGathersThroughTheirReadersMatchTheReference(
            @ForAll @IntRange(min = 1, max = 3) int tableRank, @ForAll @IntRange(min = 1, max = 2) int idsRank,
            @ForAll boolean i32, @ForAll @IntRange(min = 0, max = 3) int typePick, @ForAll @IntRange(min = 0, max = 100_000) int seed) {
        var rnd = new Random(seed);
        DType t = List.of(DType.F64, DType.F32, DType.BF16, DType.I64).get(typePick);
        DType it = i32 ? DType.I32 : DType.I64;
        long[] table = new long[tableRank], ids = new long[idsRank];
        for (int d = 0; d < tableRank; d++) table[d] = 1 + rnd.nextInt(5);
        for (int d = 0; d < idsRank; d++) ids[d] = 1 + rnd.nextInt(4);
        var g = Gatun.graph("gather_random");
        Tensor y = g.input("x", t, GatherShapes.dims(table)).indexSelect(0, g.input("idx", it, GatherShapes.dims(ids)));
        int reader = rnd.nextInt(5);
        long picked = java.util.Arrays.stream(GatherShapes.picked(ids, table)).reduce(1, (a, b) -> a * b);
        y = switch (reader) {
            case 0 -> y.add(1);
            case 1 -> y.mul(y).sub(3).add(g.input("b", t, GatherShapes.dims(GatherShapes.picked(ids, table))));
            case 2 -> y.rank() >= 2 ? y.transpose(0, y.rank() - 1).add(2) : y.add(2);
            case 3 -> y.add(1).sum(y.rank() - 1);
            default -> y.reshape(picked).slice(0, picked > 1 ? 1 : 0, picked, 1 + rnd.nextInt(2)).add(1);   // a read across rows
        };
        g.output("y", y);
        check(g.build(), rnd, table[0], reader < 3);
    }

    /** Random inputs (indices anywhere in the table, repeated); the host backend with the option against the reference. */
    private static void check(Graph g, Random rnd, long rows, boolean pointwise) {
        var in = new HashMap<String, NDArray>();
        g.inputs().forEach((name, node) -> {
            long[] shape = node.type().shape().dims().stream().mapToLong(d -> d.size()).toArray();
            int n = (int) java.util.Arrays.stream(shape).reduce(1, (a, b) -> a * b);
            DType t = node.type().dtype();
            if (name.equals("idx")) {
                long[] v = new long[n];
                for (int i = 0; i < n; i++) v[i] = i % 3 == 0 ? rows - 1 : rnd.nextInt((int) rows);
                in.put(name, t == DType.I32 ? NDArray.of(java.util.Arrays.stream(v).mapToInt(x -> (int) x).toArray(), shape) : NDArray.of(v, shape));
            } else {
                double[] v = new double[n];
                for (int i = 0; i < n; i++) v[i] = t == DType.I64 ? rnd.nextInt(9) - 4 : rnd.nextDouble() * 2 - 1;
                in.put(name, NDArray.of(t, v, shape));
            }
        });
        var want = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst();
        try (var s = Session.compile(g, gathering().roundEachOp())) {
            Plan p = s.plan();
            if (pointwise) assertThat(p.steps()).as("%s", p).noneMatch(st -> st instanceof Step.OpCall);
            var got = s.runToHost(in);
            DType t = g.inputs().get("x").type().dtype();
            double tol = t == DType.BF16 ? 1e-2 : t == DType.F32 ? 1e-6 : 1e-12;   // a row sum may add in another order
            for (var e : want.entrySet())
                assertThat(e.getValue().mismatch(got.get(e.getKey()), tol, tol)).as("output %s of\n%s\n%s", e.getKey(), g, p).isNull();
        }
    }
}
