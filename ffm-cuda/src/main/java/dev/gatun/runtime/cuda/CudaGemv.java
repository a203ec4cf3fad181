package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;


/**
 * One row by a weight that lies transposed, {@code y[n] = sum_k x[k] w[n, k]}: a decode step's linear layers at batch
 * 1, whose time is reading the weight once. cuBLAS's general kernels reach 0.9 to 2.4 TB/s on these shapes on an H100;
 * here one warp reads one row of the weight, 16-byte vectors, four in flight a lane and streamed past the caches,
 * multiplies it with x (which stays in cache) and reduces by shuffles. Accumulates in float32 and rounds once, as
 * cuBLAS does; the order of the sum differs, so a result may differ from cuBLAS's in the last bit.
 *
 * <p>Measured on an H100 in the Llama-3.2-1B-shaped decode step: the products' time fell from 1.47 to 1.38 ms and the
 * step from 2.25 to 1.99 ms at batch 1. The kernel takes up to 8 rows ({@code M}), but at 8 rows, with eight loads of
 * x per vector of the weight, the step took 4.5 ms against cuBLAS's 2.7: so only one row is taken until a tiling
 * that reuses x is measured. Taken only where it applies (see {@link #applies}): float32, float16 or bfloat16; one
 * row, no batch; the weight read transposed; rows of a length that is a whole number of 16-byte vectors, at 16-byte
 * aligned addresses. Everything else goes to cuBLAS.
 */
final class CudaGemv {
    static final int MAX_ROWS = 1;
    static final int WARPS = 8;

    static final String SOURCE = """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>

            __device__ __forceinline__ void gv_unpack(uint4 v, const float*, float* f) {
                f[0] = __uint_as_float(v.x); f[1] = __uint_as_float(v.y); f[2] = __uint_as_float(v.z); f[3] = __uint_as_float(v.w);
            }
            __device__ __forceinline__ void gv_unpack(uint4 v, const __half*, float* f) {
                const __half2* h = reinterpret_cast<const __half2*>(&v);
                #pragma unroll
                for (int i = 0; i < 4; i++) { float2 p = __half22float2(h[i]); f[2 * i] = p.x; f[2 * i + 1] = p.y; }
            }
            __device__ __forceinline__ void gv_unpack(uint4 v, const __nv_bfloat16*, float* f) {
                const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&v);
                #pragma unroll
                for (int i = 0; i < 4; i++) { float2 p = __bfloat1622float2(h[i]); f[2 * i] = p.x; f[2 * i + 1] = p.y; }
            }
            __device__ __forceinline__ float gv_store(float v, const float*) { return v; }
            __device__ __forceinline__ __half gv_store(float v, const __half*) { return __float2half_rn(v); }
            __device__ __forceinline__ __nv_bfloat16 gv_store(float v, const __nv_bfloat16*) { return __float2bfloat16_rn(v); }

            #define GV_UNROLL 4

            // warp j: y[m, j] = sum_k x[m, k] w[j, k] for m < rows <= M; k a multiple of V (elements per 16 bytes)
            template <typename T, int M>
            __device__ void gemv_rows(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, long long n, long long k, long long ldc,
                                      int rows) {
                constexpr int V = 16 / sizeof(T);
                const long long j = ((long long) blockIdx.x * blockDim.x + threadIdx.x) >> 5;
                const int lane = threadIdx.x & 31;
                if (j >= n) return;
                const uint4* wr = reinterpret_cast<const uint4*>(w + j * k);
                const long long vectors = k / V;
                float acc[M];
                #pragma unroll
                for (int m = 0; m < M; m++) acc[m] = 0.0f;
                for (long long base = lane; base < vectors; base += 32 * GV_UNROLL) {
                    uint4 wv[GV_UNROLL];
                    #pragma unroll
                    for (int u = 0; u < GV_UNROLL; u++) {
                        long long v = base + 32LL * u;
                        wv[u] = v < vectors ? __ldcs(wr + v) : make_uint4(0u, 0u, 0u, 0u);
                    }
                    #pragma unroll
                    for (int u = 0; u < GV_UNROLL; u++) {
                        long long v = base + 32LL * u;
                        if (v >= vectors) break;
                        float wf[V];
                        gv_unpack(wv[u], (const T*) nullptr, wf);
                        #pragma unroll
                        for (int m = 0; m < M; m++) {
                            if (m >= rows) break;
                            float xf[V];
                            gv_unpack(__ldg(reinterpret_cast<const uint4*>(x + m * k) + v), (const T*) nullptr, xf);
                            #pragma unroll
                            for (int e = 0; e < V; e++) acc[m] = fmaf(xf[e], wf[e], acc[m]);
                        }
                    }
                }
                #pragma unroll
                for (int m = 0; m < M; m++)
                    #pragma unroll
                    for (int d = 16; d > 0; d >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], d);
                #pragma unroll
                for (int m = 0; m < M; m++)
                    if (lane == m && m < rows) y[m * ldc + j] = gv_store(acc[m], (const T*) nullptr);
            }

            #define GV_ENTRY(T, NAME, M) \\
                extern "C" __global__ void __launch_bounds__(256) NAME##_##M(const T* x, const T* w, T* y, long long n, long long k, long long ldc, int rows) { \\
                    gemv_rows<T, M>(x, w, y, n, k, ldc, rows); }
            #define GV_ENTRIES(T, NAME) GV_ENTRY(T, NAME, 1)
            GV_ENTRIES(float, gemv_f32)
            GV_ENTRIES(__half, gemv_f16)
            GV_ENTRIES(__nv_bfloat16, gemv_bf16)
            """;

