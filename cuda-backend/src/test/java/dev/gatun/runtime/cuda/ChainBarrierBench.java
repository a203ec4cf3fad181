package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Cuda;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Event;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;

import java.util.ArrayList;
import java.util.Locale;

/**
 * What a step boundary of a decode chain costs, two ways (not a test): a chain of 16 kernels that each stream a buffer
 * of their own ({@code step}: a grid of two 512-thread blocks a multiprocessor reading 16-byte vectors past the caches,
 * launched programmatically as the decoder's kernels are: the next scheduled first, then the wait, the first vector
 * loaded before it), captured into a CUDA graph; against one persistent launch of the same grid doing the 16 steps with
 * a grid-wide barrier between them ({@code persistent}: an arrival counter and a generation word, a block's first
 * thread spinning, bounded: it traps after 2^26 polls rather than hang), with and without each block loading its
 * first vector of the next step before the barrier; and the same chain launched plainly (each kernel waits for the
 * one before to end before it is scheduled), and with every other launch plain (a collective's place in a decode chain
 * today: launched as always between programmatic kernels). Per step size (0 bytes: the boundary alone; then 1 to 64 MiB, each
 * step its own buffer, so the reads come from memory): µs a step, medians of 5 timings of 40 replays, and GB/s.
 * Whether a persistent form of the step chain (a megakernel) would pay on this GPU, and by how much a boundary.
 *
 * <p>Run on a GPU machine with {@code bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.ChainBarrierBench}.
 */
public final class ChainBarrierBench {
    private ChainBarrierBench() {}

    static final String SOURCE = """
            #define CB_LIMIT (1ll << 26)
            __device__ __forceinline__ unsigned cb_fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }

            // the grid's vectors of w, four loads in flight a thread; acc keeps the loads
            __device__ __forceinline__ unsigned cb_stream(const uint4* __restrict__ w, long long n, long long first, long long all) {
                unsigned acc = 0;
                long long i = first;
                for (; i + 3 * all < n; i += 4 * all) {
                    uint4 a = __ldcs(w + i), b = __ldcs(w + i + all), c = __ldcs(w + i + 2 * all), d = __ldcs(w + i + 3 * all);
                    acc ^= cb_fold(a) ^ cb_fold(b) ^ cb_fold(c) ^ cb_fold(d);
                }
                for (; i < n; i += all) acc ^= cb_fold(__ldcs(w + i));
                return acc;
            }

            extern "C" __global__ void __launch_bounds__(512) step(const uint4* __restrict__ w, long long n, unsigned* out) {
                const long long first = blockIdx.x * (long long) blockDim.x + threadIdx.x, all = (long long) gridDim.x * blockDim.x;
                const uint4 a = first < n ? __ldcs(w + first) : make_uint4(0u, 0u, 0u, 0u);
            #if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
                asm volatile("griddepcontrol.launch_dependents;\\n\\tgriddepcontrol.wait;" ::: "memory");
            #endif
                const unsigned acc = cb_fold(a) ^ cb_stream(w, n, first + all, all);
                if (acc == 0x9e3779b9u) out[0] = acc;
            }

            // every block of the grid arrives, then all leave; bar[0] counts arrivals, bar[1] is the generation
            __device__ __forceinline__ void cb_barrier(unsigned* bar, unsigned& gen) {
                __syncthreads();
                if (threadIdx.x == 0) {
                    __threadfence();
                    if (atomicAdd(bar, 1u) == gridDim.x - 1) {
                        atomicExch(bar, 0u);
                        __threadfence();
                        atomicAdd(bar + 1, 1u);
                    } else {
                        long long spins = 0;
                        while (*(volatile unsigned*) (bar + 1) == gen)
                            if (++spins > CB_LIMIT) asm volatile("trap;");
                    }
                    __threadfence();
                }
                __syncthreads();
                gen++;
            }

            extern "C" __global__ void __launch_bounds__(512) persistent(const unsigned long long* ws, long long n, int steps, int ahead,
                                                                         unsigned* bar, unsigned* out) {
                __shared__ unsigned gen0;
                if (threadIdx.x == 0) gen0 = *(volatile unsigned*) (bar + 1);
                __syncthreads();
                unsigned gen = gen0, acc = 0;
                const long long first = blockIdx.x * (long long) blockDim.x + threadIdx.x, all = (long long) gridDim.x * blockDim.x;
                uint4 next = make_uint4(0u, 0u, 0u, 0u);
                if (first < n) next = __ldcs(reinterpret_cast<const uint4*>(ws[0]) + first);
                for (int s = 0; s < steps; s++) {
                    const uint4* w = reinterpret_cast<const uint4*>(ws[s]);
                    acc ^= cb_fold(next) ^ cb_stream(w, n, first + all, all);
                    next = make_uint4(0u, 0u, 0u, 0u);
                    if (s + 1 < steps) {
                        if (ahead && first < n) next = __ldcs(reinterpret_cast<const uint4*>(ws[s + 1]) + first);
                        cb_barrier(bar, gen);
                        if (!ahead && first < n) next = __ldcs(reinterpret_cast<const uint4*>(ws[s + 1]) + first);
                    }
                }
                if (acc == 0x9e3779b9u) out[0] = acc;
            }
            """;

