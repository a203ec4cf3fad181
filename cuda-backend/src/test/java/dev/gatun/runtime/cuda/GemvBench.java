package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Blas;
import dev.gatun.cuda.Cuda;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Event;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Random;

/**
 * The weight-streaming product ({@link CudaGemv}) beside cuBLAS (the {@code cublasGemmEx} call {@link CudaMatmul}
 * makes) on the Llama-3.2-1B layers' shapes and their tensor-parallel halves, bfloat16, 1 and 8 rows (not a test): a
 * line a shape with each one's median time of a call on the GPU (CUDA events around each call) and the bandwidth of
 * reading the weight once, the CUDA-core kernel's too, and how far the product's result is from cuBLAS's.
 *
 * <p>The weight is one of several copies, used in turn, that together are four times the L2 cache, so every call reads
 * it from memory as a decode step does. Calls are timed in groups of 50 behind a kernel that keeps the GPU busy for
 * 2 ms, so that the host's enqueueing is not in the time. Arguments: [timed calls, default 200].
 *
 * <p>Run on a GPU machine with {@code bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.GemvBench}.
 */
public final class GemvBench {
    private GemvBench() {}

    static final String SPIN = """
            extern "C" __global__ void spin(long long nanos) {
                unsigned long long start, now;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
                do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now)); } while (now - start < (unsigned long long) nanos);
            }
            """;
    static final int GROUP = 50;

    /** {k, n, what}: Llama-3.2-1B's layers, then their halves under tensor parallelism of 2. */
    static final Object[][] SHAPES = {
            {2048, 3072, "qkv"}, {2048, 2048, "o_proj"}, {2048, 16384, "gate|up"}, {8192, 2048, "down"}, {2048, 128256, "lm_head"},
            {2048, 1536, "qkv/2"}, {1024, 2048, "o_proj/2"}, {2048, 8192, "gate|up/2"}, {4096, 2048, "down/2"}, {2048, 64128, "lm_head/2"}};

    record Timed(double micros, double gbs) {}

