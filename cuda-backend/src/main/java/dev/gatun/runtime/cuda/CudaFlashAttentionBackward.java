package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.runtime.GatunRuntimeException;

import java.util.HashMap;
import java.util.Map;

/**
 * {@code flash_attention_backward} ({@link dev.gatun.ir.ops.FlashAttentionBackward}) on the GPU: flash attention 2's
 * backward pass, which recomputes the scores tile by tile and never holds a [T, S] tensor. Three forms, which the dtype
 * and head size select ({@link #form}: the forward's choice of tensor cores, then whether the tiles fit):
 * <ul>
 *   <li><b>mma</b>, bf16 and f16 at head size 64 or 128, two kernels. {@code fb_mma_stats} (a block per 64 query rows of
 *   a head, a warp per 16, the scores on the tensor cores) writes each row's logsumexp L and {@code D = sum(dout * o)}
 *   into the op's stats output and zeroes the float32 dq output. {@code fb_mma_main} takes a block per 64 keys and one
 *   query head (a warp per 16 keys; a block a query head rather than a key-value head, so the causal attention's
 *   unequal blocks are four times shorter at a group of four, and spread over the GPU): with its keys and values in
 *   shared memory it walks the query tiles that can see them (causal and window bounds), and computes on the tensor
 *   cores ({@code mma.sync m16n8k16}, float32 sums) the transposed scores {@code S^T = K Q^T}, {@code P^T = exp(S^T -
 *   L)}, {@code dV += P^T dO}, {@code dP^T = V dO^T}, {@code dS^T = P^T (dP^T - D)}, {@code dK += dS^T Q}, and
 *   {@code dQ = dS K} through a shared-memory copy of dS, added to the float32 dq output with {@code atomicAdd}. dK and
 *   dV stay in registers until the block is done and go to the head's float32 part (the gradient rule sums a group's
 *   parts); P and dS are rounded to the dtype as the products' operands, as flash attention does.</li>
 *   <li><b>rows</b>, float32 (the training step's check against PyTorch), float64 to head size 128 and 16-bit off the
 *   tensor cores: the same walk on the CUDA cores in the type the kernels compute in (float, double for f64), two
 *   kernels. {@code fb_rows_dq}, a block per BR query rows, holds their q and dout in shared memory, computes L over the
 *   key tiles they see (an online logsumexp) and D, writes the stats, then walks the key tiles again for {@code dS = P
 *   (dP - D)} and {@code dq += dS K}: dq without atomics, the same sums every run, at the cost of the scores twice.
 *   {@code fb_rows_dkv}, a block per BR keys and query head, walks the query tiles that see its keys for {@code dV +=
 *   P^T dO} and {@code dK += dS^T Q}, P^T and then dS^T passed through one shared tile. Every product is a
 *   register-blocked micro-tile (a thread TR rows by TC columns of a score tile, or TR rows by groups of four head
 *   elements of a sum), its operands read from shared memory four elements at a time: the reuse that brings SIMT FMA
 *   near the CUDA cores' rate, where the old kernels (a lane a row, full dot products from global memory) spent 88 ms a
 *   layer at the Llama-3.2-1B training shape. {@link #tiles} picks BR, TR, BC and TC per dtype and head size so the five
 *   tiles fit 48 KiB of static shared memory and a thread's sums 64 registers (the head padded to the four-element
 *   groups a row of threads covers, so no product needs a bound).</li>
 *   <li><b>simple</b>, what no tiling fits (f64 past head size 128): three kernels in double, the stats (a warp a query
 *   row), dq (a warp a query row, a lane a key), a head's part of dk and dv (a warp a key, a lane a query). No atomics;
 *   slow but exact to the type.</li>
 * </ul>
 * The float32 gradients and the stats are the op's outputs, so the plan places them; nothing is allocated here.
 */
final class CudaFlashAttentionBackward {
    /**
     * The kernels a call of this dtype and head size takes: "mma" where the forward's is, else "rows" where {@link #tiles}
     * finds tiles that fit, else "simple".
     */
    static String form(DType t, long d) {
        if (CudaFlashAttention.form(t, d).equals("mma")) return "mma";
        return tiles(t, d).isPresent() ? "rows" : "simple";
    }

    /**
     * The shape of the tiled rows kernels: a block of {@code threads} holds {@code br} rows of its own, a thread {@code tr}
     * of them, and walks tiles of {@code bc} rows of the other side, a thread {@code tc} of those columns of the score
     * tile; the head size padded to {@code fdp} (a multiple of the four-element groups a row of threads covers, so no
     * product needs a bound), each shared row {@code fdp + 4} long (float4 reads that spread over the banks).
     */
    record Tiles(int br, int tr, int bc, int tc, int fdp) {
        int rowGroups() { return br / tr; }
        int columnGroups() { return bc / tc; }
        int threads() { return rowGroups() * columnGroups(); }
        /** The shared memory of the larger kernel (both hold two [br] tiles, two [bc] tiles, dS^T and two rows of stats). */
        long sharedBytes(int size) { return (long) size * (2L * br * (fdp + 4) + 2L * bc * (fdp + 4) + (long) bc * (br + 4) + 2L * Math.max(br, bc)); }
        /** A thread's dk and dv (or dq) sums, in elements. */
        int accumulators() { return 2 * tr * fdp / columnGroups(); }
    }

    /** Candidate tiles, fastest first: (br, tr, bc, tc). */
    private static final int[][] CANDIDATES = {{64, 4, 16, 2}, {64, 4, 8, 1}, {32, 2, 16, 2}, {32, 2, 8, 1}, {16, 1, 16, 2}, {16, 1, 8, 1}, {8, 1, 8, 1}};
    static final int SHARED_LIMIT = 48 * 1024;

    /**
     * The first candidate whose five tiles fit in 48 KiB of static shared memory and whose sums fit in 64 registers a
     * thread (no spills), at dtype {@code t} (float32, or double for f64) and head size {@code d}; none for f64 past head
     * size 128, which the simple kernels take.
     */
    static java.util.Optional<Tiles> tiles(DType t, long d) {
        int size = t == DType.FLOAT64 ? 8 : 4;
        for (int[] c : CANDIDATES) {
            int groups = c[2] / c[3];
            int fdp = (int) (Math.ceilDiv(d, 4L * groups) * 4 * groups);
            var x = new Tiles(c[0], c[1], c[2], c[3], fdp);
            if (x.accumulators() * (size / 4) <= 64 && x.sharedBytes(size) <= SHARED_LIMIT) return java.util.Optional.of(x);
        }
        return java.util.Optional.empty();
    }

