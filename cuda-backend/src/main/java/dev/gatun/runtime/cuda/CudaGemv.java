package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;


/**
 * One to eight rows by a weight that lies transposed, {@code y[r, j] = sum_k x[r, k] w[j, k]}: a decode step's linear
 * layers at batch 1 to 8, whose time is reading the weight once. cuBLAS's general kernels reach 0.9 to 2.4 TB/s on
 * these shapes on an H100 at one row. The kernel this one replaces loaded x again for every vector of the weight: at
 * eight rows the Llama-3.2-1B-shaped decode step took 4.5 ms with it against cuBLAS's 2.7, so it took one row only.
 *
 * <p>Every element of the weight is read from memory exactly once per call, in 16-byte vectors streamed past the
 * caches ({@code ld.global.cs}); x (at most 8 rows, 128 KiB) is read through the read-only cache and each vector of it
 * loaded serves several columns at once, so the weight's stream is what the time is. Two kernels:
 * <ul>
 *   <li>float16 and bfloat16 (tensor cores, {@code gemv_mma_*}, any 1 to 8 rows): a warp's tile is 8 columns (rows of
 *   w) by the 8 rows of x, {@code mma.sync.m16n8k16} with x as A (its rows 8 to 15 zeros), w as B, float32
 *   accumulators. A step is four 16-byte vectors of each of the tile's 8 rows of w: lane (g, t) loads vector t of row g
 *   of w and of x, which go into the fragments unchanged (the sum over k does not care which k sits where in a
 *   fragment, so long as A and B agree). Four steps are unrolled: 4 loads of the weight (64 bytes) in flight a lane,
 *   2 KiB a warp. A step reads as many bytes of x as of the weight at 8 rows, from the read-only cache (rows of x past
 *   {@code rows} are not loaded: zeros in the fragment, their sums never stored).</li>
 *   <li>float32 (CUDA cores, {@code gemv_fma_*_M}, M = 1, 2, 4 or 8, the smallest that holds the rows): a warp's tile
 *   is {@value #FMA_COLS} columns; a step is 32 consecutive 16-byte vectors of each (one a lane), two steps unrolled
 *   (8 loads, 128 bytes, in flight a lane); each vector of x loaded serves the {@value #FMA_COLS} columns. Lanes' sums
 *   are added by shuffles. (The 16-bit types have these kernels too, for comparison; see {@link Path}.)</li>
 * </ul>
 * Short rows of many columns (lm_head: 2048 by 128256) have tiles enough to fill the GPU; few columns of long rows
 * (down_proj: 8192 by 2048, 256 tiles of 8) would leave most SMs idle, so the row is also cut into k-slices, one a
 * warp of the block, whose partial sums are added through shared memory: {@link #launch} doubles the slices (up to
 * {@value #MAX_SLICES}) until there are about {@value #WARPS_PER_SM} warps for each SM or a slice would get less than
 * one unrolled loop. A block is 8 warps, or 16 at 16 slices. Accumulates in float32 and rounds once, as cuBLAS does;
 * the order of the sum differs (tensor cores add within a product in an order and precision of their own, as they do
 * for cuBLAS), so a result may differ from cuBLAS's in the last bits. Where the weight is a graph input and launches
 * are programmatic, both kernels load their first loop of it before they wait for the kernel before them.
 *
 * <p>Measured on an H200 (median of 200 calls, bf16, the weight read from memory; {@code GemvBench}, and a sweep of
 * kernel forms in one command, 2026-11-27): at one row the CUDA-core kernel streams the weight at 4.33 TB/s on lm_head
 * (2048 by 128256; cuBLAS 4.15), 3.24 on gate|up (cuBLAS 3.24), 2.57 on down (cuBLAS 2.14), and is 7 to 14% faster than
 * cuBLAS on the small products (q|k|v 8.4 against 9.0 µs, o 7.3 against 8.5). At 8 rows it falls to half that (the
 * CUDA cores' multiply-adds), and the tensor-core kernel takes over: q|k|v 9.2 µs (cuBLAS 8.9), o 7.8 (8.5), gate|up
 * 23.6 (20.9), down 15.6 (15.4), lm_head 135 (130): within 5% of cuBLAS over a layer, and launched programmatically,
 * which no cuBLAS kernel can be (see {@link CudaExecutable}). So a product is taken here automatically at one row by
 * the CUDA-core kernel, and at 2 to 8 rows of a 16-bit type by the tensor-core kernel ({@link Path#auto}); float32 at
 * more than one row goes to cuBLAS. Both kernels take 1 to {@value #MAX_ROWS} rows when called by
 * {@link #run(Path, DType, int, int, int, int, long, long, long, Stream)} (tests, {@code GemvBench}).
 *
 * <p><b>Gated</b> ({@link #runGated}, a plan's {@code GatedProduct}: a decode layer's gate|up projection and its SwiGLU):
 * w is {@code [2H, k]} and the kernel stores {@code silu(x w_j) * (x w_{H+j})} into {@code [rows, H]}. A tile takes
 * half its columns from gate rows and half from the matching up rows (2 and 2 in the CUDA cores' tile, 4 and 4 in the
 * tensor cores'), so each pair's sums end in one lane (or two lanes a shuffle apart), which rounds both to the type as
 * the product would have stored them and computes the SwiGLU as the generated kernel does ({@code gv_glu}): the same
 * bits as the two launches, one launch fewer, and the product's own output never written.
 *
 * <p><b>Rotary</b> ({@link #runRotary}, a plan's {@code RotaryProduct}: a decode layer's q|k|v projection and the rotary
 * embedding of its query and key heads): the same pairing with a pair a head's halves apart (column j of a head with
 * column half + j), so the lane holding both sums stores both and, for a head of a rotated run, their rotation with
 * the rotary kernel's arithmetic ({@code gv_pair}): the bits of the product and the rotary kernels, one or two launches
 * fewer.
 *
 * <p>Taken where the plan says ({@code Step.Matmul.gemv}, chosen by the planner's {@code ProductKernels} by the same
 * rule, {@link #applies}): {@link #autoRows} rows, no batch; the weight read transposed; rows of a length that is a
 * whole number of 16-byte vectors, at 16-byte aligned addresses. Everything else goes to cuBLAS.
 */
