package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;

/**
 * {@code sample} on the GPU: the rule of {@code TokenSampling} (the reference of {@code dev.gatun.ir.ops.Sample}, which the host backend runs),
 * restated step for step so that a seed and a step draw the same token on both backends, and the logits never leave
 * the device.
 *
 * <p>One block of 1024 threads a row. The context's tokens become a bit set in shared memory (a bit a column, so a
 * token repeated in the context is penalized once). Every later pass reads the row again, penalizes it on the fly and
 * ends in a block reduction whose result every thread computes alike (the warps' partial results summed in one order
 * by each thread), so every thread takes the same branch: the first largest value (argmax's keys, a NaN the largest),
 * then where the temperature is above 0 and the largest value finite, a bisection of at most 32 passes for the top-k
 * threshold (a count), one pass for the softmax's sum over the kept values, a bisection of at most 32 passes for the
 * top-p threshold (the mass above it), and a last pass that draws: the kept element with the largest
 * {@code (value - largest) / T + gumbel(seed, step, column)}. The bisections work on the values' order as 32-bit
 * integers, so the thresholds are exact values of the row; only the sums' order differs from the host's (a threshold
 * can move only where a mass equals top_p * sum to the last bits). Every loop is bounded; nothing waits on another
 * block.
 */
final class CudaSample {
    static final String SOURCE = Programmatic.SOURCE + """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>

            #define SM_THREADS 1024
            #define SM_WARPS (SM_THREADS / 32)

            __device__ __forceinline__ float sm_float(const float* p, long long i) { return p[i]; }
            __device__ __forceinline__ float sm_float(const __half* p, long long i) { return __half2float(p[i]); }
            __device__ __forceinline__ float sm_float(const __nv_bfloat16* p, long long i) { return __bfloat162float(p[i]); }

            __device__ __forceinline__ long long sm_int(const void* p, int wide, long long i) {
                return wide ? ((const long long*) p)[i] : (long long) ((const int*) p)[i];
            }

            // TokenSampling.mix: splitmix64's finalizer
            __device__ __forceinline__ unsigned long long sm_mix(unsigned long long z) {
                z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
                z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
                return z ^ (z >> 31);
            }

            // TokenSampling.gumbel: -log(-log(u)), u the top 52 bits of the hash of (seed, step, column), centred
            __device__ __forceinline__ double sm_gumbel(unsigned long long seed, unsigned long long step, unsigned long long column) {
                unsigned long long h = sm_mix(sm_mix(sm_mix(seed ^ 0x9e3779b97f4a7c15ull) + step) + column);
                double u = ((double) (h >> 12) + 0.5) * (1.0 / 4503599627370496.0);
                return -log(-log(u));
            }

            // TokenSampling.key: a float's order as an unsigned integer, -0 as +0 (no NaN reaches it)
            __device__ __forceinline__ unsigned int sm_key(float v) {
                unsigned int u = __float_as_uint(v);
                return v == 0.0f ? 0x80000000u : (u & 0x80000000u) ? ~u : (u | 0x80000000u);
            }

            // the value of column v, penalized where the context holds it (TokenSampling.penalized, float32 as there)
            template <typename T>
            __device__ __forceinline__ float sm_value(const T* row, long long v, const unsigned int* seen, bool penalize, float r) {
                float x = sm_float(row, v);
                if (penalize && ((seen[v >> 5] >> (v & 31)) & 1u)) x = x > 0.0f ? __fdiv_rn(x, r) : __fmul_rn(x, r);
                return x;
            }

            // block reductions: each warp folds its lanes, then every thread folds the warps' results in one order,
            // so every thread holds the same result (and takes the same branch after it)
            __device__ double sm_sum(double v, double* s) {
                for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
                __syncthreads();
                if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
                __syncthreads();
                double t = 0.0;
                for (int w = 0; w < SM_WARPS; w++) t += s[w];
                return t;
            }

            __device__ unsigned long long sm_count(unsigned long long v, unsigned long long* s) {
                for (int d = 16; d > 0; d >>= 1) v += __shfl_down_sync(0xffffffffu, v, d);
                __syncthreads();
                if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
                __syncthreads();
                unsigned long long t = 0ull;
                for (int w = 0; w < SM_WARPS; w++) t += s[w];
                return t;
            }

            __device__ unsigned long long sm_max(unsigned long long v, unsigned long long* s) {
                for (int d = 16; d > 0; d >>= 1) { unsigned long long o = __shfl_down_sync(0xffffffffu, v, d); v = o > v ? o : v; }
                __syncthreads();
                if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = v;
                __syncthreads();
                unsigned long long t = 0ull;
                for (int w = 0; w < SM_WARPS; w++) t = s[w] > t ? s[w] : t;
                return t;
            }

            // the index of the largest score, the smaller index on a tie; -1 for none
            __device__ bool sm_beats(double a, long long i, double b, long long j) { return i >= 0 && (j < 0 || a > b || (a == b && i < j)); }

            __device__ long long sm_argmax(double v, long long i, double* s, long long* si) {
                for (int d = 16; d > 0; d >>= 1) {
                    double o = __shfl_down_sync(0xffffffffu, v, d);
                    long long j = __shfl_down_sync(0xffffffffu, i, d);
                    if (sm_beats(o, j, v, i)) { v = o; i = j; }
                }
                __syncthreads();
                if ((threadIdx.x & 31) == 0) { s[threadIdx.x >> 5] = v; si[threadIdx.x >> 5] = i; }
                __syncthreads();
                double b = 0.0;
                long long at = -1;
                for (int w = 0; w < SM_WARPS; w++) if (sm_beats(s[w], si[w], b, at)) { b = s[w]; at = si[w]; }
                return at;
            }

            template <typename T>
            __device__ void sample_rows(const T* logits, const float* params, const long long* seeds, const void* steps, int stepsWide,
                                        long long stepsN, const void* context, int contextWide, long long h, long long* out, long long rows, long long n) {
                extern __shared__ unsigned int seen[];
                __shared__ double sd[SM_WARPS];
                __shared__ unsigned long long su[SM_WARPS];
                __shared__ long long si[SM_WARPS];
                const long long words = (n + 31) >> 5;
                for (long long r = blockIdx.x; r < rows; r += gridDim.x) {
                    const T* row = logits + r * n;
                    const float* p = params + r * 5;
                    const float temperature = p[0], topK = p[1], topP = p[2], minP = p[3], pen = p[4];
                    const bool penalize = pen > 0.0f && pen != 1.0f;
                    __syncthreads();   // the row before is done with the bit set
                    for (long long w = threadIdx.x; w < words; w += blockDim.x) seen[w] = 0u;
                    __syncthreads();
                    if (penalize)
                        for (long long j = threadIdx.x; j < h; j += blockDim.x) {
                            long long id = sm_int(context, contextWide, r * h + j);
                            if (id >= 0 && id < n) atomicOr(&seen[id >> 5], 1u << (id & 31));
                        }
                    __syncthreads();
                    // the first largest value, a NaN the largest (argmax's keys: the value's order, then the index's complement)
                    unsigned long long best = 0ull;
                    for (long long v = threadIdx.x; v < n; v += blockDim.x) {
                        float x = sm_value(row, v, seen, penalize, pen);
                        unsigned long long k = ((unsigned long long) (x != x ? 0xffffffffu : sm_key(x)) << 32) | (0xffffffffull - (unsigned long long) v);
                        best = k > best ? k : best;
                    }
                    best = sm_max(best, su);
                    const long long at = (long long) (0xffffffffull - (best & 0xffffffffull));
                    const float top = sm_value(row, at, seen, penalize, pen);
                    if (!(temperature > 0.0f) || !isfinite(top)) {
                        if (threadIdx.x == 0) out[r] = at;
                        continue;
                    }
                    const double t = (double) temperature;
                    const unsigned int topKey = sm_key(top);
                    // top-k: the largest key with at least k keys at or above it (TokenSampling.kthLargest)
                    unsigned int floor = 0u;
                    if (topK >= 1.0f && topK < (float) n) {
                        const unsigned long long k = (unsigned long long) topK;
                        unsigned int lo = 0u, hi = topKey;
                        for (int it = 0; it < 33 && lo < hi; it++) {
                            unsigned int mid = lo + (unsigned int) (((unsigned long long) (hi - lo) + 1ull) / 2ull);
                            unsigned long long c = 0ull;
                            for (long long v = threadIdx.x; v < n; v += blockDim.x) c += sm_key(sm_value(row, v, seen, penalize, pen)) >= mid ? 1ull : 0ull;
                            c = sm_count(c, su);
                            if (c >= k) lo = mid; else hi = mid - 1u;
                        }
                        floor = lo;
                    }
                    // the softmax's sum over the kept values
                    double z = 0.0;
                    for (long long v = threadIdx.x; v < n; v += blockDim.x) {
                        float x = sm_value(row, v, seen, penalize, pen);
                        if (sm_key(x) >= floor) z += exp(((double) x - (double) top) / t);
                    }
                    z = sm_sum(z, sd);
                    // top-p: the smallest key whose mass above it is below top_p * sum (TokenSampling.massThreshold)
                    unsigned int pFloor = floor;
                    if (topP < 1.0f) {
                        const double limit = (double) topP * z;
                        unsigned int lo = floor, hi = topKey;
                        for (int it = 0; it < 33 && lo < hi; it++) {
                            unsigned int mid = lo + (hi - lo) / 2u;
                            double mass = 0.0;
                            for (long long v = threadIdx.x; v < n; v += blockDim.x) {
                                float x = sm_value(row, v, seen, penalize, pen);
                                unsigned int k = sm_key(x);
                                if (k > mid && k >= floor) mass += exp(((double) x - (double) top) / t);
                            }
                            mass = sm_sum(mass, sd);
                            if (mass < limit) hi = mid; else lo = mid + 1u;
                        }
                        pFloor = lo;
                    }
                    // min-p, then the draw: the kept element with the largest scaled value plus Gumbel noise
                    const double m = minP > 0.0f ? fmin((double) minP, 1.0) : 0.0;
                    const unsigned long long seed = (unsigned long long) seeds[r];
                    const unsigned long long step = (unsigned long long) sm_int(steps, stepsWide, stepsN == 1 ? 0 : r);
                    double score = 0.0;
                    long long chosen = -1;
                    for (long long v = threadIdx.x; v < n; v += blockDim.x) {
                        float x = sm_value(row, v, seen, penalize, pen);
                        double e = exp(((double) x - (double) top) / t);
                        if (sm_key(x) < pFloor || e < m) continue;
                        double s = ((double) x - (double) top) / t + sm_gumbel(seed, step, (unsigned long long) v);
                        if (chosen < 0 || s > score) { score = s; chosen = v; }
                    }
                    chosen = sm_argmax(score, chosen, sd, si);
                    if (threadIdx.x == 0) out[r] = chosen;
                }
            }

            extern "C" __global__ void __launch_bounds__(SM_THREADS) sample_f32(const float* logits, const float* params, const long long* seeds, const void* steps, int stepsWide,
                    long long stepsN, const void* context, int contextWide, long long h, long long* out, long long rows, long long n) {
                GATUN_DEPENDENT_START();
                sample_rows(logits, params, seeds, steps, stepsWide, stepsN, context, contextWide, h, out, rows, n);
            }
            extern "C" __global__ void __launch_bounds__(SM_THREADS) sample_f16(const __half* logits, const float* params, const long long* seeds, const void* steps, int stepsWide,
                    long long stepsN, const void* context, int contextWide, long long h, long long* out, long long rows, long long n) {
                GATUN_DEPENDENT_START();
                sample_rows(logits, params, seeds, steps, stepsWide, stepsN, context, contextWide, h, out, rows, n);
            }
            extern "C" __global__ void __launch_bounds__(SM_THREADS) sample_bf16(const __nv_bfloat16* logits, const float* params, const long long* seeds, const void* steps, int stepsWide,
                    long long stepsN, const void* context, int contextWide, long long h, long long* out, long long rows, long long n) {
                GATUN_DEPENDENT_START();
                sample_rows(logits, params, seeds, steps, stepsWide, stepsN, context, contextWide, h, out, rows, n);
            }
            """;

