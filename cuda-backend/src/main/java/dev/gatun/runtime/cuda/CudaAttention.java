package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;
import dev.gatun.planner.LaunchChoice;
import dev.gatun.planner.Plan;
import dev.gatun.planner.AttentionCall;
import dev.gatun.planner.Step;
import dev.gatun.planner.UpdateSliceCall;
import dev.gatun.runtime.GatunRuntimeException;

/**
 * {@code attention} on the GPU ({@link AttentionCall}): a decode step's scores, mask, softmax and weighted values in
 * one launch, where the graph of products had three (the scores' product, a softmax kernel, the values' product).
 * q is [B, R, d], the keys transposed [B, d, S], the values [B, S, d]; the position is read on the device, so a captured
 * graph replays with each call's position.
 *
 * <p>The cut, flash-decoding's, down to a warp: a warp takes {@value #ROWS} query rows of one batch entry
 * ({@code blockIdx.y}, and {@code blockIdx.z} for rows past the first {@value #ROWS}) and a slice of P positions (P the
 * plan's cut, {@code LaunchChoice.Attention}: 32, 16 or 8), each position's key column split over G = 32 / P lanes
 * (lanes P apart: lane % P the position, lane / P which D / G elements of its key); a block is {@value #WARPS} warps
 * (consecutive slices) that share the scaled q in shared memory and nothing else, so the only barrier is the one after
 * q is stored. A warp issues every load of its slice first: each lane its D / G elements of its key column (kT read down
 * a column: consecutive lanes, consecutive positions) and its elements of the P value rows (a row per load of the
 * warp). Then a lane scores its part of its position against the four rows, the G parts are summed by shuffles (every
 * lane of the position then holds the same score, the parts added in the same order), the warp finds each row's
 * maximum and sum over the slice by shuffles among the P positions (positions past the query's position weigh 0), and
 * each lane adds the P rows' values, weighted (each position's weights shuffled from its lane of group 0), into float32
 * sums for its own elements of the head. A program a cut ({@link #source}), compiled where a plan has that cut.
 *
 * <p>The first version (blocks of 256 threads over chunks of 64 positions, sums added through shared memory between
 * barriers) was slower than the three launches at batch 8 and hardly faster at batch 1 ({@code AttentionBench}, an
 * H100): profiled, each warp waited on its barriers and shuffles with two warps a scheduler. A warp per slice has no
 * barrier to wait on and many more warps in flight: 8.1–9.5 µs a layer against the products' 9.4–11.3 at batch 1,
 * 11.7–12.2 against 12.2–14.2 at batch 8. Most of what remains is the loads' trip to memory, the partials' through L2
 * and the merge.
 *
 * <p>That cut was 32 positions a warp, a lane each. Profiled in a decode step on an H200 (bf16, batch 1, a cache of 160
 * positions): 12 µs a layer at heads of 64 (Llama-3.2-1B: about 190 µs of a 0.947 ms token), 17–18 at heads of 128
 * (Mistral, Qwen2, Qwen3, Phi-3: the main reason their bandwidth fraction was 0.73–0.83 of Llama's). With 160 positions
 * there are 5 slices: 40 warps (8 key-value heads of 4 rows) on 132 multiprocessors, so the time is one warp's chain (d
 * key loads a lane, the 32 weighted value rows, the shuffles, the partials and the merge), not bandwidth. So the cut is
 * now the plan's, from the cache's length, the query rows and the target's multiprocessors ({@code LaunchChoices}): at a
 * short cache 16 or 8 positions a warp, each key's dot product split over 2 or 4 lanes and summed by one or two more
 * shuffles, so a lane loads d / 2 or d / 4 key elements and weighs 16 or 8 value rows, and there are 2 or 4 times the
 * warps (at 160 positions and batch 1: 20 slices of 8, 160 warps; each lane's loads 16 key elements and 8 value vectors
 * at heads of 64, where they were 64 and 32); the merge reads 20 partials in one round where it read 5. Expected: the
 * chain about a third as long. Measured ({@code AttentionBench cuts}, one H200, a chain of 64 layers in a CUDA graph, µs
 * a layer): at a cache of 160 every cut takes about the same, 7.8-8.0 at heads of 64 and 9.1-9.7 at 128 (batch 1), so
 * the chain was not the time: the profile's 12 and 17 µs held each launch's own latency, and a kernel in a graph costs
 * some 4 µs on these hosts whatever it does. 16 positions was the fastest at 160 in three shapes of four, by 0.3-0.6
 * µs; 8 never, and both lose past 544 (at 4096, 8 takes three to four times as long as 32). The rule so halves to 16
 * at the fewest (8 where the options force it). A long cache or many rows keep 32 (the GPU is full, and fewer slices
 * are fewer partials). Why not a block a slice with the key split over warps: that brings back the barriers the
 * warp-per-slice form removed.
 *
 * <p>With one slice (a cache of at most P) the warp stores {@code sums / sum}. With several, each
 * writes its float32 partial (sums, maximum, sum per row) to this object's scratch and counts itself in on its (batch,
 * row block)'s counter with an acquire-release add; the warp that comes last merges the slices in order 0, 1, 2, ...
 * (each weighted by {@code exp(max_i - max)}, a slice past the position by 0: the same sums whichever warp came last),
 * stores, and sets the counter back to 0 for the next launch. A position outside [0, S) writes the executable's
 * {@link DeviceFault} record and traps, naming the step. Every sum in float32; the result rounded once.
 *
 * <p>Where the step just before is the update of this step's caches at its position (a decode step's layer: the
 * plan's choice, {@code LaunchChoice.early}, made by the planner's {@code LaunchChoices}), the kernel loads the position and its slice of the caches before it waits for that update (launched
 * programmatically, while the update still runs: the cache but the position is as earlier calls left it), and loads the
 * written position's key column and value row again after the wait, from L2. q and everything else come after the wait.
 *
 * <p>Takes head sizes of 16, 32, 64 and 128 (float16, bfloat16; float32 to 64); {@link #check} refuses others when the
 * executable is made, naming the step.
 */
