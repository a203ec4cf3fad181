package dev.gatun.cuda;

import java.util.ArrayList;
import java.util.Locale;

/**
 * Where device memory goes before any plan holds a byte (a measurement, not a test): the free memory after opening
 * the device, after loading and launching a kernel that needs no stack, after one that may call {@code printf} (a
 * stack frame: the driver then reserves local memory for every thread the GPU can hold), and after loading and
 * launching many small modules as a plan's kernels are (one module a kernel). The Llama decoder's sessions use about
 * 0.28 GB on an H200 beyond their weights, caches and pools; this says which of these it is.
 *
 * <pre>.bundle/run-gpu-tests.sh --main dev.gatun.cuda.MemoryProbe [modules, default 200]</pre>
 */
public final class MemoryProbe {
    private MemoryProbe() {}

    public static void main(String[] args) {
        int modules = args.length > 0 ? Integer.parseInt(args[0]) : 200;
        try (Device d = Device.open(0); Stream s = d.createStream(); DeviceBuffer x = d.allocate(4096)) {
            long start = d.memoryInfo()[0];
            long[] last = {start};
            report(d, "device open, a stream and 4 KiB allocated", start, last);
            var plain = Program.of("probe_plain", "extern \"C\" __global__ void probe_plain(float* x) { x[threadIdx.x] += 1.0f; }").load(d);
            plain.kernel("probe_plain").launch(new LaunchConfig(Dim3.of(1), Dim3.of(256), 0, s), x.address());
            s.synchronize();
            report(d, "a kernel with no stack loaded and launched", start, last);
            var stack = Program.of("probe_stack", """
                    extern "C" __global__ void probe_stack(float* x, int n) {
                        if (n < 0) printf("never printed %d\\n", n);
                        x[threadIdx.x] += 1.0f;
                    }
                    """).load(d);
            stack.kernel("probe_stack").launch(new LaunchConfig(Dim3.of(1), Dim3.of(256), 0, s), x.address(), 1);
            s.synchronize();
            report(d, "a kernel that may call printf loaded and launched", start, last);
            var loaded = new ArrayList<Module>();
            for (int i = 0; i < modules; i++) {
                String name = "probe_" + i;
                Module m = Program.of(name, "extern \"C\" __global__ void " + name + "(float* x) { x[threadIdx.x] += " + i + ".0f; }").load(d);
                m.kernel(name).launch(new LaunchConfig(Dim3.of(1), Dim3.of(32), 0, s), x.address());
                loaded.add(m);
            }
            s.synchronize();
            report(d, modules + " more modules of one small kernel each, loaded and launched", start, last);
            for (Module m : loaded) m.close();
            plain.close();
            stack.close();
        }
    }

    private static void report(Device d, String what, long start, long[] last) {
        long free = d.memoryInfo()[0];
        System.out.printf(Locale.ROOT, "%-72s %9.1f MB used since the start, %+9.1f MB this step%n", what, (start - free) / 1e6, (last[0] - free) / 1e6);
        last[0] = free;
    }
}
