package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Cuda;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Event;
import dev.gatun.cuda.Stream;
import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.Locale;
import java.util.Map;

import static dev.gatun.ir.DType.F32;

/**
 * The CUDA backend's benchmark command (not a test): a chain of 20 cheap pointwise ops (mul, add, maximum, abs,
 * sub) on 2^24 float32 elements and
 * the seeds' graph without collectives, each with and without CUDA graphs, timed through the public API: per call
 * with the input on the device (calls back to back, one synchronization), the time a call takes to return, and the
 * host round trip ({@code runToHost} of a host array, median); achieved bandwidth is compared with a
 * device-to-device copy measured in the same run.
 *
 * <p>Arguments: [log2 elements, default 24] [iterations, default 200].
 */
public final class PointwiseBenchmark {
    private PointwiseBenchmark() {}

    static Graph chain(long n) {
        var g = Gatun.graph("chain20");
        Tensor x = g.input("x", F32, n);
        Tensor y = x;
        for (int i = 0; i < 20; i++) {
            // cheap ops, so the fused kernel is bound by memory, which is what this measures
            y = switch (i % 5) {
                case 0 -> y.mul(1.0001);
                case 1 -> y.add(0.5);
                case 2 -> y.maximum(-4.0);
                case 3 -> y.abs();
                default -> y.sub(0.25);
            };
        }
        g.output("y", y);
        return g.build();
    }

    static Graph seedsLocal(long side) {
        var g = Gatun.graph("seeds_local");
        var x = g.input("x", F32, side, side);
        g.output("d", x.add(1).add(x.add(2)).add(x.add(3)));
        return g.build();
    }

    public static void main(String[] args) {
        int log2 = args.length > 0 ? Integer.parseInt(args[0]) : 24;
        int iters = args.length > 1 ? Integer.parseInt(args[1]) : 200;
        if (!Cuda.isAvailable()) {
            System.out.println("CUDA " + Cuda.probe().summary() + "; nothing to measure");
            return;
        }
        long n = 1L << log2;
        double copyGBs;
        String gpu;
        try (Device d = Device.open(0)) {
            gpu = d.name();
            copyGBs = copyBandwidth(d, n * 4, iters);
        }
        System.out.printf(Locale.ROOT, "GPU %s; device-to-device copy of %d MiB: %.0f GB/s (read + write)%n", gpu, n * 4 >> 20, copyGBs);
        System.out.printf(Locale.ROOT, "%-28s %-7s %12s %12s %10s %10s %12s%n", "workload", "graphs", "per call us", "enqueue us", "GB/s", "of copy", "host trip us");
        long side = 1L << (log2 / 2);
        measure("chain of 20 pointwise", chain(n), Map.of("x", NDArray.random(F32, 1, n)), 2.0 * n * 4, iters, copyGBs);
        measure("seeds without collectives", seedsLocal(side), Map.of("x", NDArray.random(F32, 2, side, side)), 2.0 * side * side * 4, iters, copyGBs);
    }

    private static void measure(String name, Graph g, Map<String, NDArray> inputs, double bytes, int iters, double copyGBs) {
        for (boolean graphs : new boolean[]{false, true}) {
            var options = CompileOptions.world(1).backend("cuda").cudaGraphs(graphs);
            try (var s = Session.compile(g, options)) {
                // through the public API: inputs on the device once, outputs left there
                var onDevice = new java.util.LinkedHashMap<String, dev.gatun.runtime.DeviceArray>();
                inputs.forEach((k, v) -> onDevice.put(k, s.toDevice(v)));
                var t = CudaTiming.ofCalls(() -> s.run(onDevice), s::synchronize, 20, iters);
                var host = CudaTiming.ofCalls(() -> s.runToHost(inputs), () -> {}, 5, Math.max(10, iters / 10));
                double gbs = bytes / (t.pipelined() * 1e-6) / 1e9;
                System.out.printf(Locale.ROOT, "%-28s %-7s %12.1f %12.1f %10.0f %9.0f%% %12.1f%n", name, graphs ? "on" : "off", t.pipelined(),
                        t.enqueue(), gbs, 100 * gbs / copyGBs, host.median());
            }
        }
    }

    /** Median bandwidth of a device-to-device copy, counting bytes read plus bytes written. */
    static double copyBandwidth(Device d, long bytes, int iters) {
        try (DeviceBuffer a = d.allocate(bytes); DeviceBuffer b = d.allocate(bytes); Stream s = d.createStream();
             Event start = d.createEvent(); Event end = d.createEvent()) {
            a.memset(1);
            for (int i = 0; i < 10; i++) b.copyFromAsync(a, s);
            double[] ms = new double[iters];
            for (int i = 0; i < iters; i++) {
                start.record(s);
                b.copyFromAsync(a, s);
                end.record(s);
                end.synchronize();
                ms[i] = Event.elapsedMillis(start, end);
            }
            java.util.Arrays.sort(ms);
            return 2.0 * bytes / (ms[iters / 2] * 1e-3) / 1e9;
        }
    }
}