    private static final String COMMON = Programmatic.SOURCE + """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>
            """ + CudaFlashAttention.MASK_AND_SCORE + """
            #define FB_NEG_INF FA_NEG_INF
            // whether query i of T sees key j: the forward's mask, and no query past the last
            __device__ __forceinline__ bool fb_sees(int i, int j, int T, int S, int causal, int window) {
                return i < T && fa_sees(i, j, T, S, causal, window);
            }
            // the keys query i sees: [start, end)
            __device__ __forceinline__ int fb_end(int i, int T, int S, int causal) { return causal ? S - T + i + 1 : S; }
            __device__ __forceinline__ int fb_start(int i, int T, int S, int causal, int window) {
                int s = causal && window > 0 ? S - T + i - window + 1 : 0;
                return s < 0 ? 0 : s;
            }
            // the queries that see key j: [lo, hi)
            __device__ __forceinline__ int fb_qlo(int j, int T, int S, int causal) {
                int lo = causal ? j - (S - T) : 0;
                return lo < 0 ? 0 : lo;
            }
            __device__ __forceinline__ int fb_qhi(int j, int T, int S, int causal, int window) {
                int hi = causal && window > 0 ? j + window - (S - T) : T;
                return hi > T ? T : hi;
            }
            """;

    /**
     * The tiled rows kernels (FT the element type, FD the head size, FA the type they compute in with FA_FMA, FA_MAX,
     * FA_EXP, FA_LOG, FB_LD4 reading four consecutive FA of shared memory at once; the tile constants of {@link Tiles}). A block of
     * NT threads holds BR rows of its own (queries for dq, keys for dk and dv) in shared memory and walks the BC-row tiles
     * of the other side that it sees; every product is a register-blocked micro-tile: for a score tile [BR][BC] a thread
     * computes rows rg + NRG * a (a < TR) by columns cg + NCG * t (t < TC), reading four head elements at a time; for an
     * accumulated [BR][FD] product it owns the same rows by the four-element groups cg + NCG * u of the head.
     */
    private static final String ROWS = """
            #define NRG (BR / TR)
            #define NCG (BC / TC)
            #define NU (FDP / 4 / NCG)
            #define LP (BR + 4)
            // rows [r0, r0 + n) of a [rows, FD] matrix (row stride `stride` elements) into a shared tile as FA, zeros past `rows` and FD
            template <int N> __device__ __forceinline__ void fb_load(FA (*dst)[LD], const FT* src, int r0, int rows, long long stride) {
                for (int e = threadIdx.x; e < N * FDP; e += NT) {
                    int r = e / FDP, c = e % FDP;
                    dst[r][c] = r0 + r < rows && c < FD ? (FA) at_f(src[(long long) (r0 + r) * stride + c]) : (FA) 0;
                }
            }
            // acc[a][t] = the dot of A's row rg + NRG * a and B's row cg + NCG * t
            __device__ __forceinline__ void fb_scores(FA (&acc)[TR][TC], FA (*A)[LD], FA (*B)[LD], int rg, int cg) {
                #pragma unroll
                for (int a = 0; a < TR; a++)
                    #pragma unroll
                    for (int t = 0; t < TC; t++) acc[a][t] = 0;
                #pragma unroll 2   // more and ptxas spills at head size 128 (or takes more than 128 registers at 64)
                for (int c = 0; c < FDP; c += 4) {
                    FA x[TR][4], y[TC][4];
                    #pragma unroll
                    for (int a = 0; a < TR; a++) FB_LD4(x[a], &A[rg + NRG * a][c]);
                    #pragma unroll
                    for (int t = 0; t < TC; t++) FB_LD4(y[t], &B[cg + NCG * t][c]);
                    #pragma unroll
                    for (int e = 0; e < 4; e++)
                        #pragma unroll
                        for (int a = 0; a < TR; a++)
                            #pragma unroll
                            for (int t = 0; t < TC; t++) acc[a][t] = FA_FMA(x[a][e], y[t][e], acc[a][t]);
                }
            }
            // out[a][u][e] += sum over the tile's BC rows j of P[j][rg + NRG * a] * M[j][(cg + NCG * u) * 4 + e] (P transposed: [BC][BR])
            __device__ __forceinline__ void fb_accumulate(FA (&out)[TR][NU][4], FA (*P)[LP], FA (*M)[LD], int rg, int cg) {
                #pragma unroll 2
                for (int j = 0; j < BC; j++) {
                    FA p[TR], m[NU][4];
                    #pragma unroll
                    for (int a = 0; a < TR; a++) p[a] = P[j][rg + NRG * a];
                    #pragma unroll
                    for (int u = 0; u < NU; u++) FB_LD4(m[u], &M[j][(cg + NCG * u) * 4]);
                    #pragma unroll
                    for (int a = 0; a < TR; a++)
                        #pragma unroll
                        for (int u = 0; u < NU; u++)
                            #pragma unroll
                            for (int e = 0; e < 4; e++) out[a][u][e] = FA_FMA(p[a], m[u][e], out[a][u][e]);
                }
            }
            // a thread's part of a [rows, FD] result at `dst` (row r of the block at dst + r * FD), times `mul`
            __device__ __forceinline__ void fb_store(FA* dst, const FA (&out)[TR][NU][4], int r0, int rows, FA mul, int rg, int cg) {
                #pragma unroll
                for (int a = 0; a < TR; a++) {
                    int r = r0 + rg + NRG * a;
                    if (r >= rows) continue;
                    #pragma unroll
                    for (int u = 0; u < NU; u++)
                        #pragma unroll
                        for (int e = 0; e < 4; e++) {
                            int c = (cg + NCG * u) * 4 + e;
                            if (c < FD) dst[(long long) r * FD + c] = out[a][u][e] * mul;
                        }
                }
            }
            // dS of one score's dot s and its dP, P into *p, for a query of logsumexp L and D; zeros where the query does not see the key
            __device__ __forceinline__ FA fb_grad(FA s, FA dp, FA L, FA D, bool seen, FA scale, FA softcap, FA* p) {
                if (!seen) { *p = 0; return 0; }
                FA sc = fa_score(s, scale, softcap);
                *p = FA_EXP(sc - L);
                FA ds = *p * (dp - D);
                if (softcap > 0) ds *= 1 - (sc / softcap) * (sc / softcap);
                return ds;
            }
            // dq and the stats of BR query rows: their L over the keys they see (an online logsumexp), D, then the key tiles
            // again for dS = P (dP - D) and dq += dS K; the last query tiles (the longest, when causal) first
            extern "C" __global__ void __launch_bounds__(NT) fb_rows_dq(const FT* q, const FT* k, const FT* v, const FT* o, const FT* dout, FA* stats,
                    FA* dq, int Hq, int Hkv, int T, int S, FA scale, int causal, int window, FA softcap) {
                GATUN_DEPENDENT_START();
                __shared__ __align__(16) FA qs[BR][LD];
                __shared__ __align__(16) FA dos[BR][LD];
                __shared__ __align__(16) FA ks[BC][LD];
                __shared__ __align__(16) FA vs[BC][LD];
                __shared__ __align__(16) FA dss[BC][LP];   // dS^T: [key][query]
                __shared__ FA ls[BR], dl[BR];
                const int tid = threadIdx.x, lane = tid & 31, rg = tid / NCG, cg = tid % NCG;
                const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * BR, kvh = h / (Hq / Hkv);
                const long long bh = (long long) b * Hq + h;
                const FT* kb = k + ((long long) b * Hkv + kvh) * S * FD;
                const FT* vb = v + ((long long) b * Hkv + kvh) * S * FD;
                fb_load<BR>(qs, q + bh * T * FD, i0, T, FD);
                fb_load<BR>(dos, dout + ((long long) b * T * Hq + h) * FD, i0, T, (long long) Hq * FD);
                __syncthreads();
                // D = sum(dout * o): a warp a row
                for (int r = tid >> 5; r < BR; r += NT / 32) {
                    FA d = 0;
                    if (i0 + r < T)
                        for (int c = lane; c < FD; c += 32) d = FA_FMA(dos[r][c], (FA) at_f(o[(((long long) b * T + i0 + r) * Hq + h) * FD + c]), d);
                    for (int w = 16; w > 0; w >>= 1) d += __shfl_xor_sync(0xffffffffu, d, w);
                    if (lane == 0) dl[r] = d;
                }
                const int last = i0 + BR - 1 < T ? i0 + BR - 1 : T - 1, end = fb_end(last, T, S, causal);
                int start = fb_start(i0, T, S, causal, window);
                start -= start % BC;
                // L: each thread's maximum and sum over its columns, then joined over the row's NCG threads (neighbouring lanes)
                FA m[TR], l[TR];
                #pragma unroll
                for (int a = 0; a < TR; a++) { m[a] = FB_NEG_INF; l[a] = 0; }
                for (int j0 = start; j0 < end; j0 += BC) {
                    __syncthreads();
                    fb_load<BC>(ks, kb, j0, S, FD);
                    __syncthreads();
                    FA s[TR][TC];
                    fb_scores(s, qs, ks, rg, cg);
                    #pragma unroll
                    for (int a = 0; a < TR; a++) {
                        FA mx = FB_NEG_INF;
                        #pragma unroll
                        for (int t = 0; t < TC; t++) {
                            s[a][t] = fb_sees(i0 + rg + NRG * a, j0 + cg + NCG * t, T, S, causal, window) ? fa_score(s[a][t], scale, softcap) : FB_NEG_INF;
                            mx = FA_MAX(mx, s[a][t]);
                        }
                        if (mx == FB_NEG_INF) continue;
                        FA mn = FA_MAX(m[a], mx), sum = 0;
                        #pragma unroll
                        for (int t = 0; t < TC; t++) sum += s[a][t] == FB_NEG_INF ? 0 : FA_EXP(s[a][t] - mn);
                        l[a] = (m[a] == FB_NEG_INF ? 0 : l[a] * FA_EXP(m[a] - mn)) + sum;
                        m[a] = mn;
                    }
                }
                #pragma unroll
                for (int a = 0; a < TR; a++) {
                    for (int w = 1; w < NCG; w <<= 1) {
                        FA mo = __shfl_xor_sync(0xffffffffu, m[a], w), lo = __shfl_xor_sync(0xffffffffu, l[a], w), mn = FA_MAX(m[a], mo);
                        if (mn != FB_NEG_INF) l[a] = (m[a] == FB_NEG_INF ? 0 : l[a] * FA_EXP(m[a] - mn)) + (mo == FB_NEG_INF ? 0 : lo * FA_EXP(mo - mn));
                        m[a] = mn;
                    }
                    int r = rg + NRG * a;
                    if (cg == 0) ls[r] = m[a] + FA_LOG(l[a]);
                }
                __syncthreads();
                for (int r = tid; r < BR; r += NT)
                    if (i0 + r < T) { stats[(bh * T + i0 + r) * 2] = ls[r]; stats[(bh * T + i0 + r) * 2 + 1] = dl[r]; }
                FA aq[TR][NU][4];
                #pragma unroll
                for (int a = 0; a < TR; a++)
                    #pragma unroll
                    for (int u = 0; u < NU; u++) aq[a][u][0] = aq[a][u][1] = aq[a][u][2] = aq[a][u][3] = 0;
                for (int j0 = start; j0 < end; j0 += BC) {
                    __syncthreads();
                    fb_load<BC>(ks, kb, j0, S, FD);
                    fb_load<BC>(vs, vb, j0, S, FD);
                    __syncthreads();
                    FA s[TR][TC], dp[TR][TC];
                    fb_scores(s, qs, ks, rg, cg);
                    fb_scores(dp, dos, vs, rg, cg);
                    #pragma unroll
                    for (int a = 0; a < TR; a++)
                        #pragma unroll
                        for (int t = 0; t < TC; t++) {
                            int r = rg + NRG * a, c = cg + NCG * t;
                            FA p;
                            dss[c][r] = fb_grad(s[a][t], dp[a][t], ls[r], dl[r], fb_sees(i0 + r, j0 + c, T, S, causal, window), scale, softcap, &p);
                        }
                    __syncthreads();
                    fb_accumulate(aq, dss, ks, rg, cg);
                }
                fb_store(dq + bh * T * FD, aq, i0, T, scale, rg, cg);
            }
            // one query head's part of dk and dv of BR keys: every query tile that sees them, P^T and dS^T of the tile, then
            // dV += P^T dO and dK += dS^T Q
            extern "C" __global__ void __launch_bounds__(NT) fb_rows_dkv(const FT* q, const FT* k, const FT* v, const FT* dout, const FA* stats,
                    FA* dk, FA* dv, int Hq, int Hkv, int T, int S, FA scale, int causal, int window, FA softcap) {
                GATUN_DEPENDENT_START();
                __shared__ __align__(16) FA ks[BR][LD];
                __shared__ __align__(16) FA vs[BR][LD];
                __shared__ __align__(16) FA qs[BC][LD];
                __shared__ __align__(16) FA dos[BC][LD];
                __shared__ __align__(16) FA pss[BC][LP];   // P^T, then dS^T: [query][key]
                __shared__ FA ls[BC], dl[BC];
                const int tid = threadIdx.x, rg = tid / NCG, cg = tid % NCG;
                const int b = blockIdx.z, h = blockIdx.y, j0 = blockIdx.x * BR, kvh = h / (Hq / Hkv);
                const long long bh = (long long) b * Hq + h;
                fb_load<BR>(ks, k + ((long long) b * Hkv + kvh) * S * FD, j0, S, FD);
                fb_load<BR>(vs, v + ((long long) b * Hkv + kvh) * S * FD, j0, S, FD);
                FA ak[TR][NU][4], av[TR][NU][4];
                #pragma unroll
                for (int a = 0; a < TR; a++)
                    #pragma unroll
                    for (int u = 0; u < NU; u++)
                        #pragma unroll
                        for (int e = 0; e < 4; e++) ak[a][u][e] = av[a][u][e] = 0;
                int lo = fb_qlo(j0, T, S, causal), hi = fb_qhi(j0 + BR - 1 < S ? j0 + BR - 1 : S - 1, T, S, causal, window);
                lo -= lo % BC;
                for (int i0 = lo; i0 < hi; i0 += BC) {
                    __syncthreads();
                    fb_load<BC>(qs, q + bh * T * FD, i0, T, FD);
                    fb_load<BC>(dos, dout + ((long long) b * T * Hq + h) * FD, i0, T, (long long) Hq * FD);
                    for (int r = tid; r < BC; r += NT) {
                        bool ok = i0 + r < T;
                        ls[r] = ok ? stats[(bh * T + i0 + r) * 2] : 0;
                        dl[r] = ok ? stats[(bh * T + i0 + r) * 2 + 1] : 0;
                    }
                    __syncthreads();
                    FA s[TR][TC], dp[TR][TC];
                    fb_scores(s, ks, qs, rg, cg);
                    fb_scores(dp, vs, dos, rg, cg);
                    #pragma unroll
                    for (int a = 0; a < TR; a++)
                        #pragma unroll
                        for (int t = 0; t < TC; t++) {
                            int r = rg + NRG * a, c = cg + NCG * t;
                            FA p;
                            dp[a][t] = fb_grad(s[a][t], dp[a][t], ls[c], dl[c], fb_sees(i0 + c, j0 + r, T, S, causal, window), scale, softcap, &p);
                            pss[c][r] = p;
                        }
                    __syncthreads();
                    fb_accumulate(av, pss, dos, rg, cg);
                    __syncthreads();
                    #pragma unroll
                    for (int a = 0; a < TR; a++)
                        #pragma unroll
                        for (int t = 0; t < TC; t++) pss[cg + NCG * t][rg + NRG * a] = dp[a][t];
                    __syncthreads();
                    fb_accumulate(ak, pss, qs, rg, cg);
                }
                fb_store(dk + bh * S * FD, ak, j0, S, scale, rg, cg);
                fb_store(dv + bh * S * FD, av, j0, S, (FA) 1, rg, cg);
            }
            """;