    private final LazyProgram program;

    CudaGemv(LazyProgram.Compiler compiler) { this.program = new LazyProgram(compiler, "gatun_gemv", SOURCE); }

    /** Whether a product of {@code m} rows of length {@code k} of {@code t}, at these addresses, is one this kernel takes. */
    static boolean applies(DType t, boolean transA, boolean transB, long batches, int m, int k, long x, long w, long y) {
        if (batches != 1 || transA || !transB || m < 1 || m > MAX_ROWS || k < 1) return false;
        if (t != DType.FLOAT32 && t != DType.FLOAT16 && t != DType.BFLOAT16) return false;
        int perVector = 16 / t.byteSize();
        return k % perVector == 0 && ((x | w) & 15) == 0 && (y & (t.byteSize() - 1)) == 0;
    }

    /**
     * {@code y[i, j] = sum_p x[i, p] w[j, p]} for {@code m} rows (1 to {@link #MAX_ROWS}), {@code n} columns; y's rows
     * {@code ldc} elements apart. The kernel instantiated for {@link #MAX_ROWS} rows is told how many there are.
     */
    /** Loads every kernel now (see {@link LazyProgram#loadNow}). */
    void loadNow() { program.loadNow("gemv_f32_" + MAX_ROWS, "gemv_f16_" + MAX_ROWS, "gemv_bf16_" + MAX_ROWS); }

    void run(DType t, int m, int n, int k, int ldc, long x, long w, long y, Stream stream) {
        if (n == 0) return;
        if (m < 1 || m > MAX_ROWS) throw new IllegalArgumentException("gemv of " + m + " rows: it takes 1 to " + MAX_ROWS);
        String name = switch (t) {
            case FLOAT32 -> "gemv_f32";
            case FLOAT16 -> "gemv_f16";
            case BFLOAT16 -> "gemv_bf16";
            default -> throw new IllegalArgumentException("gemv of " + t);
        } + "_" + MAX_ROWS;
        Kernel kernel = program.kernel(name);
        long grid = Math.ceilDiv(n, (long) WARPS);
        kernel.launch(new LaunchConfig(Dim3.of(Math.toIntExact(grid)), Dim3.of(32 * WARPS), 0, stream), x, w, y, (long) n, (long) k, (long) ldc, m);
    }
}
