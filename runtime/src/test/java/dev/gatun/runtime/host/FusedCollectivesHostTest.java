package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * All-reduces fused with the kernels around them ({@code Step.FusedCollective}), run by simulated ranks with random
 * delays: the same bits as the unfused plan on every call and every rank, and the reference's values.
 */
public class FusedCollectivesHostTest {

    static List<Map<String, NDArray>> inputs(Graph g, int world, long seed) {
        var in = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) in.add(Map.of("x", NDArray.randn(g.inputs().get("x").type().dtype(), seed * 31 + r, 8, 8)));
        return in;
    }

    static long launches(Graph g, CompileOptions o) {
        var plan = Planner.plan(Lowering.lower(g, o.lowering()), o.planning());
        return plan.steps().stream().filter(s -> s.isDeviceWork() && !(s instanceof Step.CopyIn)).count();
    }

    /**
     * The seeds' graph at worlds 1 to 4, each all-reduce algorithm (automatic, one-shot, barrier-free), 1,000 calls in all
     * per world with new inputs and random rank delays: at most two launches, every rank's result bit for bit the
     * unfused plan's and rank 0's, and the reference's within float rounding.
     */
    @Test
    void theSeedsGraphInTwoLaunchesIsRightCallAfterCall() {
        Graph g = HostSessionTest.seeds(DType.F32, 8);
        Algorithm[] algorithms = {null, Algorithm.ONE_SHOT, Algorithm.BARRIER_FREE};
        for (int world = 1; world <= 4; world++) {
            for (int a = 0; a < algorithms.length; a++) {
                var options = CompileOptions.world(world).backend("host");
                if (algorithms[a] != null) options = options.forceAllReduce(algorithms[a]);
                assertThat(launches(g, options)).as("world %d %s", world, algorithms[a]).isLessThanOrEqualTo(2);
                int calls = a == 0 ? 334 : 333;
                try (var fused = Session.compile(g, options.randomDelays(world * 10L + a));
                     var plain = Session.compile(g, options.fuseCollectives(false))) {
                    for (int call = 0; call < calls; call++) {
                        var in = inputs(g, world, call);
                        var got = fused.runToHost(in);
                        var want = plain.runToHost(in);
                        for (int r = 0; r < world; r++) {
                            NDArray d = got.get(r).get("d");
                            assertThat(d.segment().mismatch(want.get(r).get("d").segment())).as("world %d %s call %d rank %d: bits of the unfused plan",
                                    world, algorithms[a], call, r).isEqualTo(-1);
                            assertThat(d.segment().mismatch(got.get(0).get("d").segment())).as("rank %d against rank 0", r).isEqualTo(-1);
                        }
                        if (call % 50 == 0) {
                            var ref = ReferenceInterpreter.evaluate(g, in);
                            for (int r = 0; r < world; r++) assertThat(ref.get(r).get("d").mismatch(got.get(r).get("d"), 1e-5, 1e-5)).isNull();
                        }
                    }
                }
            }
        }
    }

    /** {@code h = all_reduce(x) + residual; y = h * rsqrt(mean(h * h, -1) + 1e-6) * w}, outputs y and h, bf16. */
    public static Graph arNorm(int tokens, int hidden) {
        var g = Gatun.graph("ar_norm");
        Tensor x = g.input("x", DType.BF16, tokens, hidden), residual = g.input("residual", DType.BF16, tokens, hidden), w = g.input("w", DType.BF16, hidden);
        Tensor h = x.allReduce(SUM).add(residual);
        g.output("y", h.mul(h.mul(h).mean(true, -1).add(1e-6).rsqrt()).mul(w));
        g.output("h", h);
        return g.build();
    }

    /**
     * All-reduce, residual add and RMSNorm in bf16 as one launch, against float64 computed here from the bf16 inputs
     * with no rounding in between: within a bf16 rounding or two of the result.
     */
    @Test
    void allReduceResidualAndRmsNormInOneLaunchMatchFloat64() {
        int world = 2;
        int[][] shapes = {{1, 4096}, {8, 4096}, {64, 4096}, {256, 4096}, {1, 8192}, {8, 8192}, {64, 8192}, {256, 8192}};
        for (int[] shape : shapes) {
            int tokens = shape[0], hidden = shape[1];
            Graph g = arNorm(tokens, hidden);
            var in = new ArrayList<Map<String, NDArray>>();
            NDArray residual = NDArray.randn(DType.BF16, 99, tokens, hidden), w = NDArray.randn(DType.BF16, 98, hidden);
            for (int r = 0; r < world; r++) in.add(Map.of("x", NDArray.randn(DType.BF16, 100 + r, tokens, hidden), "residual", residual, "w", w));
            Algorithm forced = tokens == 8 ? Algorithm.BARRIER_FREE : null;
            var options = CompileOptions.world(world).backend("host").randomDelays(tokens);
            if (forced != null) options = options.forceAllReduce(forced);
            assertThat(launches(g, options)).as("%dx%d", tokens, hidden).isEqualTo(1);
            try (var s = Session.compile(g, options)) {
                var got = s.runToHost(in);
                double[][] x = new double[world][];
                for (int r = 0; r < world; r++) x[r] = in.get(r).get("x").toDoubleArray();
                for (int r = 0; r < world; r++)
                    checkArNorm(tokens + "x" + hidden + " rank " + r, x, residual.toDoubleArray(), w.toDoubleArray(), tokens, hidden,
                            got.get(r).get("y").toDoubleArray(), got.get(r).get("h").toDoubleArray());
                for (String name : List.of("y", "h"))
                    assertThat(got.get(1).get(name).segment().mismatch(got.get(0).get(name).segment())).as("rank 1's %s against rank 0's", name).isEqualTo(-1);
            }
        }
    }

    /** h and y of {@link #arNorm} against float64 from the bf16 inputs (x per rank), no rounding in between: within a bf16 rounding or two. */
    public static void checkArNorm(String what, double[][] x, double[] res, double[] w, int tokens, int hidden, double[] y, double[] h) {
        for (int t = 0; t < tokens; t++) {
            double[] row = new double[hidden];
            double squares = 0;
            for (int i = 0; i < hidden; i++) {
                double sum = 0;
                for (double[] xr : x) sum += xr[t * hidden + i];
                row[i] = sum + res[t * hidden + i];
                squares += row[i] * row[i];
            }
            double scale = 1 / Math.sqrt(squares / hidden + 1e-6);
            for (int i = 0; i < hidden; i++) {
                int at = t * hidden + i;
                double wantY = row[i] * scale * w[i];
                assertThat(Math.abs(h[at] - row[i])).as("%s h[%d, %d]", what, t, i).isLessThanOrEqualTo(2e-2 * (1 + Math.abs(row[i])));
                assertThat(Math.abs(y[at] - wantY)).as("%s y[%d, %d]", what, t, i).isLessThanOrEqualTo(2e-2 * (1 + Math.abs(wantY)));
            }
        }
    }
}
