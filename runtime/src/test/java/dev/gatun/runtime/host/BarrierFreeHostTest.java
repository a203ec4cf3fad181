package dev.gatun.runtime.host;

import dev.gatun.ir.Algorithm;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Barrier-free all-reduces through sessions on the host backend: the seeds' graph call after call, ranks delayed at random. */
class BarrierFreeHostTest {

    static List<Map<String, NDArray>> inputs(Graph g, int world, long seed) {
        var in = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) in.add(Map.of("x", NDArray.randn(g.inputs().get("x").type().dtype(), seed * 31 + r, 8, 8)));
        return in;
    }

    static Graph seeds(DType t) { return HostSessionTest.seeds(t, 8); }

    /**
     * Worlds of 2 to 4 with random rank delays, 80 calls each with new inputs: every rank's result is the reference's,
     * bit for bit the one-shot all-reduce's, and the same bits on every rank.
     */
    @Test
    void theSeedsGraphMatchesOneShotBitForBitCallAfterCall() {
        for (DType t : List.of(DType.F32, DType.BF16)) {
            Graph g = seeds(t);
            for (int world = 2; world <= 4; world++) {
                try (var free = Session.compile(g, CompileOptions.world(world).backend("host").forceAllReduce(Algorithm.BARRIER_FREE).randomDelays(world));
                     var shot = Session.compile(g, CompileOptions.world(world).backend("host").forceAllReduce(Algorithm.ONE_SHOT))) {
                    for (int call = 0; call < 80; call++) {
                        var in = inputs(g, world, call);
                        var got = free.runToHost(in);
                        var want = shot.runToHost(in);
                        for (int r = 0; r < world; r++) {
                            NDArray d = got.get(r).get("d");
                            assertThat(d.segment().mismatch(want.get(r).get("d").segment())).as("world %d call %d rank %d: bits of one-shot", world, call, r).isEqualTo(-1);
                            assertThat(d.segment().mismatch(got.get(0).get("d").segment())).as("rank %d against rank 0", r).isEqualTo(-1);
                        }
                        if (call % 40 == 0) {
                            var ref = ReferenceInterpreter.evaluate(g, in);
                            for (int r = 0; r < world; r++)
                                assertThat(ref.get(r).get("d").mismatch(got.get(r).get("d"), t == DType.F32 ? 1e-5 : 1e-2, t == DType.F32 ? 1e-5 : 1e-2)).isNull();
                        }
                    }
                }
            }
        }
    }

    /**
     * A call that fails on one rank (an index out of range before the all-reduce) leaves pushes in the slots and the
     * ranks' call counters apart; the calls after it still give the one-shot all-reduce's bits on every rank.
     */
    @Test
    void callsAfterAFailedOneGiveTheRightSums() {
        var b = dev.gatun.dsl.Gatun.graph("select_then_reduce").world(2);
        var table = b.input("table", DType.F32, 6, 8);
        b.output("y", table.indexSelect(0, b.input("ids", DType.I64, 3)).allReduce(dev.gatun.ir.graph.ReduceOp.SUM));
        Graph g = b.build();
        java.util.function.BiFunction<Integer, long[], List<Map<String, NDArray>>> in = (call, rank1Ids) -> {
            var out = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < 2; r++)
                out.add(Map.of("table", NDArray.randn(DType.F32, call * 7L + r, 6, 8), "ids", NDArray.of(r == 1 ? rank1Ids : new long[]{0, 5, 2}, 3)));
            return out;
        };
        try (var free = Session.compile(g, CompileOptions.world(2).backend("host").forceAllReduce(Algorithm.BARRIER_FREE).randomDelays(2));
             var shot = Session.compile(g, CompileOptions.world(2).backend("host").forceAllReduce(Algorithm.ONE_SHOT))) {
            for (int call = 0; call < 12; call++) {
                if (call % 4 == 1) {
                    int c = call;
                    assertThatThrownBy(() -> free.runToHost(in.apply(c, new long[]{1, 9, 3})))
                            .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("index 9");
                    continue;
                }
                var ins = in.apply(call, new long[]{4, 1, 3});
                var got = free.runToHost(ins);
                var want = shot.runToHost(ins);
                for (int r = 0; r < 2; r++)
                    assertThat(got.get(r).get("y").segment().mismatch(want.get(r).get("y").segment())).as("call %d rank %d", call, r).isEqualTo(-1);
            }
        }
    }

    @Test
    void aRankThatWaitsPastTheTimeoutGivesUpNamingThePeer() {
        // a timeout shorter than any wait: the first rank to wait for a delayed peer's element gives up
        Graph g = seeds(DType.F32);
        try (var s = Session.compile(g, CompileOptions.world(2).backend("host").forceAllReduce(Algorithm.BARRIER_FREE)
                .timeout(java.time.Duration.ofNanos(1)).randomDelays(3))) {
            assertThatThrownBy(() -> { for (int call = 0; call < 50; call++) s.runToHost(inputs(g, 2, call)); })
                    .isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("all_reduce.barrier_free").hasMessageContaining("waiting for rank");
        }
    }
}