    /**
     * The simple kernels, for what the tiled ones cannot hold in 48 KiB of shared memory (f64 past head size 128): FT the
     * element type, FD the head size, FA the type they compute in, with FA_FMA, FA_MAX, FA_EXP, FA_LOG.
     */
    private static final String SIMPLE = """
            #define FW 4
            #define FU ((FD + 31) / 32)
            __device__ __forceinline__ FA fb_warp_sum(FA x) {
                for (int w = 16; w > 0; w >>= 1) x += __shfl_xor_sync(0xffffffffu, x, w);
                return x;
            }
            __device__ __forceinline__ FA fb_dot(const FT* a, const FT* b) {
                FA s = 0;
                for (int c = 0; c < FD; c++) s = FA_FMA((FA) at_f(a[c]), (FA) at_f(b[c]), s);
                return s;
            }
            // stats[row] = (L, D): a warp a query row, a lane a key at a time for L's online logsumexp
            extern "C" __global__ void __launch_bounds__(32 * FW) fb_simple_stats(const FT* q, const FT* k, const FT* o, const FT* dout, FA* stats,
                    int Hq, int Hkv, int T, int S, FA scale, int causal, int window, FA softcap) {
                GATUN_DEPENDENT_START();
                const int lane = threadIdx.x & 31, b = blockIdx.z, h = blockIdx.y, i = blockIdx.x * FW + (threadIdx.x >> 5);
                if (i >= T) return;
                const FT* qr = q + (((long long) b * Hq + h) * T + i) * FD;
                const FT* kb = k + ((long long) b * Hkv + h / (Hq / Hkv)) * S * FD;
                FA m = FB_NEG_INF, l = 0;
                for (int j = fb_start(i, T, S, causal, window) + lane; j < fb_end(i, T, S, causal); j += 32) {
                    FA s = fa_score(fb_dot(qr, kb + (long long) j * FD), scale, softcap);
                    FA mn = FA_MAX(m, s);
                    l = l * FA_EXP(m - mn) + FA_EXP(s - mn);
                    m = mn;
                }
                for (int w = 16; w > 0; w >>= 1) {
                    FA mo = __shfl_xor_sync(0xffffffffu, m, w), lo = __shfl_xor_sync(0xffffffffu, l, w), mn = FA_MAX(m, mo);
                    if (mn != FB_NEG_INF) l = (m == FB_NEG_INF ? 0 : l * FA_EXP(m - mn)) + (mo == FB_NEG_INF ? 0 : lo * FA_EXP(mo - mn));
                    m = mn;
                }
                long long t = (((long long) b * T + i) * Hq + h) * FD;
                FA d = 0;
                for (int c = lane; c < FD; c += 32) d = FA_FMA((FA) at_f(dout[t + c]), (FA) at_f(o[t + c]), d);
                d = fb_warp_sum(d);
                if (lane == 0) {
                    stats[(((long long) b * Hq + h) * T + i) * 2] = m + FA_LOG(l);
                    stats[(((long long) b * Hq + h) * T + i) * 2 + 1] = d;
                }
            }
            // dq of one query row: a lane a key for dS, then every lane's dS times its key, a lane a group of the head's elements
            extern "C" __global__ void __launch_bounds__(32 * FW) fb_simple_dq(const FT* q, const FT* k, const FT* v, const FT* dout, const FA* stats, FA* dq,
                    int Hq, int Hkv, int T, int S, FA scale, int causal, int window, FA softcap) {
                GATUN_DEPENDENT_START();
                const int lane = threadIdx.x & 31, b = blockIdx.z, h = blockIdx.y, i = blockIdx.x * FW + (threadIdx.x >> 5);
                if (i >= T) return;
                const long long row = ((long long) b * Hq + h) * T + i;
                const FT* qr = q + row * FD;
                const FT* dr = dout + (((long long) b * T + i) * Hq + h) * FD;
                const FT* kb = k + ((long long) b * Hkv + h / (Hq / Hkv)) * S * FD;
                const FT* vb = v + ((long long) b * Hkv + h / (Hq / Hkv)) * S * FD;
                const FA L = stats[row * 2], D = stats[row * 2 + 1];
                FA acc[FU];
                for (int u = 0; u < FU; u++) acc[u] = 0;
                const int end = fb_end(i, T, S, causal);
                for (int j0 = fb_start(i, T, S, causal, window); j0 < end; j0 += 32) {
                    int j = j0 + lane;
                    FA ds = 0;
                    if (j < end) {
                        FA s = fa_score(fb_dot(qr, kb + (long long) j * FD), scale, softcap);
                        FA p = FA_EXP(s - L);
                        ds = p * (fb_dot(dr, vb + (long long) j * FD) - D);
                        if (softcap > 0) ds *= 1 - (s / softcap) * (s / softcap);
                    }
                    int n = end - j0 < 32 ? end - j0 : 32;
                    #pragma unroll 1   // ptxas spills a few bytes of some forms where it unrolls this
                    for (int jj = 0; jj < n; jj++) {
                        FA x = __shfl_sync(0xffffffffu, ds, jj);
                        for (int u = 0; u < FU; u++) { int c = lane + 32 * u; if (c < FD) acc[u] = FA_FMA(x, (FA) at_f(kb[(long long) (j0 + jj) * FD + c]), acc[u]); }
                    }
                }
                for (int u = 0; u < FU; u++) { int c = lane + 32 * u; if (c < FD) dq[row * FD + c] = acc[u] * scale; }
            }
            // one query head's part of dk and dv of one key: a lane a query for P and dS, then every lane's share
            extern "C" __global__ void __launch_bounds__(32 * FW) fb_simple_dkv(const FT* q, const FT* k, const FT* v, const FT* dout, const FA* stats,
                    FA* dk, FA* dv, int Hq, int Hkv, int T, int S, FA scale, int causal, int window, FA softcap) {
                GATUN_DEPENDENT_START();
                const int lane = threadIdx.x & 31, b = blockIdx.z, h = blockIdx.y, j = blockIdx.x * FW + (threadIdx.x >> 5);
                if (j >= S) return;
                const long long key = ((long long) b * Hkv + h / (Hq / Hkv)) * S + j, part = ((long long) b * Hq + h) * S + j;
                const FT* kr = k + key * FD;
                const FT* vr = v + key * FD;
                FA ak[FU], av[FU];
                for (int u = 0; u < FU; u++) ak[u] = av[u] = 0;
                const int lo = fb_qlo(j, T, S, causal), hi = fb_qhi(j, T, S, causal, window);
                for (int i0 = lo; i0 < hi; i0 += 32) {
                        int i = i0 + lane;
                        FA p = 0, ds = 0;
                        if (i < hi) {
                            long long row = ((long long) b * Hq + h) * T + i;
                            FA s = fa_score(fb_dot(q + row * FD, kr), scale, softcap);
                            p = FA_EXP(s - stats[row * 2]);
                            ds = p * (fb_dot(dout + (((long long) b * T + i) * Hq + h) * FD, vr) - stats[row * 2 + 1]);
                            if (softcap > 0) ds *= 1 - (s / softcap) * (s / softcap);
                        }
                        int n = hi - i0 < 32 ? hi - i0 : 32;
                        #pragma unroll 1
                        for (int ii = 0; ii < n; ii++) {
                            FA pp = __shfl_sync(0xffffffffu, p, ii), dd = __shfl_sync(0xffffffffu, ds, ii);
                            const FT* qr = q + (((long long) b * Hq + h) * T + i0 + ii) * FD;
                            const FT* dr = dout + (((long long) b * T + i0 + ii) * Hq + h) * FD;
                            for (int u = 0; u < FU; u++) {
                                int c = lane + 32 * u;
                                if (c < FD) { ak[u] = FA_FMA(dd, (FA) at_f(qr[c]), ak[u]); av[u] = FA_FMA(pp, (FA) at_f(dr[c]), av[u]); }
                            }
                        }
                    }
                for (int u = 0; u < FU; u++) {
                    int c = lane + 32 * u;
                    if (c < FD) { dk[part * FD + c] = ak[u] * scale; dv[part * FD + c] = av[u]; }
                }
            }
            """;

