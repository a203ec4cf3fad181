package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@code argmaxAcrossRanks}: each rank holds a shard of the last dimension, and every rank's answer is the argmax of
 * the whole row by plain loops ({@link ArgmaxHostTest#firstLargest}): the first of equal largest elements, the first
 * NaN above every number, across shard boundaries, on the host backend and in the reference interpreter.
 */
class ArgmaxAcrossRanksHostTest {

    /**
     * Rows of small integers (ties within and across shards), with NaNs, infinities and signed zeros sprinkled in, at
     * 1, 2 and 4 ranks and every floating dtype.
     */
    @Property(tries = 40)
    void everyRankGetsTheArgmaxOfTheWholeRow(@ForAll @IntRange(min = 0, max = 2) int ranksAt, @ForAll @IntRange(min = 1, max = 5) int width,
                                             @ForAll @IntRange(min = 1, max = 3) int rows, @ForAll @IntRange(min = 0, max = 2) int dtypeAt,
                                             @ForAll long seed) {
        int tp = new int[]{1, 2, 4}[ranksAt];
        DType t = new DType[]{DType.F32, DType.BF16, DType.F64}[dtypeAt];
        int cols = tp * width;
        double[] whole = values(new Random(seed), rows * cols);
        long[] want = ArgmaxHostTest.firstLargest(whole, cols);
        var g = Gatun.graph("sharded_greedy").world(tp);
        g.output("next", g.input("logits", t, rows, width).argmaxAcrossRanks());
        Graph graph = g.build();
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < tp; r++) inputs.add(Map.of("logits", shard(whole, rows, cols, r, width, t)));
        try (var s = Session.compile(graph, CompileOptions.world(tp).backend("host"))) {
            var host = s.runToHost(inputs);
            var ref = ReferenceInterpreter.evaluate(graph, inputs);
            for (int r = 0; r < tp; r++)
                for (var out : List.of(host.get(r), ref.get(r))) {
                    NDArray next = out.get("next");
                    assertThat(next.dtype()).isEqualTo(DType.I64);
                    assertThat(next.shape()).containsExactly(rows);
                    for (int b = 0; b < rows; b++) assertThat((long) next.get(b)).as("%s tp %d rank %d row %d of %s", t, tp, r, b, java.util.Arrays.toString(whole))
                            .isEqualTo(want[b]);
                }
        }
    }

    /** The cases a random row seldom makes: a NaN and a larger number in a later shard, all NaN, all equal, -inf only. */
    @Test
    void nanTiesAndInfinitiesAcrossShardBoundaries() {
        double nan = Double.NaN, inf = Double.POSITIVE_INFINITY;
        double[][] cases = {
                {1, 2, 3, nan, 9, 9, nan, 0},          // the first NaN, in rank 1 (tp 2) or rank 1 (tp 4): 3
                {0, 0, 0, 0, 0, 0, 0, 0},              // all equal: 0
                {-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf},
                {-0.0, 0.0, -1, -1, 0.0, -0.0, -1, -1},
                {-5, -5, -5, -5, -5, -5, 7, 7},        // the largest in the last shard, tied: 6
                {1, 1, 1, 1, 1, 1, 1, nan},            // a NaN at the very end wins: 7
                {nan, nan, nan, nan, nan, nan, nan, nan},
                {3, inf, 2, inf, 1, inf, 0, inf}};
        for (int tp : new int[]{2, 4}) {
            int width = 8 / tp;
            var g = Gatun.graph("sharded_greedy").world(tp);
            g.output("next", g.input("logits", DType.F32, cases.length, width).argmaxAcrossRanks());
            double[] whole = java.util.Arrays.stream(cases).flatMapToDouble(java.util.Arrays::stream).toArray();
            long[] want = ArgmaxHostTest.firstLargest(whole, 8);
            assertThat(want).containsExactly(3, 0, 0, 0, 6, 7, 0, 1);
            var inputs = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < tp; r++) inputs.add(Map.of("logits", shard(whole, cases.length, 8, r, width, DType.F32)));
            try (var s = Session.compile(g.build(), CompileOptions.world(tp).backend("host"))) {
                var out = s.runToHost(inputs);
                for (int r = 0; r < tp; r++)
                    for (int b = 0; b < cases.length; b++) assertThat((long) out.get(r).get("next").get(b)).as("tp %d rank %d case %d", tp, r, b).isEqualTo(want[b]);
            }
        }
    }

    @Test
    void refusesWhatArgmaxRefuses() {
        var g = Gatun.graph("bad").world(2);
        assertThatThrownBy(() -> g.input("i", DType.I32, 4).argmaxAcrossRanks()).isInstanceOf(GraphException.class)
                .hasMessageContaining("argmaxAcrossRanks('i'").hasMessageContaining("must be a floating dtype");
        assertThatThrownBy(() -> g.input("n", DType.F32, "b", 4).argmaxAcrossRanks()).isInstanceOf(GraphException.class).hasMessageContaining("must be static");
        assertThatThrownBy(() -> g.input("e", DType.F32, 3, 0).argmaxAcrossRanks()).isInstanceOf(GraphException.class).hasMessageContaining("empty");
    }

    /** Small integers (many ties), with a NaN, an infinity or a signed zero now and then. */
    private static double[] values(Random rnd, int n) {
        double[] x = new double[n];
        for (int i = 0; i < n; i++)
            x[i] = switch (rnd.nextInt(12)) {
                case 0 -> Double.NaN;
                case 1 -> Double.POSITIVE_INFINITY;
                case 2 -> Double.NEGATIVE_INFINITY;
                case 3 -> -0.0;
                default -> rnd.nextInt(5) - 2;
            };
        return x;
    }

    /** Columns [rank * width, (rank + 1) * width) of each row of {@code whole} [rows, cols]. */
    private static NDArray shard(double[] whole, int rows, int cols, int rank, int width, DType t) {
        double[] part = new double[rows * width];
        for (int b = 0; b < rows; b++) System.arraycopy(whole, b * cols + rank * width, part, b * width, width);
        return NDArray.of(t, part, rows, width);
    }
}
