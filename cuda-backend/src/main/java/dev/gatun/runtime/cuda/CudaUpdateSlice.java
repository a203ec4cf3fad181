package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;

import java.util.List;

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

            // one update: the position checked (a bad one is recorded as member `member` of plan step `step`), its runs copied
            __device__ __forceinline__ void gatun_update_body(const char* update, long long at, char* target, long long runs, long long size,
                                                              long long len, long long inner_bytes, int unit, long long inner, long long inner_apart,
                                                              long long outer_apart, int* claim, gatun_fault* fault, int step, int member) {
                if (at < 0 || at > size - len) gatun_fail(claim, fault, 2, step, at, len, size, member);
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

            __device__ __forceinline__ long long gatun_position(const void* pos, int pos64) {
                return pos64 ? *(const long long*) pos : (long long) *(const int*) pos;
            }

            // one update; and two at one position (Step.UpdateSlices), blockIdx.y picking the update: the same leading arguments
            extern "C" __global__ void gatun_update_slice(const void* pos, int pos64, int* claim, gatun_fault* fault, int step,
                    const char* u0, char* t0, long long runs0, long long size0, long long len0, long long ib0, int unit0, long long in0, long long ia0, long long oa0) {
                GATUN_DEPENDENT_START();
                gatun_update_body(u0, gatun_position(pos, pos64), t0, runs0, size0, len0, ib0, unit0, in0, ia0, oa0, claim, fault, step, 0);
            }

            extern "C" __global__ void gatun_update_slice2(const void* pos, int pos64, int* claim, gatun_fault* fault, int step,
                    const char* u0, char* t0, long long runs0, long long size0, long long len0, long long ib0, int unit0, long long in0, long long ia0, long long oa0,
                    const char* u1, char* t1, long long runs1, long long size1, long long len1, long long ib1, int unit1, long long in1, long long ia1, long long oa1) {
                GATUN_DEPENDENT_START();
                const long long at = gatun_position(pos, pos64);
                if (blockIdx.y == 0) gatun_update_body(u0, at, t0, runs0, size0, len0, ib0, unit0, in0, ia0, oa0, claim, fault, step, 0);
                else gatun_update_body(u1, at, t1, runs1, size1, len1, ib1, unit1, in1, ia1, oa1, claim, fault, step, 1);
            }
            """;

    private final LazyProgram program;

    /** Loads the program now, both kernels (where ranks share a GPU nothing may load mid-session). */
    CudaUpdateSlice(LazyProgram.Compiler compiler) {
        this.program = new LazyProgram(compiler, "gatun_update_slice", SOURCE);
        program.loadNow("gatun_update_slice", "gatun_update_slice2");
    }

    /**
     * One update: {@code runs} runs of {@code len * innerBytes} bytes at {@code update} (run {@code o} starting
     * {@code (o / inner) * outerApart + (o % inner) * innerApart} bytes in) into {@code target}, {@code size} positions
     * along the dimension.
     */
    record Update(long update, long target, long runs, long size, long len, long innerBytes, long inner, long innerApart, long outerApart) {
        /** The largest power of two up to 16 bytes that divides a run's stride, both addresses and the update's strides. */
        int unit() {
            int unit = 16;
            while (unit > 1 && ((innerBytes | update | target | innerApart | outerApart) & (unit - 1)) != 0) unit >>= 1;
            return unit;
        }

        /** Threads to copy it (an empty update still gets one warp: its position is checked as the host backend checks it). */
        long threads() { return Math.max(32, runs * (len * innerBytes / unit())); }

        List<Object> args() { return List.of(update, target, runs, size, len, innerBytes, unit(), Math.max(1, inner), innerApart, outerApart); }
    }

    /** {@code u} from the position at {@code pos}; a position that does not fit is reported in {@code fault} as plan step {@code step}. */
    void run(Update u, long pos, DType posType, DeviceFault fault, int step, boolean programmatic, Stream stream) {
        launch("gatun_update_slice", List.of(u), pos, posType, fault, step, programmatic, stream);
    }

    /** Two updates at the position at {@code pos}, one launch ({@code blockIdx.y} picks the update); a bad position names its member. */
    void run(Update a, Update b, long pos, DType posType, DeviceFault fault, int step, boolean programmatic, Stream stream) {
        launch("gatun_update_slice2", List.of(a, b), pos, posType, fault, step, programmatic, stream);
    }

    /** One launch of {@code kernel} for {@code members} (blockIdx.y: the member), threads enough for the largest. */
    private void launch(String kernel, List<Update> members, long pos, DType posType, DeviceFault fault, int step, boolean programmatic, Stream stream) {
        long most = members.stream().mapToLong(Update::threads).max().orElseThrow();
        int block = (int) Math.min(256, most), grid = (int) Math.min((most + block - 1) / block, 65_535);
        var args = new java.util.ArrayList<Object>(List.of(pos, posType == DType.INT64 ? 1 : 0, fault.claim(), fault.record(), step));
        for (Update u : members) args.addAll(u.args());
        Programmatic.launch(program.kernel(kernel), programmatic, new LaunchConfig(new Dim3(grid, members.size(), 1), Dim3.of(block), 0, stream),
                args.toArray());
    }
}