final class CudaAttention implements AutoCloseable {
    /** Warps a block, query rows a warp. */
    static final int WARPS = 4, ROWS = 4;
    /** The cuts: positions a warp. */
    static final int[] CUTS = {32, 16, 8};
    static final int[] HEAD_SIZES = {16, 32, 64, 128};

    /**
     * Float32 views of the three floating dtypes the attention kernels take: {@code at_f} reads an element as float32,
     * {@code at_store} writes a float32 rounded to the element's dtype (after {@code cuda_fp16.h} and {@code cuda_bf16.h}).
     */
    static final String FLOATS = """
            __device__ __forceinline__ float at_f(float x) { return x; }
            __device__ __forceinline__ float at_f(__half x) { return __half2float(x); }
            __device__ __forceinline__ float at_f(__nv_bfloat16 x) { return __bfloat162float(x); }
            __device__ __forceinline__ void at_store(float* p, float v) { *p = v; }
            __device__ __forceinline__ void at_store(__half* p, float v) { *p = __float2half_rn(v); }
            __device__ __forceinline__ void at_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
            """;

    /** The kernels' code: the entry points of a cut are {@code AT_CUT(P)} ({@link #source}). */
    static final String BODY = Programmatic.SOURCE + DeviceFault.SOURCE + """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>
            #define AT_WARPS 4
            #define AT_ROWS 4
            #define AT_NEG_INF __int_as_float(0xff800000)

            """ + FLOATS + """

            // N consecutive elements of T in one load of N * sizeof(T) bytes (2 to 16), as floats
            template <int B> struct AtWord;
            template <> struct AtWord<2> { typedef unsigned short type; };
            template <> struct AtWord<4> { typedef unsigned int type; };
            template <> struct AtWord<8> { typedef uint2 type; };
            template <> struct AtWord<16> { typedef uint4 type; };
            template <typename T, int N> struct AtVec {
                typedef typename AtWord<N * sizeof(T)>::type W;
                W w;
                __device__ __forceinline__ void load(const T* p) { w = __ldg(reinterpret_cast<const W*>(p)); }
                __device__ __forceinline__ void loadL2(const T* p) { w = __ldcg(reinterpret_cast<const W*>(p)); }
                __device__ __forceinline__ float at(int i) const { return at_f(reinterpret_cast<const T*>(&w)[i]); }
                __device__ __forceinline__ void set(int i, T x) { reinterpret_cast<T*>(&w)[i] = x; }
            };

            // A lane's loads of its slice: its KD elements of its position's key column (kT read down a column) and its elements
            // of the slice's P value rows (rows past the cache: not loaded)
            template <typename T, int D, int KD, int P, int LE, int EPL>
            __device__ __forceinline__ void at_load_slice(T (&kv)[KD], AtVec<T, EPL> (&vv)[P], const T* kcol, const T* vrow,
                                                          long long S, long long s0, int lane) {
                #pragma unroll
                for (int e = 0; e < KD; e++) kv[e] = kcol[(long long) e * S];
                #pragma unroll
                for (int i = 0; i < P; i++) if (lane < LE && s0 + i < S) vv[i].load(vrow + (long long) i * D);
            }

            // One warp: AT_ROWS query rows of batch entry blockIdx.y (row block blockIdx.z) against the P positions of its slice
            // (the cut: 32, 16 or 8), split * P + lane % P. The G = 32 / P lanes of a position (lane % P, groups lane / P) score it
            // each over KD = D / G elements of its key column (read down kT: consecutive lanes of a group, consecutive
            // positions) and sum their parts by shuffles, the warp finds the slice's maximum and sum by shuffles among the P
            // positions, and each lane adds the weighted values of the slice's P positions for its own EPL elements of a head (a
            // value row is read by the warp in one coalesced load).
            // Every load of the slice (keys and values) is issued before the first is used. The warps of a block share the
            // scaled q in shared memory and nothing else: no barrier after that one.
            // With `early` (the step just before wrote this step's keys and values at its position, a graph input, and nothing
            // else this step reads), the position and the slice's keys and values are loaded before the wait: launched
            // programmatically, while that update still runs. The cache but the position is as earlier calls left it; the
            // position's key column and value row are loaded again after the wait, from L2 (the early load may have left the
            // old bytes in L1). Without it, everything is read after the wait.
            // With an update (`up`, a Step.UpdateAttention), this step also writes the new key and value into the caches: the
            // cache is read as earlier calls left it (before the wait: no kernel of this call wrote it), the position's key
            // column and value row are taken from the update's sources (after the wait: the kernels before wrote them), and
            // the blocks of row block 0 that hold the position write them into the caches. A source element (x, e), x the
            // batch entry (the caches' leading dimensions, x = batch * heads + head), is at (x / heads) * sb + (x % heads) * sh
            // + e * se.
            struct AtUpdate { const void* k; long long kb, kh, ke; const void* v; long long vb, vh, ve; int heads, on; };

            template <typename T, int D, int P>
            __device__ void attention(const T* __restrict__ q, T* kT, T* v, T* __restrict__ out,
                                      const void* pos, int pos64, int R, long long S, float scale, int splits,
                                      float* __restrict__ scratch, unsigned* __restrict__ counters, int* claim, gatun_fault* fault, int step,
                                      int early, const AtUpdate& up) {
                constexpr int LE = D < 32 ? D : 32, EPL = D / LE;   // lanes holding a head's elements, elements a lane
                constexpr int G = 32 / P, KD = D / G;               // lanes a position, key elements a lane
                __shared__ float4 qs[D];                             // q[r][e] of the block's four rows, scaled: qs[e] = (q0, q1, q2, q3)
                const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
                const int b = blockIdx.y, r0 = blockIdx.z * AT_ROWS, rows = min(AT_ROWS, R - r0);
                const int split = blockIdx.x * AT_WARPS + warp, g = lane / P;
                const long long s0 = (long long) split * P, j = s0 + lane % P;
                // the slice's loads: the lane's part of its position's key column (clamped to the cache: a position past it is
                // masked) and the lane's elements of the P value rows (rows past the cache: not loaded)
                const T* kcol = kT + (long long) b * D * S + (long long) g * KD * S + min(j, S - 1);
                const T* vrow = v + ((long long) b * S + s0) * D + lane * EPL;
                T kv[KD];
                AtVec<T, EPL> vv[P];
                long long last = 0;
                if (early) {
                    last = pos64 ? *(const long long*) pos : (long long) *(const int*) pos;
                    at_load_slice<T, D, KD, P, LE, EPL>(kv, vv, kcol, vrow, S, s0, lane);
                }
                GATUN_DEPENDENT_START();
                if (!early) last = pos64 ? *(const long long*) pos : (long long) *(const int*) pos;
                for (int e = threadIdx.x; e < D; e += 32 * AT_WARPS) {
                    const T* qe = q + ((long long) b * R + r0) * D + e;
                    qs[e] = make_float4(scale * at_f(qe[0]), rows > 1 ? scale * at_f(qe[D]) : 0.0f,
                                        rows > 2 ? scale * at_f(qe[2 * D]) : 0.0f, rows > 3 ? scale * at_f(qe[3 * D]) : 0.0f);
                }
                if (!early) {
                    at_load_slice<T, D, KD, P, LE, EPL>(kv, vv, kcol, vrow, S, s0, lane);
                }
                if (up.on) {
                    // the position's key and value from the update's sources, written into the caches by row block 0
                    const long long h = b % up.heads, bb = b / up.heads;
                    const bool writes = blockIdx.z == 0 && last >= 0 && last < S;
                    if (j == last) {
                        const T* kn = reinterpret_cast<const T*>(up.k) + bb * up.kb + h * up.kh;
                        #pragma unroll
                        for (int e = 0; e < KD; e++) {
                            kv[e] = kn[(long long) (g * KD + e) * up.ke];
                            if (writes) kT[(long long) b * D * S + (long long) (g * KD + e) * S + last] = kv[e];
                        }
                    }
                    const T* vn = reinterpret_cast<const T*>(up.v) + bb * up.vb + h * up.vh;
                    #pragma unroll
                    for (int i = 0; i < P; i++)
                        if (lane < LE && s0 + i == last && s0 + i < S)
                            #pragma unroll
                            for (int k = 0; k < EPL; k++) {
                                const T x = vn[(long long) (lane * EPL + k) * up.ve];
                                vv[i].set(k, x);
                                if (writes) v[((long long) b * S + last) * D + lane * EPL + k] = x;
                            }
                } else if (early) {
                    // the position the update just before wrote: loaded again, from L2 (the early load may have left the old bytes in L1)
                    if (j == last)
                        #pragma unroll
                        for (int e = 0; e < KD; e++) kv[e] = __ldcg(kcol + (long long) e * S);
                    #pragma unroll
                    for (int i = 0; i < P; i++) if (lane < LE && s0 + i == last && s0 + i < S) vv[i].loadL2(vrow + (long long) i * D);
                }
                if (last < 0 || last >= S) gatun_fail(claim, fault, 3, step, last, S, 0, -1);
                __syncthreads();   // q in shared memory
                if (split >= splits) return;
                // the scores of the lane's position: its KD elements' part, then the G parts summed (lanes P apart: every lane of the
                // position holds the same sums, added in the same order); -inf past the position (or the cache)
                float sc[AT_ROWS] = {0.0f, 0.0f, 0.0f, 0.0f};
                #pragma unroll
                for (int e = 0; e < KD; e++) {
                    const float k = at_f(kv[e]);
                    const float4 qq = qs[g * KD + e];
                    sc[0] = fmaf(qq.x, k, sc[0]); sc[1] = fmaf(qq.y, k, sc[1]); sc[2] = fmaf(qq.z, k, sc[2]); sc[3] = fmaf(qq.w, k, sc[3]);
                }
                #pragma unroll
                for (int r = 0; r < AT_ROWS; r++)
                    #pragma unroll
                    for (int o = 16; o >= P; o >>= 1) sc[r] += __shfl_xor_sync(0xffffffffu, sc[r], o);
                const bool in = j <= last;
                float most[AT_ROWS], sum[AT_ROWS], p[AT_ROWS];
                #pragma unroll
                for (int r = 0; r < AT_ROWS; r++) {
                    // over the slice's P positions (lanes less than P apart): each group of P lanes finds the same
                    float m = in ? sc[r] : AT_NEG_INF;
                    #pragma unroll
                    for (int o = P / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
                    most[r] = m;
                    p[r] = in ? __expf(sc[r] - m) : 0.0f;   // m is finite where any lane is in
                    float l = p[r];
                    #pragma unroll
                    for (int o = P / 2; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
                    sum[r] = l;
                }
                // the weighted values: position i's weights come from lane i (group 0)
                float acc[AT_ROWS][EPL];
                #pragma unroll
                for (int r = 0; r < AT_ROWS; r++)
                    #pragma unroll
                    for (int k = 0; k < EPL; k++) acc[r][k] = 0.0f;
                const int n = (int) max(0LL, min((long long) P, last + 1 - s0));
                #pragma unroll
                for (int i = 0; i < P; i++) {
                    if (i >= n) break;
                    float w[AT_ROWS];
                    #pragma unroll
                    for (int r = 0; r < AT_ROWS; r++) w[r] = __shfl_sync(0xffffffffu, p[r], i);
                    #pragma unroll
                    for (int k = 0; k < EPL; k++) {
                        const float x = vv[i].at(k);
                        #pragma unroll
                        for (int r = 0; r < AT_ROWS; r++) acc[r][k] = fmaf(w[r], x, acc[r][k]);
                    }
                }
                T* o = out + ((long long) b * R + r0) * D + lane * EPL;
                if (splits == 1) {
                    if (lane < LE)
                        #pragma unroll
                        for (int r = 0; r < AT_ROWS; r++)
                            #pragma unroll
                            for (int k = 0; k < EPL; k++) if (r < rows) at_store(o + r * D + k, acc[r][k] / sum[r]);
                    return;
                }
                // a partial per slice: the rows' sums (AT_ROWS x D), maxima and sums; the last warp of the tile to count in merges
                const long long tile = (long long) b * gridDim.z + blockIdx.z;
                constexpr int PART = AT_ROWS * (D + 2);
                float* mine = scratch + (tile * splits + split) * PART;
                if (lane < LE)
                    #pragma unroll
                    for (int r = 0; r < AT_ROWS; r++)
                        #pragma unroll
                        for (int k = 0; k < EPL; k++) mine[r * D + lane * EPL + k] = acc[r][k];
                if (lane < AT_ROWS) {
                    // lane r writes row r's: select without a dynamic index into the arrays
                    float m = most[0], l = sum[0];
                    #pragma unroll
                    for (int r = 1; r < AT_ROWS; r++) if (lane == r) { m = most[r]; l = sum[r]; }
                    mine[AT_ROWS * D + lane] = m;
                    mine[AT_ROWS * D + AT_ROWS + lane] = l;
                }
                __syncwarp();
                unsigned before = 0;
                if (lane == 0)
                    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counters + tile) : "memory");
                before = __shfl_sync(0xffffffffu, before, 0);
                if (before != (unsigned) splits - 1) return;
                if (lane == 0) counters[tile] = 0u;   // for the next launch, which the stream orders after this one
                // the merge: the slices' maxima and sums a lane each (32 slices at a time), their weights shuffled to every lane,
                // then every lane adds its elements of the slices' sums, eight slices' loads in flight at a time; the order
                // of the sums is fixed (slice 0, 1, 2, ...), whichever warp came last
                const float* parts = scratch + tile * splits * PART;
                float gm[AT_ROWS], tl[AT_ROWS], tv[AT_ROWS][EPL];
                #pragma unroll
                for (int r = 0; r < AT_ROWS; r++) {
                    gm[r] = AT_NEG_INF;
                    tl[r] = 0.0f;
                    #pragma unroll
                    for (int e = 0; e < EPL; e++) tv[r][e] = 0.0f;
                }
                for (int k0 = 0; k0 < splits; k0 += 32) {
                    const int k = k0 + lane;
                    const float* pk = parts + (long long) min(k, splits - 1) * PART + AT_ROWS * D;
                    float m[AT_ROWS], l[AT_ROWS], w[AT_ROWS];
                    #pragma unroll
                    for (int r = 0; r < AT_ROWS; r++) {
                        m[r] = k < splits ? __ldcg(pk + r) : AT_NEG_INF;
                        l[r] = k < splits ? __ldcg(pk + AT_ROWS + r) : 0.0f;
                    }
                    #pragma unroll
                    for (int r = 0; r < AT_ROWS; r++) {
                        float most = m[r];
                        #pragma unroll
                        for (int o = 16; o > 0; o >>= 1) most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, o));
                        const float now = fmaxf(gm[r], most);
                        const float carry = gm[r] == AT_NEG_INF ? 0.0f : __expf(gm[r] - now);   // the earlier groups' rescaling
                        w[r] = m[r] == AT_NEG_INF ? 0.0f : __expf(m[r] - now);              // a slice past the position: 0
                        float wl = w[r] * l[r];
                        #pragma unroll
                        for (int o = 16; o > 0; o >>= 1) wl += __shfl_xor_sync(0xffffffffu, wl, o);
                        tl[r] = tl[r] * carry + wl;
                        #pragma unroll
                        for (int e = 0; e < EPL; e++) tv[r][e] *= carry;
                        gm[r] = now;
                    }
                    const int count = min(32, splits - k0);
                    for (int i0 = 0; i0 < count; i0 += 8) {
                        float a[8][AT_ROWS][EPL];
                        #pragma unroll
                        for (int i = 0; i < 8; i++) {
                            const float* pi = parts + (long long) min(k0 + i0 + i, splits - 1) * PART + lane * EPL;
                            #pragma unroll
                            for (int r = 0; r < AT_ROWS; r++)
                                #pragma unroll
                                for (int e = 0; e < EPL; e++) a[i][r][e] = lane < LE ? __ldcg(pi + r * D + e) : 0.0f;
                        }
                        #pragma unroll
                        for (int i = 0; i < 8; i++)
                            #pragma unroll
                            for (int r = 0; r < AT_ROWS; r++) {
                                const float wi = __shfl_sync(0xffffffffu, w[r], (i0 + i) & 31);
                                if (i0 + i < count)
                                    #pragma unroll
                                    for (int e = 0; e < EPL; e++) tv[r][e] = fmaf(wi, a[i][r][e], tv[r][e]);
                            }
                    }
                }
                if (lane < LE)
                    #pragma unroll
                    for (int r = 0; r < AT_ROWS; r++)
                        #pragma unroll
                        for (int e = 0; e < EPL; e++) if (r < rows) at_store(o + r * D + e, tv[r][e] / tl[r]);
            }

            // four blocks an SM where a head is at most 128 bytes (at most 128 registers a thread), else two
            #define AT_ENTRY(T, NAME, D, P) \\
                extern "C" __global__ void __launch_bounds__(32 * AT_WARPS, (D * sizeof(T) <= 128 ? 4 : 2)) attention_##NAME##_##D##_p##P(const T* q, T* kT, \\
                        T* v, T* out, const void* pos, int pos64, int R, long long S, float scale, int splits, float* scratch, \\
                        unsigned* counters, int* claim, gatun_fault* fault, int step, int early, const void* uk, long long ukb, long long ukh, \\
                        long long uke, const void* uv, long long uvb, long long uvh, long long uve, int heads, int update) { \\
                    const AtUpdate up = {uk, ukb, ukh, uke, uv, uvb, uvh, uve, heads, update}; \\
                    attention<T, D, P>(q, kT, v, out, pos, pos64, R, S, scale, splits, scratch, counters, claim, fault, step, early, up); }
            #define AT_ENTRIES(D, P) AT_ENTRY(float, f32, D, P) AT_ENTRY(__half, f16, D, P) AT_ENTRY(__nv_bfloat16, bf16, D, P)
            // the entries of one cut, P positions a warp
            #define AT_CUT(P) AT_ENTRIES(16, P) AT_ENTRIES(32, P) AT_ENTRIES(64, P) AT_ENTRY(__half, f16, 128, P) AT_ENTRY(__nv_bfloat16, bf16, 128, P)
            """;

