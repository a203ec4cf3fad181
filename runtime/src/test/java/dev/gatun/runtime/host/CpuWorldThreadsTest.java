package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.ExecutionOptions.HostTransport;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.RankFailedException;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReferenceArray;

import static dev.gatun.ir.DType.BF16;
import static dev.gatun.ir.DType.F16;
import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.DType.F64;
import static dev.gatun.ir.DType.I64;
import static dev.gatun.ir.graph.ReduceOp.MAX;
import static dev.gatun.ir.graph.ReduceOp.MIN;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * A world of host sessions whose ranks are threads ({@link LocalWorld}), each session one rank that performs its
 * collectives with the others for real, over each transport: random graphs give the simulated world's outputs bit
 * for bit, int64 sums are exact, a contribution larger than a shared-memory slot crosses in several rounds, and a
 * rank that fails or never comes makes the others fail promptly, naming it and the collective.
 */
@Timeout(120)
class CpuWorldThreadsTest {

    /** Runs {@code body} on every rank of a local world, a session of {@code g} each; the outputs of each rank's calls. */
    static List<List<Map<String, NDArray>>> onThreads(Graph g, HostTransport transport, List<Map<String, NDArray>> inputs, int calls) {
        return onThreads(g, transport, inputs, calls, 0);
    }

    /** {@link #onThreads} with random delays between steps ({@code delaySeed} 0: none), which shake the ranks' order. */
    static List<List<Map<String, NDArray>>> onThreads(Graph g, HostTransport transport, List<Map<String, NDArray>> inputs, int calls, long delaySeed) {
        int world = inputs.size();
        var out = new AtomicReferenceArray<List<Map<String, NDArray>>>(world);
        LocalWorld.run(world, Duration.ofSeconds(60), rv -> {
            var opts = CompileOptions.world(world).rank(rv).backend("host").hostTransport(transport).timeout(Duration.ofSeconds(60))
                    .randomDelays(delaySeed);
            try (var s = Session.compile(g, opts)) {
                assertThat(s.ranks()).containsExactly(rv.rank());
                var mine = new ArrayList<Map<String, NDArray>>();
                for (int c = 0; c < calls; c++) mine.add(s.runToHost(inputs.get(rv.rank())));
                out.set(rv.rank(), mine);
            }
        });
        var byRank = new ArrayList<List<Map<String, NDArray>>>();
        for (int r = 0; r < world; r++) byRank.add(out.get(r));
        return byRank;
    }

    @ParameterizedTest
    @EnumSource(HostTransport.class)   // AUTO: shared memory here, as the default is
    void randomGraphsGiveTheSimulatedWorldsBits(HostTransport transport) {
        for (long seed = 0; seed < 30; seed++) {
            int world = 2 + (int) (seed % 3);
            Graph g = CpuWorlds.randomGraph(seed, world);
            var expected = CpuWorlds.simulated(g, seed, world);
            var got = onThreads(g, transport, CpuWorlds.inputs(g, seed, world), 2, seed % 3 == 0 ? seed + 1 : 0);
            for (int call = 0; call < 2; call++) {
                int c = call;
                CpuWorlds.assertSameBits(transport + " seed " + seed + " call " + call, g, expected, got.stream().map(r -> r.get(c)).toList());
            }
        }
    }