    /**
     * The warp-wide primitives of the tensor-core kernels (the product, the shared-memory matrix loads), apart so that a
     * host emulation of the kernels can put its own in their place.
     */
    static final String MMA_PRIMITIVES = """
            __device__ __forceinline__ void fb_mma(float* d, const unsigned* a, unsigned b0, unsigned b1) {
                asm("mma.sync.aligned.m16n8k16.row.col.f32." MMA "." MMA ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
            }
            __device__ __forceinline__ unsigned fb_smem(const void* p) { return (unsigned) __cvta_generic_to_shared(p); }
            __device__ __forceinline__ void fb_ldsm4(unsigned* r, const void* p) {
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(fb_smem(p)));
            }
            __device__ __forceinline__ void fb_ldsm4t(unsigned* r, const void* p) {
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(fb_smem(p)));
            }
            """;

    /** The tensor-core kernels: FT bf16 or f16, FD 64 or 128, BQ query rows a tile of the main kernel, MMA the type suffix, PACK. */
    private static final String MMA = """
            #define BK 64
            #define LD (FD + 8)
            #define LDS (BQ + 8)
            """ + MMA_PRIMITIVES + """
            __device__ __forceinline__ unsigned fb_pack(float lo, float hi) { PACK }
            __device__ __forceinline__ unsigned fb_word(const FT* p) { return *reinterpret_cast<const unsigned*>(p); }
            // rows [r0, r0 + n) of a [rows, FD] matrix (row stride `stride` elements) into shared memory, zeros past `rows`
            __device__ __forceinline__ void fb_tile(FT (*dst)[LD], const FT* src, int r0, int n, int rows, long long stride) {
                for (int e = threadIdx.x; e < n * (FD / 8); e += blockDim.x) {
                    int r = e / (FD / 8), c = (e % (FD / 8)) * 8;
                    uint4 x = make_uint4(0u, 0u, 0u, 0u);
                    if (r0 + r < rows) x = *reinterpret_cast<const uint4*>(src + (long long) (r0 + r) * stride + c);
                    *reinterpret_cast<uint4*>(&dst[r][c]) = x;
                }
            }
            // A fragments (16 rows from `row`, dims kk*16 .. +15) of a [rows][LD] tile
            __device__ __forceinline__ void fb_afrag(unsigned* a, FT (*m)[LD], int row, int kk, int lane) {
                int mi = lane >> 3;
                fb_ldsm4(a, &m[row + (mi & 1) * 8 + (lane & 7)][kk * 16 + (mi >> 1) * 8]);
            }

            // L and D of 64 query rows of one head (a warp 16), and their dq rows zeroed for the main kernel's sums
            extern "C" __global__ void __launch_bounds__(128) fb_mma_stats(const FT* q, const FT* k, const FT* o, const FT* dout, float* stats, float* dq,
                    int Hq, int Hkv, int T, int S, float scale, int causal, int window, float softcap) {
                GATUN_DEPENDENT_START();
                __shared__ __align__(16) FT ks[BK][LD];
                const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
                const int b = blockIdx.z, h = blockIdx.y, i0 = blockIdx.x * 64;
                const long long bh = (long long) b * Hq + h;
                const FT* qb = q + bh * T * FD;
                const FT* kb = k + ((long long) b * Hkv + h / (Hq / Hkv)) * S * FD;
                const int r0 = i0 + warp * 16 + g, r1 = r0 + 8;
                unsigned qa[FD / 16][4];
                #pragma unroll
                for (int kk = 0; kk < FD / 16; kk++) {
                    int c = kk * 16 + 2 * t4;
                    qa[kk][0] = r0 < T ? fb_word(qb + (long long) r0 * FD + c) : 0u;
                    qa[kk][1] = r1 < T ? fb_word(qb + (long long) r1 * FD + c) : 0u;
                    qa[kk][2] = r0 < T ? fb_word(qb + (long long) r0 * FD + c + 8) : 0u;
                    qa[kk][3] = r1 < T ? fb_word(qb + (long long) r1 * FD + c + 8) : 0u;
                }
                int last = i0 + 63 < T ? i0 + 63 : T - 1;
                int end = fb_end(last, T, S, causal), start = fb_start(i0, T, S, causal, window);
                float m0 = FB_NEG_INF, m1 = FB_NEG_INF, l0 = 0.f, l1 = 0.f;
                for (int j0 = start; j0 < end; j0 += BK) {
                    __syncthreads();
                    fb_tile(ks, kb, j0, BK, S, FD);
                    __syncthreads();
                    float s[BK / 8][4];
                    #pragma unroll
                    for (int n = 0; n < BK / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
                    #pragma unroll
                    for (int kk = 0; kk < FD / 16; kk += 2)
                        #pragma unroll
                        for (int n = 0; n < BK / 8; n++) {
                            unsigned kf[4];
                            fb_ldsm4(kf, &ks[n * 8 + (lane & 7)][kk * 16 + (lane >> 3) * 8]);
                            fb_mma(s[n], qa[kk], kf[0], kf[1]);
                            fb_mma(s[n], qa[kk + 1], kf[2], kf[3]);
                        }
                    float mx0 = FB_NEG_INF, mx1 = FB_NEG_INF;
                    #pragma unroll
                    for (int n = 0; n < BK / 8; n++)
                        #pragma unroll
                        for (int x = 0; x < 4; x++) {
                            int j = j0 + n * 8 + 2 * t4 + (x & 1);
                            float sc = fb_sees(x < 2 ? r0 : r1, j, T, S, causal, window) ? fa_score(s[n][x], scale, softcap) : FB_NEG_INF;
                            s[n][x] = sc;
                            if (x < 2) mx0 = fmaxf(mx0, sc); else mx1 = fmaxf(mx1, sc);
                        }
                    #pragma unroll
                    for (int w = 1; w < 4; w <<= 1) {
                        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, w));
                        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, w));
                    }
                    float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
                    float u0 = n0 == FB_NEG_INF ? 0.f : n0, u1 = n1 == FB_NEG_INF ? 0.f : n1;
                    l0 = m0 == FB_NEG_INF ? 0.f : l0 * __expf(m0 - u0);
                    l1 = m1 == FB_NEG_INF ? 0.f : l1 * __expf(m1 - u1);
                    #pragma unroll
                    for (int n = 0; n < BK / 8; n++) { l0 += __expf(s[n][0] - u0) + __expf(s[n][1] - u0); l1 += __expf(s[n][2] - u1) + __expf(s[n][3] - u1); }
                    m0 = n0; m1 = n1;
                }
                #pragma unroll
                for (int w = 1; w < 4; w <<= 1) {
                    l0 += __shfl_xor_sync(0xffffffffu, l0, w);
                    l1 += __shfl_xor_sync(0xffffffffu, l1, w);
                }
                if (t4 == 0 && r0 < T) stats[(bh * T + r0) * 2] = m0 + logf(l0);
                if (t4 == 0 && r1 < T) stats[(bh * T + r1) * 2] = m1 + logf(l1);
                for (int r = 0; r < 16; r++) {
                    int i = i0 + warp * 16 + r;
                    if (i >= T) break;
                    const long long t = (((long long) b * T + i) * Hq + h) * FD;
                    float d = 0.f;
                    for (int c = lane; c < FD; c += 32) d = fmaf(at_f(dout[t + c]), at_f(o[t + c]), d);
                    for (int w = 16; w > 0; w >>= 1) d += __shfl_xor_sync(0xffffffffu, d, w);
                    if (lane == 0) stats[(bh * T + i) * 2 + 1] = d;
                    for (int c = lane; c < FD; c += 32) dq[(bh * T + i) * FD + c] = 0.f;
                }
            }

            // one block: 64 keys (a warp 16) and one query head, every query tile that sees them; the head's part of dk and dv
            extern "C" __global__ void __launch_bounds__(128) fb_mma_main(const FT* q, const FT* k, const FT* v, const FT* dout, const float* stats,
                    float* dq, float* dk, float* dv, int Hq, int Hkv, int T, int S, float scale, int causal, int window, float softcap) {
                GATUN_DEPENDENT_START();
                __shared__ __align__(16) FT ks[BK][LD];
                __shared__ __align__(16) FT vs[BK][LD];
                __shared__ __align__(16) FT qs[BQ][LD];
                __shared__ __align__(16) FT dos[BQ][LD];
                __shared__ __align__(16) FT dss[BK][LDS];   // dS^T: [key][query]
                __shared__ float ls[BQ], dsum[BQ];
                const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t4 = lane & 3;
                const int b = blockIdx.z, h = blockIdx.y, kvh = h / (Hq / Hkv), j0 = blockIdx.x * BK;
                const FT* kb = k + ((long long) b * Hkv + kvh) * S * FD;
                const FT* vb = v + ((long long) b * Hkv + kvh) * S * FD;
                fb_tile(ks, kb, j0, BK, S, FD);
                fb_tile(vs, vb, j0, BK, S, FD);
                const int kr = warp * 16;                          // this warp's keys in the tile
                const int key0 = j0 + kr + g, key1 = key0 + 8;     // a thread's two key rows
                float adk[FD / 8][4], adv[FD / 8][4];
                #pragma unroll
                for (int n = 0; n < FD / 8; n++) adk[n][0] = adk[n][1] = adk[n][2] = adk[n][3] = adv[n][0] = adv[n][1] = adv[n][2] = adv[n][3] = 0.f;
                int lo = fb_qlo(j0, T, S, causal), hi = fb_qhi(j0 + BK - 1, T, S, causal, window);
                lo -= lo % BQ;
                // the dQ product's share of this warp: query rows (warp / WPR) * 16, dims from (warp % WPR) * NT * 8
                const int WPR = 4 / (BQ / 16), NT = FD / 8 / WPR;
                const int qrow = (warp / WPR) * 16, n0 = (warp % WPR) * NT;
                const long long bh = (long long) b * Hq + h;
                for (int i0 = lo; i0 < hi; i0 += BQ) {
                    __syncthreads();
                    fb_tile(qs, q + bh * T * FD, i0, BQ, T, FD);
                    fb_tile(dos, dout + ((long long) b * T * Hq + h) * FD, i0, BQ, T, (long long) Hq * FD);
                    for (int r = threadIdx.x; r < BQ; r += blockDim.x) {
                        bool ok = i0 + r < T;
                        ls[r] = ok ? stats[(bh * T + i0 + r) * 2] : 0.f;
                        dsum[r] = ok ? stats[(bh * T + i0 + r) * 2 + 1] : 0.f;
                    }
                    __syncthreads();
                    // S^T = K Q^T and dP^T = V dO^T: 16 keys x BQ queries a warp
                    float st[BQ / 8][4], dpt[BQ / 8][4];
                    #pragma unroll
                    for (int n = 0; n < BQ / 8; n++) st[n][0] = st[n][1] = st[n][2] = st[n][3] = dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.f;
                    #pragma unroll
                    for (int kk = 0; kk < FD / 16; kk += 2) {
                        unsigned ka0[4], ka1[4], va0[4], va1[4];
                        fb_afrag(ka0, ks, kr, kk, lane); fb_afrag(ka1, ks, kr, kk + 1, lane);
                        fb_afrag(va0, vs, kr, kk, lane); fb_afrag(va1, vs, kr, kk + 1, lane);
                        #pragma unroll
                        for (int n = 0; n < BQ / 8; n++) {
                            unsigned f[4];
                            fb_ldsm4(f, &qs[n * 8 + (lane & 7)][kk * 16 + (lane >> 3) * 8]);
                            fb_mma(st[n], ka0, f[0], f[1]);
                            fb_mma(st[n], ka1, f[2], f[3]);
                            fb_ldsm4(f, &dos[n * 8 + (lane & 7)][kk * 16 + (lane >> 3) * 8]);
                            fb_mma(dpt[n], va0, f[0], f[1]);
                            fb_mma(dpt[n], va1, f[2], f[3]);
                        }
                    }
                    // P^T and dS^T (st holds P, dpt dS), each rounded to the dtype as an operand
                    unsigned pa[BQ / 16][4], sa[BQ / 16][4];
                    #pragma unroll
                    for (int n = 0; n < BQ / 8; n++) {
                        #pragma unroll
                        for (int x = 0; x < 4; x++) {
                            int c = n * 8 + 2 * t4 + (x & 1), i = i0 + c;
                            float p = 0.f, ds = 0.f;
                            if (fb_sees(i, x < 2 ? key0 : key1, T, S, causal, window)) {
                                float sc = fa_score(st[n][x], scale, softcap);
                                p = __expf(sc - ls[c]);
                                ds = p * (dpt[n][x] - dsum[c]);
                                if (softcap > 0.f) ds *= 1.f - (sc / softcap) * (sc / softcap);
                            }
                            st[n][x] = p; dpt[n][x] = ds;
                        }
                        pa[n / 2][(n & 1) * 2] = fb_pack(st[n][0], st[n][1]);
                        pa[n / 2][(n & 1) * 2 + 1] = fb_pack(st[n][2], st[n][3]);
                        sa[n / 2][(n & 1) * 2] = fb_pack(dpt[n][0], dpt[n][1]);
                        sa[n / 2][(n & 1) * 2 + 1] = fb_pack(dpt[n][2], dpt[n][3]);
                        *reinterpret_cast<unsigned*>(&dss[kr + g][n * 8 + 2 * t4]) = sa[n / 2][(n & 1) * 2];
                        *reinterpret_cast<unsigned*>(&dss[kr + g + 8][n * 8 + 2 * t4]) = sa[n / 2][(n & 1) * 2 + 1];
                    }
                    // dV += P^T dO and dK += dS^T Q: the queries are the sums' index
                    #pragma unroll
                    for (int kk = 0; kk < BQ / 16; kk++)
                        #pragma unroll
                        for (int n = 0; n < FD / 8; n += 2) {
                            unsigned f[4];
                            int mi = lane >> 3;
                            fb_ldsm4t(f, &dos[kk * 16 + (mi & 1) * 8 + (lane & 7)][n * 8 + (mi >> 1) * 8]);
                            fb_mma(adv[n], pa[kk], f[0], f[1]);
                            fb_mma(adv[n + 1], pa[kk], f[2], f[3]);
                            fb_ldsm4t(f, &qs[kk * 16 + (mi & 1) * 8 + (lane & 7)][n * 8 + (mi >> 1) * 8]);
                            fb_mma(adk[n], sa[kk], f[0], f[1]);
                            fb_mma(adk[n + 1], sa[kk], f[2], f[3]);
                        }
                    __syncthreads();   // every warp's dS^T in shared memory
                    // dQ (BQ x FD) += dS K over the 64 keys: this warp's rows and dims, added to dq
                    float aq[NT][4];
                    #pragma unroll
                    for (int n = 0; n < NT; n++) aq[n][0] = aq[n][1] = aq[n][2] = aq[n][3] = 0.f;
                    #pragma unroll
                    for (int kk = 0; kk < BK / 16; kk++) {
                        unsigned a[4];
                        int mi = lane >> 3;
                        fb_ldsm4t(a, &dss[kk * 16 + (mi >> 1) * 8 + (lane & 7)][qrow + (mi & 1) * 8]);
                        #pragma unroll
                        for (int n = 0; n < NT; n += 2) {
                            unsigned f[4];
                            fb_ldsm4t(f, &ks[kk * 16 + (mi & 1) * 8 + (lane & 7)][(n0 + n) * 8 + (mi >> 1) * 8]);
                            fb_mma(aq[n], a, f[0], f[1]);
                            fb_mma(aq[n + 1], a, f[2], f[3]);
                        }
                    }
                    const int q0 = i0 + qrow + g, q1 = q0 + 8;
                    #pragma unroll
                    for (int n = 0; n < NT; n++) {
                        int c = (n0 + n) * 8 + 2 * t4;
                        if (q0 < T) { float* p = dq + (bh * T + q0) * FD + c; atomicAdd(p, aq[n][0] * scale); atomicAdd(p + 1, aq[n][1] * scale); }
                        if (q1 < T) { float* p = dq + (bh * T + q1) * FD + c; atomicAdd(p, aq[n][2] * scale); atomicAdd(p + 1, aq[n][3] * scale); }
                    }
                }
                const long long base = bh * S;
                #pragma unroll
                for (int n = 0; n < FD / 8; n++) {
                    int c = n * 8 + 2 * t4;
                    if (key0 < S) {
                        *reinterpret_cast<float2*>(dk + (base + key0) * FD + c) = make_float2(adk[n][0] * scale, adk[n][1] * scale);
                        *reinterpret_cast<float2*>(dv + (base + key0) * FD + c) = make_float2(adv[n][0], adv[n][1]);
                    }
                    if (key1 < S) {
                        *reinterpret_cast<float2*>(dk + (base + key1) * FD + c) = make_float2(adk[n][2] * scale, adk[n][3] * scale);
                        *reinterpret_cast<float2*>(dv + (base + key1) * FD + c) = make_float2(adv[n][2], adv[n][3]);
                    }
                }
            }
            """;