    /** The program of one cut, {@code positions} positions a warp (compiled where a plan's step has that cut). */
    static String source(int positions) { return BODY + "AT_CUT(" + positions + ")\n"; }

    /** Every cut's entries in one program: for the compile checks. */
    static final String SOURCE = BODY + "AT_CUT(32) AT_CUT(16) AT_CUT(8)\n";

    /** The cut of one step: {@code splits} slices of {@code positions} positions, a warp each; {@code rowBlocks} blocks of {@value #ROWS} rows. */
    record Cut(int batch, int rowBlocks, int positions, int splits) {
        int tiles() { return batch * rowBlocks; }
        /** Floats of scratch the step's partials need (none with one slice). */
        long scratchFloats(int d) { return splits == 1 ? 0 : (long) tiles() * splits * ROWS * (d + 2); }
        Dim3 grid() { return new Dim3(Math.ceilDiv(splits, WARPS), batch, rowBlocks); }
    }

    /** A program a cut (its index in {@link #CUTS}), each compiled where a step has that cut. */
    private final LazyProgram[] programs = new LazyProgram[CUTS.length];
    private final SplitScratch split;

    /**
     * The kernels, and scratch and counters enough for every attention step of {@code plan}; the counters are zeroed on
     * {@code stream}, the stream every launch of this instance is ordered by.
     */
    CudaAttention(Device device, LazyProgram.Compiler compiler, Plan plan, Stream stream) {
        for (int i = 0; i < CUTS.length; i++) programs[i] = new LazyProgram(compiler, "gatun_attention_p" + CUTS[i], source(CUTS[i]));
        long floats = 1, tiles = 1;
        var steps = plan.steps();
        for (int i = 0; i < steps.size(); i++) {
            AttentionCall a = attentionOf(steps.get(i));
            if (a != null) {
                check(a);
                Cut c = cut(a, positions(a, plan.choice(steps.get(i))));
                floats = Math.max(floats, c.scratchFloats(d(a)));
                tiles = Math.max(tiles, c.tiles());
            }
        }
        this.split = SplitScratch.allocate(device, floats, tiles, stream);
    }

