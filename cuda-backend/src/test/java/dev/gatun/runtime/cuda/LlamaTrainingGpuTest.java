package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.models.llama.LlamaTraining;
import dev.gatun.models.llama.LlamaTraining.DataParallel;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReferenceArray;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The tiny Llama ({@link TrainingPlans#TINY}) trained {@value #STEPS} steps of AdamW (clipped by global norm at 1.0) on
 * the CUDA backend, at world 1 and fully sharded over 2 ranks sharing one GPU (threads of this process,
 * {@code ranksPerGpu(2)}), against the host backend's run of the same graph from the same weights and data (an
 * independent backend: plain loops per op). Float32: each step's loss within 1e-4 relative, and every final weight and
 * moment close (below); float64 at world 1 likewise, within 1e-10 (fully sharded over ranks sharing a GPU, f64 is
 * refused: {@link TrainingStepLoadsTest}). bf16 compute over f32 master weights: the first loss within 2e-2 of the
 * host's, and the loss falls.
 *
 * <p>Tolerances. Both backends round each op to float32 but sum in other orders (cuBLAS's and the block reductions'
 * against the host's loops), so each loss and gradient differs by a few units of float32's rounding (~1e-6 relative
 * after products of at most 128 terms); ten steps of AdamW keep that order of difference: the update divides the
 * averaged gradient by the root of its averaged square, which scales a relative difference by about one. Hence 1e-4
 * relative on the loss, a hundred times that. An element whose gradient is at the rounding's own level (a true zero
 * computed as ±1e-9) is the exception: AdamW's step there is lr * g / (|g| + eps), which is why eps is 1e-6 here
 * (the step on such an element is then at most lr * 1e-2, 1e-4) and why each tensor is compared by its relative L2
 * difference with a looser per-element bound (2e-3 of the tensor's largest element): a wrong kernel moves
 * weights by a step of lr = 1e-2 each call, hundreds of times more. The relative L2 bound is 1e-4 in float64; in float32
 * each state is measured against a float64 run of the same weights and data on the host, and the GPU's must be no
 * further from it than 4 times the host's float32 state is (or 1e-4 relative): ten steps of AdamW make a
 * moment's float32 error larger than a step's (an embedding row's moment reached 1.6e-4 relative between the
 * backends on an H200), but no further from float64 on one backend than on the other.
 */
@RequiresGpu
class LlamaTrainingGpuTest {
    static final int STEPS = 10;

    /** Each step's mean loss over the world and each rank's outputs after the last step. */
    record Run(double[] losses, List<Map<String, NDArray>> finalStates) {}

    /** The inputs of rank {@code r} of {@code dp}: its sequences and the rotary tables. */
    static Map<String, NDArray> inputs(int dp, int r, DType compute) {
        var in = new HashMap<>(LlamaTraining.batch(TrainingPlans.TINY, TrainingPlans.SEQUENCES, TrainingPlans.TOKENS, dp, 11).get(r));
        in.putAll(LlamaTraining.tables(TrainingPlans.TINY, TrainingPlans.TOKENS, compute));
        return in;
    }

    /** Rank {@code r}'s initial weights: its block of every whole weight (drawn once, seed 7, for world 1's graph), in {@code master}. */
    static Map<String, NDArray> weights(Graph g, int r, DType master) {
        var whole = LlamaTraining.initialWeights(TrainingPlans.graph(1, DataParallel.REPLICATED, master, master, false), 7, 0.02, master);
        return LlamaTraining.rankWeights(TrainingPlans.TINY, g, whole, 1, r);
    }

    /** The host backend simulating the {@code dp} ranks. */
    static Run host(Graph g, int dp, DType master, DType compute) {
        double[] losses = new double[STEPS];
        List<Map<String, NDArray>> out = List.of();
        try (var s = Session.compile(g, CompileOptions.world(dp).backend("host"))) {
            var perRank = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < dp; r++) {
                s.bind(r, weights(g, r, master));
                perRank.add(inputs(dp, r, compute));
            }
            for (int step = 0; step < STEPS; step++) {
                out = s.runToHost(perRank);
                for (var rank : out) losses[step] += rank.get("loss").get(0) / dp;
            }
        }
        return new Run(losses, out);
    }

    /**
     * The host backend in float64 ({@code g64}, the float32 graph {@code g32}'s twin) from float32's weights and data
     * widened: where the float32 runs' states should be.
     */
    static Run host64(Graph g64, Graph g32, int dp) {
        double[] losses = new double[STEPS];
        List<Map<String, NDArray>> out = List.of();
        try (var s = Session.compile(g64, CompileOptions.world(dp).backend("host"))) {
            var perRank = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < dp; r++) {
                var wide = new HashMap<String, NDArray>();
                weights(g32, r, DType.F32).forEach((k, v) -> wide.put(k, v.to(DType.F64)));
                s.bind(r, wide);
                var in = new HashMap<String, NDArray>();
                inputs(dp, r, DType.F32).forEach((k, v) -> in.put(k, v.dtype() == DType.F32 ? v.to(DType.F64) : v));
                perRank.add(in);
            }
            for (int step = 0; step < STEPS; step++) {
                out = s.runToHost(perRank);
                for (var rank : out) losses[step] += rank.get("loss").get(0) / dp;
            }
        }
        return new Run(losses, out);
    }

    /** The CUDA backend: one session at world 1, else one per rank, the ranks threads of this process on one GPU. */
    static Run gpu(Graph g, int dp, DType master, DType compute) {
        double[][] losses = new double[dp][STEPS];
        var finals = new AtomicReferenceArray<Map<String, NDArray>>(dp);
        LocalWorld.run(dp, rv -> {
            int r = rv.rank();
            var options = dp == 1 ? CompileOptions.world(1).backend("cuda")
                    // the ranks meet after each has compiled its kernels (a few hundred, NVRTC, a cold disk cache): a
                    // generous timeout, so that the slower compile is not taken for a peer that never came
                    : CompileOptions.world(dp).rank(rv).ranksPerGpu(dp).timeout(Duration.ofMinutes(5)).backend("cuda");
            try (var s = Session.compile(g, options)) {
                assertThat(s.backendName()).isEqualTo("cuda");
                s.bind(s.ranks().getFirst(), weights(g, r, master));
                var in = inputs(dp, r, compute);
                Map<String, NDArray> out = Map.of();
                for (int step = 0; step < STEPS; step++) {
                    out = s.runToHost(in);
                    losses[r][step] = out.get("loss").get(0);
                }
                finals.set(r, out);
            }
        });
        double[] mean = new double[STEPS];
        for (double[] rank : losses) for (int i = 0; i < STEPS; i++) mean[i] += rank[i] / dp;
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < dp; r++) out.add(finals.get(r));
        return new Run(mean, out);
    }

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"f32 world 1", "f32 world 2", "f64 world 1"})
    void trainingOnTheGpuFollowsTheHostBackend(String which) {
        DType t = which.startsWith("f64") ? DType.F64 : DType.F32;
        int dp = which.endsWith("2") ? 2 : 1;
        // f64: the two backends differ by f64's rounding in other orders (~1e-16 relative), a million times below these
        double loss = t == DType.F64 ? 1e-10 : 1e-4, l2 = t == DType.F64 ? 1e-9 : 1e-4, element = t == DType.F64 ? 1e-8 : 2e-3;
        var layout = dp == 1 ? DataParallel.REPLICATED : DataParallel.FULLY_SHARDED;
        Graph g = TrainingPlans.graph(dp, layout, t, t, true);
        Run want = host(g, dp, t, t), got = gpu(g, dp, t, t);
        // float32: both backends' final states against the float64 run from the same (float32) weights and data
        Run exact = t == DType.F32 ? host64(TrainingPlans.graph(dp, layout, DType.F64, DType.F64, true), g, dp) : null;
        assertThat(want.losses()[STEPS - 1]).as("the host's loss falls: %s", java.util.Arrays.toString(want.losses())).isLessThan(want.losses()[0]);
        for (int i = 0; i < STEPS; i++)
            assertThat(Math.abs(got.losses()[i] - want.losses()[i])).as("%s step %d: gpu %s host %s", which, i, got.losses()[i], want.losses()[i])
                    .isLessThanOrEqualTo(loss * Math.abs(want.losses()[i]));
        for (int r = 0; r < dp; r++)
            for (var e : want.finalStates().get(r).entrySet()) {
                if (e.getKey().equals("loss")) continue;
                double[] w = e.getValue().toDoubleArray(), v = got.finalStates().get(r).get(e.getKey()).toDoubleArray();
                assertThat(v).as("rank %d %s", r, e.getKey()).hasSize(w.length);
                double diff = 0, norm = 0, max = 0;
                for (int i = 0; i < w.length; i++) {
                    diff += (v[i] - w[i]) * (v[i] - w[i]);
                    norm += w[i] * w[i];
                    max = Math.max(max, Math.abs(w[i]));
                }
                if (exact == null)
                    assertThat(Math.sqrt(diff)).as("%s rank %d %s: relative L2 difference", which, r, e.getKey()).isLessThanOrEqualTo(l2 * Math.sqrt(norm) + 1e-30);
                else {
                    // float32 against float64: the GPU's state no further from the float64 state than the host's float32 one
                    // is, within a factor of 4 (other orders of the same float32 sums), or within l2 of it where both
                    // are closer than that
                    double[] x = exact.finalStates().get(r).get(e.getKey()).toDoubleArray();
                    double gpuErr = 0, hostErr = 0, xNorm = 0;
                    for (int i = 0; i < x.length; i++) {
                        gpuErr += (v[i] - x[i]) * (v[i] - x[i]);
                        hostErr += (w[i] - x[i]) * (w[i] - x[i]);
                        xNorm += x[i] * x[i];
                    }
                    assertThat(Math.sqrt(gpuErr)).as("%s rank %d %s: distance to float64 (the host's float32: %s)", which, r, e.getKey(), Math.sqrt(hostErr))
                            .isLessThanOrEqualTo(Math.max(4 * Math.sqrt(hostErr), l2 * Math.sqrt(xNorm)) + 1e-30);
                }
                for (int i = 0; i < w.length; i++)
                    assertThat(Math.abs(v[i] - w[i])).as("%s rank %d %s[%d]: gpu %s host %s", which, r, e.getKey(), i, v[i], w[i])
                            .isLessThanOrEqualTo(element * max + 1e-30);
            }
    }

    /**
     * bf16 compute over f32 master weights (FSDP gathers bf16 copies of the f32 shards): rounding to bf16 (8 bits) in
     * other orders makes the two backends drift apart step by step, so only the first loss (the same weights) is
     * compared, within 2e-2 relative, and the GPU's loss must fall.
     */
    @ParameterizedTest(name = "world {0}")
    @ValueSource(ints = {1, 2})
    void bf16ComputeOverF32MastersTrainsOnTheGpu(int dp) {
        Graph g = TrainingPlans.graph(dp, dp == 1 ? DataParallel.REPLICATED : DataParallel.FULLY_SHARDED, DType.F32, DType.BF16, false);
        Run want = host(g, dp, DType.F32, DType.BF16), got = gpu(g, dp, DType.F32, DType.BF16);
        assertThat(Math.abs(got.losses()[0] - want.losses()[0])).as("first loss: gpu %s host %s", got.losses()[0], want.losses()[0])
                .isLessThanOrEqualTo(2e-2 * want.losses()[0]);
        for (double l : got.losses()) assertThat(l).isFinite();
        assertThat(got.losses()[STEPS - 1]).as("the loss falls: %s", java.util.Arrays.toString(got.losses())).isLessThan(got.losses()[0]);
    }
}