    /** Threads of a block: one block a row. */
    static final int THREADS = 1024;
    /**
     * The most dynamic shared memory a block takes (the bit set of a row's context, a bit a column): the 48 KiB a block
     * has without opting in to more, less a KiB for the reductions' own.
     */
    static final int MAX_SHARED_BYTES = 47 * 1024;

    private final LazyProgram program;

    /** Refuses a plan whose rows have more columns than the bit set of a row's context can hold. */
    CudaSample(LazyProgram.Compiler compiler, Plan plan) {
        for (Step s : plan.steps())
            if (s instanceof Step.OpCall x && x.spec() == dev.gatun.ir.ops.Sample.SPEC && bitSetBytes(x.input(0).shape().sizes()[1]) > MAX_SHARED_BYTES)
                throw new CompilationException(x.format().strip() + ": rows of " + x.input(0).shape().sizes()[1] + " logits; the CUDA backend samples rows of at most "
                        + MAX_SHARED_BYTES * 8L + " (a bit a column in a block's shared memory)");
        this.program = new LazyProgram(compiler, "gatun_sample", SOURCE);
    }

    private static long bitSetBytes(long cols) { return Math.ceilDiv(cols, 32) * 4; }

    /** Loads every kernel now (see {@link LazyProgram#loadNow}). */
    void loadNow() { program.loadNow("sample_f32", "sample_f16", "sample_bf16"); }

    /**
     * The step's rows: {@code rows} of {@code cols} logits, a context of {@code h} tokens a row, {@code steps} step values
     * (1 or rows); with {@code programmatic} (the plan's choice), a programmatic dependent launch (see {@link Programmatic}).
     */
    void run(Step.OpCall s, long logits, long params, long seeds, long steps, long context, long out, long rows, long cols, long h, long nSteps,
             boolean programmatic, Stream stream) {
        if (rows == 0) return;
        String name = switch (s.input(0).dtype()) {
            case FLOAT32 -> "sample_f32";
            case FLOAT16 -> "sample_f16";
            case BFLOAT16 -> "sample_bf16";
            default -> throw new IllegalStateException("sample of " + s.input(0).dtype() + " logits");
        };
        var config = new LaunchConfig(Dim3.of((int) Math.min(rows, 65_535)), Dim3.of(THREADS), (int) bitSetBytes(cols), stream);
        Programmatic.launch(program.kernel(name), programmatic, config, logits, params, seeds, steps, s.input(3).dtype() == DType.INT64 ? 1 : 0, nSteps,
                context, s.input(4).dtype() == DType.INT64 ? 1 : 0, h, out, rows, cols);
    }
}
