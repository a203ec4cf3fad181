package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;


/**
 * {@code argmax} over the last dimension on the GPU. Candidates compare as PyTorch's argmax does: a NaN is larger than
 * any number, -0 equals +0, and of equal candidates the smaller index wins, so the result is the first largest element
 * (the first NaN where there is one).
 *
 * <p>float32, float16 and bfloat16 rows (every value exact as a float) spread over as many blocks as the row needs:
 * each element becomes one 64-bit key, its value's bits made to order as unsigned integers (a NaN above all) followed by
 * the complement of its index, so the largest key is the answer. Each block reduces 4096 elements to their largest key
 * (sixteen independent loads a thread in flight, integer compares), each warp folds its key into the row's output word
 * with one {@code atomicMax}, and a last kernel turns the key back into the index; the output is cleared first. A
 * row of a vocabulary (128K) is 32 blocks instead of one latency-bound block. float64 rows, whose values need the
 * whole 64 bits, keep one block per row.
 */
final class CudaArgmax {
    static final String SOURCE = Programmatic.SOURCE + """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>

            __device__ __forceinline__ double gt_value(const double* p, long long i) { return p[i]; }
            __device__ __forceinline__ float gt_float(const float* p, long long i) { return p[i]; }
            __device__ __forceinline__ float gt_float(const __half* p, long long i) { return __half2float(p[i]); }
            __device__ __forceinline__ float gt_float(const __nv_bfloat16* p, long long i) { return __bfloat162float(p[i]); }

            // whether (v, i) beats (w, j): a NaN beats any number, a larger value a smaller one, and on a tie the smaller index
            __device__ __forceinline__ bool gt_better(double v, long long i, double w, long long j) {
                bool a = v != v, b = w != w;
                if (a || b) return a && (!b || i < j);
                return v > w || (v == w && i < j);
            }

            // float64: one block per row, each thread the first largest element of its strided share, then shuffles
            extern "C" __global__ void argmax_f64(const double* in, long long* out, long long rows, long long cols) {
                GATUN_DEPENDENT_START();
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

            // a float's order as an unsigned integer: NaN above everything, -0 as +0, negatives below positives
            __device__ __forceinline__ unsigned long long gt_key(float v, long long j) {
                unsigned int u = __float_as_uint(v);
                unsigned int o = v != v ? 0xffffffffu : v == 0.0f ? 0x80000000u : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
                return ((unsigned long long) o << 32) | (0xffffffffull - (unsigned long long) j);
            }

            #define GT_PER_THREAD 16
            #define GT_THREADS 256
            #define GT_CHUNK (GT_PER_THREAD * GT_THREADS)

            extern "C" __global__ void argmax_clear(unsigned long long* out, long long rows) {
                GATUN_DEPENDENT_START();
                for (long long r = blockIdx.x * (long long) blockDim.x + threadIdx.x; r < rows; r += (long long) gridDim.x * blockDim.x) out[r] = 0ull;
            }

            // block (x, y): elements [x * GT_CHUNK, (x + 1) * GT_CHUNK) of rows y, y + gridDim.y, ...
            template <typename T>
            __device__ void argmax_keys(const T* in, unsigned long long* out, long long rows, long long cols) {
                for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
                    const T* row = in + r * cols;
                    long long base = (long long) blockIdx.x * GT_CHUNK + threadIdx.x;
                    float v[GT_PER_THREAD];
                    #pragma unroll
                    for (int i = 0; i < GT_PER_THREAD; i++) {
                        long long j = base + (long long) i * GT_THREADS;
                        v[i] = j < cols ? gt_float(row, j) : 0.0f;
                    }
                    unsigned long long best = 0ull;
                    #pragma unroll
                    for (int i = 0; i < GT_PER_THREAD; i++) {
                        long long j = base + (long long) i * GT_THREADS;
                        if (j < cols) { unsigned long long k = gt_key(v[i], j); best = k > best ? k : best; }
                    }
                    for (int d = 16; d > 0; d >>= 1) {
                        unsigned long long o = __shfl_down_sync(0xffffffffu, best, d);
                        best = o > best ? o : best;
                    }
                    if ((threadIdx.x & 31) == 0 && best != 0ull) atomicMax(out + r, best);
                }
            }

            extern "C" __global__ void argmax_f32(const float* in, unsigned long long* out, long long rows, long long cols) { GATUN_DEPENDENT_START(); argmax_keys(in, out, rows, cols); }
            extern "C" __global__ void argmax_f16(const __half* in, unsigned long long* out, long long rows, long long cols) { GATUN_DEPENDENT_START(); argmax_keys(in, out, rows, cols); }
            extern "C" __global__ void argmax_bf16(const __nv_bfloat16* in, unsigned long long* out, long long rows, long long cols) { GATUN_DEPENDENT_START(); argmax_keys(in, out, rows, cols); }

            // the key back to its index (the complement of its low 32 bits)
            extern "C" __global__ void argmax_index(unsigned long long* out, long long rows) {
                GATUN_DEPENDENT_START();
                for (long long r = blockIdx.x * (long long) blockDim.x + threadIdx.x; r < rows; r += (long long) gridDim.x * blockDim.x)
                    out[r] = (long long) (0xffffffffull - (out[r] & 0xffffffffull));
            }
            """;

