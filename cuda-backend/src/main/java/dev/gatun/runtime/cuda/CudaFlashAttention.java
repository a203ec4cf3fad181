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
 * {@code flash_attention} ({@link dev.gatun.ir.ops.FlashAttention}) on the GPU, in one of two kernels that the
 * operands' dtype and head size alone select ({@link #form}), as a dtype selects any kernel's instantiation:
 * <ul>
 *   <li><b>mma</b>, for bf16 and f16 with a head size of 64 or 128: flash attention 2's loop on the tensor cores. A
 *   block takes 64 query rows of one head (a warp 16) in two groups of four warps, which walk alternate key-value tiles
 *   (32 positions at head size 64, 16 at 128) of the positions the rows may see (none past the causal bound, none
 *   before the window): twice the warps a row's work would have alone, the two partial softmaxes joined at the end.
 *   Each group copies its next tile into shared memory ({@code cp.async}) while it computes on the current one, reads
 *   the keys and the transposed values with {@code ldmatrix}, computes the scores with {@code mma.sync m16n8k16}
 *   (float32 sums), keeps each row's running maximum and sum, and feeds the probabilities, rounded to the dtype, back
 *   as the next product's operand straight from the registers that hold them.</li>
 *   <li><b>rows</b>, for every other case (float32, float64, other head sizes to 256): a warp a query row, a lane a key
 *   of the tile for the scores and a group of the head's elements for the weighted values, all in float32 (in double
 *   for float64, the scale and soft cap passed as doubles: an f64 graph, a training step's say, keeps its precision).</li>
 * </ul>
 * Each (dtype, head size, form) is one small NVRTC program, compiled once when a plan first needs it.
 */
final class CudaFlashAttention {
    /** The kernel a call of this dtype and head size takes: "mma" or "rows". */
    static String form(DType t, long d) {
        return (t == DType.BFLOAT16 || t == DType.FLOAT16) && (d == 64 || d == 128) ? "mma" : "rows";
    }

    /**
     * The device helpers the forward and backward kernels share: -inf, the dtype conversions, whether query i sees key
     * j (causal bound and window), a score scaled and soft-capped in float and in double.
     */
    static final String MASK_AND_SCORE = """
            #define FA_NEG_INF __int_as_float(0xff800000)
            """ + CudaAttention.FLOATS + """
            // whether query i of T (at position S - T + i) sees key j
            __device__ __forceinline__ bool fa_sees(int i, int j, int T, int S, int causal, int window) {
                if (j >= S) return false;
                if (!causal) return true;
                int pos = S - T + i;
                return j <= pos && (window == 0 || j > pos - window);
            }
            __device__ __forceinline__ float fa_score(float dot, float scale, float softcap) {
                float s = dot * scale;
                return softcap > 0.f ? softcap * tanhf(s / softcap) : s;
            }
            // float64 (the rows kernel's f64 form, which holds everything in double)
            __device__ __forceinline__ double fa_score(double dot, double scale, double softcap) {
                double s = dot * scale;
                return softcap > 0.0 ? softcap * tanh(s / softcap) : s;
            }
            __device__ __forceinline__ double at_f(double x) { return x; }
            __device__ __forceinline__ void at_store(double* p, double v) { *p = v; }
            """;

    private static final String COMMON = Programmatic.SOURCE + """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>
            """ + MASK_AND_SCORE;

