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
 * <p><b>A capped grid.</b> The kernels take a grid of fewer blocks than the launch's ({@link Launch#grid}): block i
 * then computes the launch's blocks i, i + grid, ... in turn, each exactly as it would alone (the same sums in the same
 * order, so the same bits), only the first waiting for the kernel before and preloading. A plan launched
 * programmatically caps it ({@code LaunchChoice.Gemv#resident}, the planner's rule: half the registers of a
 * multiprocessor), so that the next kernel of the chain finds room to be resident, and to issue its early loads, while
 * this one still streams; uncapped, gate|up and down filled 512 of the 528 places for blocks of 8 warps on an H200.
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
 * <p><b>Column tables.</b> Both kernels take a table of columns ({@code cols}, null for none): position p of the
 * launch computes column {@code cols[p]} (none where it is negative), so a block may hold any set of columns. A plan's
 * {@code TiledProduct} runs that way: {@link TiledProductCodegen} packs the tiles its epilogues need into blocks, and its
 * kernel calls {@link #DEVICE}'s functions, then the epilogues on the columns each block stored.
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

        /** The same launch over {@code b} blocks (a tiled product's, whose blocks its packing gives). */
        Launch withBlocks(int b) { return new Launch(kernel, b, warps, slices, sharedBytes); }

        /**
         * The grid for at most {@code resident} warps on each of {@code sms} multiprocessors, one block at least (a plan's
         * {@code LaunchChoice.Gemv#resident}; 0: every block at once): the kernels loop over the blocks past it.
         */
        int grid(int sms, int resident) { return resident <= 0 ? blocks : Math.max(1, Math.min(blocks, sms * Math.max(1, resident / warps))); }
    }

    /**
     * The kernels' device code, without entries: the entries below ({@link #SOURCE}) and a tiled product's kernel
     * ({@link TiledProductCodegen}) call {@code gemv_mma<T>} and {@code gemv_fma<T, M>}.
     */
    static final String DEVICE = Programmatic.SOURCE + """
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

            // The column at position p of a launch of n positions: cols[p] where the launch has a table (none where negative),
            // else p itself; -1 past the last position.
            __device__ __forceinline__ long long gv_col(const int* cols, long long p, int n) { return p >= n ? -1 : cols ? (long long) cols[p] : p; }

            // The launch's blocks of positions: n positions in tiles of `columns`, (blockDim.x / 32) / slices tiles a block. A
            // grid of fewer blocks (a plan's `resident` cap: at most that many warps a multiprocessor, so that the next kernel
            // of a programmatic chain is resident beside this one) loops: block i of the grid computes blocks i, i + gridDim.x,
            // ... each exactly as a block of a full grid would (the same sums in the same order); only the first waits.
            __device__ __forceinline__ int gv_blocks(int n, int columns, int slices) {
                return ceil_div_gv(ceil_div_gv(n, columns), (blockDim.x >> 5) / slices);
            }

            #define GV_MMA_UNROLL 4
            #define GV_FMA_UNROLL 2
            #define GV_FMA_COLS 4

            // The block's warps: (blockDim.x / 32) = slices * tiles; warp w works on tile (w % tiles) of the launch's block
            // `block` and k-slice (w / tiles). A k-slice is a run of steps [first, last) of the row (the launch has slices <=
            // steps: none is empty); slices > 1 add their partial sums through shared memory (gv_part: one float per (warp,
            // lane, value)), and the warps of slice 0 store.
            struct GvWarp {
                int warp, lane, tiles, slice, tile, first, last;
                __device__ __forceinline__ GvWarp(int steps, int slices, int block) {
                    warp = threadIdx.x >> 5;
                    lane = threadIdx.x & 31;
                    tiles = (blockDim.x >> 5) / slices;
                    slice = warp / tiles;
                    tile = block * tiles + warp % tiles;
                    first = slice * steps / slices;   // slices of steps / slices steps, rounded down or up
                    last = (slice + 1) * steps / slices;
                }
            };

            // Adds the other slices' partial sums of `count` values a lane into slice 0's; false for the warps of other slices,
            // which then have nothing to store. Every thread of the block must call it (it synchronizes the block); `again`
            // (the same for the whole block): the block added an earlier block's sums, which slice 0 may still be reading.
            template <int count>
            __device__ __forceinline__ bool gv_add_slices(const GvWarp& g, float* v, int slices, bool again) {
                if (slices == 1) return true;
                extern __shared__ float gv_part[];
                if (again) __syncthreads();
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
            // The tile's 8 columns are positions 8 tile .. 8 tile + 7 (see gv_col).
            template <int U>
            __device__ __forceinline__ void gv_mma_load(uint4 (&a)[U], const uint4* wr, int vectors, bool ok, int step, int last, int t) {
                const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
                #pragma unroll
                for (int u = 0; u < U; u++) {
                    const int v = (step + u) * 4 + t;
                    a[u] = ok && step + u < last && v < vectors ? __ldcs(wr + v) : zero;
                }
            }

            // One block of the launch's positions (`block`); `first`: the grid block's first, which waits for the launch before.
            template <typename T>
            __device__ __forceinline__ void gemv_mma_block(const T* __restrict__ x, const T* __restrict__ w, T* y, int n, int k, long long ldc,
                                                           int rows, int slices, int preload, const int* cols, int block, bool first) {
                const int vectors = k / 8;
                const GvWarp g(ceil_div_gv(vectors, 4), slices, block);
                const int gr = g.lane >> 2, t = g.lane & 3;
                const long long col = gv_col(cols, (long long) g.tile * 8 + gr, n);
                const bool okw = col >= 0;
                const uint4* wr = reinterpret_cast<const uint4*>(w) + (okw ? col : 0) * vectors;
                uint4 a[GV_MMA_UNROLL];
                const bool early = preload && first;
                if (early) gv_mma_load<GV_MMA_UNROLL>(a, wr, vectors, okw, g.first, g.last, t);
                if (first) GATUN_DEPENDENT_START();
                const uint4* xr = reinterpret_cast<const uint4*>(x) + (long long) gr * vectors;
                const bool okx = gr < rows;
                const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f}, e[4] = {0.0f, 0.0f, 0.0f, 0.0f};   // two chains of products, added at the end
                for (int step = g.first; step < g.last; step += GV_MMA_UNROLL) {
                    if (!early || step != g.first) gv_mma_load<GV_MMA_UNROLL>(a, wr, vectors, okw, step, g.last, t);
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
                if (!gv_add_slices<2>(g, s, slices, !first)) return;
                const long long c0 = gv_col(cols, (long long) g.tile * 8 + 2 * t, n), c1 = gv_col(cols, (long long) g.tile * 8 + 2 * t + 1, n);
                if (gr < rows && c0 >= 0) y[gr * ldc + c0] = gv_store(s[0], (const T*) nullptr);
                if (gr < rows && c1 >= 0) y[gr * ldc + c1] = gv_store(s[1], (const T*) nullptr);
            }

            template <typename T>
            __device__ void gemv_mma(const T* __restrict__ x, const T* __restrict__ w, T* y, int n, int k, long long ldc, int rows,
                                     int slices, int preload, const int* cols) {
                // the first block apart, then the rest where a plan capped the grid (as one loop, ptxas gave this kernel 76
                // registers, not 60: 3 blocks of 8 warps a multiprocessor, not 4)
                const int blocks = gv_blocks(n, 8, slices);
                if ((int) blockIdx.x < blocks) gemv_mma_block<T>(x, w, y, n, k, ldc, rows, slices, preload, cols, blockIdx.x, true);
                #pragma unroll 1
                for (int b = blockIdx.x + gridDim.x; b < blocks; b += gridDim.x)
                    gemv_mma_block<T>(x, w, y, n, k, ldc, rows, slices, preload, cols, b, false);
            }

            // Any type, CUDA cores: y[r, j] = sum_k x[r, k] w[j, k] for r < rows <= M. A warp's tile is GV_FMA_COLS columns j (positions
            // GV_FMA_COLS tile on, see gv_col); a step is 32 consecutive 16-byte vectors of each of those rows of w (one a lane),
            // and each vector of x loaded serves all GV_FMA_COLS columns. Lanes' sums are added by shuffles.
            // With `preload` (a weight no kernel of the call writes: a graph input), a warp loads its first step of the weight
            // before the wait: launched programmatically (see Programmatic), those loads are in flight while the kernel before
            // it still runs, and its first products start as soon as the wait returns. Everything else is read after the wait.
            // wc[c]: column c's row of w; bit c of ok: whether column c is one.
            template <int C>
            __device__ __forceinline__ void gv_fma_load(uint4 (&a)[GV_FMA_UNROLL][C], const uint4* const (&wc)[C], int ok, int vectors,
                                                        int step, int last, int lane) {
                const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
                #pragma unroll
                for (int u = 0; u < GV_FMA_UNROLL; u++) {
                    const int v = (step + u) * 32 + lane;
                    const bool in = step + u < last && v < vectors;
                    #pragma unroll
                    for (int c = 0; c < C; c++) a[u][c] = in && (ok >> c & 1) ? __ldcs(wc[c] + v) : zero;
                }
            }

            // One block of the launch's positions (`block`); `first`: the grid block's first, which waits for the launch before.
            template <typename T, int M>
            __device__ __forceinline__ void gemv_fma_block(const T* __restrict__ x, const T* __restrict__ w, T* y, int n, int k, long long ldc,
                                                           int rows, int slices, int preload, const int* cols, int block, bool first) {
                constexpr int V = 16 / sizeof(T), C = GV_FMA_COLS;
                const int vectors = k / V;
                const GvWarp g(ceil_div_gv(vectors, 32), slices, block);
                const long long pos = (long long) g.tile * C;   // the tile's first position
                const uint4* wc[C];
                int ok = 0;
                #pragma unroll
                for (int c = 0; c < C; c++) {
                    const long long col = gv_col(cols, pos + c, n);
                    ok |= (col >= 0) << c;
                    wc[c] = reinterpret_cast<const uint4*>(w) + (col >= 0 ? col : 0) * vectors;
                }
                uint4 a[GV_FMA_UNROLL][C];
                const bool early = preload && first;
                if (early) gv_fma_load<C>(a, wc, ok, vectors, g.first, g.last, g.lane);
                if (first) GATUN_DEPENDENT_START();
                const uint4* xv = reinterpret_cast<const uint4*>(x);
                float acc[C * M];
                #pragma unroll
                for (int i = 0; i < C * M; i++) acc[i] = 0.0f;
                for (int step = g.first; step < g.last; step += GV_FMA_UNROLL) {
                    if (!early || step != g.first) gv_fma_load<C>(a, wc, ok, vectors, step, g.last, g.lane);
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
                // every lane holds every sum: lane i keeps value i (column i / M, row i % M)
                float mine[1] = {0.0f};
                #pragma unroll
                for (int i = 0; i < C * M; i++)
                    if (g.lane == i) mine[0] = acc[i];
                if (!gv_add_slices<1>(g, mine, slices, !first)) return;
                const int c = g.lane / M, m = g.lane % M;
                const long long col = g.lane < C * M ? gv_col(cols, pos + c, n) : -1;
                if (m < rows && col >= 0) y[m * ldc + col] = gv_store(mine[0], (const T*) nullptr);
            }

            template <typename T, int M>
            __device__ void gemv_fma(const T* __restrict__ x, const T* __restrict__ w, T* y, int n, int k, long long ldc, int rows,
                                     int slices, int preload, const int* cols) {
                const int blocks = gv_blocks(n, GV_FMA_COLS, slices);
                for (int b = blockIdx.x; b < blocks; b += gridDim.x)   // more than once where a plan capped the grid
                    gemv_fma_block<T, M>(x, w, y, n, k, ldc, rows, slices, preload, cols, b, b == (int) blockIdx.x);
            }
            """;

    /** The plain products' kernels: {@link #DEVICE} and an entry per kernel, every column at its own position. */
    static final String SOURCE = DEVICE + """

            #define GV_PARAMS(T) const T* x, const T* w, T* y, int n, int k, long long ldc, int rows, int slices, int preload
            #define GV_MMA_ENTRY(T, NAME) \\
                extern "C" __global__ void __launch_bounds__(512) gemv_mma_##NAME(GV_PARAMS(T)) { \\
                    gemv_mma<T>(x, w, y, n, k, ldc, rows, slices, preload, nullptr); }
            #define GV_FMA_ENTRY(T, NAME, M) \\
                extern "C" __global__ void __launch_bounds__(512) gemv_fma_##NAME##_##M(GV_PARAMS(T)) { \\
                    gemv_fma<T, M>(x, w, y, n, k, ldc, rows, slices, preload, nullptr); }
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
            default -> throw new IllegalStateException("gemv of " + t + ": it takes float32, float16 or bfloat16");
        };
    }

    /** The smallest of the CUDA-core kernel's row counts (1, 2, 4, 8) that holds {@code m} rows. */
    static int rowsTemplate(int m) { return m <= 1 ? 1 : m <= 2 ? 2 : m <= 4 ? 4 : 8; }

    /**
     * The launch for {@code m} rows by {@code n} columns of length {@code k} on a GPU of {@code sms} multiprocessors:
     * tiles of {@link #MMA_COLS} or {@link #FMA_COLS} columns; k-slices doubled while there are fewer than
     * {@value #WARPS_PER_SM} warps an SM and each slice keeps at least one unrolled loop of steps.
     */
    static Launch launch(DType t, Path path, int m, int n, int k, int sms) { return launch(t, path, m, n, k, sms, 1); }

    /**
     * As {@link #launch(DType, Path, int, int, int, int)} for {@code matrices} products of that shape in one launch
     * (a routed product's pairs, {@link CudaExpertMatmul}: one grid row each): the k-slices fill the GPU with all of
     * their tiles; the launch's blocks are one matrix's.
     */
    static Launch launch(DType t, Path path, int m, int n, int k, int sms, long matrices) {
        // the planner takes a product by GEMV only for the shapes and dtypes it serves: these checks fail on a Gatun bug only
        if (m < 1 || m > MAX_ROWS) throw new IllegalStateException("gemv of " + m + " rows: it takes 1 to " + MAX_ROWS);
        if (n < 1 || k < 1) throw new IllegalStateException("gemv of " + n + " columns of length " + k + ": both must be positive");
        suffix(t);   // refuses any other type before anything else is checked
        if (path == Path.TENSOR_CORES && t == DType.FLOAT32) throw new IllegalStateException("gemv on tensor cores of float32: it takes float16 or bfloat16");
        int vectors = k / (16 / t.byteSize());
        boolean mma = path == Path.TENSOR_CORES;
        long tiles = Math.ceilDiv((long) n, mma ? MMA_COLS : FMA_COLS) * matrices;
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
            throw new IllegalStateException("gemv launch of " + slices + " k-slices in blocks of " + warps + " warps (" + steps + " steps a row)");
        long tiles = Math.ceilDiv((long) n, mma ? MMA_COLS : FMA_COLS);
        long blocks = Math.ceilDiv(tiles, warps / slices);
        return new Launch(kernel(t, path, m), Math.toIntExact(blocks), warps, slices, sharedBytes(warps, slices, mma ? 2 : 1));
    }

    /**
     * The launch of a product whose blocks each hold {@code columns} positions or more in one pass (a tiled product's,
     * {@link TiledProductCodegen}): {@link #launch}'s, its k-slices halved, then its warps doubled, until they do.
     */
    static Launch holding(DType t, Path path, int m, int n, int k, int sms, int columns) {
        Launch l = launch(t, path, m, n, k, sms);
        int slices = l.slices(), warps = l.warps();
        while (columnsPerTile(path) * (warps / slices) < columns) {
            if (slices > 1) slices /= 2;
            else if (warps < 16) warps *= 2;
            else throw new IllegalStateException("gemv blocks of " + columns + " columns: a block holds at most " + 16 * columnsPerTile(path));
        }
        return sliced(t, path, m, n, k, slices, warps);
    }

    /** Columns of one warp's tile on {@code path}. */
    static int columnsPerTile(Path path) { return path == Path.TENSOR_CORES ? MMA_COLS : FMA_COLS; }

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
        launch(launch(t, Path.auto(t, m), m, n, k, sms), m, n, k, ldc, x, w, y, constantWeight, stream);
    }

    /** As {@link #run(DType, int, int, int, int, long, long, long, Stream)}, with the kernel chosen (tests, benchmarks). */
    void run(Path path, DType t, int m, int n, int k, int ldc, long x, long w, long y, Stream stream) {
        if (n == 0) return;
        run(launch(t, path, m, n, k, sms), m, n, k, ldc, x, w, y, stream);
    }

    /** As {@link #run(Path, DType, int, int, int, int, long, long, long, Stream)} with the launch given (benchmarks' sweeps). */
    void run(Launch l, int m, int n, int k, int ldc, long x, long w, long y, Stream stream) { launch(l, m, n, k, ldc, x, w, y, false, stream); }

    /**
     * As {@link #run(Launch, int, int, int, int, long, long, long, Stream)} with the weight's first loop loaded before the
     * wait where {@code preload} and the grid capped at {@code resident} warps a multiprocessor (0: none), as a plan's
     * form may ask (benchmarks comparing forms).
     */
    void run(Launch l, boolean preload, int resident, int m, int n, int k, int ldc, long x, long w, long y, Stream stream) {
        var config = new LaunchConfig(Dim3.of(l.grid(sms, resident)), Dim3.of(32 * l.warps()), l.sharedBytes(), stream);
        Programmatic.launch(program.kernel(l.kernel()), programmatic, config, x, w, y, n, k, (long) ldc, m, l.slices(), preload ? 1 : 0);
    }

    /**
     * In the form the plan chose ({@code LaunchChoice.Gemv}: the kernel, k-slices and warps, preload; made by the
     * planner's {@code LaunchChoices} by the rule of {@link #launch}) and launched programmatically where it says.
     */
    void run(DType t, dev.gatun.planner.LaunchChoice.Gemv form, boolean programmatic, int m, int n, int k, int ldc, long x, long w, long y, Stream stream) {
        if (n == 0) return;
        Launch l = sliced(t, form.tensorCores() ? Path.TENSOR_CORES : Path.CUDA_CORES, m, n, k, form.slices(), form.warps());
        var config = new LaunchConfig(Dim3.of(l.grid(sms, form.resident())), Dim3.of(32 * l.warps()), l.sharedBytes(), stream);
        Programmatic.launch(program.kernel(l.kernel()), programmatic, config, x, w, y, n, k, (long) ldc, m, l.slices(), form.preload() ? 1 : 0);
    }

    private void launch(Launch l, int m, int n, int k, int ldc, long x, long w, long y, boolean constantWeight, Stream stream) {
        Kernel kernel = program.kernel(l.kernel());
        var config = new LaunchConfig(Dim3.of(l.blocks()), Dim3.of(32 * l.warps()), l.sharedBytes(), stream);
        // preload: whether to load the weight's first loop before the wait
        Programmatic.launch(kernel, programmatic, config, x, w, y, n, k, (long) ldc, m, l.slices(), constantWeight ? 1 : 0);
    }
}