final class CudaGemv {
    static final int MAX_ROWS = 8;
    /** Columns (rows of w) of a warp's tile: the tensor-core kernel's, the CUDA-core kernel's. */
    static final int MMA_COLS = 8, FMA_COLS = 4;
    /** 16-byte vectors of a row that one step of a warp covers: 4 lanes a row (tensor cores), 32 (CUDA cores). */
    static final int MMA_STEP = 4, FMA_STEP = 32;
    /** Steps of a loop unrolled, all their loads issued before the first product (GV_MMA_UNROLL, GV_FMA_UNROLL). */
    static final int MMA_UNROLL = 4, FMA_UNROLL = 2;
    static final int MAX_SLICES = 16, BLOCK_WARPS = 8, WARPS_PER_SM = 16;

    /** Which kernel: the tensor cores' (float16 and bfloat16 only) or the CUDA cores' (every type). */
    enum Path {
        TENSOR_CORES, CUDA_CORES;

        /**
         * The one {@link #run(DType, int, int, int, int, long, long, long, Stream)} takes, the faster one measured: the
         * CUDA cores' at one row, the tensor cores' at 2 to 8 rows of 16-bit types.
         */
        static Path auto(DType t, int m) { return m == 1 || t == DType.FLOAT32 ? CUDA_CORES : TENSOR_CORES; }
    }

    /**
     * A launch: {@code blocks} blocks of {@code warps} warps, each warp one tile of columns and one of {@code slices}
     * k-slices ({@code warps / slices} tiles a block); {@code sharedBytes} for adding the slices' partial sums.
     */
    record Launch(String kernel, int blocks, int warps, int slices, int sharedBytes) {
        int tilesPerBlock() { return warps / slices; }

        /** This launch paired (gated or rotary, see {@link Pairs}): two sums a lane added across slices, a pair's. */
        Launch paired() { return new Launch(kernel, blocks, warps, slices, CudaGemv.sharedBytes(warps, slices, 2)); }
    }