    /**
     * The rows kernel: FT the element type, FD the head size, FR query rows a block (a warp each, in turns), FK keys a
     * tile; FA the type it computes in (float, or double for f64) and FA_FMA, FA_MAX, FA_EXP its functions.
     */
    private static final String ROWS = """
            #define FW 4
            #define FU ((FD + 31) / 32)
            extern "C" __global__ void __launch_bounds__(32 * FW) flash_rows(const FT* q, const FT* k, const FT* v, FT* out, int Hq, int Hkv,
                    int T, int S, FA scale, int causal, int window, FA softcap) {
                GATUN_DEPENDENT_START();
                __shared__ FA qs[FR][FD];
                __shared__ FA ks[FK][FD + 1];
                __shared__ FA vs[FK][FD];
                const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
                const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * FR;
                const int kvh = h / (Hq / Hkv);
                const FT* kb = k + ((long long) b * Hkv + kvh) * S * FD;
                const FT* vb = v + ((long long) b * Hkv + kvh) * S * FD;
                for (int e = threadIdx.x; e < FR * FD; e += blockDim.x) {
                    int r = e / FD, c = e % FD, i = i0 + r;
                    qs[r][c] = i < T ? at_f(q[(((long long) b * Hq + h) * T + i) * FD + c]) : 0.f;
                }
                FA m[FR / FW], l[FR / FW], o[FR / FW][FU];
                for (int r = 0; r < FR / FW; r++) { m[r] = FA_NEG_INF; l[r] = 0.f; for (int u = 0; u < FU; u++) o[r][u] = 0.f; }
                int last = i0 + FR - 1 < T ? i0 + FR - 1 : T - 1;
                int end = causal ? S - T + last + 1 : S;
                int start = causal && window > 0 ? S - T + i0 - window + 1 : 0;
                if (start < 0) start = 0;
                start -= start % FK;
                for (int j0 = start; j0 < end; j0 += FK) {
                    __syncthreads();
                    for (int e = threadIdx.x; e < FK * FD; e += blockDim.x) {
                        int r = e / FD, c = e % FD, j = j0 + r;
                        ks[r][c] = j < S ? at_f(kb[(long long) j * FD + c]) : 0.f;
                        vs[r][c] = j < S ? at_f(vb[(long long) j * FD + c]) : 0.f;
                    }
                    __syncthreads();
                    for (int r = 0; r < FR / FW; r++) {
                        int row = warp + r * FW, i = i0 + row;
                        if (i >= T) continue;
                        FA s = FA_NEG_INF;
                        if (lane < FK && fa_sees(i, j0 + lane, T, S, causal, window)) {
                            FA dot = 0.f;
                            for (int c = 0; c < FD; c++) dot = FA_FMA(qs[row][c], ks[lane][c], dot);
                            s = fa_score(dot, scale, softcap);
                        }
                        FA mx = s;
                        for (int w = 16; w > 0; w >>= 1) mx = FA_MAX(mx, __shfl_xor_sync(0xffffffffu, mx, w));
                        FA mn = FA_MAX(m[r], mx);
                        if (mn == FA_NEG_INF) continue;   // nothing seen yet in this row
                        FA p = s == FA_NEG_INF ? 0.f : FA_EXP(s - mn);
                        FA alpha = m[r] == FA_NEG_INF ? 0.f : FA_EXP(m[r] - mn);
                        FA ps = p;
                        for (int w = 16; w > 0; w >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, w);
                        l[r] = l[r] * alpha + ps;
                        m[r] = mn;
                        for (int u = 0; u < FU; u++) o[r][u] *= alpha;
                        for (int j = 0; j < FK; j++) {
                            FA pj = __shfl_sync(0xffffffffu, p, j);
                            for (int u = 0; u < FU; u++) { int c = lane + 32 * u; if (c < FD) o[r][u] = FA_FMA(pj, vs[j][c], o[r][u]); }
                        }
                    }
                }
                for (int r = 0; r < FR / FW; r++) {
                    int i = i0 + warp + r * FW;
                    if (i >= T) continue;
                    FT* dst = out + (((long long) b * T + i) * Hq + h) * FD;
                    for (int u = 0; u < FU; u++) { int c = lane + 32 * u; if (c < FD) at_store(dst + c, o[r][u] / l[r]); }
                }
            }
            """;

