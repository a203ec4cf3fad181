package dev.gatun.models.llama;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Optimizers;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.models.llama.LlamaTraining.DataParallel;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Pool;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Activation recomputation by layer ({@code GraphBuilder.recompute}, {@link LlamaTraining}'s {@code recomputeLayers}):
 * the tiny Llama trained with every layer recomputed gives the losses and every state (weights, moments) bit for bit as
 * without, in float64 on the host; the gradients of a small graph likewise; and the planned regular arena of the wider
 * training step falls, both plans within 1.05x of the max-live bound computed from their slots.
 */
class RecomputeTest {
    static final LlamaConfig TINY = LlamaTrainingTest.TINY;
    static final int STEPS = 3;

    static Graph graph(LlamaConfig c, int batch, int tokens, int dp, DataParallel mode, Set<Integer> recompute) {
        return graph(c, batch, tokens, dp, mode, recompute, true);
    }

    static Graph graph(LlamaConfig c, int batch, int tokens, int dp, DataParallel mode, Set<Integer> recompute, boolean reshard) {
        return LlamaTraining.graph(c, batch, tokens, dp, 1, mode, DType.F64, DType.F64, Optimizers.adamW(1e-2).clipGradNorm(1.0), true, recompute, reshard);
    }

    static List<List<Map<String, NDArray>>> train(int dp, DataParallel mode, Set<Integer> recompute) { return train(dp, mode, recompute, true); }

    static List<List<Map<String, NDArray>>> train(int dp, DataParallel mode, Set<Integer> recompute, boolean reshard) {
        Graph g = graph(TINY, LlamaTrainingTest.SEQUENCES / dp, LlamaTrainingTest.TOKENS, dp, mode, recompute, reshard);
        var whole = LlamaTraining.initialWeights(graph(TINY, 4, 8, 1, DataParallel.REPLICATED, Set.of()), 7, 0.02, DType.F64);
        var batch = LlamaTraining.batch(TINY, LlamaTrainingTest.SEQUENCES, LlamaTrainingTest.TOKENS, dp, 11);
        var out = new ArrayList<List<Map<String, NDArray>>>();
        try (var s = Session.compile(g, CompileOptions.world(dp).backend("host"))) {
            var perRank = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < dp; r++) {
                s.bind(r, LlamaTraining.rankWeights(TINY, g, whole, 1, r));
                var in = new HashMap<>(batch.get(r));
                in.putAll(LlamaTraining.tables(TINY, LlamaTrainingTest.TOKENS, DType.F64));
                perRank.add(in);
            }
            for (int i = 0; i < STEPS; i++) out.add(s.runToHost(perRank));
        }
        return out;
    }

    @Test
    void recomputedLayersTrainBitForBitAsKeptOnes() {
        for (var mode : new Object[][]{{1, DataParallel.REPLICATED}, {2, DataParallel.FULLY_SHARDED}}) {
            int dp = (int) mode[0];
            var kept = train(dp, (DataParallel) mode[1], Set.of());
            var again = train(dp, (DataParallel) mode[1], Set.of(0, 1));
            for (int i = 0; i < STEPS; i++)
                for (int r = 0; r < dp; r++)
                    for (var e : kept.get(i).get(r).entrySet())
                        assertThat(again.get(i).get(r).get(e.getKey())).as("dp %d step %d rank %d %s", dp, i, r, e.getKey()).isEqualTo(e.getValue());
        }
    }

    /**
     * Mixed precision (bf16 over f32, FSDP over 2): with every op rounded to bf16 as it is stored ({@code roundEachOp})
     * the clones give the same bits. (By default a fused kernel holds its bf16 intermediates in float, and a clone may be
     * fused otherwise than the forward op it repeats: the values then agree to bf16's rounding, not bit for bit.)
     */
    @Test
    void mixedPrecisionRoundingEachOpTrainsBitForBit() {
        double[][] losses = new double[2][];
        int k = 0;
        for (var recompute : List.of(Set.<Integer>of(), Set.of(0, 1))) {
            Graph g = LlamaTraining.graph(TINY, 1, 8, 2, 1, DataParallel.FULLY_SHARDED, DType.F32, DType.BF16, Optimizers.adamW(1e-2), false, recompute);
            var whole = LlamaTraining.initialWeights(graph(TINY, 4, 8, 1, DataParallel.REPLICATED, Set.of()), 5, 0.02, DType.F32);
            var batch = LlamaTraining.batch(TINY, 2, 8, 2, 3);
            losses[k] = new double[2 * 4];
            try (var s = Session.compile(g, CompileOptions.world(2).backend("host").roundEachOp())) {
                var perRank = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < 2; r++) {
                    s.bind(r, LlamaTraining.rankWeights(TINY, g, whole, 1, r));
                    var in = new HashMap<>(batch.get(r));
                    in.putAll(LlamaTraining.tables(TINY, 8, DType.BF16));
                    perRank.add(in);
                }
                for (int i = 0; i < 4; i++) {
                    var out = s.runToHost(perRank);
                    for (int r = 0; r < 2; r++) losses[k][2 * i + r] = out.get(r).get("loss").get(0);
                }
            }
            k++;
        }
        for (int i = 0; i < losses[0].length; i++)
            assertThat(Double.doubleToRawLongBits(losses[1][i])).as("step %d rank %d", i / 2, i % 2).isEqualTo(Double.doubleToRawLongBits(losses[0][i]));
        assertThat(losses[0][6]).as("it trains").isNotEqualTo(losses[0][0]);
    }

    @Test
    void theGraphAndThePlanPrintTheChoice() {
        Graph g = graph(TINY, 4, 8, 1, DataParallel.REPLICATED, Set.of(1));
        assertThat(g.notes()).singleElement().asString().startsWith("recompute layer.1: ");
        Plan p = Planner.plan(Lowering.lower(g, LoweringOptions.world(1)));
        assertThat(p.toString()).contains("# recompute layer.1: ");
        assertThat(p.explain()).contains("# recompute layer.1: ");
        assertThat(graph(TINY, 4, 8, 1, DataParallel.REPLICATED, Set.of()).notes()).isEmpty();
    }

    /** Under FSDP a recomputed layer gathers its 9 weights again in the backward pass (FSDP2's reshard_after_forward). */
    @Test
    void aRecomputedFsdpLayerGathersItsWeightsAgain() {
        long kept = gathers(graph(TINY, 2, 8, 2, DataParallel.FULLY_SHARDED, Set.of(), false)), again = gathers(graph(TINY, 2, 8, 2, DataParallel.FULLY_SHARDED, Set.of(1), false));
        assertThat(again - kept).isEqualTo(9);
    }

    /**
     * Resharding after the forward pass (the default under FSDP): every layer not recomputed gathers its 9 weights again
     * in the backward pass and keeps its activations; the graph says so; replicated weights are untouched.
     */
    @Test
    void resharedLayersGatherTheirWeightsAgainAndKeepTheirActivations() {
        Graph kept = graph(TINY, 2, 8, 2, DataParallel.FULLY_SHARDED, Set.of(), false), resharded = graph(TINY, 2, 8, 2, DataParallel.FULLY_SHARDED, Set.of());
        assertThat(gathers(resharded) - gathers(kept)).isEqualTo(2 * 9);
        assertThat(resharded.notes()).hasSize(2).allSatisfy(n -> assertThat(n).startsWith("regather layer.").contains("gathered again in the backward pass"));
        // the activations are kept: no product, reduction or attention is computed again (a recomputed layer's are)
        assertThat(computing(resharded)).isEqualTo(computing(kept));
        assertThat(computing(graph(TINY, 2, 8, 2, DataParallel.FULLY_SHARDED, Set.of(1), false))).isGreaterThan(computing(kept));
        Graph recomputedOne = graph(TINY, 2, 8, 2, DataParallel.FULLY_SHARDED, Set.of(0));
        assertThat(recomputedOne.notes()).anySatisfy(n -> assertThat(n).startsWith("recompute layer.0"))
                .anySatisfy(n -> assertThat(n).startsWith("regather layer.1"));
        assertThat(graph(TINY, 4, 8, 1, DataParallel.REPLICATED, Set.of()).notes()).isEmpty();
    }

    /** Trained resharded and kept (FSDP over 2, f64 on the host): the losses and every state, bit for bit. */
    @Test
    void resharedLayersTrainBitForBitAsKeptOnes() {
        var kept = train(2, DataParallel.FULLY_SHARDED, Set.of(), false);
        var resharded = train(2, DataParallel.FULLY_SHARDED, Set.of(), true);
        for (int i = 0; i < STEPS; i++)
            for (int r = 0; r < 2; r++)
                for (var e : kept.get(i).get(r).entrySet())
                    assertThat(resharded.get(i).get(r).get(e.getKey())).as("step %d rank %d %s", i, r, e.getKey()).isEqualTo(e.getValue());
    }

    /** The planned regular arena of the wider training step under FSDP over 2: lower resharded than kept. */
    @Test
    void resharingLowersThePlannedPeak() {
        var wider = TrainingMemoryTest.WIDER;
        long kept = arena(graph(wider, 4, 32, 2, DataParallel.FULLY_SHARDED, Set.of(), false), 2);
        long resharded = arena(graph(wider, 4, 32, 2, DataParallel.FULLY_SHARDED, Set.of()), 2);
        assertThat(resharded).as("resharded %d bytes against %d kept", resharded, kept).isLessThan(kept);
    }

    private static long computing(Graph g) {
        return g.nodes().stream().filter(n -> n.op() instanceof dev.gatun.ir.graph.Op.Matmul || n.op() instanceof dev.gatun.ir.graph.Op.Reduce
                || n.op() instanceof dev.gatun.ir.graph.Op.Registered).count();
    }

    private static long gathers(Graph g) {
        return g.nodes().stream().filter(n -> n.op() instanceof dev.gatun.ir.graph.Op.Collective c && c.kind() == dev.gatun.ir.graph.CollectiveKind.ALL_GATHER).count();
    }

    /** The planned regular arena with every layer recomputed against all kept, on the wider shape; each near its max-live. */
    @Test
    void thePlannedPeakFalls() {
        var wider = TrainingMemoryTest.WIDER;
        for (int dp : new int[]{1, 2}) {
            var mode = dp == 1 ? DataParallel.REPLICATED : DataParallel.FULLY_SHARDED;
            long kept = arena(graph(wider, 8 / dp, 32, dp, mode, Set.of()), dp), again = arena(graph(wider, 8 / dp, 32, dp, mode, Set.of(0, 1, 2, 3)), dp);
            assertThat(again).as("dp %d: recomputed %d bytes against %d kept", dp, again, kept).isLessThan(kept);
        }
    }

    /** The regular pool's bytes, checked within 1.05x of the max-live bound taken from the plan's slots. */
    static long arena(Graph g, int dp) {
        Plan p = Planner.plan(Lowering.lower(g, LoweringOptions.world(dp)));
        Pool pool = p.pools().stream().filter(x -> x.kind() == Pool.Kind.REGULAR).findFirst().orElseThrow();
        assertThat((double) pool.bytes()).isLessThanOrEqualTo(1.05 * TrainingMemoryTest.maxLive(p, pool.name()));
        return pool.bytes();
    }

    /** The gradients of a two-layer graph with and without its first layer recomputed: the same bits. */
    @Test
    void gradientsAreBitForBitTheSame() {
        double[] got = null;
        for (boolean recompute : new boolean[]{false, true}) {
            var g = Gatun.graph("mlp");
            Tensor x = g.input("x", DType.F64, 8, 4), w1 = g.input("w1", DType.F64, 4, 6), w2 = g.input("w2", DType.F64, 6, 3);
            java.util.function.Supplier<Tensor> first = () -> x.matmul(w1).tanh().mul(x.matmul(w1).exp()).softmax(1);
            Tensor h = recompute ? g.recompute("first", first) : first.get();
            Tensor loss = h.matmul(w2).sin().sum();
            Tensor[] d = g.grad(loss, w1, w2);
            g.output("dw1", d[0]).output("dw2", d[1]).output("loss", loss);
            Graph built = g.build();
            assertThat(built.notes().isEmpty()).isEqualTo(!recompute);
            try (var s = Session.compile(built, CompileOptions.world(1).backend("host"))) {
                var out = s.runToHost(Map.of("x", NDArray.randn(DType.F64, 1, 8, 4), "w1", NDArray.randn(DType.F64, 2, 4, 6), "w2", NDArray.randn(DType.F64, 3, 6, 3)));
                double[] all = java.util.stream.DoubleStream.concat(java.util.Arrays.stream(out.get("dw1").toDoubleArray()),
                        java.util.stream.DoubleStream.concat(java.util.Arrays.stream(out.get("dw2").toDoubleArray()), java.util.Arrays.stream(out.get("loss").toDoubleArray()))).toArray();
                if (got == null) got = all;
                else for (int i = 0; i < all.length; i++) assertThat(Double.doubleToRawLongBits(all[i])).as("element %d", i).isEqualTo(Double.doubleToRawLongBits(got[i]));
            }
        }
    }

    @Test
    void misuseIsRefusedByName() {
        var g = Gatun.graph("bad");
        Tensor x = g.input("x", DType.F64, 4);
        assertThatThrownBy(() -> g.recompute("a", () -> g.grad(x.sum(), x))).isInstanceOf(GraphException.class).hasMessageContaining("grad inside recompute(\"a\")");
        assertThatThrownBy(() -> g.recompute("b", () -> g.recompute("c", () -> x))).isInstanceOf(GraphException.class).hasMessageContaining("do not nest");
        g.recompute("d", () -> x.exp());
        assertThatThrownBy(() -> g.recompute("d", () -> x)).isInstanceOf(GraphException.class).hasMessageContaining("'d' exists already");
        assertThatThrownBy(() -> LlamaTraining.graph(TINY, 4, 8, 1, 1, DataParallel.REPLICATED, DType.F64, DType.F64, Optimizers.adamW(), false, Set.of(2)))
                .isInstanceOf(GraphException.class).hasMessageContaining("recompute layer 2");
    }
}
