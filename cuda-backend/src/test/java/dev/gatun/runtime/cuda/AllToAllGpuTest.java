package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;
import dev.gatun.models.llama.ExpertParallel;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The even all_to_all on GPUs, one rank a GPU: on symmetric memory {@link SymmetricAllToAll}'s kernel, each rank
 * pulling its part of every member's communication buffer; through NCCL (symmetric memory off) its grouped send and
 * receive out of ordinary memory; f32 rows written by a kernel (path 1), a bf16 graph input (path 2), i64 past 2^53;
 * 50 calls captured in CUDA graphs with new inputs each, against plain loops on every rank. And inputs that the op
 * making them writes straight into symmetric memory (lowering's path 1 for a registered op's output and a collective's
 * result): expert parallelism's dispatch and combine (an index_select's rows, the received counts of an all_to_all) and
 * an all-reduce's result sent on by an all_to_all, captured, routings uniform and skewed, against plain loops.
 */
@RequiresGpu
class AllToAllGpuTest {

    static Graph graph(int world) {
        var g = Gatun.graph("a2a").world(world);
        g.output("rows", g.input("x", DType.F32, 4L * world, 64).mul(2).allToAll("world"));
        g.output("half", g.input("h", DType.BF16, 2L * world, 128).allToAll("world"));
        g.output("ids", g.input("ids", DType.I64, 3L * world).allToAll("world"));
        return g.build();
    }

    /** Rank r's element i of an input at call c: a value of its own, exact in every dtype used here. */
    static double value(int rank, int call, long i) { return rank * 1000 + call * 7 + (i % 200); }

    static Map<String, NDArray> inputs(int world, int rank, int call) {
        float[] x = new float[4 * world * 64];
        for (int i = 0; i < x.length; i++) x[i] = (float) value(rank, call, i);
        double[] h = new double[2 * world * 128];
        for (int i = 0; i < h.length; i++) h[i] = value(rank, call, i) % 256;   // integers below 256: exact in bf16
        long[] ids = new long[3 * world];
        for (int i = 0; i < ids.length; i++) ids[i] = (1L << 60) + (long) value(rank, call, i);
        return Map.of("x", NDArray.of(x, 4L * world, 64), "h", NDArray.of(DType.BF16, h, 2L * world, 128), "ids", NDArray.of(ids, 3L * world));
    }

    /** Rank d's result by plain loops: part d of every rank's input ({@code part} elements each), in rank order. */
    static double[] expected(int world, int d, int call, int part, java.util.function.DoubleUnaryOperator f) {
        double[] want = new double[world * part];
        for (int s = 0; s < world; s++)
            for (int i = 0; i < part; i++) want[s * part + i] = f.applyAsDouble(value(s, call, (long) d * part + i));
        return want;
    }

    @ParameterizedTest
    @ValueSource(booleans = {true, false})
    void evenAllToAllsOfTwoGpusMatchPlainLoopsInCapturedGraphs(boolean symmetricMemory) {
        assumeTrue(dev.gatun.cuda.Device.count() >= 2, "needs 2 GPUs (NCCL runs one rank a GPU)");
        int world = 2;
        LocalWorld.run(world, rv -> {
            int rank = rv.rank();
            var options = CompileOptions.world(world).rank(rv).backend("cuda").cudaGraphs(true).symmetricMemory(symmetricMemory);
            try (var s = Session.compile(graph(world), options)) {
                assertThat(s.plan().toString()).contains(symmetricMemory ? "all_to_all.symm_mem(" : "all_to_all.nccl(");
                for (int call = 0; call < 50; call++) {
                    var out = s.runToHost(inputs(world, rank, call));
                    assertThat(out.get("rows").toDoubleArray()).as("call %d rank %d", call, rank)
                            .containsExactly(expected(world, rank, call, 4 * 64, v -> 2 * v));
                    assertThat(out.get("half").toDoubleArray()).containsExactly(expected(world, rank, call, 2 * 128, v -> v % 256));
                    double[] ids = expected(world, rank, call, 3, v -> v);
                    long[] want = new long[ids.length];
                    for (int i = 0; i < ids.length; i++) want[i] = (1L << 60) + (long) ids[i];
                    assertThat(out.get("ids").toLongArray()).containsExactly(want);
                }
            }
        });
    }