    static final String SOURCE = Programmatic.SOURCE + """
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

            // d += a b: one m16n8k16 tensor-core product, 16-bit inputs, float32 accumulators (PTX's fragment layouts)
            __device__ __forceinline__ void gv_mma(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1, const __half*) {
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            }
            __device__ __forceinline__ void gv_mma(float* d, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0, unsigned b1, const __nv_bfloat16*) {
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
                             : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
            }

            __device__ __forceinline__ int ceil_div_gv(int a, int b) { return (a + b - 1) / b; }

            // A gated product's store: silu(gate) * up of the pair of sums, each first rounded to T as the product would have
            // stored it, silu's result held in float (rounded to T with roundGate, a plan that rounds every op), the product
            // rounded once: the arithmetic of the generated SwiGLU kernel the launch replaces (CudaCodegen's gt_silu), so
            // the bits are the two launches'.
            __device__ __forceinline__ float gv_round(float v, const float*) { return v; }
            __device__ __forceinline__ float gv_round(float v, const __half*) { return __half2float(__float2half_rn(v)); }
            __device__ __forceinline__ float gv_round(float v, const __nv_bfloat16*) { return __bfloat162float(__float2bfloat16_rn(v)); }
            __device__ __forceinline__ float gv_sigmoid(float a) { if (a >= 0.0f) return 1.0f / (1.0f + expf(-a)); float e = expf(a); return e / (1.0f + e); }
            template <typename T>
            __device__ __forceinline__ T gv_glu(float gate, float up, int roundGate) {
                const float g = gv_round(gate, (const T*) nullptr), u = gv_round(up, (const T*) nullptr);
                float s = g * gv_sigmoid(g);
                if (roundGate) s = gv_round(s, (const T*) nullptr);
                return gv_store(__fmul_rn(s, u), (const T*) nullptr);
            }

            __device__ __forceinline__ float gv_f(float v) { return v; }
            __device__ __forceinline__ float gv_f(__half v) { return __half2float(v); }
            __device__ __forceinline__ float gv_f(__nv_bfloat16 v) { return __bfloat162float(v); }

            // A paired launch (mode > 0): each output o < n / 2 pairs column c = gv_col(o) of the product with column c + pair,
            // the columns of w taken in blocks of 2 pair (gated: one block, pair = H; rotary: a block a head, pair = half a head).
            // Gated (mode 1): y [rows, H] gets the SwiGLU of the pair. Rotary (mode 2): y [rows, n] gets both columns, and
            // where the pair's head is one of a run's (h[s] <= head < h[s] + nh[s], s < 2), first[s] and second[s] get the
            // head's rotation (RotaryKernel's form, the rotary kernel's arithmetic: each sum rounded to T as the product would
            // have stored it, the multiplications exact to float (__fmul_rn) and rounded to T with roundEach, as CudaCodegen).
            template <typename T> struct GvPairs {
                int mode, pair, roundEach;
                const T* cs; const T* sn;
                T* first[2]; T* second[2]; long long rs[2], hs[2]; int h[2], nh[2];
            };
            __device__ __forceinline__ long long gv_col(long long o, int pair) { return o / pair * 2 * pair + o % pair; }

            template <typename T>
            __device__ __forceinline__ void gv_pair(const GvPairs<T>& p, T* y, long long ldc, int r, long long o, float a, float b) {
                const T* z = nullptr;
                if (p.mode == 1) { y[r * ldc + o] = gv_glu<T>(a, b, p.roundEach); return; }
                const long long c = gv_col(o, p.pair), head = o / p.pair;
                const int e = (int) (o % p.pair);
                const float x1 = gv_round(a, z), x2 = gv_round(b, z);
                y[r * ldc + c] = gv_store(x1, z);
                y[r * ldc + c + p.pair] = gv_store(x2, z);
                #pragma unroll
                for (int s = 0; s < 2; s++) {
                    if (head < p.h[s] || head >= p.h[s] + p.nh[s]) continue;
                    float t0 = __fmul_rn(x1, gv_f(p.cs[e])), t1 = __fmul_rn(x2, gv_f(p.sn[e]));
                    float t3 = __fmul_rn(x2, gv_f(p.cs[p.pair + e])), t4 = __fmul_rn(x1, gv_f(p.sn[p.pair + e]));
                    if (p.roundEach) { t0 = gv_round(t0, z); t1 = gv_round(t1, z); t3 = gv_round(t3, z); t4 = gv_round(t4, z); }
                    const long long at = r * p.rs[s] + (head - p.h[s]) * p.hs[s] + e;
                    p.first[s][at] = gv_store(t0 - t1, z);
                    p.second[s][at] = gv_store(t3 + t4, z);
                }
            }

            #define GV_MMA_UNROLL 4
            #define GV_FMA_UNROLL 2
            #define GV_FMA_COLS 4

            // The block's warps: (blockDim.x / 32) = slices * tiles; warp w works on tile (w % tiles) of the block and k-slice
            // (w / tiles). A k-slice is a run of steps [first, last) of the row (the launch has slices <= steps: none is
            // empty); slices > 1 add their partial sums through shared memory (gv_part: one float per (warp, lane, value)),
            // and the warps of slice 0 store.
            struct GvWarp {
                int warp, lane, tiles, slice, tile, first, last;
                __device__ __forceinline__ GvWarp(int steps, int slices) {
                    warp = threadIdx.x >> 5;
                    lane = threadIdx.x & 31;
                    tiles = (blockDim.x >> 5) / slices;
                    slice = warp / tiles;
                    tile = blockIdx.x * tiles + warp % tiles;
                    first = slice * steps / slices;   // slices of steps / slices steps, rounded down or up
                    last = (slice + 1) * steps / slices;
                }
            };

            // Adds the other slices' partial sums of `count` values a lane into slice 0's; false for the warps of other slices,
            // which then have nothing to store. Every thread of the block must call it (it synchronizes the block).
            template <int count>
            __device__ __forceinline__ bool gv_add_slices(const GvWarp& g, float* v, int slices) {
                if (slices == 1) return true;
                extern __shared__ float gv_part[];
                float* mine = gv_part + ((size_t) g.warp * 32 + g.lane) * count;
                #pragma unroll
                for (int i = 0; i < count; i++) mine[i] = v[i];
                __syncthreads();
                if (g.slice != 0) return false;
                for (int s = 1; s < slices; s++) {
                    const float* other = gv_part + ((size_t) (s * g.tiles + g.warp) * 32 + g.lane) * count;
                    #pragma unroll
                    for (int i = 0; i < count; i++) v[i] += other[i];
                }
                return true;
            }

            // 16-bit types, tensor cores: y[r, j] = sum_k x[r, k] w[j, k] for r < rows <= 8. A warp's tile is 8 columns j (rows of
            // w) by the 8 rows of x: D[16 x 8] += A[16 x 16] B[16 x 8], A = x (its rows 8-15 zeros), B = w^T. A step is 4
            // consecutive 16-byte vectors of every row: lane (g = lane / 4, t = lane % 4) loads vector t of row g of w and of
            // row g of x, and two mma.sync consume them. The sum over k does not depend on which k sits where in a fragment,
            // so each lane's 8 elements are given the fragment positions of its own lane (elements 0-3 to the first product,
            // 4-7 to the second), identically in A and B: the weight goes straight from the 16-byte loads into the tensor
            // cores. (w as A, 16 columns a warp and half a byte of x a byte of w, streamed at 2.3 TB/s where this form
            // streams at 3.9 on lm_head on an H200, the same registers and warps: the 16 rows a warp's loads spread over.)
            // With `preload` (a weight no kernel of the call writes), the first loop's weight loads come before the wait.
            // Paired (see GvPairs; gated: w is [2H, k], y [rows, H] gets silu(x w_j) * (x w_{H+j})): a tile is 4 outputs' first
            // rows of w and their 4 second rows, in the tile's columns 0-3 and 4-7, so lane (g, t < 2) holds the first sums of
            // its two columns and lane (g, t + 2) their second sums, two lanes on.
            template <int U>
            __device__ __forceinline__ void gv_mma_load(uint4 (&a)[U], const uint4* wr, int vectors, bool ok, int step, int last, int t) {
                const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
                #pragma unroll
                for (int u = 0; u < U; u++) {
                    const int v = (step + u) * 4 + t;
                    a[u] = ok && step + u < last && v < vectors ? __ldcs(wr + v) : zero;
                }
            }

            template <typename T>
            __device__ void gemv_mma(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int n, int k, long long ldc, int rows,
                                     int slices, int preload, const GvPairs<T>& p) {
                const int vectors = k / 8;
                const GvWarp g(ceil_div_gv(vectors, 4), slices);
                const int gr = g.lane >> 2, t = g.lane & 3;
                const long long out = (long long) g.tile * 4 + (gr & 3);   // paired: the output this lane's row of w serves
                const long long col = p.mode ? gv_col(out, p.pair) + (gr < 4 ? 0 : p.pair) : (long long) g.tile * 8 + gr;
                const bool okw = p.mode ? out < n / 2 : col < n;
                const uint4* wr = reinterpret_cast<const uint4*>(w) + col * vectors;
                uint4 a[GV_MMA_UNROLL];
                if (preload) gv_mma_load<GV_MMA_UNROLL>(a, wr, vectors, okw, g.first, g.last, t);
                GATUN_DEPENDENT_START();
                const uint4* xr = reinterpret_cast<const uint4*>(x) + (long long) gr * vectors;
                const bool okx = gr < rows;
                const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};   // two chains of products, added at the end
                for (int step = g.first; step < g.last; step += GV_MMA_UNROLL) {
                    if (!preload || step != g.first) gv_mma_load<GV_MMA_UNROLL>(a, wr, vectors, okw, step, g.last, t);
                    uint4 b[GV_MMA_UNROLL];
                    #pragma unroll
                    for (int u = 0; u < GV_MMA_UNROLL; u++) {
                        const int v = (step + u) * 4 + t;
                        b[u] = okx && step + u < g.last && v < vectors ? __ldg(xr + v) : zero;
                    }
                    #pragma unroll
                    for (int u = 0; u < GV_MMA_UNROLL; u++) {
                        gv_mma(d, b[u].x, 0u, b[u].y, 0u, a[u].x, a[u].y, (const T*) nullptr);
                        gv_mma(e, b[u].z, 0u, b[u].w, 0u, a[u].z, a[u].w, (const T*) nullptr);
                    }
                }
                // D: d[0], d[1] at (row g of x; columns 2t, 2t + 1 of the tile); d[2], d[3] are the zero rows' sums
                float s[2] = {d[0] + e[0], d[1] + e[1]};
                if (!gv_add_slices<2>(g, s, slices)) return;
                if (p.mode) {
                    const float b0 = __shfl_down_sync(0xffffffffu, s[0], 2), b1 = __shfl_down_sync(0xffffffffu, s[1], 2);
                    const long long o0 = (long long) g.tile * 4 + 2 * t;
                    if (t < 2 && gr < rows && o0 < n / 2) gv_pair<T>(p, y, ldc, gr, o0, s[0], b0);
                    if (t < 2 && gr < rows && o0 + 1 < n / 2) gv_pair<T>(p, y, ldc, gr, o0 + 1, s[1], b1);
                    return;
                }
                const long long c0 = (long long) g.tile * 8 + 2 * t;
                if (gr < rows && c0 < n) y[gr * ldc + c0] = gv_store(s[0], (const T*) nullptr);
                if (gr < rows && c0 + 1 < n) y[gr * ldc + c0 + 1] = gv_store(s[1], (const T*) nullptr);
            }

            // Any type, CUDA cores: y[r, j] = sum_k x[r, k] w[j, k] for r < rows <= M. A warp's tile is GV_FMA_COLS columns j; a step
            // is 32 consecutive 16-byte vectors of each of those rows of w (one a lane), and each vector of x loaded serves all
            // GV_FMA_COLS columns. Lanes' sums are added by shuffles.
            // With `preload` (a weight no kernel of the call writes: a graph input), a warp loads its first step of the weight
            // before the wait: launched programmatically (see Programmatic), those loads are in flight while the kernel before
            // it still runs, and its first products start as soon as the wait returns. Everything else is read after the wait.
            // The tile's rows of w: columns c < C/2 from w0 on, the others from w1 on (rows next to each other, or paired, see
            // gemv_mma: 2 outputs' first rows and their 2 second rows); bit c of ok: whether column c is a row of w.
            template <int C>
            __device__ __forceinline__ void gv_fma_load(uint4 (&a)[GV_FMA_UNROLL][C], const uint4* w0, const uint4* w1, int ok, int vectors,
                                                        int step, int last, int lane) {
                const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
                #pragma unroll
                for (int u = 0; u < GV_FMA_UNROLL; u++) {
                    const int v = (step + u) * 32 + lane;
                    const bool in = step + u < last && v < vectors;
                    #pragma unroll
                    for (int c = 0; c < C; c++)
                        a[u][c] = in && (ok >> c & 1) ? __ldcs((c < C / 2 ? w0 + (long long) c * vectors : w1 + (long long) (c - C / 2) * vectors) + v) : zero;
                }
            }

            template <typename T, int M>
            __device__ void gemv_fma(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y, int n, int k, long long ldc, int rows,
                                     int slices, int preload, const GvPairs<T>& p) {
                constexpr int V = 16 / sizeof(T), C = GV_FMA_COLS, H = C / 2;
                const int vectors = k / V;
                const GvWarp g(ceil_div_gv(vectors, 32), slices);
                const long long col = (long long) g.tile * C, out = (long long) g.tile * H;   // the tile's first row of w; paired: its first output
                const long long first = p.mode ? gv_col(out, p.pair) : col;
                const uint4* w0 = reinterpret_cast<const uint4*>(w) + first * vectors;
                const uint4* w1 = reinterpret_cast<const uint4*>(w) + (p.mode ? first + p.pair : col + H) * vectors;
                int ok = 0;
                #pragma unroll
                for (int c = 0; c < C; c++) ok |= (p.mode ? out + c % H < n / 2 : col + c < n) << c;
                uint4 a[GV_FMA_UNROLL][C];
                if (preload) gv_fma_load<C>(a, w0, w1, ok, vectors, g.first, g.last, g.lane);
                GATUN_DEPENDENT_START();
                const uint4* xv = reinterpret_cast<const uint4*>(x);
                float acc[C * M];
                #pragma unroll
                for (int i = 0; i < C * M; i++) acc[i] = 0.0f;
                for (int step = g.first; step < g.last; step += GV_FMA_UNROLL) {
                    if (!preload || step != g.first) gv_fma_load<C>(a, w0, w1, ok, vectors, step, g.last, g.lane);
                    #pragma unroll
                    for (int u = 0; u < GV_FMA_UNROLL; u++) {
                        const int v = (step + u) * 32 + g.lane;
                        if (step + u >= g.last || v >= vectors) break;
                        float wf[C][V];
                        #pragma unroll
                        for (int c = 0; c < C; c++) gv_unpack(a[u][c], (const T*) nullptr, wf[c]);
                        #pragma unroll
                        for (int m = 0; m < M; m++) {
                            if (m >= rows) break;
                            float xf[V];
                            gv_unpack(__ldg(xv + (long long) m * vectors + v), (const T*) nullptr, xf);
                            #pragma unroll
                            for (int c = 0; c < C; c++)
                                #pragma unroll
                                for (int e = 0; e < V; e++) acc[c * M + m] = fmaf(xf[e], wf[c][e], acc[c * M + m]);
                        }
                    }
                }
                #pragma unroll
                for (int i = 0; i < C * M; i++)
                    #pragma unroll
                    for (int d = 16; d > 0; d >>= 1) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], d);
                // every lane holds every sum: lane i keeps value i (paired: lane i < H M keeps first sum i and its second, i + H M)
                float mine[2] = {0.0f, 0.0f};
                #pragma unroll
                for (int i = 0; i < C * M; i++)
                    if (g.lane == i) {
                        mine[0] = acc[i];
                        if (i < H * M) mine[1] = acc[(i + H * M) % (C * M)];   // (the modulo keeps the unrolled index in range)
                    }
                if (!(p.mode ? gv_add_slices<2>(g, mine, slices) : gv_add_slices<1>(g, mine, slices))) return;
                const int c = g.lane / M, m = g.lane % M;
                if (p.mode) {
                    if (g.lane < H * M && m < rows && out + c < n / 2) gv_pair<T>(p, y, ldc, m, out + c, mine[0], mine[1]);
                } else if (g.lane < C * M && m < rows && col + c < n) {
                    y[m * ldc + col + c] = gv_store(mine[0], (const T*) nullptr);
                }
            }

            // every entry's arguments: the product's, then the pairing's (GvPairs: mode, pair, roundEach, the tables, two runs)
            #define GV_PARAMS(T) const T* x, const T* w, T* y, int n, int k, long long ldc, int rows, int slices, int preload, int mode, \\
                    int pair, int roundEach, const T* cs, const T* sn, T* f0, T* s0, long long rs0, long long hs0, int h0, int nh0, T* f1, \\
                    T* s1, long long rs1, long long hs1, int h1, int nh1
            #define GV_PAIRS(T) const GvPairs<T> p = {mode, pair, roundEach, cs, sn, {f0, f1}, {s0, s1}, {rs0, rs1}, {hs0, hs1}, {h0, h1}, {nh0, nh1}};
            #define GV_MMA_ENTRY(T, NAME) \\
                extern "C" __global__ void __launch_bounds__(512) gemv_mma_##NAME(GV_PARAMS(T)) { \\
                    GV_PAIRS(T) gemv_mma<T>(x, w, y, n, k, ldc, rows, slices, preload, p); }
            #define GV_FMA_ENTRY(T, NAME, M) \\
                extern "C" __global__ void __launch_bounds__(512) gemv_fma_##NAME##_##M(GV_PARAMS(T)) { \\
                    GV_PAIRS(T) gemv_fma<T, M>(x, w, y, n, k, ldc, rows, slices, preload, p); }
            #define GV_FMA_ENTRIES(T, NAME) GV_FMA_ENTRY(T, NAME, 1) GV_FMA_ENTRY(T, NAME, 2) GV_FMA_ENTRY(T, NAME, 4) GV_FMA_ENTRY(T, NAME, 8)
            GV_MMA_ENTRY(__half, f16)
            GV_MMA_ENTRY(__nv_bfloat16, bf16)
            GV_FMA_ENTRIES(float, f32)
            GV_FMA_ENTRIES(__half, f16)
            GV_FMA_ENTRIES(__nv_bfloat16, bf16)
            """;