    public static void main(String[] args) {
        int iters = args.length > 0 ? Integer.parseInt(args[0]) : 200;
        if (GemvChainBench.noCuda()) return;
        String cudaHome = GemvChainBench.cudaHome();
        DType t = DType.BF16;
        try (Device d = Device.open(0); Stream stream = d.createStream(); Blas blas = Blas.create(d)) {
            int sms = d.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT);
            long l2 = d.attribute(DeviceAttribute.L2_CACHE_SIZE);
            var gemv = new CudaGemv((name, source) -> CudaExecutable.compile(d, cudaHome, "gemv-bench", name, source), sms);
            Kernel spin = CudaExecutable.compile(d, cudaHome, "gemv-bench", "spin", SPIN).kernel("spin");
            List<Event> events = new ArrayList<>();
            for (int i = 0; i < 2 * GROUP; i++) events.add(d.createEvent());
            System.out.printf(Locale.ROOT, "GPU %s, %d SMs, L2 %d MiB; %s, median of %d calls, GB/s of the weight read once%n", d.name(), sms, l2 >> 20,
                    t, iters);
            System.out.printf(Locale.ROOT, "%-10s %2s %6s %7s %-5s %10s %8s %10s %8s %10s %8s %8s %10s%n", "shape", "m", "k", "n", "dtype",
                    "gatun us", "GB/s", "cublas us", "GB/s", "fma us", "GB/s", "speedup", "max diff");
            var random = new Random(42);
            for (Object[] shape : SHAPES) {
                int k = (Integer) shape[0], n = (Integer) shape[1];
                long weightBytes = (long) n * k * t.byteSize();
                int copies = (int) Math.max(1, Math.ceilDiv(4 * l2, weightBytes));
                try (DeviceBuffer w = d.allocate(weightBytes * copies); DeviceBuffer x = d.allocate(8L * k * t.byteSize());
                     DeviceBuffer y = d.allocate(8L * n * t.byteSize()); DeviceBuffer yRef = d.allocate(8L * n * t.byteSize())) {
                    fill(w, random);
                    fill(x, random);
                    for (int m : new int[]{1, 2, 4, 8}) {
                        int mm = m;
                        Timed ours = time(stream, spin, events, iters, weightBytes, c ->
                                gemv.run(t, mm, n, k, n, x.address(), w.address() + c % copies * weightBytes, y.address(), stream));
                        Timed cublas = time(stream, spin, events, iters, weightBytes, c ->
                                blas.gemm(Blas.Precision.BF16, true, false, n, mm, k, 1f, w.slice(c % copies * weightBytes, weightBytes), k, x, k, 0f,
                                        yRef, n, true, stream));
                        Timed fma = time(stream, spin, events, iters, weightBytes, c ->
                                gemv.run(CudaGemv.Path.CUDA_CORES, t, mm, n, k, n, x.address(), w.address() + c % copies * weightBytes, y.address(), stream));
                        // the last calls of both used the same copy of the weight; the tensor-core kernel once more on it
                        gemv.run(t, m, n, k, n, x.address(), w.address() + (long) ((iters - 1) % copies) * weightBytes, y.address(), stream);
                        stream.synchronize();
                        System.out.printf(Locale.ROOT, "%-10s %2d %6d %7d %-5s %10.1f %8.0f %10.1f %8.0f %10.1f %8.0f %7.2fx %10.2e%n", shape[2], m, k, n, t,
                                ours.micros(), ours.gbs(), cublas.micros(), cublas.gbs(), fma.micros(), fma.gbs(), cublas.micros() / ours.micros(),
                                maxDiff(y, yRef, m * n));
                    }
                }
            }
            for (Event e : events) e.close();
        }
    }

    interface Call { void run(long call); }

    /** Median GPU time of {@code iters} calls, each between two events, in groups behind a 2 ms spin; warmed up first. */
    static Timed time(Stream stream, Kernel spin, List<Event> events, int iters, long weightBytes, Call call) {
        for (int i = 0; i < 20; i++) call.run(i);
        stream.synchronize();
        double[] micros = new double[iters];
        for (int from = 0; from < iters; from += GROUP) {
            int count = Math.min(GROUP, iters - from);
            spin.launch(new LaunchConfig(Dim3.of(1), Dim3.of(1), 0, stream), 2_000_000L);
            for (int i = 0; i < count; i++) {
                events.get(2 * i).record(stream);
                call.run(from + i);
                events.get(2 * i + 1).record(stream);
            }
            stream.synchronize();
            for (int i = 0; i < count; i++) micros[from + i] = 1e3 * Event.elapsedMillis(events.get(2 * i), events.get(2 * i + 1));
        }
        Arrays.sort(micros);
        double median = micros[iters / 2];
        return new Timed(median, weightBytes / (median * 1e-6) / 1e9);
    }

    /** Random bfloat16 values in [-1, 1), written in pieces of at most 16 MiB. */
    static void fill(DeviceBuffer b, Random random) {
        int piece = (int) Math.min(b.size() / 2, 8L << 20);
        float[] v = new float[piece];
        for (int i = 0; i < piece; i++) v[i] = random.nextFloat() * 2 - 1;
        MemorySegment bits = MemorySegment.ofArray(Blas.toBFloat16(v));
        for (long at = 0; at < b.size(); at += 2L * piece) {
            long bytes = Math.min(2L * piece, b.size() - at);
            b.slice(at, bytes).copyFrom(bits.asSlice(0, bytes));
        }
    }

    /** The largest difference between two bfloat16 results, relative to the largest magnitude of the second. */
    static double maxDiff(DeviceBuffer a, DeviceBuffer b, int count) {
        short[] x = new short[count], y = new short[count];
        a.slice(0, 2L * count).copyTo(x);
        b.slice(0, 2L * count).copyTo(y);
        double diff = 0, scale = 0;
        for (int i = 0; i < count; i++) {
            double u = Blas.fromBFloat16(x[i]), v = Blas.fromBFloat16(y[i]);
            diff = Math.max(diff, Math.abs(u - v));
            scale = Math.max(scale, Math.abs(v));
        }
        return scale == 0 ? diff : diff / scale;
    }
}