    /**
     * Dispatch and combine of {@link ExpertParallel#layer} (f32, 24 tokens a rank of 64, top-2 of 4 experts, the trivial
     * expert: local expert i scales its rows by i + 1) and {@code z = allToAll(allReduce(2 x))}: every all_to_all input
     * written where the collective reads it, no identity copy (the plan checked), 30 captured calls on two GPUs.
     */
    @Test
    void inputsWrittenStraightIntoSymmetricMemoryMatchPlainLoopsInCapturedGraphs() {
        assumeTrue(dev.gatun.cuda.Device.count() >= 2, "needs 2 GPUs");
        int world = 2, tokens = 24, hidden = 64, experts = 4, k = 2, local = experts / world;
        var g = Gatun.graph("moe_straight").mesh("ep", world);
        var x = g.input("x", DType.F32, tokens, hidden);
        g.output("y", ExpertParallel.layer(g, x, g.input("w", DType.F32, tokens, k), g.input("ids", DType.I64, tokens, k), experts, "ep", world,
                (long) tokens * k * world, (rows, ids) -> rows.mul(ids.reshape(rows.shape().sizes()[0], 1).add(g.scalar(1, DType.I64)).cast(DType.F32))));
        g.output("z", x.mul(2).allReduce(dev.gatun.ir.graph.ReduceOp.SUM, "ep").allToAll("ep"));
        Graph graph = g.build();
        LocalWorld.run(world, rv -> {
            int rank = rv.rank();
            var options = CompileOptions.world(world).rank(rv).backend("cuda").cudaGraphs(true);
            try (var s = Session.compile(graph, options)) {
                assertThat(s.plan().toString()).contains("= index_select(x, ").doesNotContain("kernel copy_");
                for (int call = 0; call < 30; call++) {
                    boolean skewed = call % 3 == 2;
                    var in = new java.util.HashMap<String, NDArray>();
                    float[] xs = new float[tokens * hidden];
                    for (int i = 0; i < xs.length; i++) xs[i] = (float) (value(rank, call, i) % 64);
                    long[] ids = new long[tokens * k];
                    float[] w = new float[tokens * k];
                    for (int n = 0; n < tokens; n++)
                        for (int j = 0; j < k; j++) {
                            ids[n * k + j] = skewed ? j : (n * 7 + j * 3 + call + rank) % experts;
                            w[n * k + j] = j == 0 ? 0.75f : 0.25f;
                        }
                    in.put("x", NDArray.of(xs, tokens, hidden));
                    in.put("ids", NDArray.of(ids, tokens, k));
                    in.put("w", NDArray.of(w, tokens, k));
                    var out = s.runToHost(in);
                    double[] y = out.get("y").toDoubleArray();
                    for (int n = 0; n < tokens; n++)
                        for (int c = 0; c < hidden; c++) {
                            double want = 0;
                            for (int j = 0; j < k; j++) want += w[n * k + j] * (1 + ids[n * k + j] % local) * xs[n * hidden + c];
                            assertThat(y[n * hidden + c]).as("call %d rank %d token %d column %d", call, rank, n, c).isEqualTo(want);
                        }
                    // z: part `rank` of the sum over ranks of 2 x, from every member (the same sum everywhere)
                    double[] z = out.get("z").toDoubleArray();
                    int part = tokens / world * hidden;
                    for (int src = 0; src < world; src++)
                        for (int i = 0; i < part; i++) {
                            long at = (long) rank * part + i;
                            double want = 0;
                            for (int r = 0; r < world; r++) want += 2 * (float) (value(r, call, at) % 64);
                            assertThat(z[src * part + i]).as("z call %d rank %d element %d", call, rank, src * part + i).isEqualTo(want);
                        }
                }
            }
        });
    }
}