    private final LazyProgram program;
    private final int sms;
    private final boolean programmatic;

    /** {@code sms}: the device's multiprocessors, which {@link #launch} fills. */
    CudaGemv(LazyProgram.Compiler compiler, int sms) { this(compiler, sms, false); }

    /** With {@code programmatic}, every launch is a programmatic dependent launch (see {@link Programmatic}). */
    CudaGemv(LazyProgram.Compiler compiler, int sms, boolean programmatic) {
        this.programmatic = programmatic;
        this.program = new LazyProgram(compiler, "gatun_gemv", SOURCE);
        this.sms = Math.max(1, sms);
    }

    /** Whether a product of {@code m} rows of length {@code k} of {@code t}, at these addresses, is one taken here automatically. */
    static boolean applies(DType t, boolean transA, boolean transB, long batches, int m, int k, long x, long w, long y) {
        if (batches != 1 || transA || !transB || m < 1 || m > autoRows(t) || k < 1) return false;
        int perVector = 16 / t.byteSize();
        return k % perVector == 0 && ((x | w) & 15) == 0 && (y & (t.byteSize() - 1)) == 0;
    }

    /**
     * The most rows a product of {@code t} is taken here automatically: 8 of the 16-bit types (the tensor cores'
     * kernel), one of float32 (more go to cuBLAS: the CUDA-core kernel is slower there), none of any other type.
     */
    static int autoRows(DType t) {
        return switch (t) {
            case FLOAT16, BFLOAT16 -> MAX_ROWS;
            case FLOAT32 -> 1;
            default -> 0;
        };
    }