    static final long[] SIZES = {0, 1L << 20, 8L << 20, 12L << 20, 32L << 20, 64L << 20};

    public static void main(String[] args) {
        int replays = args.length > 0 ? Integer.parseInt(args[0]) : 40;
        if (GemvChainBench.noCuda()) return;
        String cudaHome = GemvChainBench.cudaHome();
        int steps = GemvChainBench.LAYERS;
        try (Device d = Device.open(0); Stream stream = d.createStream(); Event start = d.createEvent(); Event end = d.createEvent()) {
            int sms = d.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT);
            var program = CudaExecutable.compile(d, cudaHome, "chain-barrier", "chain", SOURCE);
            var step = program.kernel("step");
            var persistent = program.kernel("persistent");
            var fill = CudaExecutable.compile(d, cudaHome, "chain-barrier", "fill", GemvChainBench.FILL).kernel("fill_bf16");
            var buffers = new ArrayList<DeviceBuffer>();
            try {
                long most = SIZES[SIZES.length - 1];
                long[] addresses = new long[steps];
                for (int s = 0; s < steps; s++) {
                    DeviceBuffer b = d.allocate(most);
                    buffers.add(b);
                    addresses[s] = b.address();
                    fill.launch(new LaunchConfig(Dim3.of(1024), Dim3.of(256), 0, stream), b.address(), most / 2, 31 * s + 7);
                }
                DeviceBuffer ws = d.allocate(8L * steps), bar = d.allocate(64), out = d.allocate(64);
                buffers.add(ws);
                buffers.add(bar);
                buffers.add(out);
                stream.synchronize();
                ws.copyFrom(addresses);
                bar.copyFrom(new int[16]);
                int blocks = 2 * sms;
                var config = new LaunchConfig(Dim3.of(blocks), Dim3.of(512), 0, stream);
                System.out.printf(Locale.ROOT, "GPU %s, %d SMs; %d steps a graph, a grid of %d blocks of 512 threads, replayed %d times%n",
                        d.name(), sms, steps, blocks, replays);
                System.out.println("bytes a step | launches (programmatic) us a step | plain launches | every other launch plain"
                        + " | persistent, barrier | persistent, next vector before the barrier | GB/s (launches / persistent ahead)");
                for (long size : SIZES) {
                    long n = size / 16;
                    double launched = GemvChainBench.chain(d, stream, start, end, replays,
                            (l, st) -> step.launchOverlapped(new LaunchConfig(Dim3.of(blocks), Dim3.of(512), 0, st), addresses[l], n, out.address()));
                    double plain = GemvChainBench.chain(d, stream, start, end, replays,
                            (l, st) -> step.launch(new LaunchConfig(Dim3.of(blocks), Dim3.of(512), 0, st), addresses[l], n, out.address()));
                    double mixed = GemvChainBench.chain(d, stream, start, end, replays, (l, st) -> {
                        var c = new LaunchConfig(Dim3.of(blocks), Dim3.of(512), 0, st);
                        if (l % 2 == 0) step.launchOverlapped(c, addresses[l], n, out.address());
                        else step.launch(c, addresses[l], n, out.address());
                    });
                    double[] pers = new double[2];
                    for (int ahead = 0; ahead < 2; ahead++) {
                        int a = ahead;
                        pers[a] = GemvChainBench.chain(d, stream, start, end, replays, (l, st) -> {
                            if (l == 0) persistent.launch(new LaunchConfig(Dim3.of(blocks), Dim3.of(512), 0, st), ws.address(), n, steps, a, bar.address(), out.address());
                        });
                    }
                    System.out.printf(Locale.ROOT, "%12d | %8.2f | %8.2f | %8.2f | %8.2f | %8.2f | %s%n", size, launched, plain, mixed, pers[0], pers[1],
                            size == 0 ? "-" : String.format(Locale.ROOT, "%.0f / %.0f", size / launched / 1e3, size / pers[1] / 1e3));
                }
            } finally {
                for (DeviceBuffer b : buffers) b.close();
            }
        }
    }
}
