package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.runtime.ArrayLike;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLongArray;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * One session called from many threads at once, every way a call's outputs can be read: each value a caller gets is
 * its own call's, and the only error a caller may see is the documented one, for a {@code DeviceArray} output read
 * after another thread's call overwrote it (never for {@code runToHost} or {@code runCopied}, which copy the outputs
 * inside their call). The same for a world of two simulated ranks, for sessions whose calls read each other's
 * outputs from several threads, and for binds, which end earlier outputs as calls do. Every thread passes inputs of
 * its own (small integers, so float32 is exact), and the expected outputs are plain loops over them. On the code
 * before the session's call lock, the eight threads saw wrong values (another call's), bare IllegalStateExceptions
 * (per-call memory freed under a copy) and failures of runToHost; the pipelines read inputs half overwritten.
 */
class SessionThreadsTest {
    static final int THREADS = 8;

    /** How a call's outputs are read. */
    enum Way {
        RUN_TO_HOST, RUN_COPIED, RUN_THEN_TO_HOST, RUN_THEN_COPY, LIST_FORM;

        /** Whether the documented refusal may answer it: an output read after run returned, which another call may have overwritten. */
        boolean mayBeRefused() { return this != RUN_TO_HOST && this != RUN_COPIED; }
    }

    /** y = 3x + 1 (static shape: a pool slot); w = 2v - 5 (symbolic shape: the call's own memory). */
    static Graph graph() {
        var g = Gatun.graph("threads");
        g.output("y", g.input("x", F32, 64).mul(3).add(1));
        g.output("w", g.input("v", F32, "n").mul(2).add(-5));
        return g.build();
    }

    /** Distinct inputs for every thread and call: x = (t * 1000 + c) * 64 + i, v the same offset by 7, n from 9 to 12. */
    static Map<String, NDArray> inputs(int t, int c) {
        double base = (t * 1000.0 + c) * 64;
        double[] x = new double[64], v = new double[9 + c % 4];
        for (int i = 0; i < x.length; i++) x[i] = base + i;
        for (int i = 0; i < v.length; i++) v[i] = base + 7 + i;
        return Map.of("x", NDArray.of(F32, x, 64), "v", NDArray.of(F32, v, v.length));
    }

    static double[] expectedY(Map<String, NDArray> in) {
        double[] x = in.get("x").toDoubleArray(), y = new double[x.length];
        for (int i = 0; i < x.length; i++) y[i] = 3 * x[i] + 1;
        return y;
    }

    static double[] expectedW(Map<String, NDArray> in) {
        double[] v = in.get("v").toDoubleArray(), w = new double[v.length];
        for (int i = 0; i < v.length; i++) w[i] = 2 * v[i] - 5;
        return w;
    }

    /** What the threads saw: calls, wrong values, documented refusals by way, and every other failure. */
    static final class Tally {
        final AtomicLongArray calls = new AtomicLongArray(Way.values().length), wrong = new AtomicLongArray(Way.values().length),
                refused = new AtomicLongArray(Way.values().length), failed = new AtomicLongArray(Way.values().length);
        final ConcurrentLinkedQueue<String> wrongSamples = new ConcurrentLinkedQueue<>();
        final ConcurrentLinkedQueue<Throwable> other = new ConcurrentLinkedQueue<>();

        String summary() {
            var s = new StringBuilder();
            for (Way w : Way.values())
                if (calls.get(w.ordinal()) > 0) s.append(w).append(": ").append(calls.get(w.ordinal())).append(" calls, ").append(wrong.get(w.ordinal())).append(" wrong, ")
                        .append(refused.get(w.ordinal())).append(" refused, ").append(failed.get(w.ordinal())).append(" other failures; ");
            long overwritten = other.stream().filter(e -> String.valueOf(e.getMessage()).contains("overwritten")).count();
            s.append(overwritten).append(" of the other failures say 'overwritten'");
            if (!other.isEmpty()) s.append(", the first: ").append(other.peek());
            if (!wrongSamples.isEmpty()) s.append("; a wrong value: ").append(wrongSamples.peek());
            return s.toString();
        }

        long total(AtomicLongArray a) {
            long n = 0;
            for (int i = 0; i < a.length(); i++) n += a.get(i);
            return n;
        }
    }

    /** The documented refusal of an output read after another call overwrote it: names the output, the calls and every fix. */
    static boolean isDocumentedRefusal(Throwable e, String output) { return isDocumentedRefusal(e, output, "threads"); }