    private static int d(AttentionCall a) { return (int) a.q().shape().sizes()[2]; }

    /** The attention step {@code s} runs: an attention's own, or one with the update of its caches; else null. */
    static AttentionCall attentionOf(Step s) {
        return switch (s) {
            case Step.OpCall o when AttentionCall.is(o) -> AttentionCall.of(o);
            case Step.UpdateAttention u -> u.attention();
            default -> null;
        };
    }

    /** Refuses, naming the step, a head size the kernels do not take. */
    static void check(AttentionCall a) {
        DType t = a.q().dtype();
        int d = d(a);
        boolean size = dev.gatun.ir.ops.Attention.fusedKernelTakes(t, d);
        if (t != DType.FLOAT32 && t != DType.FLOAT16 && t != DType.BFLOAT16)
            throw new GatunRuntimeException(a.format().strip() + ": attention on the GPU takes float32, float16 or bfloat16, not " + t);
        if (!size)
            throw new GatunRuntimeException(a.format().strip() + ": attention on the GPU takes a head size of 16, 32, 64 or 128 (float32: to 64), not " + d + " of " + t + "; compose it from matmul and softmax instead");
    }

    /** The positions a warp the plan chose for {@code a} ({@code LaunchChoice.Attention}); refused, naming the step, where it chose none. */
    static int positions(AttentionCall a, LaunchChoice choice) {
        if (choice.attention() == null)
            throw new GatunRuntimeException(a.format().strip() + ": the plan has no attention cut for this step (LaunchChoice.attention)");
        return choice.attention().positions();
    }

