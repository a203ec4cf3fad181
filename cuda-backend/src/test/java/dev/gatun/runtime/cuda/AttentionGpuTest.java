package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.host.AttentionHostTest;
import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code attention} on the GPU against plain float64 loops: every dtype and head size the kernels take, one slice of
 * positions and many (the last block merging them), row counts that are not a multiple of the block's four, positions
 * at both ends of the cache, replayed with a new position every call (the position read on the device) and eagerly;
 * each cut (32, 16 and 8 positions a warp, forced by {@code PlanOptions.attentionPositions}) and the planner's own.
 */
@RequiresGpu
class AttentionGpuTest {
    record Case(DType t, int batch, int rows, int d, int len) {}

    /** The cuts forced (positions a warp), and 0: the planner's rule. */
    static final int[] CUTS = {0, 32, 16, 8};

    static CompileOptions cut(CompileOptions o, int positions) { return o.planning(o.planning().withAttentionPositions(positions)); }

    /** The cut the plan chose for its (first) attention step: {@code positions} where forced. */
    static int chosen(Session s) {
        var p = s.plan();
        return p.steps().stream().map(p::choice).filter(c -> c.attention() != null).findFirst().orElseThrow().attention().positions();
    }

    @Test
    void everyHeadSizeAndDtypeAgainstPlainLoops() {
        var cases = List.of(new Case(DType.BF16, 8, 4, 64, 544), new Case(DType.BF16, 64, 4, 64, 544), new Case(DType.F16, 2, 6, 128, 300),
                new Case(DType.F32, 3, 5, 16, 70), new Case(DType.F32, 1, 1, 64, 2048), new Case(DType.BF16, 1, 8, 128, 33),
                new Case(DType.F16, 4, 4, 32, 1));
        for (int positions : CUTS)
        for (Case c : cases)
            for (boolean replay : new boolean[]{true, false}) {
                double scale = 1 / Math.sqrt(c.d());
                Graph graph = AttentionHostTest.graph(c.t(), DType.I32, c.batch(), c.rows(), c.d(), c.len(), scale);
                double tol = c.t() == DType.F32 ? 1e-4 : 2e-2;
                try (var s = Session.compile(graph, cut(CompileOptions.world(1).backend("cuda").cudaGraphs(replay), positions))) {
                    if (positions != 0) assertThat(chosen(s)).isEqualTo(positions);
                    for (int position : new int[]{0, c.len() - 1, c.len() / 2, 1 % c.len(), c.len() / 3}) {
                        var in = AttentionHostTest.inputs(c.t(), DType.I32, c.batch(), c.rows(), c.d(), c.len(), position, 11L * c.d() + position);
                        double[] want = AttentionHostTest.expected(in, c.batch(), c.rows(), c.d(), c.len(), position, scale);
                        NDArray y = s.runToHost(in).get("y");
                        assertThat(NDArray.of(DType.F64, want, c.batch(), c.rows(), c.d()).mismatch(y, tol, tol))
                                .as("%s replay %s position %d, %d positions a warp", c, replay, position, chosen(s)).isNull();
                    }
                }
            }
    }