    /** Whether no kernel of a call writes {@code w}: a graph input or a constant, whose first step may be loaded before the wait. */
    static boolean constantDuringCall(dev.gatun.planner.PlanBuffer w) {
        var kind = w.storage().kind();
        return kind == dev.gatun.planner.PlanBuffer.Kind.INPUT || kind == dev.gatun.planner.PlanBuffer.Kind.CONSTANT;
    }

    private static String suffix(DType t) {
        return switch (t) {
            case FLOAT32 -> "f32";
            case FLOAT16 -> "f16";
            case BFLOAT16 -> "bf16";
            default -> throw new IllegalArgumentException("gemv of " + t + ": it takes float32, float16 or bfloat16");
        };
    }

    /** The smallest of the CUDA-core kernel's row counts (1, 2, 4, 8) that holds {@code m} rows. */
    static int rowsTemplate(int m) { return m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : 8; }

    /**
     * The launch for {@code m} rows by {@code n} columns of length {@code k} on a GPU of {@code sms} multiprocessors:
     * tiles of {@link #MMA_COLS} or {@link #FMA_COLS} columns; k-slices doubled while there are fewer than
     * {@value #WARPS_PER_SM} warps an SM and each slice keeps at least one unrolled loop of steps.
     */
    static Launch launch(DType t, Path path, int m, int n, int k, int sms) {
        if (m < 1 || m > MAX_ROWS) throw new IllegalArgumentException("gemv of " + m + " rows: it takes 1 to " + MAX_ROWS);
        if (n < 1 || k < 1) throw new IllegalArgumentException("gemv of " + n + " columns of length " + k + ": both must be positive");
        suffix(t);   // refuses any other type before anything else is checked
        if (path == Path.TENSOR_CORES && t == DType.FLOAT32) throw new IllegalArgumentException("gemv on tensor cores of float32: it takes float16 or bfloat16");
        int vectors = k / (16 / t.byteSize());
        boolean mma = path == Path.TENSOR_CORES;
        long tiles = Math.ceilDiv((long) n, mma ? MMA_COLS : FMA_COLS);
        int steps = Math.ceilDiv(vectors, mma ? MMA_STEP : FMA_STEP), unroll = mma ? MMA_UNROLL : FMA_UNROLL;
        int slices = 1;
        while (slices < MAX_SLICES && tiles * slices < (long) WARPS_PER_SM * sms && steps / (2 * slices) >= unroll) slices *= 2;
        return sliced(t, path, m, n, k, slices, Math.max(BLOCK_WARPS, slices));
    }