    /** The cut of {@code a}: a warp for every {@code positions} positions of the cache and {@value #ROWS} query rows. */
    static Cut cut(AttentionCall a, int positions) {
        long[] q = a.q().shape().sizes();
        long len = a.keysT().shape().sizes()[2];
        long splits = Math.ceilDiv(len, positions);
        long rowBlocks = Math.ceilDiv(q[1], ROWS);
        if (splits * WARPS > Integer.MAX_VALUE || q[0] > 65_535 || rowBlocks > 65_535)
            throw new GatunRuntimeException(a.format().strip() + ": " + q[0] + " batch entries of " + q[1] + " rows over a cache of " + len
                    + " positions do not fit the GPU kernel's grid (at most 65535 batch entries and 65535 blocks of " + ROWS + " rows)");
        return new Cut((int) q[0], (int) rowBlocks, positions, (int) splits);
    }

    /** Loads the kernels of every attention step of {@code plan} now (where ranks share a GPU nothing may load mid-session). */
    void loadNow(Plan plan) {
        for (Step s : plan.steps())
            if (attentionOf(s) instanceof AttentionCall a) {
                int p = positions(a, plan.choice(s));
                program(p).loadNow(kernel(a, p));
            }
    }

    private LazyProgram program(int positions) {
        for (int i = 0; i < CUTS.length; i++) if (CUTS[i] == positions) return programs[i];
        throw new GatunRuntimeException("the attention kernels have no cut of " + positions + " positions a warp, only 32, 16 and 8");
    }