    /** Query rows a tile of the main tensor-core kernel takes at head size {@code d}: its shared memory under 48 KiB. */
    static int queryTile(long d) { return d == 64 ? 64 : 16; }

    /** The program of one (dtype, head size, form): the common header, the constants, the kernels. */
    static String source(DType t, int d) {
        var sb = CudaFlashAttention.header(COMMON, "flash_attention_backward", t, d);
        if (form(t, d).equals("mma")) {
            sb.append("#define BQ ").append(queryTile(d)).append('\n').append(CudaFlashAttention.mmaDefines(t)).append(MMA);
        } else {
            sb.append(t == DType.FLOAT64 ? "#define FA double\n#define FA_FMA fma\n#define FA_MAX fmax\n#define FA_EXP exp\n#define FA_LOG log\n"
                    : "#define FA float\n#define FA_FMA fmaf\n#define FA_MAX fmaxf\n#define FA_EXP expf\n#define FA_LOG logf\n");
            var tiles = tiles(t, d);
            if (tiles.isEmpty()) return sb.append(SIMPLE).toString();
            var x = tiles.get();
            sb.append("#define BR ").append(x.br()).append("\n#define TR ").append(x.tr()).append("\n#define BC ").append(x.bc())
                    .append("\n#define TC ").append(x.tc()).append("\n#define NT ").append(x.threads()).append("\n#define FDP ").append(x.fdp())
                    .append("\n#define LD ").append(x.fdp() + 4).append('\n');
            sb.append(t == DType.FLOAT64
                    ? "__device__ __forceinline__ void FB_LD4(double* x, const double* p) { double2 a = reinterpret_cast<const double2*>(p)[0], "
                      + "b = reinterpret_cast<const double2*>(p)[1]; x[0] = a.x; x[1] = a.y; x[2] = b.x; x[3] = b.y; }\n"
                    : "__device__ __forceinline__ void FB_LD4(float* x, const float* p) { float4 a = *reinterpret_cast<const float4*>(p); "
                      + "x[0] = a.x; x[1] = a.y; x[2] = a.z; x[3] = a.w; }\n");
            sb.append(ROWS);
        }
        return sb.toString();
    }