    static boolean isDocumentedRefusal(Throwable e, String output, String plan) {
        String m = e.getMessage();
        return e instanceof GatunRuntimeException && m != null && m.contains("output '" + output + "' of plan '" + plan + "'")
                && m.contains("was overwritten by a later call") && m.contains("copy()") && m.contains("runToHost")
                && m.contains("runCopied") && m.contains("session per thread")
                && java.util.regex.Pattern.compile(", call \\d+ was overwritten by a later call: session '" + plan + "' (has run call \\d+ since,|is running call \\d+) on thread '")
                        .matcher(m).find();
    }

    /**
     * One call read one way, each output checked as it is read: {@code wrong} hears of each wrong one at once (so it
     * is counted even where a later read fails).
     */
    static void call(Session s, Way way, Map<String, NDArray> in, java.util.function.Consumer<String> wrong) {
        var want = Map.of("y", expectedY(in), "w", expectedW(in));
        Map<String, ? extends ArrayLike> out = switch (way) {
            case RUN_TO_HOST -> s.runToHost(in);
            case RUN_COPIED -> s.runCopied(in);
            case RUN_THEN_TO_HOST, RUN_THEN_COPY -> s.run(in);
            case LIST_FORM -> s.run(List.<Map<String, ? extends ArrayLike>>of(in)).getFirst();
        };
        for (String name : List.of("y", "w")) {
            NDArray got = switch (out.get(name)) {
                case NDArray host -> host;
                case DeviceArray d when way == Way.RUN_COPIED -> {
                    try (d) {   // the caller's own copy, which it closes
                        yield d.toHost();
                    }
                }
                case DeviceArray d when way == Way.RUN_THEN_COPY -> {
                    try (DeviceArray kept = d.copy()) {
                        yield kept.toHost();
                    }
                }
                case DeviceArray d -> d.toHost();
                default -> throw new AssertionError(name);
            };
            if (!java.util.Arrays.equals(got.toDoubleArray(), want.get(name)))
                wrong.accept(name + "[0] " + got.get(0) + " (want " + want.get(name)[0] + ")");
        }
    }