    /**
     * The launch of {@code path}'s kernel with {@code slices} k-slices and blocks of {@code warps} warps (a multiple
     * of the slices, at most 16: the kernels are built for 512 threads); {@link #launch} chooses them, benchmarks sweep them.
     */
    static Launch sliced(DType t, Path path, int m, int n, int k, int slices, int warps) {
        boolean mma = path == Path.TENSOR_CORES;
        int steps = Math.ceilDiv(k / (16 / t.byteSize()), mma ? MMA_STEP : FMA_STEP);
        if (slices < 1 || slices > steps || warps % slices != 0 || warps > 16)
            throw new IllegalArgumentException("gemv launch of " + slices + " k-slices in blocks of " + warps + " warps (" + steps + " steps a row)");
        long tiles = Math.ceilDiv((long) n, mma ? MMA_COLS : FMA_COLS);
        long blocks = Math.ceilDiv(tiles, warps / slices);
        return new Launch(kernel(t, path, m), Math.toIntExact(blocks), warps, slices, sharedBytes(warps, slices, mma ? 2 : 1));
    }

    /** Shared memory for adding the k-slices' partial sums: {@code sums} floats a lane of every warp, none unsliced. */
    static int sharedBytes(int warps, int slices, int sums) { return slices == 1 ? 0 : warps * 32 * sums * Float.BYTES; }

