package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Blas;
import dev.gatun.cuda.Cuda;
import dev.gatun.cuda.CudaGraph;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Event;
import dev.gatun.cuda.GraphExec;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.cuda.StreamCapture;
import dev.gatun.ir.DType;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Locale;

/**
 * The one-row products of a Llama-3.2-1B decode step as a decode step runs them: 16 layers' weights (each its own,
 * 1 GB in all, so every product reads its weight from memory), the products captured back to back into one CUDA graph
 * and replayed, timed by two events around many replays (not a test). {@code GemvBench} times one call at a time
 * between events, which adds the events' own microseconds to every small product; here a product's time is what it
 * adds to a chain of them, as in the decoder's graph.
 *
 * <p>Per product shape (q|k|v, o, gate|up, down; bf16, one row): µs a product for the default launch
 * ({@link CudaGemv#launch}), for every k-slice count and block size {@link CudaGemv#sliced} takes, for the default
 * launched programmatically (each product may start while the one before it ends), and for cuBLAS; then the four
 * products of a layer in turn, default against the best of the sweep, and the layer's weight bytes over that time.
 * Then each product after about 8 µs of other work (a kernel that sleeps), with and without that kernel first asking
 * L2 for the product's weight ({@code cp.async.bulk.prefetch.L2}): what prefetching the next weight during a layer's
 * small kernels would save. Then (compute capability 9.0 and later) the forms a plan launches programmatically, side by
 * side in one process: the whole grid without and with the weight's first loop loaded before the wait (main's plans
 * preload a graph input's weight; the "programmatic" column above does not), and the grid capped at 8 to 24 warps a
 * multiprocessor ({@code LaunchChoice.Gemv#resident}; the plan's rule takes 16), per product and for a layer's four.
 * Arguments: [replays, default 40] [forms: those forms only].
 *
 * <p>Run on a GPU machine with {@code bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.GemvChainBench}.
 */
public final class GemvChainBench {
    private GemvChainBench() {}

    static final int LAYERS = 16;
    /** Blocks of the other work that ask L2 for the next weight (one SM's bulk prefetches alone reach about 0.3 TB/s). */
    static final int PREFETCH_BLOCKS = 64;
    /** {k, n, what}: a Llama-3.2-1B layer's one-row products. */
    static final Object[][] SHAPES = {{2048, 3072, "qkv"}, {2048, 2048, "o_proj"}, {2048, 16384, "gate|up"}, {8192, 2048, "down"}};

    /** Fills bf16 memory with values in [-1, 1) from a hash of the index (no host copy of a gigabyte). */
    static final String FILL = """
            extern "C" __global__ void fill_bf16(unsigned short* p, long long n, unsigned seed) {
                for (long long i = blockIdx.x * (long long) blockDim.x + threadIdx.x; i < n; i += (long long) gridDim.x * blockDim.x) {
                    unsigned h = (unsigned) i * 2654435761u ^ seed;
                    h ^= h >> 15; h *= 2246822519u; h ^= h >> 13;
                    float f = (h & 0xffffu) / 32768.0f - 1.0f;
                    p[i] = (unsigned short) (__float_as_uint(f) >> 16);
                }
            }
            """;

    /**
     * The other kernels of a layer, as far as the products care: a kernel that waits about {@code ns} nanoseconds
     * (a bounded sleep, no memory), and whose threads first ask L2 for {@code bytes} bytes at {@code p} where
     * {@code bytes} is not 0 (16-byte-aligned runs of 64 KiB spread over every thread of the grid:
     * {@code cp.async.bulk.prefetch.L2}, which fills L2 and reads nothing into the kernel).
     */
    static final String QUIET = """
            extern "C" __global__ void quiet(const char* p, long long bytes, long long ns) {
                const long long run = 65536;
                const long long first = (long long) blockIdx.x * blockDim.x + threadIdx.x, all = (long long) gridDim.x * blockDim.x;
                for (long long at = first * run; at < bytes; at += all * run) {
                    long long n = bytes - at < run ? bytes - at : run;
            #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p + at), "r"((unsigned) n) : "memory");
            #endif
                }
                for (long long waited = 0; waited < ns; waited += 1000) __nanosleep(1000);
            }
            """;

