package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.ExecutionOptions.HostTransport;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicReferenceArray;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * all_to_all in a world of host sessions whose 2 ranks are threads ({@link LocalWorld}), exchanging through each
 * transport: even and uneven (skewed counts, an empty part) against plain loops, two calls with different counts (no
 * stale rows), and a count past the capacity refused on every rank with the op and the counts named. The three
 * all_to_alls (the rows, their counts, z) read only the graph's inputs and run as one joined step: each rank
 * exchanges the parts in turn.
 */
@Timeout(120)
class AllToAllCpuWorldTest {

    static Graph graph() {
        var g = Gatun.graph("a2a").world(2);
        var x = g.input("x", DType.F32, 4, 3);
        var r = x.mul(2).allToAll("world", g.input("counts", DType.I64, 2), 6);
        g.output("y", r.values());
        g.output("received", r.counts());
        g.output("even", g.input("z", DType.I64, 4).allToAll("world"));
        return g.build();
    }

    /** Rank r's x: element i is 100 r + i; its z: rank r's (r, i) as 10 r + i; its counts. */
    static Map<String, NDArray> inputs(int r, long[] counts) {
        float[] x = new float[12];
        for (int i = 0; i < 12; i++) x[i] = 100 * r + i;
        long[] z = new long[4];
        for (int i = 0; i < 4; i++) z[i] = 10L * r + i + (1L << 55);
        return Map.of("x", NDArray.of(x, 4, 3), "counts", NDArray.of(counts.clone(), 2), "z", NDArray.of(z, 4));
    }

    /** Rank d's rows by plain loops: rank s's rows from sum(counts[s][0..d)) for counts[s][d] rows, doubled, packed, zeros after. */
    static float[] expected(long[][] counts, int d) {
        float[] want = new float[6 * 3];
        int at = 0;
        for (int s = 0; s < 2; s++) {
            long from = 0;
            for (int k = 0; k < d; k++) from += counts[s][k];
            for (long row = from; row < from + counts[s][d]; row++)
                for (int e = 0; e < 3; e++) want[at++] = 2 * (100 * s + row * 3 + e);
        }
        return want;
    }

    @ParameterizedTest
    @EnumSource(value = HostTransport.class, names = {"SHARED_MEMORY", "TCP"})
    void twoRanksInThreadsExchangeTheirRows(HostTransport transport) {
        long[][][] calls = {{{1, 3}, {2, 2}}, {{0, 4}, {0, 0}}, {{4, 0}, {2, 1}}};   // skewed, an empty part, nothing sent
        var inputs = new ArrayList<List<Map<String, NDArray>>>();
        for (long[][] c : calls) inputs.add(List.of(inputs(0, c[0]), inputs(1, c[1])));
        var out = new AtomicReferenceArray<List<Map<String, NDArray>>>(2);
        LocalWorld.run(2, Duration.ofSeconds(60), rv -> {
            var opts = CompileOptions.world(2).rank(rv).backend("host").hostTransport(transport).timeout(Duration.ofSeconds(60)).randomDelays(7);
            try (var s = Session.compile(graph(), opts)) {
                var mine = new ArrayList<Map<String, NDArray>>();
                for (var in : inputs) mine.add(s.runToHost(in.get(rv.rank())));
                out.set(rv.rank(), mine);
            }
        });
        var plan = dev.gatun.planner.Planner.plan(dev.gatun.lowering.Lowering.lower(graph(), dev.gatun.lowering.LoweringOptions.world(2)));
        assertThat(plan.steps()).as("%s", plan).anyMatch(st -> st instanceof dev.gatun.planner.Step.JoinedAllToAll j && j.members().size() == 3);
        for (int call = 0; call < calls.length; call++)
            for (int d = 0; d < 2; d++) {
                var o = out.get(d).get(call);
                assertThat(o.get("y").toFloatArray()).as("call %d rank %d", call, d).containsExactly(expected(calls[call], d));
                assertThat(o.get("received").toLongArray()).containsExactly(calls[call][0][d], calls[call][1][d]);
                long base = 1L << 55;
                assertThat(o.get("even").toLongArray()).as("even, rank %d", d)
                        .containsExactly(base + 2L * d, base + 2L * d + 1, base + 10 + 2L * d, base + 10 + 2L * d + 1);
            }
    }

    @ParameterizedTest
    @EnumSource(value = HostTransport.class, names = {"SHARED_MEMORY", "TCP"})
    void aCountPastTheCapacityIsRefusedOnEveryRank(HostTransport transport) {
        long[][] counts = {{2, 2}, {3, 1}};   // rank 0 would receive 2 + 3 = 5 rows: fits 6; raise to 4 + 3 = 7: does not
        counts[0][0] = 4;
        counts[0][1] = 0;
        var errors = new AtomicReferenceArray<String>(2);
        LocalWorld.run(2, Duration.ofSeconds(60), rv -> {
            var opts = CompileOptions.world(2).rank(rv).backend("host").hostTransport(transport).timeout(Duration.ofSeconds(60));
            try (var s = Session.compile(graph(), opts)) {
                try {
                    s.runToHost(inputs(rv.rank(), counts[rv.rank()]));
                } catch (GatunRuntimeException e) {
                    errors.set(rv.rank(), e.getMessage());
                }
            }
        });
        for (int r = 0; r < 2; r++)
            assertThat(errors.get(r)).as("rank %d", r).contains("all_to_all.symm_mem(")
                    .contains("rank 0 would receive 7 rows ([4, 3] from ranks [0, 1]) but the capacity is 6 rows");
    }
}