    /** The entry point of {@code a}'s dtype and head size in the program of {@code positions} positions a warp. */
    static String kernel(AttentionCall a, int positions) {
        DType t = a.q().dtype();
        return "attention_" + (t == DType.FLOAT32 ? "f32" : t == DType.FLOAT16 ? "f16" : "bf16") + "_" + d(a) + "_p" + positions;
    }

    /**
     * One launch of {@code a} at these addresses; a bad position is reported in {@code fault} as plan step {@code step}.
     * {@code choice}: the plan's, whether the launch is programmatic and loads its cache early ({@code LaunchChoice}).
     */
    void run(AttentionCall a, long q, long keysT, long values, long out, long position, DeviceFault fault, int step, LaunchChoice choice, Stream stream) {
        launch(a, q, keysT, values, out, position, fault, step, choice, stream, 0L, new long[3], 0L, new long[3], 1, 0);
    }

    /**
     * One launch of {@code u}: the updates' new key and value (at {@code keySource} and {@code valueSource}) written into
     * the caches at the position and attended to with the rest of each cache.
     */
    void run(Step.UpdateAttention u, long q, long keysT, long values, long out, long position, long keySource, long valueSource, DeviceFault fault,
             int step, LaunchChoice choice, Stream stream) {
        UpdateSliceCall k = u.keys(), v = u.values();
        int rank = k.output().shape().rank();
        int heads = rank == 4 ? (int) k.output().shape().sizes()[1] : 1;
        launch(u.attention(), q, keysT, values, out, position, fault, step, choice, stream, keySource, sourceStrides(k.update(), rank - 2), valueSource,
                sourceStrides(v.update(), rank - 1), heads, 1);
    }