    /**
     * The order and precision of sums, against plain Java loops here: f64 summed in rank order (values where another
     * order gives another result); int64 near the extremes, sums wrapping as Java's long does, max and min exact; half
     * types summed in double in rank order and rounded once.
     */
    @ParameterizedTest
    @EnumSource(value = HostTransport.class, names = {"SHARED_MEMORY", "TCP"})
    void sumsGoInRankOrderInt64IsExactAndHalfTypesRoundOnce(HostTransport transport) {
        int world = 3, n = 5;
        var b = Gatun.graph("exact").world(world);
        var x = b.input("x", I64, n);
        var h = b.input("h", BF16, n);
        var f = b.input("f", F16, n);
        var d = b.input("d", F64, n);
        b.output("sum", x.allReduce(SUM));
        b.output("max", x.allReduce(MAX));
        b.output("min", x.allReduce(MIN));
        b.output("hsum", h.allReduce(SUM));
        b.output("fsum", f.allReduce(SUM));
        b.output("dsum", d.allReduce(SUM));
        Graph g = b.build();
        long[][] v = new long[world][n];
        double[][] hv = new double[world][n], fv = new double[world][n], dv = new double[world][n];
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) {
            for (int i = 0; i < n; i++) {
                v[r][i] = switch (i) {
                    case 0 -> Long.MAX_VALUE - r;        // the sum wraps
                    case 1 -> Long.MIN_VALUE + r;
                    case 2 -> (1L << 53) + 1 + r;         // beyond a double's integers
                    case 3 -> -(1L << 62) * (r % 2 == 0 ? 1 : -1);
                    default -> r * 1_000_000_007L;
                };
                hv[r][i] = r == 0 ? 256 : 1.0 / (1 + i);   // small addends a pairwise bf16 sum would lose
                fv[r][i] = r == 0 ? 2048 : 0.75;
                dv[r][i] = new double[] {1, 1e16, -1e16}[r];   // in rank order the 1 is lost in 1e16; reversed, it survives
            }
            inputs.add(Map.of("x", NDArray.of(v[r], n), "h", NDArray.of(BF16, hv[r], n), "f", NDArray.of(F16, fv[r], n), "d", NDArray.of(dv[r], n)));
        }
        var got = onThreads(g, transport, inputs, 1);
        for (int r = 0; r < world; r++) {
            var out = got.get(r).getFirst();
            for (int i = 0; i < n; i++) {
                long sum = 0, max = Long.MIN_VALUE, min = Long.MAX_VALUE;
                double hs = 0, fs = 0, ds = 0;
                for (int k = 0; k < world; k++) {
                    sum += v[k][i];
                    max = Math.max(max, v[k][i]);
                    min = Math.min(min, v[k][i]);
                    hs += NDArray.of(BF16, hv[k], n).get(i);
                    fs += NDArray.of(F16, fv[k], n).get(i);
                    ds += dv[k][i];
                }
                assertThat(out.get("sum").toLongArray()[i]).as("rank %d sum[%d]", r, i).isEqualTo(sum);
                assertThat(out.get("max").toLongArray()[i]).as("rank %d max[%d]", r, i).isEqualTo(max);
                assertThat(out.get("min").toLongArray()[i]).as("rank %d min[%d]", r, i).isEqualTo(min);
                assertThat(out.get("hsum").get(i)).as("rank %d bf16 sum[%d]", r, i).isEqualTo(NDArray.of(BF16, new double[] {hs}, 1).get(0));
                assertThat(out.get("dsum").get(i)).as("rank %d f64 sum[%d], in rank order", r, i).isEqualTo(ds);
                assertThat(out.get("fsum").get(i)).as("rank %d f16 sum[%d]", r, i).isEqualTo(NDArray.of(F16, new double[] {fs}, 1).get(0));
            }
        }
    }

    /** 300 000 f32 (1.2 MB) per rank: five rounds through a shared-memory slot of 256 KiB, one frame over TCP. */
    @ParameterizedTest
    @EnumSource(value = HostTransport.class, names = {"SHARED_MEMORY", "TCP"})
    void aContributionLargerThanASlotCrossesWhole(HostTransport transport) {
        int world = 2, n = 300_000;
        var b = Gatun.graph("large").world(world);
        b.output("y", b.input("x", F32, n).allReduce(SUM));
        b.output("g", b.input("z", F32, 4).allGather());
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) {
            float[] x = new float[n];
            for (int i = 0; i < n; i++) x[i] = (float) (i * (r + 1) % 1000);
            inputs.add(Map.of("x", NDArray.of(x, n), "z", NDArray.of(new float[] {r, r, r, r}, 4)));
        }
        var out = onThreads(b.build(), transport, inputs, 1);
        for (int r = 0; r < world; r++) {
            float[] y = out.get(r).getFirst().get("y").toFloatArray();
            for (int i = 0; i < n; i++) assertThat(y[i]).as("rank %d y[%d]", r, i).isEqualTo((float) (i % 1000 + i * 2 % 1000));
            assertThat(out.get(r).getFirst().get("g").toFloatArray()).containsExactly(0, 0, 0, 0, 1, 1, 1, 1);
        }
    }

    /** An all-reduce, a user op that throws on rank 1, another all-reduce: rank 0 waits in the second for rank 1. */
    static Graph failingOnRank1() {
        var boom = UserOp.builder("boom").input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .host((in, out, rank, world) -> {
                    if (rank == 1) throw new IllegalStateException("rank one exploded");
                    for (long i = 0; i < in.getFirst().numel(); i++) out.getFirst().set(i, in.getFirst().get(i));
                })
                .build();
        var b = Gatun.graph("boom").world(2).register(boom);
        b.output("y", b.call1("boom", b.input("x", F32, 8).allReduce(SUM)).allReduce(SUM));
        return b.build();
    }

    @ParameterizedTest
    @EnumSource(value = HostTransport.class, names = {"SHARED_MEMORY", "TCP"})
    void aRankThatFailsStopsItsPeersAtOnceNamingIt(HostTransport transport) {
        Graph g = failingOnRank1();
        var errors = new AtomicReferenceArray<Throwable>(2);
        var took = new long[1];
        LocalWorld.run(2, rv -> {
            // the long timeout shows the peer is stopped by rank 1's failure, not by waiting out the timeout
            var opts = CompileOptions.world(2).rank(rv).backend("host").hostTransport(transport).timeout(Duration.ofSeconds(60));
            try (var s = Session.compile(g, opts)) {
                long t0 = System.nanoTime();
                try {
                    s.runToHost(Map.of("x", NDArray.full(F32, 1, 8)));
                } catch (GatunRuntimeException e) {
                    errors.set(rv.rank(), e);
                }
                if (rv.rank() == 0) took[0] = System.nanoTime() - t0;
                rv.barrier("reported", Duration.ofSeconds(30));   // both failed before either closes
            }
        });
        assertThat(errors.get(1)).hasMessageContaining("rank one exploded");
        assertThat(errors.get(0)).isInstanceOf(RankFailedException.class)
                .hasMessageContaining("rank 0 at ").hasMessageContaining("= all_reduce.").hasMessageContaining("rank 1 stopped")
                .hasMessageContaining("rank one exploded");
        assertThat(((RankFailedException) errors.get(0)).rank()).isEqualTo(1);
        assertThat(took[0]).as("rank 0 stops at once, not after the 60 s timeout").isLessThan(TimeUnit.SECONDS.toNanos(30));
    }

    @ParameterizedTest
    @EnumSource(value = HostTransport.class, names = {"SHARED_MEMORY", "TCP"})
    void aRankThatNeverComesTimesOutNamingItAndTheCollective(HostTransport transport) {
        var b = Gatun.graph("late").world(3);
        b.output("y", b.input("x", F32, 4).allReduce(SUM));
        Graph g = b.build();
        var error = new AtomicReferenceArray<Throwable>(3);
        var failed = new CountDownLatch(2);
        LocalWorld.run(3, rv -> {
            var opts = CompileOptions.world(3).rank(rv).backend("host").hostTransport(transport).timeout(Duration.ofMillis(1500));
            try (var s = Session.compile(g, opts)) {
                if (rv.rank() == 2) {
                    assertThat(failed.await(60, TimeUnit.SECONDS)).isTrue();   // never calls while the others wait
                    return;
                }
                try {
                    s.runToHost(Map.of("x", NDArray.full(F32, 1, 4)));
                } catch (GatunRuntimeException e) {
                    error.set(rv.rank(), e);
                } finally {
                    failed.countDown();
                }
            }
        });
        // rank 0 or 1 may see the other give up first; whoever timed out names rank 2, the other names it or its peer
        var messages = Collections.synchronizedList(new ArrayList<String>());
        for (int r = 0; r < 2; r++) {
            assertThat(error.get(r)).as("rank " + r).isInstanceOf(RankFailedException.class).hasMessageContaining("= all_reduce.barrier_free(x, sum, \"world\")");
            messages.add(error.get(r).getMessage());
        }
        assertThat(messages).anySatisfy(m -> assertThat(m).contains("timed out after 1500 ms waiting for rank 2"));
    }

    @ParameterizedTest
    @EnumSource(value = HostTransport.class, names = {"SHARED_MEMORY", "TCP"})
    void ranksThatCallWithDifferentShapesAreToldSo(HostTransport transport) {
        var b = Gatun.graph("shapes").world(2);
        b.output("y", b.input("x", F32, "n").allReduce(SUM));
        Graph g = b.build();
        var error = new AtomicReferenceArray<Throwable>(2);
        LocalWorld.run(2, rv -> {
            var opts = CompileOptions.world(2).rank(rv).backend("host").hostTransport(transport).timeout(Duration.ofSeconds(60));
            try (var s = Session.compile(g, opts)) {
                try {
                    s.runToHost(Map.of("x", NDArray.full(F32, 1, 4 + rv.rank())));   // 4 elements on rank 0, 5 on rank 1
                } catch (GatunRuntimeException e) {
                    error.set(rv.rank(), e);
                }
                rv.barrier("reported", Duration.ofSeconds(30));
            }
        });
        assertThat(error.get(0)).isInstanceOf(RankFailedException.class)
                .hasMessageContaining("rank 0 at ").hasMessageContaining("rank 1 contributes 20 bytes and this rank 16; every rank must call with the same shapes");
        assertThat(error.get(1)).isInstanceOf(RankFailedException.class).hasMessageContaining("rank 1 at ");
    }
}