    /** A head size the kernels do not take is refused when the session is made, naming the step. */
    @Test
    void anUnsupportedHeadSizeIsRefusedByName() {
        Graph graph = AttentionHostTest.graph(DType.F32, DType.I32, 1, 4, 128, 64, 0.1);
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> Session.compile(graph, CompileOptions.world(1).backend("cuda")).close())
                .isInstanceOf(dev.gatun.runtime.GatunRuntimeException.class).hasMessageContaining("attention(").hasMessageContaining("head size");
    }

    /** The same inputs at a position that moves each call, replayed: only the position changes the result. */
    @Test
    void aReplayedGraphReadsEachCallsPosition() {
        int b = 8, r = 4, d = 64, len = 544;
        Graph graph = AttentionHostTest.graph(DType.BF16, DType.I64, b, r, d, len, 0.125);
        var in = new HashMap<>(AttentionHostTest.inputs(DType.BF16, DType.I64, b, r, d, len, 0, 5));
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("cuda").cudaGraphs(true))) {
            for (int position = 0; position < len; position += 37) {
                in.put("pos", NDArray.of(DType.I64, new double[]{position}, 1));
                double[] want = AttentionHostTest.expected(in, b, r, d, len, position, 0.125);
                assertThat(NDArray.of(DType.F64, want, b, r, d).mismatch(s.runToHost(in).get("y"), 2e-2, 2e-2)).as("position %d", position).isNull();
            }
        }
    }

    /**
     * A decode step's layer: the new key and value written into the caches (states) at the position, then attended to,
     * call after call at positions 0, 1, 2, ... over a cache of four slices, programmatic launches on, the update a launch
     * of its own (the attention loads the cache before it waits for it, {@code LaunchChoice.early}, and the written
     * position again after) and in the attention's launch ({@code Step.UpdateAttention}: the kernel takes the position
     * from the update's sources and writes it into the caches), so every call must see its own key and value and every
     * earlier call's. Against float64 loops over a mirror of the caches.
     */
    @Test
    void theCacheUpdatedJustBeforeIsReadWithItsNewPosition() {
        int b = 8, r = 4, d = 64, len = 100;
        double scale = 0.125;
        for (int positions : CUTS)
        for (boolean together : new boolean[]{true, false})
        for (DType t : List.of(DType.BF16, DType.F32)) {
            var g = dev.gatun.dsl.Gatun.graph("update_attend");
            var q = g.input("q", t, b, r, d);
            var pos = g.input("pos", DType.I32, 1);
            var keys = g.state("k", t, b, d, len).updateSlice(2, g.input("k_new", t, b, d, 1), pos);
            var values = g.state("v", t, b, len, d).updateSlice(1, g.input("v_new", t, b, 1, d), pos);
            g.output("y", q.attention(keys, values, pos, scale));
            Graph graph = g.build();
            var base = CompileOptions.world(1).backend("cuda").cudaGraphs(true).planning(dev.gatun.planner.PlanOptions.DEFAULT.withAttentionUpdates(together));
            var options = cut(base.programmaticLaunch(dev.gatun.planner.PlanOptions.ProgrammaticLaunch.ON), positions);
            try (var s = Session.compile(graph, options)) {
                var steps = s.plan().steps();
                int at = 0;
                while (!(dev.gatun.planner.AttentionCall.is(steps.get(at)) || steps.get(at) instanceof dev.gatun.planner.Step.UpdateAttention)) at++;
                assertThat(steps.get(at) instanceof dev.gatun.planner.Step.UpdateAttention).as(s.plan().toString()).isEqualTo(together);
                assertThat(s.plan().choice(steps.get(at)).early()).as(s.plan().toString()).isTrue();
                double[] kc = new double[b * d * len], vc = new double[b * len * d];
                for (int position = 0; position < len; position++) {
                    var in = new HashMap<String, NDArray>();
                    in.put("q", NDArray.random(t, 3L * position + 1, b, r, d));
                    in.put("k_new", NDArray.random(t, 3L * position + 2, b, d, 1));
                    in.put("v_new", NDArray.random(t, 3L * position + 3, b, 1, d));
                    in.put("pos", NDArray.of(new int[]{position}, 1));
                    double[] kn = in.get("k_new").toDoubleArray(), vn = in.get("v_new").toDoubleArray();
                    for (int x = 0; x < b; x++)
                        for (int e = 0; e < d; e++) {
                            kc[(x * d + e) * len + position] = kn[x * d + e];
                            vc[(x * len + position) * d + e] = vn[x * d + e];
                        }
                    double[] want = dev.gatun.runtime.testing.Attentions.expected(in.get("q").toDoubleArray(), kc, vc, b, r, d, len, position, scale);
                    double tol = t == DType.F32 ? 1e-4 : 2e-2;
                    assertThat(NDArray.of(DType.F64, want, b, r, d).mismatch(s.runToHost(in).get("y"), tol, tol))
                            .as("%s position %d, one launch %s, %d positions a warp", t, position, together, chosen(s)).isNull();
                }
            }
        }
    }
}
