package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;

import java.util.EnumMap;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * {@code topk} over the last dimension on the GPU, exactly as {@link dev.gatun.ir.ops.TopK}'s host body: the k best
 * elements of each row, best first, where an element ranks by its value (a NaN above every number, -0 equal to +0) and,
 * on equal values, by its lower index. Each element's value becomes a 64-bit unsigned key that orders as the values do
 * (a float's bits made to order as unsigned integers, every NaN the largest key, -0 the key of +0; an integer with its
 * sign bit flipped), so an element's rank is the pair (key, index), a strict total order: the k best are one answer,
 * whatever the threads' order.
 *
 * <p>One block a row (grid-stride over rows) makes k rounds: round i finds, with one block-wide reduction, the best
 * element ranking strictly after round i-1's pick, and writes its value (its own bits: a NaN's payload and -0 kept) and
 * index. That is k passes over the row: a vocabulary's row (128K) with a k of 50 fifty passes from the cache. Integer
 * rows compare exactly (int64 too).
 *
 * <p>A row of at most 2,048 elements where counting costs less (cols² against k rounds of a pass and two barriers: a
 * router's rows, and a whole row ordered, k = cols, as expert parallelism's stable sort of its (token, choice) pairs
 * does) is ranked by counting instead: its keys in shared memory, each element's rank the number ahead of it, an
 * element of rank below k written at its rank. The order is the same strict one, so the answer is the same; the
 * sort of 256 pairs took 256 rounds, about 0.6 ms, on two H200s (MoeBench, dispatch + combine of 128 tokens).
 */
final class CudaTopK {
    static final String SOURCE = Programmatic.SOURCE + """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>

            // a value's order as an unsigned integer: NaN above everything, -0 as +0, negatives below positives
            __device__ __forceinline__ unsigned long long tk_key(float v) {
                unsigned int u = __float_as_uint(v);
                return v != v ? 0xffffffffull : v == 0.0f ? 0x80000000ull : (u & 0x80000000u) ? (unsigned long long) ~u : (unsigned long long) (u | 0x80000000u);
            }
            __device__ __forceinline__ unsigned long long tk_key(double v) {
                unsigned long long u = (unsigned long long) __double_as_longlong(v);
                return v != v ? 0xffffffffffffffffull : v == 0.0 ? 0x8000000000000000ull : (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
            }
            __device__ __forceinline__ unsigned long long tk_key(__half v) { return tk_key(__half2float(v)); }
            __device__ __forceinline__ unsigned long long tk_key(__nv_bfloat16 v) { return tk_key(__bfloat162float(v)); }
            __device__ __forceinline__ unsigned long long tk_key(signed char v) { return (unsigned long long) (long long) v ^ 0x8000000000000000ull; }
            __device__ __forceinline__ unsigned long long tk_key(int v) { return (unsigned long long) (long long) v ^ 0x8000000000000000ull; }
            __device__ __forceinline__ unsigned long long tk_key(long long v) { return (unsigned long long) v ^ 0x8000000000000000ull; }

            // whether (ka, ia) ranks ahead of (kb, ib): the larger key, or on equal keys the lower index; an index < 0 is no element
            __device__ __forceinline__ bool tk_ahead(unsigned long long ka, int ia, unsigned long long kb, int ib) {
                if (ia < 0) return false;
                if (ib < 0) return true;
                return ka > kb || (ka == kb && ia < ib);
            }

            // one block a row; blockDim.x a multiple of 32, at most 1024
            template <typename T>
            __device__ void tk_rows(const T* in, T* values, long long* indices, long long rows, int cols, int k) {
                __shared__ unsigned long long part_k[32];
                __shared__ int part_i[32];
                __shared__ unsigned long long pick_k;
                __shared__ int pick_i;
                const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
                for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
                    const T* row = in + r * cols;
                    unsigned long long prev_k = 0ull;
                    int prev_i = -1;   // round 0: no earlier pick, every element a candidate
                    for (int round = 0; round < k; round++) {
                        unsigned long long best_k = 0ull;
                        int best_i = -1;
                        for (long long jj = threadIdx.x; jj < cols; jj += blockDim.x) {
                            int j = (int) jj;
                            unsigned long long key = tk_key(row[j]);
                            if (prev_i >= 0 && !tk_ahead(prev_k, prev_i, key, j)) continue;   // picked in an earlier round
                            if (tk_ahead(key, j, best_k, best_i)) { best_k = key; best_i = j; }
                        }
                        for (int d = 16; d > 0; d >>= 1) {
                            unsigned long long ok = __shfl_down_sync(0xffffffffu, best_k, d);
                            int oi = __shfl_down_sync(0xffffffffu, best_i, d);
                            if (tk_ahead(ok, oi, best_k, best_i)) { best_k = ok; best_i = oi; }
                        }
                        if (lane == 0) { part_k[warp] = best_k; part_i[warp] = best_i; }
                        __syncthreads();
                        if (threadIdx.x == 0) {
                            for (int w = 1; w < warps; w++)
                                if (tk_ahead(part_k[w], part_i[w], best_k, best_i)) { best_k = part_k[w]; best_i = part_i[w]; }
                            pick_k = best_k;
                            pick_i = best_i;
                            if (best_i >= 0) {   // always: a round has a candidate while round < k <= cols
                                values[r * k + round] = row[best_i];
                                indices[r * k + round] = best_i;
                            }
                        }
                        __syncthreads();
                        prev_k = pick_k;   // thread 0 writes the next pick only after the next round's first barrier
                        prev_i = pick_i;
                    }
                }
            }

            // rows of at most TK_COUNTED elements, where counting costs less than k rounds: each element's rank is the
            // number of elements ahead of it in the row (one pass over the row's keys in shared memory per element), and
            // an element of rank below k is written at its rank. The same strict order as the rounds: the same answer.
            #define TK_COUNTED 2048
            __device__ __forceinline__ bool tk_counts(int cols, int k) {
                return cols <= TK_COUNTED && (long long) cols * cols <= (long long) k * (cols + 64ll * blockDim.x);
            }
            template <typename T>
            __device__ void tk_rows_counted(const T* in, T* values, long long* indices, long long rows, int cols, int k) {
                __shared__ unsigned long long keys[TK_COUNTED];
                for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
                    const T* row = in + r * cols;
                    __syncthreads();   // every thread done with the last row's keys
                    for (int j = threadIdx.x; j < cols; j += blockDim.x) keys[j] = tk_key(row[j]);
                    __syncthreads();
                    for (int j = threadIdx.x; j < cols; j += blockDim.x) {
                        unsigned long long kj = keys[j];
                        int rank = 0;
                        for (int i = 0; i < cols; i++) rank += tk_ahead(keys[i], i, kj, j) ? 1 : 0;
                        if (rank < k) {
                            values[r * k + rank] = row[j];
                            indices[r * k + rank] = j;
                        }
                    }
                }
            }

            #define TK_ENTRY(name, T) \\
                extern "C" __global__ void name(const T* in, T* values, long long* indices, long long rows, int cols, int k) { \\
                    GATUN_DEPENDENT_START(); \\
                    if (tk_counts(cols, k)) tk_rows_counted(in, values, indices, rows, cols, k); \\
                    else tk_rows(in, values, indices, rows, cols, k); \\
                }
            TK_ENTRY(topk_f32, float)
            TK_ENTRY(topk_f64, double)
            TK_ENTRY(topk_f16, __half)
            TK_ENTRY(topk_bf16, __nv_bfloat16)
            TK_ENTRY(topk_i8, signed char)
            TK_ENTRY(topk_i32, int)
            TK_ENTRY(topk_i64, long long)
            """;