    /** Runs {@code body(thread)} on every thread at once; fails on anything a body threw past its own tally. */
    static void onThreads(int threads, java.util.function.IntConsumer body) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
            var start = new CountDownLatch(1);
            var futures = new ArrayList<Future<?>>();
            for (int t = 0; t < threads; t++) {
                int thread = t;
                futures.add(pool.submit(() -> {
                    start.await();
                    body.accept(thread);
                    return null;
                }));
            }
            start.countDown();
            for (Future<?> f : futures) f.get(120, TimeUnit.SECONDS);   // a guard against a hang, not a timing
        } finally {
            pool.shutdownNow();
        }
    }

    @Test
    void eightThreadsOnOneSessionGetOnlyTheirOwnValuesAndOnlyTheDocumentedRefusal() throws Exception {
        int calls = 1000;
        var tally = new Tally();
        try (var s = Session.compile(graph(), CompileOptions.world(1).backend("host"))) {
            onThreads(THREADS, t -> {
                for (int c = 0; c < calls; c++) {
                    Way way = Way.values()[(t + c) % Way.values().length];
                    var in = inputs(t, c);
                    tally.calls.incrementAndGet(way.ordinal());
                    try {
                        int thread = t, number = c;
                        call(s, way, in, what -> {
                            tally.wrong.incrementAndGet(way.ordinal());
                            tally.wrongSamples.add("thread " + thread + " call " + number + " " + way + ": " + what);
                        });
                    } catch (RuntimeException e) {
                        if (way.mayBeRefused() && (isDocumentedRefusal(e, "y") || isDocumentedRefusal(e, "w"))) tally.refused.incrementAndGet(way.ordinal());
                        else {
                            tally.other.add(e);
                            tally.failed.incrementAndGet(way.ordinal());
                        }
                    }
                }
            });
        }
        String summary = tally.summary();
        System.out.println("eight threads, world 1: " + summary);
        assertThat(tally.total(tally.calls)).isEqualTo((long) THREADS * calls);
        assertThat(tally.total(tally.wrong)).as(summary).isZero();
        assertThat(tally.other).as(summary).isEmpty();
        assertThat(tally.refused.get(Way.RUN_TO_HOST.ordinal()) + tally.refused.get(Way.RUN_COPIED.ordinal())).as(summary).isZero();
    }

    /** y = allReduce(x * k) over a world of two simulated ranks (a pool slot); w = 2v - 5 of the rank's own (the call's memory). */
    static Graph reduced() {
        var g = Gatun.graph("threads");
        g.output("y", g.input("x", F32, 16).mul(g.input("k", F32, 16)).allReduce(SUM));
        g.output("w", g.input("v", F32, "n").mul(2).add(-5));
        return g.build();
    }

    @Test
    void worldOfTwoSimulatedRanksFromEightThreads() throws Exception {
        int calls = 150;
        Way[] ways = {Way.RUN_TO_HOST, Way.RUN_COPIED, Way.LIST_FORM};
        var tally = new Tally();
        try (var s = Session.compile(reduced(), CompileOptions.world(2).backend("host"))) {
            onThreads(THREADS, t -> {
                for (int c = 0; c < calls; c++) {
                    Way way = ways[(t + c) % ways.length];
                    double[] x0 = new double[16], x1 = new double[16], y = new double[16], v0 = new double[3 + c % 3], v1 = new double[v0.length];
                    double[][] w = {new double[v0.length], new double[v0.length]};
                    for (int i = 0; i < 16; i++) {
                        x0[i] = (t * 1000 + c) * 16 + i;
                        x1[i] = x0[i] + 3;
                        y[i] = x0[i] * 1 + x1[i] * 2;
                    }
                    for (int i = 0; i < v0.length; i++) {
                        v0[i] = x0[i] + 5;
                        v1[i] = x0[i] + 11;
                        w[0][i] = 2 * v0[i] - 5;
                        w[1][i] = 2 * v1[i] - 5;
                    }
                    List<Map<String, NDArray>> in = List.of(
                            Map.of("x", NDArray.of(F32, x0, 16), "k", NDArray.full(F32, 1, 16), "v", NDArray.of(F32, v0, v0.length)),
                            Map.of("x", NDArray.of(F32, x1, 16), "k", NDArray.full(F32, 2, 16), "v", NDArray.of(F32, v1, v1.length)));
                    tally.calls.incrementAndGet(way.ordinal());
                    try {
                        List<? extends Map<String, ? extends ArrayLike>> out = switch (way) {
                            case RUN_TO_HOST -> s.runToHost(in);
                            case RUN_COPIED -> s.runCopied(in);
                            default -> s.run(in);
                        };
                        for (int r = 0; r < 2; r++)
                            for (String name : List.of("y", "w")) {
                                double[] got = switch (out.get(r).get(name)) {
                                    case NDArray host -> host.toDoubleArray();
                                    case DeviceArray d when way == Way.RUN_COPIED -> {
                                        try (d) {
                                            yield d.toHost().toDoubleArray();
                                        }
                                    }
                                    case DeviceArray d -> d.toHost().toDoubleArray();
                                    default -> throw new AssertionError(name);
                                };
                                if (!java.util.Arrays.equals(got, name.equals("y") ? y : w[r])) {
                                    tally.wrong.incrementAndGet(way.ordinal());
                                    tally.wrongSamples.add("thread " + t + " call " + c + " rank " + r + " " + way + ": " + name + "[0] " + got[0]);
                                }
                            }
                    } catch (RuntimeException e) {
                        if (way.mayBeRefused() && (isDocumentedRefusal(e, "y") || isDocumentedRefusal(e, "w"))) tally.refused.incrementAndGet(way.ordinal());
                        else {
                            tally.other.add(e);
                            tally.failed.incrementAndGet(way.ordinal());
                        }
                    }
                }
            });
        }
        String summary = tally.summary();
        System.out.println("eight threads, world 2: " + summary);
        assertThat(tally.total(tally.wrong)).as(summary).isZero();
        assertThat(tally.other).as(summary).isEmpty();
        assertThat(tally.refused.get(Way.RUN_TO_HOST.ordinal()) + tally.refused.get(Way.RUN_COPIED.ordinal())).as(summary).isZero();
    }

    /** y = 3x + 1 */
    static Graph triple(String name) {
        var g = Gatun.graph(name);
        g.output("y", g.input("x", F32, 64).mul(3).add(1));
        return g.build();
    }

    /** z = 2y - 1, reading the first session's output */
    static Graph twice() {
        var g = Gatun.graph("twice");
        g.output("z", g.input("y", F32, 64).mul(2).add(-1));
        return g.build();
    }

    /**
     * Two sessions in a pipeline, shared by four threads: the second reads the first's output, which another thread's
     * call of the first may overwrite meanwhile. The second session gets the first's own call's values or the
     * documented refusal, never a half-overwritten input (the host backend used to read it in place, unguarded).
     */
    @Test
    void aPipelineOfTwoSessionsSharedByThreadsReadsOnlyWholeOutputs() throws Exception {
        int threads = 4, calls = 400;
        var tally = new Tally();
        try (var first = Session.compile(triple("threads"), CompileOptions.world(1).backend("host"));
             var second = Session.compile(twice(), CompileOptions.world(1).backend("host"))) {
            onThreads(threads, t -> {
                for (int c = 0; c < calls; c++) {
                    var in = inputs(t, c);
                    double[] want = expectedY(in);
                    for (int i = 0; i < want.length; i++) want[i] = 2 * want[i] - 1;
                    tally.calls.incrementAndGet(Way.LIST_FORM.ordinal());
                    try {
                        double[] got = second.runToHost(Map.of("y", first.run(Map.of("x", in.get("x"))).get("y"))).get("z").toDoubleArray();
                        if (!java.util.Arrays.equals(got, want)) {
                            tally.wrong.incrementAndGet(Way.LIST_FORM.ordinal());
                            tally.wrongSamples.add("thread " + t + " call " + c + ": z[0] " + got[0] + " (want " + want[0] + ")");
                        }
                    } catch (RuntimeException e) {
                        if (isDocumentedRefusal(e, "y")) tally.refused.incrementAndGet(Way.LIST_FORM.ordinal());
                        else tally.other.add(e);
                    }
                }
            });
        }
        String summary = tally.summary();
        System.out.println("a pipeline of two sessions, four threads: " + summary);
        assertThat(tally.total(tally.wrong)).as(summary).isZero();
        assertThat(tally.other).as(summary).isEmpty();
    }

    /**
     * Two sessions, each thread's call of one reading the other's output, from two threads at once: each call holds
     * the other session's calls off while it reads, and neither waits for the other (they would wait forever). Every
     * value is right or refused as documented, and the threads finish.
     */
    @Test
    void twoSessionsReadingEachOthersOutputsFromTwoThreadsNeitherWaitForEachOtherNorMixValues() throws Exception {
        int calls = 500;
        var tally = new Tally();
        try (var first = Session.compile(triple("threads"), CompileOptions.world(1).backend("host"));
             var second = Session.compile(twice(), CompileOptions.world(1).backend("host"))) {
            onThreads(2, t -> {
                for (int c = 0; c < calls; c++) {
                    double[] v = inputs(t, c).get("x").toDoubleArray(), want = new double[v.length];
                    NDArray host = NDArray.of(F32, v, 64);
                    tally.calls.incrementAndGet(Way.LIST_FORM.ordinal());
                    try {
                        double[] got;
                        if (t == 0) {   // z = 2v - 1 of the second, then 3z + 1 of the first
                            for (int i = 0; i < v.length; i++) want[i] = 3 * (2 * v[i] - 1) + 1;
                            got = first.runToHost(Map.of("x", second.run(Map.of("y", host)).get("z"))).get("y").toDoubleArray();
                        } else {        // y = 3v + 1 of the first, then 2y - 1 of the second
                            for (int i = 0; i < v.length; i++) want[i] = 2 * (3 * v[i] + 1) - 1;
                            got = second.runToHost(Map.of("y", first.run(Map.of("x", host)).get("y"))).get("z").toDoubleArray();
                        }
                        if (!java.util.Arrays.equals(got, want)) {
                            tally.wrong.incrementAndGet(Way.LIST_FORM.ordinal());
                            tally.wrongSamples.add("thread " + t + " call " + c + ": " + got[0] + " (want " + want[0] + ")");
                        }
                    } catch (RuntimeException e) {
                        if (isDocumentedRefusal(e, "y") || isDocumentedRefusal(e, "z", "twice")) tally.refused.incrementAndGet(Way.LIST_FORM.ordinal());
                        else tally.other.add(e);
                    }
                }
            });
        }
        String summary = tally.summary();
        System.out.println("two sessions reading each other's outputs, two threads: " + summary);
        assertThat(tally.total(tally.wrong)).as(summary).isZero();
        assertThat(tally.other).as(summary).isEmpty();
    }

    /** y = hold(x) * 3 + 1, where hold waits for {@code release} (after saying so) on calls whose x starts with 2. */
    static Graph held(CountDownLatch inside, CountDownLatch release) {
        var hold = UserOp.builder("hold").input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .host((in, out, rank, world) -> {
                    if (in.getFirst().get(0) == 2) {
                        inside.countDown();
                        try { release.await(30, TimeUnit.SECONDS); } catch (InterruptedException e) { Thread.currentThread().interrupt(); }
                    }
                    for (long i = 0; i < in.getFirst().numel(); i++) out.getFirst().set(i, in.getFirst().get(i));
                })
                .build();
        var g = Gatun.graph("threads").register(hold);
        g.output("y", g.call1("hold", g.input("x", F32, 64)).mul(3).add(1));
        return g.build();
    }

    /**
     * A call of one session that reads another session's output while another thread's call of that session is in
     * flight neither waits for it (two such sessions could wait for each other) nor reads it: it is refused at once as
     * overwritten, naming the call in flight and its thread. Once that call is done, the output is refused by it.
     */
    @Test
    void aCallReadingAnOutputThatAnotherThreadIsOverwritingIsRefusedWithoutWaiting() throws Exception {
        var inside = new CountDownLatch(1);
        var release = new CountDownLatch(1);
        try (var first = Session.compile(held(inside, release), CompileOptions.world(1).backend("host").timeout(java.time.Duration.ofSeconds(60)));
             var second = Session.compile(twice(), CompileOptions.world(1).backend("host"))) {
            DeviceArray y = first.run(Map.of("x", NDArray.full(F32, 1, 64))).get("y");
            assertThat(second.runToHost(Map.of("y", y)).get("z").toDoubleArray()).containsOnly(2 * 4 - 1);
            var later = java.util.concurrent.CompletableFuture.supplyAsync(() -> first.runToHost(Map.of("x", NDArray.full(F32, 2, 64))));
            try {
                assertThat(inside.await(30, TimeUnit.SECONDS)).as("the second call of the first session started").isTrue();
                assertThatThrownBy(() -> second.runToHost(Map.of("y", y))).isInstanceOf(GatunRuntimeException.class)
                        .hasMessageContaining("output 'y' of plan 'threads', call 1 was overwritten by a later call")
                        .hasMessageContaining("session 'threads' is running call 2 on thread")
                        .hasMessageContaining("runToHost").hasMessageContaining("session per thread");
            } finally {
                release.countDown();
            }
            assertThat(later.get(30, TimeUnit.SECONDS).get("y").toDoubleArray()).containsOnly(7);
            assertThatThrownBy(y::toHost).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("DeviceArray.toHost(): output 'y' of plan 'threads', call 1 was overwritten by a later call")
                    .hasMessageContaining("session 'threads' has run call 2 since");
        }
    }

    /**
     * A bind rewrites memory outputs may lie in (a state's slot, a bound input's copy), so it ends the outputs of
     * earlier calls as a call does: they used to read the bound value, or fail with a bare IllegalStateException.
     */
    @Test
    void aBindEndsTheOutputsOfEarlierCallsInsteadOfChangingThem() {
        var g = Gatun.graph("kv");
        g.output("cache", g.state("cache", F32, 4).updateSlice(0, g.input("row", F32, 1), g.input("at", dev.gatun.ir.DType.I32)));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            DeviceArray cache = s.run(Map.of("row", NDArray.full(F32, 5, 1), "at", NDArray.of(dev.gatun.ir.DType.I32, new double[]{1}))).get("cache");
            assertThat(cache.toHost().toDoubleArray()).containsExactly(0, 5, 0, 0);
            DeviceArray kept = cache.copy();
            s.bind("cache", NDArray.full(F32, 9, 4));   // writes the state's slot, where the output lies
            assertThatThrownBy(cache::toHost).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("output 'cache' of plan 'kv', call 1 is no longer valid: session 'kv' has bound input 'cache' since")
                    .hasMessageContaining("copy()");
            assertThat(kept.toHost().toDoubleArray()).containsExactly(0, 5, 0, 0);
        }
        var p = Gatun.graph("same");
        var x = p.input("x", F32, 4);
        p.output("y", x);   // the input itself: on the host, the bound copy
        try (var s = Session.compile(p.build(), CompileOptions.world(1).backend("host"))) {
            s.bind("x", NDArray.full(F32, 5, 4));
            DeviceArray y = s.run(Map.of()).get("y");
            assertThat(y.toHost().toDoubleArray()).containsOnly(5);
            s.bind("x", NDArray.full(F32, 9, 4));   // frees the copy the output is
            assertThatThrownBy(y::toHost).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("has bound input 'x' since");
            assertThat(s.run(Map.of()).get("y").toHost().toDoubleArray()).containsOnly(9);
        }
    }
}