    /** The kernels of a form, in launch order. */
    static String[] entries(String form) {
        return switch (form) {
            case "mma" -> new String[]{"fb_mma_stats", "fb_mma_main"};
            case "rows" -> new String[]{"fb_rows_dq", "fb_rows_dkv"};
            default -> new String[]{"fb_simple_stats", "fb_simple_dq", "fb_simple_dkv"};
        };
    }

    private final LazyProgram.Compiler compiler;
    private final Map<String, LazyProgram> programs = new HashMap<>();

    CudaFlashAttentionBackward(LazyProgram.Compiler compiler) { this.compiler = compiler; }

    private LazyProgram program(DType t, int d) {
        String name = "gatun_flash_backward_" + t.name().toLowerCase(java.util.Locale.ROOT) + "_" + d + "_" + form(t, d);
        return programs.computeIfAbsent(name, n -> new LazyProgram(compiler, n, source(t, d)));
    }

    /** Compiles the kernels of these operands now (where ranks share a GPU nothing may load mid-session). */
    void loadNow(DType t, long d) { program(t, (int) d).loadNow(entries(form(t, d))); }

    /** The addresses of one call: the inputs q, k, v, o, dout and the outputs dq (float32, f64 for f64), dk, dv, stats. */
    record Buffers(long q, long k, long v, long o, long dout, long dq, long dk, long dv, long stats) {}