    /** The tensor-core kernel: FT bf16 or f16, FD 64 or 128, MMA the instruction's type suffix, PACK two floats into a word. */
    private static final String MMA = """
            #define BM 64
            #define BN (FD == 64 ? 32 : 16)   // keys a tile: shared memory under 48 KiB at head size 128
            #define PAD 8
            #define LD (FD + PAD)
            __device__ __forceinline__ void fa_mma(float* d, const unsigned* a, unsigned b0, unsigned b1) {
                asm("mma.sync.aligned.m16n8k16.row.col.f32." MMA "." MMA ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
            }
            __device__ __forceinline__ unsigned fa_pack(float lo, float hi) { PACK }
            __device__ __forceinline__ unsigned fa_word(const FT* p) { return *reinterpret_cast<const unsigned*>(p); }
            __device__ __forceinline__ unsigned fa_smem(const void* p) { return (unsigned) __cvta_generic_to_shared(p); }
            // four 8x8 matrices of 16-bit elements: lanes 8m..8m+7 give matrix m's row addresses
            __device__ __forceinline__ void fa_ldsm4(unsigned* r, const void* p) {
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(fa_smem(p)));
            }
            __device__ __forceinline__ void fa_ldsm4t(unsigned* r, const void* p) {
                asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(fa_smem(p)));
            }
            __device__ __forceinline__ void fa_cp16(void* dst, const void* src, bool ok) {
                asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(fa_smem(dst)), "l"(src), "r"(ok ? 16 : 0));
            }
            extern "C" __global__ void __launch_bounds__(256) flash_mma(const FT* q, const FT* k, const FT* v, FT* out, int Hq, int Hkv,
                    int T, int S, float scale, int causal, int window, float softcap) {
                GATUN_DEPENDENT_START();
                __shared__ __align__(16) FT kv[2][2][2][BN][LD];   // [group][buffer][keys, values]
                const int grp = threadIdx.x >> 7, gt = threadIdx.x & 127;
                const int lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, g = lane >> 2, t4 = lane & 3;
                const int b = blockIdx.z, h = blockIdx.y, i0 = (gridDim.x - 1 - blockIdx.x) * BM;
                const int kvh = h / (Hq / Hkv);
                const FT* qb = q + ((long long) b * Hq + h) * T * FD;
                const FT* kb = k + ((long long) b * Hkv + kvh) * S * FD;
                const FT* vb = v + ((long long) b * Hkv + kvh) * S * FD;
                const int r0 = i0 + warp * 16 + g, r1 = r0 + 8;
                int last = i0 + BM - 1 < T ? i0 + BM - 1 : T - 1;
                int end = causal ? S - T + last + 1 : S;
                int start = causal && window > 0 ? S - T + i0 - window + 1 : 0;
                if (start < 0) start = 0;
                start -= start % BN;
                const int vecs = FD / 8;
                // tile j0's keys and values into buffer buf (zeros past S)
                auto load = [&](int j0, int buf) {
                    #pragma unroll
                    for (int e = gt; e < BN * vecs; e += 128) {
                        int r = e / vecs, c = (e % vecs) * 8, j = j0 + r;
                        bool ok = j < S;
                        int jj = ok ? j : 0;
                        fa_cp16(&kv[grp][buf][0][r][c], kb + (long long) jj * FD + c, ok);
                        fa_cp16(&kv[grp][buf][1][r][c], vb + (long long) jj * FD + c, ok);
                    }
                    asm volatile("cp.async.commit_group;");
                };
                start += grp * BN;
                if (start < end) load(start, 0);
                unsigned qa[FD / 16][4];
                #pragma unroll
                for (int kk = 0; kk < FD / 16; kk++) {
                    int c = kk * 16 + 2 * t4;
                    qa[kk][0] = r0 < T ? fa_word(qb + (long long) r0 * FD + c) : 0u;
                    qa[kk][1] = r1 < T ? fa_word(qb + (long long) r1 * FD + c) : 0u;
                    qa[kk][2] = r0 < T ? fa_word(qb + (long long) r0 * FD + c + 8) : 0u;
                    qa[kk][3] = r1 < T ? fa_word(qb + (long long) r1 * FD + c + 8) : 0u;
                }
                float o[FD / 8][4];
                #pragma unroll
                for (int n = 0; n < FD / 8; n++) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
                float m0 = FA_NEG_INF, m1 = FA_NEG_INF, l0 = 0.f, l1 = 0.f;
                int buf = 0;
                for (int j0 = start; j0 < end; j0 += 2 * BN, buf ^= 1) {
                    if (j0 + 2 * BN < end) { load(j0 + 2 * BN, buf ^ 1); asm volatile("cp.async.wait_group 1;" ::: "memory"); }
                    else asm volatile("cp.async.wait_group 0;" ::: "memory");
                    asm volatile("bar.sync %0, 128;" :: "r"(1 + grp) : "memory");
                    float s[BN / 8][4];
                    #pragma unroll
                    for (int n = 0; n < BN / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
                    #pragma unroll
                    for (int kk = 0; kk < FD / 16; kk += 2) {
                        // keys n*8..n*8+7, dims kk*16 .. kk*16+31: four matrices (dims +0, +8, +16, +24); eight independent sums
                        unsigned kf[BN / 8][4];
                        #pragma unroll
                        for (int n = 0; n < BN / 8; n++) fa_ldsm4(kf[n], &kv[grp][buf][0][n * 8 + (lane & 7)][kk * 16 + (lane >> 3) * 8]);
                        #pragma unroll
                        for (int n = 0; n < BN / 8; n++) fa_mma(s[n], qa[kk], kf[n][0], kf[n][1]);
                        #pragma unroll
                        for (int n = 0; n < BN / 8; n++) fa_mma(s[n], qa[kk + 1], kf[n][2], kf[n][3]);
                    }
                    float mx0 = FA_NEG_INF, mx1 = FA_NEG_INF;
                    bool full = !causal || (j0 + BN - 1 <= S - T + i0 + warp * 16 && (window == 0 || j0 > S - T + i0 + warp * 16 + 15 - window)) ;
                    full = full && j0 + BN <= S;
                    #pragma unroll
                    for (int n = 0; n < BN / 8; n++)
                        #pragma unroll
                        for (int x = 0; x < 4; x++) {
                            int i = x < 2 ? r0 : r1, j = j0 + n * 8 + 2 * t4 + (x & 1);
                            float sc = (full || fa_sees(i, j, T, S, causal, window)) ? fa_score(s[n][x], scale, softcap) : FA_NEG_INF;
                            s[n][x] = sc;
                            if (x < 2) mx0 = fmaxf(mx0, sc); else mx1 = fmaxf(mx1, sc);
                        }
                    #pragma unroll
                    for (int w = 1; w < 4; w <<= 1) {
                        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, w));
                        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, w));
                    }
                    float n0 = fmaxf(m0, mx0), n1 = fmaxf(m1, mx1);
                    float u0 = n0 == FA_NEG_INF ? 0.f : n0, u1 = n1 == FA_NEG_INF ? 0.f : n1;
                    float a0 = m0 == FA_NEG_INF ? 0.f : __expf(m0 - u0), a1 = m1 == FA_NEG_INF ? 0.f : __expf(m1 - u1);
                    m0 = n0; m1 = n1;
                    float ps0 = 0.f, ps1 = 0.f;
                    unsigned pa[BN / 16][4];
                    #pragma unroll
                    for (int n = 0; n < BN / 8; n++) {
                        float p0 = __expf(s[n][0] - u0), p1 = __expf(s[n][1] - u0), p2 = __expf(s[n][2] - u1), p3 = __expf(s[n][3] - u1);
                        ps0 += p0 + p1; ps1 += p2 + p3;
                        pa[n / 2][(n & 1) * 2] = fa_pack(p0, p1);
                        pa[n / 2][(n & 1) * 2 + 1] = fa_pack(p2, p3);
                    }
                    l0 = l0 * a0 + ps0; l1 = l1 * a1 + ps1;
                    #pragma unroll
                    for (int n = 0; n < FD / 8; n++) { o[n][0] *= a0; o[n][1] *= a0; o[n][2] *= a1; o[n][3] *= a1; }
                    #pragma unroll
                    for (int kk = 0; kk < BN / 16; kk++)
                        #pragma unroll
                        for (int n = 0; n < FD / 8; n += 2) {
                            // keys kk*16 .. +15, dims n*8 .. n*8+15 transposed: matrices (keys +0, dims +0), (keys +8, dims +0), (keys +0, dims +8), (keys +8, dims +8)
                            unsigned vb4[4];
                            int m = lane >> 3;
                            fa_ldsm4t(vb4, &kv[grp][buf][1][kk * 16 + (m & 1) * 8 + (lane & 7)][n * 8 + (m >> 1) * 8]);
                            fa_mma(o[n], pa[kk], vb4[0], vb4[1]);
                            fa_mma(o[n + 1], pa[kk], vb4[2], vb4[3]);
                        }
                    asm volatile("bar.sync %0, 128;" :: "r"(1 + grp) : "memory");
                }
                // the second group's rows' maxima, sums and outputs join the first's
                __syncthreads();
                float* x = reinterpret_cast<float*>(&kv[0][0][0][0][0]) + gt * (FD / 2 + 4);   // the tiles are done: their memory holds the partials
                if (grp == 1) {
                    x[0] = m0; x[1] = m1; x[2] = l0; x[3] = l1;
                    #pragma unroll
                    for (int n = 0; n < FD / 8; n++) { x[4 + 4 * n] = o[n][0]; x[5 + 4 * n] = o[n][1]; x[6 + 4 * n] = o[n][2]; x[7 + 4 * n] = o[n][3]; }
                }
                __syncthreads();
                if (grp == 1) return;
                {
                    float mb0 = x[0], mb1 = x[1];
                    float n0 = fmaxf(m0, mb0), n1 = fmaxf(m1, mb1);
                    float ea0 = m0 == FA_NEG_INF ? 0.f : __expf(m0 - n0), eb0 = mb0 == FA_NEG_INF ? 0.f : __expf(mb0 - n0);
                    float ea1 = m1 == FA_NEG_INF ? 0.f : __expf(m1 - n1), eb1 = mb1 == FA_NEG_INF ? 0.f : __expf(mb1 - n1);
                    l0 = l0 * ea0 + x[2] * eb0; l1 = l1 * ea1 + x[3] * eb1;
                    #pragma unroll
                    for (int n = 0; n < FD / 8; n++) {
                        o[n][0] = o[n][0] * ea0 + x[4 + 4 * n] * eb0; o[n][1] = o[n][1] * ea0 + x[5 + 4 * n] * eb0;
                        o[n][2] = o[n][2] * ea1 + x[6 + 4 * n] * eb1; o[n][3] = o[n][3] * ea1 + x[7 + 4 * n] * eb1;
                    }
                }
                #pragma unroll
                for (int w = 1; w < 4; w <<= 1) {
                    l0 += __shfl_xor_sync(0xffffffffu, l0, w);
                    l1 += __shfl_xor_sync(0xffffffffu, l1, w);
                }
                #pragma unroll
                for (int n = 0; n < FD / 8; n++) {
                    int c = n * 8 + 2 * t4;
                    if (r0 < T) *reinterpret_cast<unsigned*>(out + (((long long) b * T + r0) * Hq + h) * FD + c) = fa_pack(o[n][0] / l0, o[n][1] / l0);
                    if (r1 < T) *reinterpret_cast<unsigned*>(out + (((long long) b * T + r1) * Hq + h) * FD + c) = fa_pack(o[n][2] / l1, o[n][3] / l1);
                }
            }
            """;