    /** The kernel of {@code path} for {@code m} rows of {@code t}. */
    static String kernel(DType t, Path path, int m) {
        return path == Path.TENSOR_CORES ? "gemv_mma_" + suffix(t) : "gemv_fma_" + suffix(t) + "_" + rowsTemplate(m);
    }

    /** Loads now every kernel a product may be given automatically (see {@link LazyProgram#loadNow}). */
    void loadNow() {
        var names = new java.util.LinkedHashSet<String>();
        for (DType t : java.util.List.of(DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16))
            for (int m = 1; m <= autoRows(t); m++) names.add(kernel(t, Path.auto(t, m), m));
        program.loadNow(names.toArray(String[]::new));
    }

    /**
     * {@code y[i, j] = sum_p x[i, p] w[j, p]} for {@code m} rows (1 to {@link #MAX_ROWS}), {@code n} columns; x's rows
     * {@code k} elements apart, y's {@code ldc}. The kernel of {@link Path#auto}.
     */
    void run(DType t, int m, int n, int k, int ldc, long x, long w, long y, Stream stream) { run(t, m, n, k, ldc, x, w, y, false, stream); }

    /**
     * As {@link #run(DType, int, int, int, int, long, long, long, Stream)}; {@code constantWeight}: no kernel of the call
     * writes w (a graph input), so a programmatic launch loads its first step before it waits for the kernel before it.
     */
    void run(DType t, int m, int n, int k, int ldc, long x, long w, long y, boolean constantWeight, Stream stream) {
        if (n == 0) return;
        launch(launch(t, Path.auto(t, m), m, n, k, sms), m, n, k, ldc, x, w, y, constantWeight, Pairs.PLAIN, stream);
    }

    /** As {@link #run(DType, int, int, int, int, long, long, long, Stream)}, with the kernel chosen (tests, benchmarks). */
    void run(Path path, DType t, int m, int n, int k, int ldc, long x, long w, long y, Stream stream) {
        if (n == 0) return;
        run(launch(t, path, m, n, k, sms), m, n, k, ldc, x, w, y, stream);
    }

