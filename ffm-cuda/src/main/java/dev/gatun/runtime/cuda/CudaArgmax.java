package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;

import java.util.HashMap;
import java.util.Map;

/**
 * {@code argmax} over the last dimension on the GPU: one block per row (grid-stride), each thread the first
 * largest element of its strided share, then warp shuffles and one partial per warp in shared memory. Candidates
 * compare as PyTorch's argmax does: a NaN is larger than any number, and of equal candidates the smaller index wins,
 * so the result is the first largest element (the first NaN where there is one).
 */
final class CudaArgmax {
    static final String SOURCE = """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>

            __device__ __forceinline__ double gt_value(const float* p, long long i) { return p[i]; }
            __device__ __forceinline__ double gt_value(const double* p, long long i) { return p[i]; }
            __device__ __forceinline__ double gt_value(const __half* p, long long i) { return __half2float(p[i]); }
            __device__ __forceinline__ double gt_value(const __nv_bfloat16* p, long long i) { return __bfloat162float(p[i]); }

            // whether (v, i) beats (w, j): a NaN beats any number, a larger value a smaller one, and on a tie the smaller index
            __device__ __forceinline__ bool gt_better(double v, long long i, double w, long long j) {
                bool a = v != v, b = w != w;
                if (a || b) return a && (!b || i < j);
                return v > w || (v == w && i < j);
            }

            template <typename T>
            __device__ void argmax_rows(const T* in, long long* out, long long rows, long long cols) {
                __shared__ double part_v[32];
                __shared__ long long part_i[32];
                const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
                for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
                    double best = 0.0;
                    long long at = -1;
                    for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
                        double v = gt_value(in + r * cols, j);
                        if (at < 0 || gt_better(v, j, best, at)) { best = v; at = j; }
                    }
                    for (int d = 16; d > 0; d >>= 1) {
                        double v = __shfl_down_sync(0xffffffffu, best, d);
                        long long i = __shfl_down_sync(0xffffffffu, at, d);
                        if (i >= 0 && (at < 0 || gt_better(v, i, best, at))) { best = v; at = i; }
                    }
                    if (lane == 0) { part_v[warp] = best; part_i[warp] = at; }
                    __syncthreads();
                    if (threadIdx.x == 0) {
                        for (int w = 1; w < warps; w++)
                            if (part_i[w] >= 0 && (at < 0 || gt_better(part_v[w], part_i[w], best, at))) { best = part_v[w]; at = part_i[w]; }
                        out[r] = at;
                    }
                    __syncthreads();
                }
            }

            extern "C" __global__ void argmax_f32(const float* in, long long* out, long long rows, long long cols) { argmax_rows(in, out, rows, cols); }
            extern "C" __global__ void argmax_f64(const double* in, long long* out, long long rows, long long cols) { argmax_rows(in, out, rows, cols); }
            extern "C" __global__ void argmax_f16(const __half* in, long long* out, long long rows, long long cols) { argmax_rows(in, out, rows, cols); }
            extern "C" __global__ void argmax_bf16(const __nv_bfloat16* in, long long* out, long long rows, long long cols) { argmax_rows(in, out, rows, cols); }
            """;

    private final CudaMatmul.Compiler compiler;
    private final Map<DType, Kernel> kernels = new HashMap<>();

    CudaArgmax(CudaMatmul.Compiler compiler) { this.compiler = compiler; }

    /** Each of {@code rows} rows of {@code cols} elements of {@code t} at {@code in}: its argmax, as i64 at {@code out}. */
    void run(long in, DType t, long out, long rows, long cols, Stream stream) {
        if (rows == 0) return;
        String name = switch (t) {
            case FLOAT32 -> "argmax_f32";
            case FLOAT64 -> "argmax_f64";
            case FLOAT16 -> "argmax_f16";
            case BFLOAT16 -> "argmax_bf16";
            default -> throw new IllegalArgumentException("argmax of " + t);
        };
        Kernel k = kernels.computeIfAbsent(t, x -> compiler.compile("gatun_argmax", SOURCE, name));
        k.launch(new LaunchConfig(Dim3.of((int) Math.min(rows, 65_535)), Dim3.of(256), 0, stream), in, out, rows, cols);
    }
}