    interface Product { void run(int layer, Stream stream); }

    /** Whether there is no CUDA here (then said, with why): a bench's main has nothing to measure. */
    static boolean noCuda() {
        if (Cuda.isAvailable()) return false;
        System.out.println("CUDA " + Cuda.probe().summary() + "; nothing to measure");
        return true;
    }

    /** Where NVRTC's headers are: {@code CUDA_HOME}, else /usr/local/cuda. */
    static String cudaHome() { return System.getenv().getOrDefault("CUDA_HOME", "/usr/local/cuda"); }

    public static void main(String[] args) {
        int replays = args.length > 0 ? Integer.parseInt(args[0]) : 40;
        boolean formsOnly = args.length > 1 && args[1].equals("forms");   // the programmatic forms side by side, nothing else
        if (noCuda()) return;
        String cudaHome = cudaHome();
        DType t = DType.BF16;
        try (Device d = Device.open(0); Stream stream = d.createStream(); Blas blas = Blas.create(d);
             Event start = d.createEvent(); Event end = d.createEvent()) {
            int sms = d.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT);
            LazyProgram.Compiler compiler = (name, source) -> CudaExecutable.compile(d, cudaHome, "gemv-chain", name, source);
            var gemv = new CudaGemv(compiler, sms);
            var programmatic = new CudaGemv(compiler, sms, d.computeCapability().major() >= 9);
            var fill = CudaExecutable.compile(d, cudaHome, "gemv-chain", "fill", FILL).kernel("fill_bf16");
            var quiet = CudaExecutable.compile(d, cudaHome, "gemv-chain", "quiet", QUIET).kernel("quiet");
            var buffers = new ArrayList<DeviceBuffer>();
            try {
                DeviceBuffer x = d.allocate(8192L * 2), y = d.allocate(16384L * 2);
                buffers.add(x);
                buffers.add(y);
                DeviceBuffer[][] w = new DeviceBuffer[SHAPES.length][LAYERS];
                for (int s = 0; s < SHAPES.length; s++)
                    for (int l = 0; l < LAYERS; l++) {
                        long elems = (long) (Integer) SHAPES[s][0] * (Integer) SHAPES[s][1];
                        w[s][l] = d.allocate(elems * 2);
                        buffers.add(w[s][l]);
                        fill.launch(new LaunchConfig(Dim3.of(1024), Dim3.of(256), 0, stream), w[s][l].address(), elems, 17 * s + l);
                    }
                fill.launch(new LaunchConfig(Dim3.of(16), Dim3.of(256), 0, stream), x.address(), 8192L, 99);
                stream.synchronize();
                System.out.printf(Locale.ROOT, "GPU %s, %d SMs; bf16, one row, %d layers' weights, a graph of %d products replayed %d times%n",
                        d.name(), sms, LAYERS, LAYERS, replays);
                var best = new CudaGemv.Launch[SHAPES.length];
                for (int s = 0; s < SHAPES.length && !formsOnly; s++) {
                    int k = (Integer) SHAPES[s][0], n = (Integer) SHAPES[s][1], si = s;
                    double bytes = 2.0 * k * n;
                    var def = CudaGemv.launch(t, CudaGemv.Path.CUDA_CORES, 1, n, k, sms);
                    double defUs = chain(d, stream, start, end, replays, (l, st) -> gemv.run(def, 1, n, k, n, x.address(), w[si][l].address(), y.address(), st));
                    double pdlUs = chain(d, stream, start, end, replays,
                            (l, st) -> programmatic.run(def, 1, n, k, n, x.address(), w[si][l].address(), y.address(), st));
                    double blasUs = chain(d, stream, start, end, replays, (l, st) -> blas.gemm(Blas.Precision.BF16, true, false, n, 1, k, 1f,
                            w[si][l], k, x.slice(0, 2L * k), k, 0f, y.slice(0, 2L * n), n, true, st));
                    System.out.printf(Locale.ROOT, "%-8s k %5d n %5d: default %s %.2f us (%.0f GB/s); programmatic %.2f; cuBLAS %.2f%n", SHAPES[s][2], k, n,
                            describe(def), defUs, bytes / defUs / 1e3, pdlUs, blasUs);
                    best[s] = def;
                    double bestUs = defUs;
                    var line = new StringBuilder("  sweep (slices x warps: us):");
                    int steps = Math.ceilDiv(k / 8, CudaGemv.FMA_STEP);
                    for (int slices = 1; slices <= 16 && slices <= steps; slices *= 2)
                        for (int warps : new int[]{4, 8, 16}) {
                            if (warps % slices != 0) continue;
                            var l = CudaGemv.sliced(t, CudaGemv.Path.CUDA_CORES, 1, n, k, slices, warps);
                            double us = chain(d, stream, start, end, replays, (li, st) -> gemv.run(l, 1, n, k, n, x.address(), w[si][li].address(), y.address(), st));
                            line.append(String.format(Locale.ROOT, " %dx%d %.2f", slices, warps, us));
                            if (us < bestUs) { bestUs = us; best[s] = l; }
                        }
                    System.out.println(line);
                    System.out.printf(Locale.ROOT, "  best %s %.2f us (%.0f GB/s)%n", describe(best[s]), bestUs, bytes / bestUs / 1e3);
                }
                // each product after ~8 us of other work (the attention's few small kernels), its weight asked of L2 by that
                // work's first threads or not: what prefetching the next product's weight would save (the difference)
                for (int s = 0; s < SHAPES.length && !formsOnly; s++) {
                    int k = (Integer) SHAPES[s][0], n = (Integer) SHAPES[s][1], si = s;
                    var def = CudaGemv.launch(t, CudaGemv.Path.CUDA_CORES, 1, n, k, sms);
                    double[] us = new double[3];
                    for (int variant = 0; variant < 3; variant++) {
                        int v = variant;
                        us[v] = chain(d, stream, start, end, replays, (l, st) -> {
                            long bytes = v == 1 ? 2L * k * n : 0;
                            if (v < 2) quiet.launch(new LaunchConfig(Dim3.of(PREFETCH_BLOCKS), Dim3.of(32), 0, st), w[si][l].address(), bytes, 8000L);
                            gemv.run(def, 1, n, k, n, x.address(), w[si][l].address(), y.address(), st);
                        });
                    }
                    System.out.printf(Locale.ROOT, "%-8s after 8 us of other work: %.2f us; with its weight asked of L2 first: %.2f (the product alone %.2f)%n",
                            SHAPES[s][2], us[0], us[1], us[2]);
                }
                // the forms a plan launches, programmatically, in one process: the whole grid (main's), the first loop of the
                // weight before the wait or not, and the grid capped at R warps a multiprocessor (LaunchChoice.Gemv#resident;
                // the plan's rule: 16), the blocks past it looped over
                if (d.computeCapability().major() >= 9) {
                    int[][] forms = {{0, 0}, {1, 0}, {1, 8}, {1, 12}, {1, 16}, {1, 24}};   // {preload, resident}
                    System.out.println("programmatic chains (preload 0/1, resident warps a multiprocessor, 0: the whole grid): us a product");
                    for (int s = 0; s < SHAPES.length; s++) {
                        int k = (Integer) SHAPES[s][0], n = (Integer) SHAPES[s][1], si = s;
                        var def = CudaGemv.launch(t, CudaGemv.Path.CUDA_CORES, 1, n, k, sms);
                        var line = new StringBuilder(String.format(Locale.ROOT, "%-8s %s:", SHAPES[s][2], describe(def)));
                        for (int[] f : forms) {
                            double us = chain(d, stream, start, end, replays,
                                    (l, st) -> programmatic.run(def, f[0] == 1, f[1], 1, n, k, n, x.address(), w[si][l].address(), y.address(), st));
                            line.append(String.format(Locale.ROOT, "  p%d r%d %.2f (grid %d)", f[0], f[1], us, def.grid(sms, f[1])));
                        }
                        System.out.println(line);
                    }
                    for (int f = 0; f < forms.length; f++) {
                        int[] form = forms[f];
                        double us = chain(d, stream, start, end, replays, (l, st) -> {
                            for (int s = 0; s < SHAPES.length; s++) {
                                int k = (Integer) SHAPES[s][0], n = (Integer) SHAPES[s][1];
                                programmatic.run(CudaGemv.launch(t, CudaGemv.Path.CUDA_CORES, 1, n, k, sms), form[0] == 1, form[1], 1, n, k, n,
                                        x.address(), w[s][l].address(), y.address(), st);
                            }
                        });
                        System.out.printf(Locale.ROOT, "a layer's 4 products, programmatic, preload %d, resident %d: %.2f us a layer (%.0f GB/s)%n",
                                form[0], form[1], us, layerBytes() / us / 1e3);
                    }
                }
                // a layer's four products in turn, 16 layers: the decode step's products without the rest
                double layerBytes = 0;
                for (Object[] s : SHAPES) layerBytes += 2.0 * (Integer) s[0] * (Integer) s[1];
                for (boolean sweep : formsOnly ? new boolean[0] : new boolean[]{false, true}) {
                    double us = chain(d, stream, start, end, replays, (l, st) -> {
                        for (int s = 0; s < SHAPES.length; s++) {
                            int k = (Integer) SHAPES[s][0], n = (Integer) SHAPES[s][1];
                            var launch = sweep ? best[s] : CudaGemv.launch(t, CudaGemv.Path.CUDA_CORES, 1, n, k, sms);
                            gemv.run(launch, 1, n, k, n, x.address(), w[s][l].address(), y.address(), st);
                        }
                    });
                    System.out.printf(Locale.ROOT, "a layer's 4 products, %s launches: %.2f us a layer (%.0f GB/s); 16 layers %.1f us%n",
                            sweep ? "best" : "default", us, layerBytes / us / 1e3, 16 * us);
                }
            } finally {
                for (DeviceBuffer b : buffers) b.close();
            }
        }
    }

    static double layerBytes() {
        double b = 0;
        for (Object[] s : SHAPES) b += 2.0 * (Integer) s[0] * (Integer) s[1];
        return b;
    }

    static String describe(CudaGemv.Launch l) { return l.slices() + "x" + l.warps() + " (" + l.blocks() + " blocks)"; }

    /** µs a product: a graph of one product a layer for 16 layers, replayed {@code replays} times after a warm-up. */
    static double chain(Device d, Stream stream, Event start, Event end, int replays, Product p) {
        CudaGraph graph;
        try (StreamCapture capture = stream.beginCapture()) {
            for (int l = 0; l < LAYERS; l++) p.run(l, stream);
            graph = capture.end();
        }
        try (graph; GraphExec exec = graph.instantiate()) {
            for (int i = 0; i < 3; i++) exec.launch(stream);
            stream.synchronize();
            double[] per = new double[5];
            for (int r = 0; r < per.length; r++) {
                start.record(stream);
                for (int i = 0; i < replays; i++) exec.launch(stream);
                end.record(stream);
                stream.synchronize();
                per[r] = 1e3 * Event.elapsedMillis(start, end) / ((double) replays * LAYERS);
            }
            Arrays.sort(per);
            return per[per.length / 2];
        }
    }
}