    /** As {@link #run(Path, DType, int, int, int, int, long, long, long, Stream)} with the launch given (benchmarks' sweeps). */
    void run(Launch l, int m, int n, int k, int ldc, long x, long w, long y, Stream stream) { launch(l, m, n, k, ldc, x, w, y, false, Pairs.PLAIN, stream); }

    /**
     * A gated product: {@code out[i, j] = silu(sum_p x[i, p] w[j, p]) * sum_p x[i, p] w[h + j, p]} for {@code m} rows,
     * {@code j < h}, w of {@code 2h} rows of length {@code k}, out's rows {@code h} apart; each sum rounded to {@code t}
     * first, silu's result too where {@code roundGate} (see {@code gv_glu}). The kernel of {@link Path#auto}.
     */
    void runGated(DType t, int m, int h, int k, long x, long w, long out, boolean roundGate, boolean constantWeight, Stream stream) {
        if (h == 0) return;
        launch(launch(t, Path.auto(t, m), m, 2 * h, k, sms).paired(), m, 2 * h, k, h, x, w, out, constantWeight, Pairs.gated(h, roundGate), stream);
    }

    /**
     * A rotary product: {@code y[i, j] = sum_p x[i, p] w[j, p]} for {@code m} rows and {@code n} columns in heads of
     * {@code 2 half}, y's rows {@code n} apart, and each run's heads rotated (see {@link Pairs#rotary}). The kernel of
     * {@link Path#auto}.
     */
    void runRotary(DType t, int m, int n, int k, long x, long w, long y, Pairs rotary, boolean constantWeight, Stream stream) {
        if (n == 0) return;
        if (rotary.mode() != Pairs.ROTARY || n % (2 * rotary.pair()) != 0) throw new IllegalArgumentException("a rotary product of " + n + " columns: " + rotary);
        launch(launch(t, Path.auto(t, m), m, n, k, sms).paired(), m, n, k, n, x, w, y, constantWeight, rotary, stream);
    }

    /**
     * A paired launch's arguments (GvPairs in the source): none; gated (the SwiGLU of column j and column {@code pair +
     * j}); or rotary, each column of a head stored with the one {@code pair} (half a head) on, and the heads of one or
     * two {@link Run}s rotated by the tables at {@code cos} and {@code sin} (device addresses, {@code 2 pair} elements),
     * each multiplication rounded to the type where {@code roundEach}.
     */
    record Pairs(int mode, int pair, boolean roundEach, long cos, long sin, java.util.List<Run> runs) {
        static final int NONE = 0, GATED = 1, ROTARY = 2;
        static final Pairs PLAIN = new Pairs(NONE, 0, false, 0, 0, java.util.List.of());

        Pairs {
            runs = java.util.List.copyOf(runs);
            if (runs.size() > 2) throw new IllegalArgumentException("a rotary product of " + runs.size() + " runs of heads: it takes 1 or 2");
            if (mode != NONE && (pair < 1 || mode == ROTARY && (pair % 4 != 0 || runs.isEmpty())))
                throw new IllegalArgumentException("a paired launch " + mode + " of pairs " + pair + " apart and " + runs.size() + " runs");
        }

        static Pairs gated(int h, boolean roundGate) { return new Pairs(GATED, h, roundGate, 0, 0, java.util.List.of()); }

        static Pairs rotary(int half, boolean roundEach, long cos, long sin, java.util.List<Run> runs) { return new Pairs(ROTARY, half, roundEach, cos, sin, runs); }

        /** The kernel's arguments from {@code mode} on. */
        Object[] arguments() {
            var a = new java.util.ArrayList<Object>(java.util.List.of(mode, pair, roundEach ? 1 : 0, cos, sin));
            for (int i = 0; i < 2; i++) {
                Run r = i < runs.size() ? runs.get(i) : new Run(0, 0, 0, 0, 0, 0);
                a.addAll(java.util.List.of(r.first(), r.second(), r.rowStride(), r.headStride(), r.firstHead(), r.heads()));
            }
            return a.toArray();
        }
    }

    /**
     * A run of {@code heads} heads from head {@code firstHead} on, rotated: the first halves' rotation at {@code first}
     * and the second halves' at {@code second} (device addresses), element e of head h of row r at {@code r rowStride + (h
     * - firstHead) headStride + e} of each.
     */
    record Run(long first, long second, long rowStride, long headStride, int firstHead, int heads) {}

    private void launch(Launch l, int m, int n, int k, int ldc, long x, long w, long y, boolean constantWeight, Pairs pairs, Stream stream) {
        Kernel kernel = program.kernel(l.kernel());
        var config = new LaunchConfig(Dim3.of(l.blocks()), Dim3.of(32 * l.warps()), l.sharedBytes(), stream);
        // preload: whether to load the weight's first loop before the wait; then the pairing's arguments
        var args = new java.util.ArrayList<Object>(java.util.List.of(x, w, y, n, k, (long) ldc, m, l.slices(), constantWeight ? 1 : 0));
        args.addAll(java.util.Arrays.asList(pairs.arguments()));
        Programmatic.launch(kernel, programmatic, config, args.toArray());
    }
}
