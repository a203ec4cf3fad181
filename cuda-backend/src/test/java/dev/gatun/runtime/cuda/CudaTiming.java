package dev.gatun.runtime.cuda;

import dev.gatun.cuda.GraphExec;
import dev.gatun.planner.Step;
import dev.gatun.runtime.NDArray;

import java.util.Map;

/**
 * The benchmarks' timing helpers (measuring code, kept out of the library): calls through the public API, and the
 * engine's floor they are compared with (bare launches of the plan's captured graphs, bare pinned copies).
 */
final class CudaTiming {
    private CudaTiming() {}

    /**
     * The engine's floor, beside which the public API is measured: the plan's captured graphs launched bare
     * ({@code cudaGraphLaunch} from Java, nothing else), inputs already staged; with {@code copied}, pinned
     * host-to-device copies of those inputs before and pinned device-to-host copies of the outputs after each replay
     * (the host round trip's floor).
     */
    static final class Bare implements AutoCloseable {
        private final CudaExecutable exe;
        private final CudaRun run;
        private final java.util.List<dev.gatun.cuda.PinnedHostBuffer> pinnedIn = new java.util.ArrayList<>(), pinnedOut = new java.util.ArrayList<>();
        private final java.util.List<dev.gatun.cuda.DeviceBuffer> devIn = new java.util.ArrayList<>(), devOut = new java.util.ArrayList<>();

        private Bare(CudaExecutable exe, Map<String, NDArray> inputs, java.util.Set<String> copied) {
            this.exe = exe;
            this.run = new CudaRun(exe, inputs, false);
            run.stageInputs();
            run.executeSteps(true); // captures
            exe.stream().synchronize();
            for (String name : copied) {
                NDArray a = inputs.get(name);
                var p = exe.device().allocatePinned(Math.max(1, a.byteSize()));
                p.segment().asSlice(0, a.byteSize()).copyFrom(a.segment());
                pinnedIn.add(p);
                devIn.add(exe.device().allocate(Math.max(1, a.byteSize())));
            }
            if (!copied.isEmpty())
                for (var b : exe.plan().outputs().values()) {
                    long bytes = b.type().byteSize();
                    pinnedOut.add(exe.device().allocatePinned(Math.max(1, bytes)));
                    devOut.add(exe.device().allocate(Math.max(1, bytes)));
                }
        }

        /** Null where some step with GPU work runs outside the captured partitions (then a bare replay is not the plan). */
        static Bare of(CudaExecutable exe, Map<String, NDArray> inputs, java.util.Set<String> copied) {
            return allCaptured(exe) ? new Bare(exe, inputs, copied) : null;
        }

        void once() {
            for (int k = 0; k < devIn.size(); k++) devIn.get(k).copyFromAsync(pinnedIn.get(k), exe.stream());
            for (GraphExec g : exe.partitions()) g.launch(exe.stream());
            for (int k = 0; k < devOut.size(); k++) devOut.get(k).copyToAsync(pinnedOut.get(k), exe.stream());
        }

        void sync() { exe.stream().synchronize(); }

        @Override public void close() {
            for (var b : pinnedIn) b.close();
            for (var b : pinnedOut) b.close();
            for (var b : devIn) b.close();
            for (var b : devOut) b.close();
            run.release();
        }
    }

    /** A call to time and how to wait for it. */
    record Call(Runnable call, Runnable sync) {}

    /**
     * With peers, how the ranks agree on a number of warm-up calls: this rank's wish in, the largest of every rank's
     * out (every rank must make the same number of collective calls). Null on one rank.
     */
    static volatile java.util.function.IntUnaryOperator sameOnEveryRank;

    /** Warm-up calls past the first ones: as many as fill half a second, at most this many. */
    static final int MAX_WARMUP = 100_000;