    /** A source's strides (elements) of its batch, heads (0 without) and the head's element, whose dimension is {@code element}. */
    private static long[] sourceStrides(dev.gatun.planner.PlanBuffer source, int element) {
        long[] st = new long[source.shape().rank()];
        for (int d = 0; d < st.length; d++) st[d] = source.strides().get(d).eval(java.util.Map.of());
        return st.length == 4 ? new long[]{st[0], st[1], st[element]} : new long[]{st[0], 0, st[element]};
    }

    private void launch(AttentionCall a, long q, long keysT, long values, long out, long position, DeviceFault fault, int step, LaunchChoice choice, Stream stream,
                        long keySource, long[] ks, long valueSource, long[] vs, int heads, int update) {
        Cut c = cut(a, positions(a, choice));
        long len = a.keysT().shape().sizes()[2];
        var config = new LaunchConfig(c.grid(), Dim3.of(32 * WARPS), 0, stream);
        Programmatic.launch(program(c.positions()).kernel(kernel(a, c.positions())), choice.programmatic(), config, q, keysT, values, out, position,
                a.position().dtype() == DType.INT64 ? 1 : 0, (int) a.q().shape().sizes()[1], len, (float) a.scale(), c.splits(),
                split.scratch().address(), split.counters().address(), fault.claim(), fault.record(), step, choice.early() ? 1 : 0,
                keySource, ks[0], ks[1], ks[2], valueSource, vs[0], vs[1], vs[2], heads, update);
    }

    /** Frees the scratch and the counters (again: nothing). */
    @Override public void close() { split.close(); }
}
