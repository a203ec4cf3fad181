package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

/**
 * A reduction of many elements into a few outputs (a gradient's squared norm) is lowered as a row kernel over its last
 * reduced dimension whose rows' results are folded in the same launch: one launch, a block a row, where a block an
 * output streamed the whole tensor on one multiprocessor. Values against plain loops in float64, every call.
 */
public class WideReductionTest {

    @Test
    void aSquaredNormOfAMatrixIsOneLaunchOfManyRowsWithAFold() {
        var g = Gatun.graph("norm");
        var w = g.input("w", DType.F32, 512, 256);
        g.output("n", w.mul(w).sum());
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            var plan = s.plan();
            assertThat(plan.kernels()).as(plan.toString()).hasSize(1);
            var k = plan.kernels().getFirst();
            assertThat(k.folds()).as(plan.toString()).isNotEmpty();
            assertThat(k.reductionRanges()).as(plan.toString()).hasSize(1);
            assertThat(plan.lowered().decisions()).anyMatch(d -> d.contains("reduced over dimension 1 first"));
            NDArray x = NDArray.randn(DType.F32, 3, 512, 256);
            double want = 0;
            for (double v : x.toDoubleArray()) want += (double) (float) (v * v);
            for (int call = 0; call < 2; call++)
                assertThat(s.runToHost(Map.of("w", x)).get("n").get(0)).isCloseTo(want, within(1e-5 * want));
        }
    }

    /** Random shapes of rank 2 to 4, random reduced dimensions (two or more), keepdim or not; sum, max, min; f32, f64, i64. */
    @Test
    void randomWideReductionsAreThePlainLoops() {
        var rnd = new Random(5);
        int split = 0;
        for (int c = 0; c < 40; c++) {
            int rank = 2 + rnd.nextInt(3);
            long[] shape = new long[rank];
            for (int d = 0; d < rank; d++) shape[d] = 1 + rnd.nextInt(d == rank - 1 ? 300 : 40);
            shape[rank - 1] = Math.max(shape[rank - 1], 32);
            int first = c % 2 == 0 ? 0 : rnd.nextInt(rank - 1);   // reduce dims first..rank-1 (two or more): all in every other case
            int[] dims = new int[rank - first];
            for (int d = first; d < rank; d++) dims[d - first] = d;
            boolean keep = rnd.nextBoolean();
            DType t = switch (c % 3) { case 0 -> DType.F32; case 1 -> DType.F64; default -> DType.I64; };
            int fn = rnd.nextInt(3);
            var g = Gatun.graph("wide");
            var x = g.input("x", t, java.util.Arrays.stream(shape).boxed().toArray());
            g.output("y", fn == 0 ? x.sum(keep, dims) : fn == 1 ? x.max(keep, dims) : x.min(keep, dims));
            NDArray in = t == DType.I64 ? ints(shape, rnd) : NDArray.randn(t, c, shape);
            double[] xs = in.toDoubleArray();
            long outer = 1, inner = 1;
            for (int d = 0; d < first; d++) outer *= shape[d];
            for (int d = first; d < rank; d++) inner *= shape[d];
            double[] want = new double[(int) outer];
            for (int o = 0; o < outer; o++) {
                double a = fn == 0 ? 0 : fn == 1 ? Double.NEGATIVE_INFINITY : Double.POSITIVE_INFINITY;
                for (int i = 0; i < inner; i++) {
                    double v = xs[(int) (o * inner + i)];
                    a = fn == 0 ? a + v : fn == 1 ? Math.max(a, v) : Math.min(a, v);
                }
                want[o] = a;
            }
            try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
                if (s.plan().lowered().decisions().stream().anyMatch(d -> d.contains("first ("))) split++;
                double[] got = s.runToHost(Map.of("x", in)).get("y").toDoubleArray();
                assertThat(got).as("case %d %s dims from %d keep %b fn %d %s", c, java.util.Arrays.toString(shape), first, keep, fn, t).hasSize(want.length);
                for (int o = 0; o < outer; o++)
                    assertThat(got[o]).as("case %d output %d", c, o).isCloseTo(want[o], within(t == DType.F32 ? 1e-4 * Math.max(1, Math.sqrt(inner)) : 1e-9 * Math.max(1, Math.sqrt(inner))));
            }
        }
        assertThat(split).as("cases the rule split").isGreaterThanOrEqualTo(8);
    }

    /**
     * More row results than one block should fold (20000 rows of a [20000, 40] norm, or 5 x 4000 rows): they are summed in
     * chunks (a divisor of the rows' count near its square root) and the chunks folded, two launches; a prime count of
     * rows keeps its one second reduction. Sum, max and min in f64 against plain loops.
     */
    @Test
    void manyRowResultsAreReducedInChunksBeforeTheFold() {
        for (long[] shape : new long[][]{{20000, 40}, {5, 4000, 40}, {16411, 40}})
            for (int fn = 0; fn < 3; fn++) {
                var g = Gatun.graph("chunks");
                var x = g.input("x", DType.F64, java.util.Arrays.stream(shape).boxed().toArray());
                int[] all = java.util.stream.IntStream.range(0, shape.length).toArray();
                g.output("y", fn == 0 ? x.mul(x).sum(false, all) : fn == 1 ? x.max(true, all) : x.min(false, all));
                NDArray in = NDArray.randn(DType.F64, 11 + fn, shape);
                double want = fn == 0 ? 0 : fn == 1 ? Double.NEGATIVE_INFINITY : Double.POSITIVE_INFINITY;
                for (double v : in.toDoubleArray()) want = fn == 0 ? want + v * v : fn == 1 ? Math.max(want, v) : Math.min(want, v);
                boolean prime = shape[0] == 16411;
                try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
                    var plan = s.plan();
                    assertThat(plan.lowered().decisions().stream().anyMatch(d -> d.contains(" chunks of "))).as(plan.lowered().decisions().toString()).isEqualTo(!prime);
                    if (!prime) {
                        assertThat(plan.kernels()).as(plan.toString()).hasSize(2);
                        assertThat(plan.kernels().getLast().folds()).as(plan.toString()).hasSize(1);
                    }
                    double got = s.runToHost(Map.of("x", in)).get("y").get(0);
                    assertThat(got).as("%s fn %d", java.util.Arrays.toString(shape), fn).isCloseTo(want, within(1e-9 * Math.abs(want)));
                }
            }
    }

    private static NDArray ints(long[] shape, Random rnd) {
        long n = 1;
        for (long s : shape) n *= s;
        long[] v = new long[(int) n];
        for (int i = 0; i < v.length; i++) v[i] = rnd.nextInt(2001) - 1000;
        return NDArray.of(v, shape);
    }
}
