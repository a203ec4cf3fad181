package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;

/**
 * Small batched products of a decode step's attention, {@code C[i] = A[i] B[i]} with A of at most 8 rows (a group of
 * query heads at one position: scores = q K^T, and probabilities times values), both operands row-major as they
 * lie, in a kernel of Gatun's own. Used only where the plan's kernels are launched programmatically
 * ({@link Programmatic}): a cuBLAS kernel cannot be, so it would break the chain of overlapped launches twice a layer.
 *
 * <p>A block is 32 columns of C for one product of the batch: lane l owns column 32 x + l for every row of A, and
 * each of the block's 16 warps sums a sixteenth of k; the warps' partial sums are added through shared memory and
 * warp 0 stores. Loads of B are coalesced across the lanes; each element of A is one broadcast load. Accumulates in
 * float32 and rounds once, as cuBLAS's bf16 products with float32 compute do (the order of the sum differs).
 */
final class CudaSmallMatmul {
    static final int MAX_ROWS = 8, WARPS = 16, COLUMNS = 32;

    static final String SOURCE = Programmatic.SOURCE + """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>

            __device__ __forceinline__ float sm_load(const float* p) { return *p; }
            __device__ __forceinline__ float sm_load(const __half* p) { return __half2float(*p); }
            __device__ __forceinline__ float sm_load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
            __device__ __forceinline__ void sm_store(float* p, float v) { *p = v; }
            __device__ __forceinline__ void sm_store(__half* p, float v) { *p = __float2half_rn(v); }
            __device__ __forceinline__ void sm_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

            // C[i] (m x n, rows ldc apart) = A[i] (m x k, row-major) B[i] (k x n, row-major), products sa, sb, sc elements
            // apart; blockIdx.x: 32 columns, blockIdx.y: the product; warp w sums its slice of k for its lane's column.
            template <typename T, int M>
            __device__ void small_matmul(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int m, int n, int k,
                                         long long sa, long long sb, long long sc, long long ldc) {
                __shared__ float part[16][M][32];
                const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
                const long long i = blockIdx.y;
                const int j = blockIdx.x * 32 + lane;
                const T* A = a + i * sa;
                const T* B = b + i * sb;
                float acc[M];
                #pragma unroll
                for (int r = 0; r < M; r++) acc[r] = 0.0f;
                const int per = (k + warps - 1) / warps, p0 = warp * per, p1 = min(k, p0 + per);
                if (j < n) {
                    #pragma unroll 4
                    for (int p = p0; p < p1; p++) {
                        const float bv = sm_load(B + (long long) p * n + j);
                        #pragma unroll
                        for (int r = 0; r < M; r++)
                            if (r < m) acc[r] = fmaf(sm_load(A + (long long) r * k + p), bv, acc[r]);
                    }
                }
                #pragma unroll
                for (int r = 0; r < M; r++) part[warp][r][lane] = acc[r];
                __syncthreads();
                if (warp != 0 || j >= n) return;
                for (int r = 0; r < m; r++) {
                    float s = 0.0f;
                    for (int w = 0; w < warps; w++) s += part[w][r][lane];
                    sm_store(c + i * sc + (long long) r * ldc + j, s);
                }
            }

            #define SM_ENTRY(T, NAME, M) \\
                extern "C" __global__ void __launch_bounds__(512) small_matmul_##NAME##_##M(const T* a, const T* b, T* c, int m, int n, int k, \\
                        long long sa, long long sb, long long sc, long long ldc) { \\
                    GATUN_DEPENDENT_START(); small_matmul<T, M>(a, b, c, m, n, k, sa, sb, sc, ldc); }
            #define SM_ENTRIES(T, NAME) SM_ENTRY(T, NAME, 4) SM_ENTRY(T, NAME, 8)
            SM_ENTRIES(float, f32)
            SM_ENTRIES(__half, f16)
            SM_ENTRIES(__nv_bfloat16, bf16)
            """;

    private final LazyProgram program;
    private final boolean programmatic;

    CudaSmallMatmul(LazyProgram.Compiler compiler, boolean programmatic) {
        this.program = new LazyProgram(compiler, "gatun_small_matmul", SOURCE);
        this.programmatic = programmatic;
    }

    /** Whether this kernel serves a product: 16- or 32-bit floats, neither operand transposed, 1 to 8 rows, a grid that fits. */
    static boolean applies(DType t, boolean transA, boolean transB, int m, int n, int k, long batches) {
        return (t == DType.FLOAT32 || t == DType.FLOAT16 || t == DType.BFLOAT16) && !transA && !transB && m >= 1 && m <= MAX_ROWS
                && n >= 1 && k >= 1 && batches >= 1 && batches <= 65_535;
    }

    static String kernel(DType t, int m) {
        String suffix = switch (t) {
            case FLOAT32 -> "f32";
            case FLOAT16 -> "f16";
            case BFLOAT16 -> "bf16";
            default -> throw new IllegalArgumentException("small matmul of " + t);
        };
        return "small_matmul_" + suffix + "_" + (m <= 4 ? 4 : 8);
    }

    /** Loads every kernel now (ranks sharing a GPU load nothing mid-session). */
    void loadNow() {
        for (DType t : new DType[]{DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16}) for (int m : new int[]{4, 8}) program.loadNow(kernel(t, m));
    }

    /**
     * {@code batches} products {@code C = A B}: A {@code m x k} and B {@code k x n} row-major at {@code a} and {@code b},
     * C's rows {@code ldc} elements apart at {@code c}; the products' operands {@code sa}, {@code sb}, {@code sc} elements apart.
     */
    void run(DType t, int m, int n, int k, long ldc, long a, long sa, long b, long sb, long c, long sc, int batches, Stream stream) {
        var config = new LaunchConfig(new Dim3(Math.toIntExact(Math.ceilDiv(n, COLUMNS)), batches, 1), Dim3.of(32 * WARPS), 0, stream);
        Programmatic.launch(program.kernel(kernel(t, m)), programmatic, config, a, b, c, m, n, k, sa, sb, sc, ldc);
    }
}