    /**
     * Query rows a block of the rows kernel takes, and keys a tile, for dtype {@code t} and head size {@code d}: its
     * three tiles in shared memory stay under 48 KiB (f64 holds them in double: fewer rows and keys past head size 64).
     */
    static int rowsPerBlock(DType t, long d) {
        if (t == DType.FLOAT64) return d <= 64 ? 16 : d <= 128 ? 8 : 4;
        return d <= 128 ? 16 : 8;
    }

    static int keysPerTile(DType t, long d) {
        if (t == DType.FLOAT64) return d <= 64 ? 32 : d <= 128 ? 16 : 8;
        return d <= 128 ? 32 : 16;
    }

    /** A program's start, for the forward's kernels and the backward's: {@code common}, then FT (the element type) and FD (the head size). */
    static StringBuilder header(String common, String op, DType t, int d) {
        String type = switch (t) {
            case FLOAT32 -> "float";
            case FLOAT16 -> "__half";
            case BFLOAT16 -> "__nv_bfloat16";
            case FLOAT64 -> "double";
            default -> throw new IllegalArgumentException(op + " takes f32, f16, bf16 or f64, not " + t);
        };
        return new StringBuilder(common).append("#define FT ").append(type).append("\n#define FD ").append(d).append('\n');
    }

    /** The tensor-core form's defines: the products' operand type and how two floats pack into its pair. */
    static String mmaDefines(DType t) {
        boolean bf = t == DType.BFLOAT16;
        return "#define MMA \"" + (bf ? "bf16" : "f16") + "\"\n"
                + (bf ? "#define PACK __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); return *reinterpret_cast<unsigned*>(&h);\n"
                      : "#define PACK __half2 h = __floats2half2_rn(lo, hi); return *reinterpret_cast<unsigned*>(&h);\n");
    }