    /** The entry point of each dtype topk takes (every one but bool). */
    static final Map<DType, String> ENTRIES = entries();

    private static Map<DType, String> entries() {
        var m = new EnumMap<DType, String>(DType.class);
        for (DType t : DType.values()) if (t != DType.BOOL) m.put(t, "topk_" + t.shortName());
        return m;
    }

    private final Map<String, Kernel> kernels = new HashMap<>();

    /** Compiles the program and looks up every entry point now (not in the middle of a call: see {@link LazyProgram#loadNow}). */
    CudaTopK(LazyProgram.Compiler compiler) {
        var program = new LazyProgram(compiler, "gatun_topk", SOURCE);
        for (String name : ENTRIES.values()) kernels.put(name, program.kernel(name));
    }

    /** Threads a block: enough warps to cover a row once, at least one, at most eight. */
    static int block(long cols) { return (int) Math.min(256, Math.max(32, Math.ceilDiv(cols, 32) * 32)); }

    /**
     * The launch that writes the {@code k} best of each of {@code rows} rows of {@code cols} elements of dtype {@code t}
     * at {@code in}: their values at {@code values} ({@code t}), their positions at {@code indices} (i64), row after row.
     */
    static List<KernelLaunch> launches(long in, DType t, long values, long indices, long rows, long cols, long k) {
        if (rows == 0) return List.of();
        String entry = ENTRIES.get(t);
        if (entry == null) throw new IllegalStateException("topk of " + t);   // the graph admits every dtype but bool
        return List.of(new KernelLaunch(entry, (int) Math.min(rows, 65_535), block(cols), List.of(in, values, indices, rows, (int) cols, (int) k)));
    }

    /** {@link #launches} on {@code stream}. */
    void run(long in, DType t, long values, long indices, long rows, long cols, long k, boolean programmatic, Stream stream) {
        for (KernelLaunch l : launches(in, t, values, indices, rows, cols, k)) l.launch(kernels, programmatic, stream);
    }
}