    /** One call: q [B, Hq, T, d], k and v [B, Hkv, S, d]; {@code what} names the step in an error. */
    void run(String what, DType t, long[] qShape, long[] kShape, Buffers x, OpAttrs attrs, boolean programmatic, Stream stream) {
        long b = qShape[0], hq = qShape[1], tq = qShape[2], d = qShape[3], hkv = kShape[1], s = kShape[2];
        if (b * hq * tq == 0 || s == 0) return;
        if (Math.ceilDiv(Math.max(tq, s), 4) > Integer.MAX_VALUE || hq > 65_535 || b > 65_535)
            throw new GatunRuntimeException(what + ": " + b + " x " + hq + " heads of " + tq + " queries over " + s
                    + " positions do not fit the GPU kernels' grids (at most 65535 batch entries and heads)");
        String form = form(t, d);
        var program = program(t, (int) d);
        String[] kernels = entries(form);
        Object scale = t == DType.FLOAT64 ? (Object) attrs.real("scale") : (Object) (float) attrs.real("scale");
        Object softcap = t == DType.FLOAT64 ? (Object) attrs.real("softcap") : (Object) (float) attrs.real("softcap");
        int causal = (int) attrs.integer("causal"), window = (int) attrs.integer("window");
        if (form.equals("mma")) {
            var stats = new LaunchConfig(new Dim3((int) Math.ceilDiv(tq, 64), (int) hq, (int) b), Dim3.of(128), 0, stream);
            Programmatic.launch(program.kernel(kernels[0]), programmatic, stats, x.q(), x.k(), x.o(), x.dout(), x.stats(), x.dq(), (int) hq, (int) hkv,
                    (int) tq, (int) s, scale, causal, window, softcap);
            var main = new LaunchConfig(new Dim3((int) Math.ceilDiv(s, 64), (int) hq, (int) b), Dim3.of(128), 0, stream);
            Programmatic.launch(program.kernel(kernels[1]), programmatic, main, x.q(), x.k(), x.v(), x.dout(), x.stats(), x.dq(), x.dk(), x.dv(),
                    (int) hq, (int) hkv, (int) tq, (int) s, scale, causal, window, softcap);
            return;
        }
        if (form.equals("rows")) {
            var tile = tiles(t, d).orElseThrow();
            var queries = new LaunchConfig(new Dim3((int) Math.ceilDiv(tq, tile.br()), (int) hq, (int) b), Dim3.of(tile.threads()), 0, stream);
            Programmatic.launch(program.kernel(kernels[0]), programmatic, queries, x.q(), x.k(), x.v(), x.o(), x.dout(), x.stats(), x.dq(), (int) hq,
                    (int) hkv, (int) tq, (int) s, scale, causal, window, softcap);
            var keys = new LaunchConfig(new Dim3((int) Math.ceilDiv(s, tile.br()), (int) hq, (int) b), Dim3.of(tile.threads()), 0, stream);
            Programmatic.launch(program.kernel(kernels[1]), programmatic, keys, x.q(), x.k(), x.v(), x.dout(), x.stats(), x.dk(), x.dv(), (int) hq,
                    (int) hkv, (int) tq, (int) s, scale, causal, window, softcap);
            return;
        }
        var rows = new LaunchConfig(new Dim3((int) Math.ceilDiv(tq, 4), (int) hq, (int) b), Dim3.of(128), 0, stream);
        Programmatic.launch(program.kernel(kernels[0]), programmatic, rows, x.q(), x.k(), x.o(), x.dout(), x.stats(), (int) hq, (int) hkv,
                (int) tq, (int) s, scale, causal, window, softcap);
        Programmatic.launch(program.kernel(kernels[1]), programmatic, rows, x.q(), x.k(), x.v(), x.dout(), x.stats(), x.dq(), (int) hq, (int) hkv,
                (int) tq, (int) s, scale, causal, window, softcap);
        var keys = new LaunchConfig(new Dim3((int) Math.ceilDiv(s, 4), (int) hq, (int) b), Dim3.of(128), 0, stream);
        Programmatic.launch(program.kernel(kernels[2]), programmatic, keys, x.q(), x.k(), x.v(), x.dout(), x.stats(), x.dk(), x.dv(), (int) hq, (int) hkv,
                (int) tq, (int) s, scale, causal, window, softcap);
    }
}
