package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.RankFailedException;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.time.Duration;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.DType.I32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class HostSessionTest {

    static Graph seeds(int n) { return seeds(F32, n); }

    static Graph seeds(dev.gatun.ir.DType t, int n) {
        var g = Gatun.graph("seeds");
        var x = g.input("x", t, n, n);
        var a = x.add(1).allReduce(SUM);
        var b = x.add(2).allReduce(SUM);
        var c = x.add(3).allReduce(SUM);
        g.output("d", a.add(b).add(c).allReduce(SUM));
        return g.build();
    }

    static List<Map<String, NDArray>> rankPlusOne(int world, int n) {
        return java.util.stream.IntStream.range(0, world).mapToObj(r -> Map.of("x", NDArray.full(F32, r + 1, n, n))).toList();
    }

    @Test
    void fusedKeepdimChainsComputeWhatPlainLoopsDo() {
        var g = Gatun.graph("keepdim");
        var x = g.input("x", F32, 4, 8);
        g.output("y", x.sum(true, -1).add(1).mul(2));
        g.output("z", x.slice(1, 0, 1).abs().add(1).rsqrt());
        var in = NDArray.random(F32, 5, 4, 8);
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            var out = s.runToHost(Map.of("x", in));
            for (int r = 0; r < 4; r++) {
                double sum = 0;
                for (int c = 0; c < 8; c++) sum += in.get(r * 8 + c);
                assertThat(out.get("y").get(r)).isCloseTo((sum + 1) * 2, org.assertj.core.data.Offset.offset(1e-4));
                assertThat(out.get("z").get(r)).isCloseTo(1 / Math.sqrt(Math.abs(in.get(r * 8)) + 1), org.assertj.core.data.Offset.offset(1e-5));
            }
        }
    }

    @Test
    void aChainAbsorbedIntoItsReductionComputesWhatPlainLoopsDo() {
        var g = Gatun.graph("chain_sum");
        var x = g.input("x", F32, 4, 8);
        g.output("y", x.add(1).sub(2).mul(3).sum(0, 1));
        g.output("r", x.add(1).mul(x.add(1)).sum(1));
        var in = NDArray.random(F32, 3, 4, 8);
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            var out = s.runToHost(Map.of("x", in));
            double y = 0;
            for (int i = 0; i < 32; i++) y += (in.get(i) + 1 - 2) * 3;
            assertThat(out.get("y").get(0)).isCloseTo(y, org.assertj.core.data.Offset.offset(1e-3));
            for (int r = 0; r < 4; r++) {
                double acc = 0;
                for (int c = 0; c < 8; c++) acc += (in.get(r * 8 + c) + 1) * (in.get(r * 8 + c) + 1);
                assertThat(out.get("r").get(r)).isCloseTo(acc, org.assertj.core.data.Offset.offset(1e-4));
            }
        }
    }

    @Test
    void kernelsPulledIntoTheirConsumerComputeWhatPlainLoopsDo() {
        var g = Gatun.graph("two_sins");
        var b = g.input("b", F32, 8);
        var c = g.input("c", F32, 8);
        g.output("y", b.sin().add(c.sin()));
        g.output("z", b.sin().mul(2).add(c.cos().mul(b.sin())));
        var bs = NDArray.random(F32, 4, 8);
        var cs = NDArray.random(F32, 5, 8);
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            var out = s.runToHost(Map.of("b", bs, "c", cs));
            for (int i = 0; i < 8; i++) {
                double sb = Math.sin(bs.get(i)), sc = Math.sin(cs.get(i)), cc = Math.cos(cs.get(i));
                assertThat(out.get("y").get(i)).isCloseTo(sb + sc, org.assertj.core.data.Offset.offset(1e-5));
                assertThat(out.get("z").get(i)).isCloseTo(sb * 2 + cc * sb, org.assertj.core.data.Offset.offset(1e-5));
            }
        }
    }

    @Test
    void anOutputWrittenInPlaceOfItsInputIsRight() {
        var g = Gatun.graph("out_in_place");
        var x = g.input("x", F32, 3, 4);
        var w = g.input("w", F32, 4, 4);
        g.output("y", x.matmul(w).exp());
        var xs = NDArray.random(F32, 1, 3, 4);
        var ws = NDArray.random(F32, 2, 4, 4);
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().toString()).contains("in place of");
            for (int call = 0; call < 2; call++) {
                var y = s.runToHost(Map.of("x", xs, "w", ws)).get("y");
                for (int i = 0; i < 3; i++)
                    for (int j = 0; j < 4; j++) {
                        double acc = 0;
                        for (int k = 0; k < 4; k++) acc += xs.get(i * 4 + k) * ws.get(k * 4 + j);
                        assertThat(y.get(i * 4 + j)).isCloseTo(Math.exp(acc), org.assertj.core.data.Offset.offset(1e-4 * Math.exp(acc)));
                    }
            }
        }
    }

    @Test
    void seedsGives42OnEveryRank() {
        try (var s = Session.compile(seeds(4), CompileOptions.world(2).backend("host"))) {
            assertThat(s.backendName()).isEqualTo("host");
            // the three all-reduces of 64 B barrier-free (the default below 512 KiB at two ranks): rotating slots, no barrier
            assertThat(s.plan().toString()).contains("all_reduce.barrier_free").contains("rotating slots").doesNotContain("one_shot");
            for (int call = 0; call < 3; call++) {
                var out = s.runToHost(rankPlusOne(2, 4));
                for (var rank : out) assertThat(rank.get("d").toFloatArray()).containsOnly(42f);
            }
        }
    }

    @Test
    void seedsOnFourRanksWithDelays() {
        // x = rank+1 on 4 ranks: a = 4*? ... each all-reduce sums ranks: sum(r+1+k) = 10 + 4k; d = 4 * (14 + 18 + 22)
        try (var s = Session.compile(seeds(8), CompileOptions.world(4).backend("host").randomDelays(7))) {
            for (var rank : s.runToHost(rankPlusOne(4, 8))) assertThat(rank.get("d").toFloatArray()).containsOnly(4f * (14 + 18 + 22));
        }
    }

    @Test
    void wrongShapeDtypeNamesAndWorldAreRejected() {
        try (var s = Session.compile(seeds(4), CompileOptions.world(2).backend("host"))) {
            var good = rankPlusOne(2, 4);
            assertThatThrownBy(() -> s.runToHost(List.of(Map.of("x", NDArray.full(F32, 1, 4, 5)), good.get(1))))
                    .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("rank 0").hasMessageContaining("'x' has shape [4, 5]")
                    .hasMessageContaining("f32[4,4]");
            assertThatThrownBy(() -> s.runToHost(List.of(good.get(0), Map.of("x", NDArray.full(I32, 1, 4, 4)))))
                    .hasMessageContaining("rank 1").hasMessageContaining("dtype i32");
            assertThatThrownBy(() -> s.runToHost(List.of(Map.of("y", NDArray.full(F32, 1, 4, 4)), good.get(1))))
                    .hasMessageContaining("missing inputs [x]");
            assertThatThrownBy(() -> s.runToHost(good.subList(0, 1))).hasMessageContaining("world of 2").hasMessageContaining("inputs for 1");
            assertThatThrownBy(() -> s.runToHost(good.get(0))).hasMessageContaining("one input map per rank");
        }
    }

    @Test
    void closedSessionRefusesAndCloseIsIdempotent() {
        var s = Session.compile(seeds(4), CompileOptions.world(2).backend("host"));
        s.close();
        s.close();
        assertThat(s.isClosed()).isTrue();
        assertThatThrownBy(() -> s.runToHost(rankPlusOne(2, 4))).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("closed");
    }

    @Test
    void aRankThatThrowsStopsTheOthersWithItsName() {
        var boom = UserOp.builder("boom")
                .input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .host((in, out, rank, world) -> {
                    if (rank == 1) throw new IllegalStateException("rank one exploded");
                    for (long i = 0; i < in.getFirst().numel(); i++) out.getFirst().set(i, in.getFirst().get(i));
                })
                .build();
        var g = Gatun.graph("boom").register(boom);
        var x = g.input("x", F32, 16);
        g.output("y", g.call1("boom", x).allReduce(SUM));
        try (var s = Session.compile(g.build(), CompileOptions.world(3).backend("host").timeout(Duration.ofSeconds(20)))) {
            var in = java.util.stream.IntStream.range(0, 3).mapToObj(r -> Map.of("x", NDArray.full(F32, r, 16))).toList();
            long t0 = System.nanoTime();
            assertThatThrownBy(() -> s.runToHost(in)).isInstanceOf(RankFailedException.class)
                    .hasMessageContaining("rank 1 failed").hasMessageContaining("rank one exploded")
                    .satisfies(e -> assertThat(((RankFailedException) e).rank()).isEqualTo(1));
            assertThat(System.nanoTime() - t0).as("others stop promptly, not at the timeout").isLessThan(Duration.ofSeconds(10).toNanos());
        }
    }

    @Test
    void callsFromManyThreadsAreServedOneAtATimeAndEveryValueIsRight() throws Exception {
        // a host user op then an all-reduce: before calls were serialised, two calls' ranks shared one pool of rank
        // threads, and rank 0 got 1 instead of 3 (rank 1's contribution missing)
        var copy = UserOp.builder("copy").input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .host((in, out, rank, world) -> { for (long i = 0; i < in.getFirst().numel(); i++) out.getFirst().set(i, in.getFirst().get(i)); })
                .build();
        var g = Gatun.graph("concurrent").register(copy);
        g.output("y", g.call1("copy", g.input("x", F32, 8)).allReduce(SUM));
        try (var s = Session.compile(g.build(), CompileOptions.world(2).backend("host").randomDelays(3).timeout(Duration.ofSeconds(30)))) {
            int threads = 8, calls = 12;
            var pool = java.util.concurrent.Executors.newFixedThreadPool(threads);
            try {
                var futures = new java.util.ArrayList<java.util.concurrent.Future<?>>();
                for (int t = 0; t < threads; t++) {
                    int base = t * 100;
                    futures.add(pool.submit(() -> {
                        for (int c = 0; c < calls; c++) {
                            float a = base + c, b = 2 * (base + c) + 1;
                            var out = s.runToHost(List.of(Map.of("x", NDArray.full(F32, a, 8)), Map.of("x", NDArray.full(F32, b, 8))));
                            for (var r : out) assertThat(r.get("y").toFloatArray()).containsOnly(a + b);
                        }
                        return null;
                    }));
                }
                for (var f : futures) f.get(120, java.util.concurrent.TimeUnit.SECONDS);
            } finally {
                pool.shutdownNow();
            }
        }
    }

    @Test
    void aPlanTooLargeForTheHostNamesThePoolInsteadOfRunningOutOfMemory() {
        var g = Gatun.graph("big");
        g.output("y", g.input("x", F32, 1L << 20, 1L << 20).add(1));   // 4 TiB
        assertThatThrownBy(() -> Session.compile(g.build(), CompileOptions.world(1).backend("host"))).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("plan 'big': the host backend cannot allocate pool").hasMessageContaining("4096 GiB");
    }

    static Graph waitingForRankOne(java.util.concurrent.CountDownLatch release) {
        var hold = UserOp.builder("hold").input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .host((in, out, rank, world) -> {
                    if (rank == 1) {
                        try { release.await(30, java.util.concurrent.TimeUnit.SECONDS); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
                    }
                })
                .build();
        var g = Gatun.graph("held").register(hold);
        g.output("y", g.call1("hold", g.input("x", F32, 8)).allReduce(SUM));
        return g.build();
    }

    @Test
    void abortStopsACallInFlightOnEveryRankAndTheSessionCannotRunAgain() throws Exception {
        var release = new java.util.concurrent.CountDownLatch(1);
        try (var s = Session.compile(waitingForRankOne(release), CompileOptions.world(2).backend("host").timeout(Duration.ofSeconds(60)))) {
            var in = List.of(Map.of("x", NDArray.full(F32, 1, 8)), Map.of("x", NDArray.full(F32, 2, 8)));
            var call = java.util.concurrent.CompletableFuture.supplyAsync(() -> s.runToHost(in));
            Thread.sleep(300);
            assertThat(call).isNotDone(); // rank 0 waits at the all-reduce for rank 1
            long t0 = System.nanoTime();
            s.abort();
            assertThatThrownBy(() -> call.get(10, java.util.concurrent.TimeUnit.SECONDS)).hasRootCauseInstanceOf(GatunRuntimeException.class)
                    .rootCause().hasMessageContaining("the call was aborted");
            assertThat(System.nanoTime() - t0).as("promptly, not at the 60 s timeout").isLessThan(Duration.ofSeconds(3).toNanos());
            assertThat(s.isAborted()).isTrue();
            assertThatThrownBy(() -> s.runToHost(in)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("was aborted and cannot run again");
        } finally {
            release.countDown();
        }
    }

    @Test
    void closingFromAnotherThreadAbortsTheCallAndWaitsForIt() throws Exception {
        var release = new java.util.concurrent.CountDownLatch(1);
        var s = Session.compile(waitingForRankOne(release), CompileOptions.world(2).backend("host").timeout(Duration.ofSeconds(60)));
        try {
            var in = List.of(Map.of("x", NDArray.full(F32, 1, 8)), Map.of("x", NDArray.full(F32, 2, 8)));
            var call = java.util.concurrent.CompletableFuture.supplyAsync(() -> s.runToHost(in));
            Thread.sleep(300);
            long t0 = System.nanoTime();
            s.close();
            assertThat(call).isCompletedExceptionally(); // close returned only after the call ended
            assertThat(System.nanoTime() - t0).isLessThan(Duration.ofSeconds(3).toNanos());
            assertThatThrownBy(() -> s.runToHost(in)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("closed");
        } finally {
            release.countDown();
        }
    }

    static java.util.Set<Thread> rankThreads() {
        var out = new java.util.HashSet<Thread>();
        for (Thread t : Thread.getAllStackTraces().keySet()) if (t.getName().startsWith("gatun-host-rank-") && t.isAlive()) out.add(t);
        return out;
    }

    @Test
    void sessionsDroppedWithoutCloseGiveTheirThreadsBack() throws Exception {
        var before = rankThreads();
        var g = Gatun.graph("dropped");
        g.output("y", g.input("x", F32, 4).add(1).allReduce(SUM));
        var graph = g.build();
        // held until their threads are counted (a collection in between would already give some back), then dropped
        var held = new java.util.ArrayList<Session>();
        for (int i = 0; i < 5; i++) {
            var s = Session.compile(graph, CompileOptions.world(4).backend("host"));
            var in = java.util.stream.IntStream.range(0, 4).mapToObj(r -> Map.of("x", NDArray.full(F32, r, 4))).toList();
            assertThat(s.runToHost(in).getFirst().get("y").toFloatArray()).containsOnly(10f);
            held.add(s);
        }
        var mine = rankThreads();
        mine.removeAll(before);
        assertThat(mine).hasSize(20);
        held.clear();
        long deadline = System.nanoTime() + Duration.ofSeconds(20).toNanos();
        while (mine.stream().anyMatch(Thread::isAlive) && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(50);
        }
        assertThat(mine).as("rank threads of the sessions that became unreachable").noneMatch(Thread::isAlive);
    }

    @Test
    void aRankThatNeverArrivesTimesOutNamingIt() {
        var slow = UserOp.builder("slow")
                .input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .host((in, out, rank, world) -> {
                    if (rank == 0) {
                        try { Thread.sleep(3000); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
                    }
                })
                .build();
        var g = Gatun.graph("slow").register(slow);
        g.output("y", g.call1("slow", g.input("x", F32, 8)).allReduce(SUM));
        try (var s = Session.compile(g.build(), CompileOptions.world(2).backend("host").timeout(Duration.ofMillis(300)))) {
            var in = List.of(Map.of("x", NDArray.full(F32, 1, 8)), Map.of("x", NDArray.full(F32, 2, 8)));
            long t0 = System.nanoTime();
            assertThatThrownBy(() -> s.runToHost(in)).isInstanceOf(RankFailedException.class)
                    .hasMessageContaining("rank 0 did not arrive in time").hasMessageContaining("waiting for rank")
                    .satisfies(e -> assertThat(((RankFailedException) e).rank()).as("the rank that never arrived").isZero());
            assertThat(System.nanoTime() - t0).as("fails soon after the timeout, not when the sleeping rank wakes").isLessThan(Duration.ofMillis(2500).toNanos());
        }
    }

    @Test
    void aRankBusyForeverFailsTheCallWithinTheTimeoutAndTheSessionSaysItCannotRunAgain() {
        var stop = new java.util.concurrent.atomic.AtomicBoolean();
        var busy = UserOp.builder("busy")
                .input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .host((in, out, rank, world) -> {
                    long until = System.nanoTime() + Duration.ofSeconds(20).toNanos();
                    if (rank == 1) while (!stop.get() && System.nanoTime() < until) Thread.onSpinWait(); // ignores interrupts
                })
                .build();
        var g = Gatun.graph("busy").register(busy);
        g.output("y", g.call1("busy", g.input("x", F32, 8)).allReduce(SUM));
        try (var s = Session.compile(g.build(), CompileOptions.world(2).backend("host").timeout(Duration.ofMillis(500)))) {
            var in = List.of(Map.of("x", NDArray.full(F32, 1, 8)), Map.of("x", NDArray.full(F32, 2, 8)));
            long t0 = System.nanoTime();
            assertThatThrownBy(() -> s.runToHost(in)).isInstanceOf(RankFailedException.class)
                    .hasMessageContaining("rank 1 did not arrive in time").hasMessageContaining("ranks [1] did not stop")
                    .satisfies(e -> assertThat(((RankFailedException) e).rank()).isEqualTo(1));
            assertThat(System.nanoTime() - t0).isLessThan(Duration.ofSeconds(3).toNanos());
            assertThatThrownBy(() -> s.runToHost(in)).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("cannot run again").hasMessageContaining("ranks [1]").hasMessageContaining("compile a new one");
        } finally {
            stop.set(true);
        }
    }

    @Test
    void symbolicShapesRunThroughNccl() {
        var g = Gatun.graph("dyn");
        var x = g.input("x", F32, "n", 3);
        g.output("y", x.mul(2).allReduce(SUM).sum(0));
        try (var s = Session.compile(g.build(), CompileOptions.world(2).backend("host"))) {
            assertThat(s.plan().toString()).contains("all_reduce.nccl").contains("alloc_dynamic");
            for (int n : new int[]{1, 5}) {
                var in = List.of(Map.of("x", NDArray.full(F32, 1, n, 3)), Map.of("x", NDArray.full(F32, 2, n, 3)));
                for (var r : s.runToHost(in)) assertThat(r.get("y").toFloatArray()).containsOnly(6f * n);
            }
            var mismatched = List.of(Map.of("x", NDArray.full(F32, 1, 2, 3)), Map.of("x", NDArray.full(F32, 2, 3, 3)));
            assertThatThrownBy(() -> s.runToHost(mismatched)).hasMessageContaining("same shapes");
        }
    }
}