    /** The program of one (dtype, head size, form): the common header, the constants, the kernel. */
    static String source(DType t, int d) {
        var sb = header(COMMON, "flash_attention", t, d);
        if (form(t, d).equals("mma")) {
            sb.append(mmaDefines(t)).append(MMA);
        } else {
            sb.append(t == DType.FLOAT64 ? "#define FA double\n#define FA_FMA fma\n#define FA_MAX fmax\n#define FA_EXP exp\n"
                    : "#define FA float\n#define FA_FMA fmaf\n#define FA_MAX fmaxf\n#define FA_EXP expf\n");
            sb.append("#define FR ").append(rowsPerBlock(t, d)).append("\n#define FK ").append(keysPerTile(t, d)).append('\n').append(ROWS);
        }
        return sb.toString();
    }

    private final LazyProgram.Compiler compiler;
    private final Map<String, LazyProgram> programs = new HashMap<>();

    CudaFlashAttention(LazyProgram.Compiler compiler) { this.compiler = compiler; }

    private dev.gatun.cuda.Kernel kernel(DType t, int d) {
        String form = form(t, d), name = "gatun_flash_" + t.name().toLowerCase(java.util.Locale.ROOT) + "_" + d + "_" + form;
        return programs.computeIfAbsent(name, n -> new LazyProgram(compiler, n, source(t, d))).kernel("flash_" + form);
    }

