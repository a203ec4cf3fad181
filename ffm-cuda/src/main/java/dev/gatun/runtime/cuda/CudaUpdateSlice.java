package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;

/**
 * {@code update_slice} on the GPU, in place: the update's runs (the elements after the updated dimension, {@code len}
 * of them along it), read where they lie in the update (packed, or at two strides: {@link dev.gatun.ir.UpdateRuns}),
 * go to their place in the target from the position read on the device, so a captured graph replays
 * with each call's position (a KV-cache write costs the bytes of the new keys, not of the cache). Threads copy units
 * of the largest power of two up to 16 bytes that divides a run's stride and both addresses, so any dtype is one
 * kernel. A position where the update does not fit writes the executable's {@link DeviceFault} record (the position,
 * the sizes) and traps, as {@link CudaIndexSelect} does: the call fails naming the step, and nothing is written outside
 * the target.
 */
final class CudaUpdateSlice {
    static final String SOURCE = Programmatic.SOURCE + DeviceFault.SOURCE + """
            // run o of the update starts at (o / inner) * outer_bytes + (o % inner) * inner_bytes_apart (see UpdateRuns)
            template <typename U>
            __device__ void gatun_copy_runs(const char* src, char* dst, long long runs, long long run_bytes, long long stride_bytes,
                                            long long inner, long long inner_apart, long long outer_apart) {
                const long long per = run_bytes / (long long) sizeof(U), total = runs * per;
                for (long long i = blockIdx.x * (long long) blockDim.x + threadIdx.x; i < total; i += (long long) gridDim.x * blockDim.x) {
                    long long o = i / per, j = i - o * per, g = o / inner;
                    const char* from = src + g * outer_apart + (o - g * inner) * inner_apart;
                    *(U*) (dst + o * stride_bytes + j * (long long) sizeof(U)) = *(const U*) (from + j * (long long) sizeof(U));
                }
            }

            extern "C" __global__ void gatun_update_slice(const char* update, const void* pos, int pos64, char* target, long long runs,
                                                          long long size, long long len, long long inner_bytes, int unit,
                                                          long long inner, long long inner_apart, long long outer_apart,
                                                          int* claim, gatun_fault* fault, int step) {
                GATUN_DEPENDENT_START();
                long long at = pos64 ? *(const long long*) pos : (long long) *(const int*) pos;
                if (at < 0 || at > size - len) gatun_fail(claim, fault, 2, step, at, len, size, 0);
                char* dst = target + at * inner_bytes;
                const long long run_bytes = len * inner_bytes, stride_bytes = size * inner_bytes;
                switch (unit) {
                    case 16: gatun_copy_runs<uint4>(update, dst, runs, run_bytes, stride_bytes, inner, inner_apart, outer_apart); break;
                    case 8: gatun_copy_runs<unsigned long long>(update, dst, runs, run_bytes, stride_bytes, inner, inner_apart, outer_apart); break;
                    case 4: gatun_copy_runs<unsigned int>(update, dst, runs, run_bytes, stride_bytes, inner, inner_apart, outer_apart); break;
                    case 2: gatun_copy_runs<unsigned short>(update, dst, runs, run_bytes, stride_bytes, inner, inner_apart, outer_apart); break;
                    default: gatun_copy_runs<unsigned char>(update, dst, runs, run_bytes, stride_bytes, inner, inner_apart, outer_apart); break;
                }
            }
            """;

    private final Kernel kernel;

    CudaUpdateSlice(LazyProgram.Compiler compiler) { this.kernel = new LazyProgram(compiler, "gatun_update_slice", SOURCE).kernel("gatun_update_slice"); }

    /**
     * The update ({@code runs} runs of {@code len * innerBytes} bytes; in the update, run {@code o} starts at
     * {@code (o / inner) * outerApart + (o % inner) * innerApart} bytes) into {@code target} ({@code size} along the
     * dimension) from the position at {@code pos}; a position that does not fit is reported in {@code fault} as plan
     * step {@code step}; launched programmatically where asked.
     */
    void run(long update, long pos, DType posType, long target, long runs, long size, long len, long innerBytes, long inner, long innerApart,
             long outerApart, DeviceFault fault, int step, boolean programmatic, Stream stream) {
        long runBytes = len * innerBytes;
        int unit = 16;
        while (unit > 1 && ((innerBytes | update | target | innerApart | outerApart) & (unit - 1)) != 0) unit >>= 1;
        // an empty update still launches, one warp: its position is checked as the host backend checks it
        long threads = Math.max(32, runs * (runBytes / unit));
        int block = (int) Math.min(256, threads), grid = (int) Math.min((threads + block - 1) / block, 65_535);
        Programmatic.launch(kernel, programmatic, new LaunchConfig(Dim3.of(grid), Dim3.of(block), 0, stream), update, pos, posType == DType.INT64 ? 1 : 0, target, runs,
                size, len, innerBytes, unit, Math.max(1, inner), innerApart, outerApart, fault.claim(), fault.record(), step);
    }
}
