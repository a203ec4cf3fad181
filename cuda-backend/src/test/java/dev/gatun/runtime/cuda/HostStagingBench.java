package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.Locale;
import java.util.Map;

import static dev.gatun.ir.DType.F32;

/**
 * Where the time of a host round trip goes: ordinary and page-locked host arrays in and out of a 1024x1024 f32
 * graph, and the host-side pieces (allocation of an output, one-thread and parallel copies), medians in microseconds.
 * {@code .bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.HostStagingBench [--n 1024] [--iters 200]}
 */
public final class HostStagingBench {
    private HostStagingBench() {}

    interface Body { void run() throws Exception; }

    static double median(int iters, Body b) throws Exception {
        for (int i = 0; i < Math.max(10, iters / 5); i++) b.run();
        double[] t = new double[iters];
        for (int i = 0; i < iters; i++) {
            long s = System.nanoTime();
            b.run();
            t[i] = (System.nanoTime() - s) / 1e3;
        }
        Arrays.sort(t);
        return t[iters / 2];
    }

    public static void main(String[] args) throws Exception {
        var opts = LlamaBench.options(args);
        int n = Integer.parseInt(opts.getOrDefault("n", "1024")), iters = Integer.parseInt(opts.getOrDefault("iters", "200"));
        long bytes = 4L * n * n;
        var g = Gatun.graph("seeds");
        g.output("y", g.input("x", F32, n, n).mul(2));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda").cudaGraphs(true))) {
            NDArray x = NDArray.random(F32, 7, n, n), out = NDArray.zeros(F32, n, n);
            NDArray px = s.allocateHost(F32, n, n), pout = s.allocateHost(F32, n, n);
            px.segment().copyFrom(x.segment());
            MemorySegment a = Arena.global().allocate(bytes, 64), b = Arena.global().allocate(bytes, 64);
            var rows = new java.util.LinkedHashMap<String, Double>();
            rows.put("NDArray.zeros (an output's allocation)", median(iters, () -> NDArray.zeros(F32, n, n)));
            rows.put("heap long[] (the same bytes)", median(iters, () -> MemorySegment.ofArray(new long[(int) (bytes / 8)])));
            rows.put("MemorySegment.copy, one thread", median(iters, () -> MemorySegment.copy(a, 0, b, 0, bytes)));
            rows.put("MemorySegment.copy, 8 threads", median(iters, () -> java.util.stream.IntStream.range(0, 8).parallel()
                    .forEach(i -> MemorySegment.copy(a, i * bytes / 8, b, i * bytes / 8, bytes / 8))));
            try (var d = dev.gatun.cuda.Device.open(0); var st = d.createStream(); var pin = d.allocatePinned(bytes); var buf = d.allocate(bytes)) {
                var ev = StagedCopies.events(d);
                rows.put("DMA in, pinned, one piece", median(iters, () -> { buf.copyFromAsync(pin.segment(), 0, st); st.synchronize(); }));
                rows.put("DMA out, pinned, one piece", median(iters, () -> { buf.copyToAsync(pin.segment(), 0, st); st.synchronize(); }));
                rows.put("copy then DMA in, one thread", median(iters, () -> { MemorySegment.copy(a, 0, pin.segment(), 0, bytes); buf.copyFromAsync(pin.segment(), 0, st); st.synchronize(); }));
                for (long part : new long[]{bytes / 16, bytes / 8, bytes / 4})
                    for (boolean par : new boolean[]{false, true}) {
                        rows.put("staged in, parts " + part / 1024 + " KiB" + (par ? ", parallel" : ""), median(iters, () -> { StagedCopies.in(a, pin.segment(), buf, st, part, par); st.synchronize(); }));
                        rows.put("staged out, parts " + part / 1024 + " KiB" + (par ? ", parallel" : ""), median(iters, () -> StagedCopies.out(d, buf.address(), pin.segment(), b, bytes, st, ev, part, par)));
                    }
                for (var e : ev) e.close();
            }
            rows.put("pinned in, pinned out (allocateHost)", median(iters, () -> s.run(Map.of("x", px)).get("y").copyTo(pout)));
            rows.put("ordinary in, pinned out", median(iters, () -> s.run(Map.of("x", x)).get("y").copyTo(pout)));
            rows.put("pinned in, ordinary out (copyTo)", median(iters, () -> s.run(Map.of("x", px)).get("y").copyTo(out)));
            rows.put("ordinary in, ordinary out (copyTo)", median(iters, () -> s.run(Map.of("x", x)).get("y").copyTo(out)));
            rows.put("ordinary in, runToHost out", median(iters, () -> s.runToHost(Map.of("x", x))));
            rows.put("pinned in, runToHost out", median(iters, () -> s.runToHost(Map.of("x", px))));
            System.out.printf(Locale.ROOT, "%dx%d f32 (%d bytes), %d iterations, %d processors%n", n, n, bytes, iters, Runtime.getRuntime().availableProcessors());
            rows.forEach((k, v) -> System.out.printf(Locale.ROOT, "  %-42s %9.1f us%n", k, v));
        }
    }
}