    /** Compiles the kernel of these operands now (where ranks share a GPU nothing may load mid-session). */
    void loadNow(DType t, long d) { kernel(t, (int) d); }

    /**
     * One call: q [B, Hq, T, d], k and v [B, Hkv, S, d] at these addresses, the result [B, T, Hq, d] at {@code out};
     * {@code what} names the step in an error.
     */
    void run(String what, DType t, long[] qShape, long[] kShape, long q, long k, long v, long out, OpAttrs attrs, boolean programmatic, Stream stream) {
        long b = qShape[0], hq = qShape[1], tq = qShape[2], d = qShape[3], hkv = kShape[1], s = kShape[2];
        if (b * hq * tq == 0) return;
        boolean mma = form(t, d).equals("mma");
        long rows = mma ? 64 : rowsPerBlock(t, d);
        long tiles = Math.ceilDiv(tq, rows);
        if (tiles > Integer.MAX_VALUE || hq > 65_535 || b > 65_535 || s > Integer.MAX_VALUE)
            throw new GatunRuntimeException(what + ": " + b + " x " + hq + " heads of " + tq + " queries over " + s
                    + " positions do not fit the GPU kernel's grid (at most 65535 batch entries and heads)");
        var config = new LaunchConfig(new Dim3((int) tiles, (int) hq, (int) b), Dim3.of(mma ? 256 : 128), 0, stream);
        // the scale and the soft cap in the type the kernel computes in (FA): double for f64, else float
        Object scale = t == DType.FLOAT64 ? (Object) attrs.real("scale") : (Object) (float) attrs.real("scale");
        Object softcap = t == DType.FLOAT64 ? (Object) attrs.real("softcap") : (Object) (float) attrs.real("softcap");
        Programmatic.launch(kernel(t, (int) d), programmatic, config, q, k, v, out, (int) hq, (int) hkv, (int) tq, (int) s,
                scale, (int) attrs.integer("causal"), (int) attrs.integer("window"), softcap);
    }
}