    /** Elements one block of the keyed kernels covers (GT_CHUNK). */
    static final int CHUNK = 16 * 256;

    private final LazyProgram program;

    CudaArgmax(LazyProgram.Compiler compiler) {
        this.program = new LazyProgram(compiler, "gatun_argmax", SOURCE);
    }

    private void launch(String name, boolean programmatic, LaunchConfig config, Object... args) { Programmatic.launch(kernel(name), programmatic, config, args); }

    private Kernel kernel(String name) { return program.kernel(name); }

    /** Loads every kernel now (see {@link LazyProgram#loadNow}). */
    void loadNow() { program.loadNow("argmax_f64", "argmax_clear", "argmax_f32", "argmax_f16", "argmax_bf16", "argmax_index"); }

    /**
     * Each of {@code rows} rows of {@code cols} elements of {@code t} at {@code in}: its argmax, as i64 at {@code out};
     * with {@code programmatic} (the plan's choice), every launch is a programmatic dependent launch (see {@link Programmatic}).
     */
    void run(long in, DType t, long out, long rows, long cols, boolean programmatic, Stream stream) {
        if (rows == 0) return;
        if (t == DType.FLOAT64) {
            launch("argmax_f64", programmatic, new LaunchConfig(Dim3.of((int) Math.min(rows, 65_535)), Dim3.of(256), 0, stream), in, out, rows, cols);
            return;
        }
        String name = switch (t) {
            case FLOAT32 -> "argmax_f32";
            case FLOAT16 -> "argmax_f16";
            case BFLOAT16 -> "argmax_bf16";
            default -> throw new IllegalStateException("argmax of " + t);   // the graph admits floating inputs only
        };
        if (cols == 0 || cols >= 1L << 32)   // shapes may be dynamic: checked here, before the launch geometry is made of them
            throw new dev.gatun.runtime.GatunRuntimeException("argmax over rows of " + cols + " elements: the CUDA backend takes rows of 1 to 2^32 - 1 elements");
        var small = new LaunchConfig(Dim3.of((int) Math.min(Math.ceilDiv(rows, 256), 65_535)), Dim3.of(256), 0, stream);
        launch("argmax_clear", programmatic, small, out, rows);
        long chunks = Math.ceilDiv(cols, CHUNK);
        launch(name, programmatic, new LaunchConfig(new Dim3((int) chunks, (int) Math.min(rows, 65_535), 1), Dim3.of(256), 0, stream), in, out, rows, cols);
        launch("argmax_index", programmatic, small, out, rows);
    }
}
