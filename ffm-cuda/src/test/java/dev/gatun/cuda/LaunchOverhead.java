package dev.gatun.cuda;

import dev.gatun.cuda.ffi.driver.driver;

import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * Launch-overhead microbenchmark: host time per {@code cuLaunchKernel} of an empty kernel through FFM. Same method
 * as ffm-cuda/bench/launch_overhead.cu: batches of 100 launches timed with a monotonic clock, a stream
 * synchronize between batches (not timed), median over batches after warm-up.
 */
public final class LaunchOverhead {
    private LaunchOverhead() {}

    public static void main(String[] args) {
        int batches = args.length > 0 ? Integer.parseInt(args[0]) : 2000;
        int perBatch = 100;
        System.out.println("[bench] " + Cuda.probe().summary());
        try (Device d = Device.open(0); Stream s = d.createStream();
             Module m = Program.of("empty.cu", "extern \"C\" __global__ void empty() {}").load(d, null)) {
            Kernel k = m.kernel("empty");
            MemorySegment f = k.handle();
            MemorySegment h = s.handle();
            double[] raw = new double[batches];
            double[] api = new double[batches];
            LaunchConfig cfg = LaunchConfig.of(1, 1).withStream(s);
            for (int rep = 0; rep < 2; rep++) { // first pass is warm-up (JIT, driver)
                for (int b = 0; b < batches; b++) {
                    long t0 = System.nanoTime();
                    for (int i = 0; i < perBatch; i++) {
                        int rc = driver.cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, h, MemorySegment.NULL, MemorySegment.NULL);
                        if (rc != 0) {
                            throw new IllegalStateException("cuLaunchKernel " + rc);
                        }
                    }
                    long t1 = System.nanoTime();
                    s.synchronize();
                    raw[b] = (t1 - t0) / (double) perBatch;
                }
                for (int b = 0; b < batches; b++) {
                    long t0 = System.nanoTime();
                    for (int i = 0; i < perBatch; i++) {
                        k.launch(cfg);
                    }
                    long t1 = System.nanoTime();
                    s.synchronize();
                    api[b] = (t1 - t0) / (double) perBatch;
                }
            }
            System.out.printf("[bench] java ffm raw cuLaunchKernel: median %.0f ns/launch, p10 %.0f, p90 %.0f (%d x %d launches)%n",
                    pct(raw, 50), pct(raw, 10), pct(raw, 90), batches, perBatch);
            System.out.printf("[bench] java Kernel.launch (context set + arg packing): median %.0f ns/launch, p10 %.0f, p90 %.0f%n",
                    pct(api, 50), pct(api, 10), pct(api, 90));
        }
    }

    static double pct(double[] v, int p) {
        double[] c = v.clone();
        Arrays.sort(c);
        return c[Math.min(c.length - 1, c.length * p / 100)];
    }
}
