package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Event;
import dev.gatun.cuda.GraphExec;
import dev.gatun.planner.Step;
import dev.gatun.runtime.NDArray;

import java.util.Map;

/** The benchmarks' timing of a loaded plan with its inputs already on the GPU (measuring code, kept out of the library). */
final class CudaTiming {
    private CudaTiming() {}

    /**
     * Device time per execution of the plan with inputs already on the GPU (no host copies): events around
     * each of {@code iterations} runs after {@code warmup} runs; returns, sorted, per run: device ms, host ms to
     * enqueue, and host wall ms until the device finished.
     */
    static double[][] timeDevice(CudaExecutable exe, Map<String, NDArray> inputs, int warmup, int iterations) {
        var run = new CudaExecutable.CudaRun(exe, inputs);
        try (var start = exe.device().createEvent(); var end = exe.device().createEvent()) {
            run.stageInputs();
            for (int i = 0; i < warmup; i++) run.executeSteps();
            exe.stream().synchronize();
            double[] dev = new double[iterations], host = new double[iterations], wall = new double[iterations];
            for (int i = 0; i < iterations; i++) {
                long t0 = System.nanoTime();
                start.record(exe.stream());
                run.executeSteps();
                end.record(exe.stream());
                host[i] = (System.nanoTime() - t0) / 1e6;
                end.synchronize();
                wall[i] = (System.nanoTime() - t0) / 1e6;
                dev[i] = Event.elapsedMillis(start, end);
            }
            java.util.Arrays.sort(dev);
            java.util.Arrays.sort(host);
            java.util.Arrays.sort(wall);
            return new double[][]{dev, host, wall};
        } finally {
            run.release();
        }
    }

    /**
     * Per-call times of the plan with its inputs already on the GPU (no host copies), in microseconds: each
     * call's wall time from enqueue to completion with a synchronization after it (latency), then
     * {@code iterations} calls back to back with one synchronization at the end (pipelined), and the host
     * time to enqueue each of those calls.
     */
    static Timing measure(CudaExecutable exe, Map<String, NDArray> inputs, int warmup, int iterations, boolean graphs) {
        var run = new CudaExecutable.CudaRun(exe, inputs);
        try {
            run.stageInputs();
            for (int i = 0; i < warmup; i++) run.executeSteps(graphs);
            exe.stream().synchronize();
            long[] wall = new long[iterations], enqueue = new long[iterations];
            for (int i = 0; i < iterations; i++) {
                long t0 = System.nanoTime();
                run.executeSteps(graphs);
                exe.stream().synchronize();
                wall[i] = System.nanoTime() - t0;
            }
            long start = System.nanoTime();
            for (int i = 0; i < iterations; i++) {
                long t0 = System.nanoTime();
                run.executeSteps(graphs);
                enqueue[i] = System.nanoTime() - t0;
            }
            exe.stream().synchronize();
            return Timing.of(wall, (System.nanoTime() - start) / 1e3 / iterations, enqueue);
        } finally {
            run.release();
        }
    }

    /**
     * Host time to enqueue one replay: through the plan ({@code executeSteps}) and, for comparison, bare
     * {@code cudaGraphLaunch} calls of the same captured graphs, in microseconds. Null when some step with GPU
     * work runs outside the captured partitions (then the two would not be the same work).
     */
    static Timing[] replayOverhead(CudaExecutable exe, Map<String, NDArray> inputs, int warmup, int iterations) {
        var inPartition = new boolean[exe.plan().steps().size()];
        for (var p : exe.plan().partitions()) for (int i = p.first(); i <= p.last(); i++) inPartition[i] = true;
        for (int i = 0; i < inPartition.length; i++)
            if (!inPartition[i] && !(exe.plan().steps().get(i) instanceof Step.AllocPool || exe.plan().steps().get(i) instanceof Step.Place
                    || exe.plan().steps().get(i) instanceof Step.Release)) return null;
        var run = new CudaExecutable.CudaRun(exe, inputs);
        try {
            run.stageInputs();
            for (int i = 0; i < warmup; i++) run.executeSteps(true);
            exe.stream().synchronize();
            long[] plan = new long[iterations], bare = new long[iterations];
            for (int round = 0; round < 2; round++) {
                long[] into = round == 0 ? bare : plan;
                for (int i = 0; i < iterations; i++) {
                    long t0 = System.nanoTime();
                    if (round == 0) for (GraphExec g : exe.partitions()) g.launch(exe.stream());
                    else run.executeSteps(true);
                    into[i] = System.nanoTime() - t0;
                    if (i % 32 == 31) exe.stream().synchronize(); // keep the launch queue short, so no launch waits for room
                }
                exe.stream().synchronize();
            }
            return new Timing[]{Timing.of(bare, Double.NaN, bare), Timing.of(plan, Double.NaN, plan)};
        } finally {
            run.release();
        }
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