    /**
     * Several calls timed side by side, so that drift of the machine (clocks, other tenants) falls on all of them
     * alike: each warmed until the JIT has compiled it ({@code warmup} calls, then as many more as fill half a second
     * at their rate: C2 compiles a path after thousands of calls, and 50 left a call's Java interpreted; with peers the
     * largest count any rank asks for), then latency in alternating blocks of 50 calls, then pipelined one after the
     * other. One {@link Timing} per call, in order.
     */
    static Timing[] sideBySide(int warmup, int iterations, Call... calls) {
        for (Call c : calls) {
            long warm = System.nanoTime();
            warmUp(c, warmup);
            double perCall = (System.nanoTime() - warm) / (double) Math.max(1, warmup);
            int more = (int) Math.min(MAX_WARMUP, 500_000_000L / Math.max(1.0, perCall));
            var agree = sameOnEveryRank;
            warmUp(c, agree == null ? more : agree.applyAsInt(more));
        }
        long[][] wall = new long[calls.length][iterations], enqueue = new long[calls.length][iterations];
        for (int from = 0; from < iterations; from += 50)
            for (int k = 0; k < calls.length; k++)
                for (int i = from; i < Math.min(iterations, from + 50); i++) {
                    long t0 = System.nanoTime();
                    calls[k].call().run();
                    calls[k].sync().run();
                    wall[k][i] = System.nanoTime() - t0;
                }
        var out = new Timing[calls.length];
        for (int k = 0; k < calls.length; k++) {
            long start = System.nanoTime();
            for (int i = 0; i < iterations; i++) {
                long t0 = System.nanoTime();
                calls[k].call().run();
                enqueue[k][i] = System.nanoTime() - t0;
            }
            calls[k].sync().run();
            out[k] = Timing.of(wall[k], (System.nanoTime() - start) / 1e3 / iterations, enqueue[k]);
        }
        return out;
    }

    /** Whether every step with GPU work is inside a captured partition. */
    static boolean allCaptured(CudaExecutable exe) {
        var steps = exe.plan().steps();
        var inPartition = new boolean[steps.size()];
        for (var p : exe.plan().partitions()) for (int i = p.first(); i <= p.last(); i++) inPartition[i] = true;
        for (int i = 0; i < inPartition.length; i++)
            if (!inPartition[i] && !(steps.get(i) instanceof Step.AllocPool || steps.get(i) instanceof Step.Place || steps.get(i) instanceof Step.Release))
                return false;
        return true;
    }

    /** Per-call times of one call (see {@link #sideBySide}), in microseconds. */
    static Timing ofCalls(Runnable call, Runnable sync, int warmup, int iterations) {
        return sideBySide(warmup, iterations, new Call(call, sync))[0];
    }

    /** {@code timing} on this rank alone (a one-GPU cell of a suite with peers): its warm-up asks no peer. */
    static <T> T alone(java.util.function.Supplier<T> timing) {
        var agree = sameOnEveryRank;
        sameOnEveryRank = null;
        try {
            return timing.get();
        } finally {
            sameOnEveryRank = agree;
        }
    }

    private static void warmUp(Call c, int n) {
        for (int i = 0; i < n; i++) {
            c.call().run();
            if (i % 32 == 31) c.sync().run(); // keep the launch queue short
        }
        c.sync().run();
    }

    /** Microseconds: latency median and 10th/90th percentiles, pipelined per-call mean, median host enqueue time. */
    public record Timing(double median, double p10, double p90, double pipelined, double enqueue, int calls) {
        static Timing of(long[] wallNanos, double pipelinedMicros, long[] enqueueNanos) {
            long[] w = wallNanos.clone(), e = enqueueNanos.clone();
            java.util.Arrays.sort(w);
            java.util.Arrays.sort(e);
            int n = w.length;
            return new Timing(w[n / 2] / 1e3, w[n / 10] / 1e3, w[Math.min(n - 1, n * 9 / 10)] / 1e3, pipelinedMicros, e[n / 2] / 1e3, n);
        }
    }

}
