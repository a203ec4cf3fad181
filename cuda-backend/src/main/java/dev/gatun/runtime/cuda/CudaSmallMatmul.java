package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;

/**
 * Small batched products such as those of a decode step's attention composed of products, {@code C[i] = A[i] B[i]}
 * with A of at most 8 rows (a group of query heads at one position: scores = q K^T, and probabilities times values),
 * both operands row-major as they lie, in a kernel of Gatun's own. (The decoder now attends with one {@code attention}
 * step, {@link CudaAttention}; the measurements below are of the decoder as it was before.) Used where asked ({@code GATUN_SMALL_MATMUL}; by default where the plan's kernels
 * are launched programmatically, {@link Programmatic}): a cuBLAS kernel cannot be, so it would break the chain of
 * overlapped launches twice a layer. Through the decoder on an H100 (decode step at batch 1) programmatic launch
 * with this kernel took 1.474 ms a token, with cuBLAS for these products 1.492, and neither beat plain launches with
 * cuBLAS (1.444); so both stay off by default.
 *
 * <p>The time is reading B once (a layer's keys or values, about 1 MB at 544 positions) and the few round trips to
 * memory a block makes one after the other. The earlier kernel gave a block 32 columns of one product and all of k,
 * one 2-byte load a lane and row: 32 blocks on the values' product ({@code n} = 128), whose warps each walked 34 rows
 * one load at a time. Now a block of {@value #THREADS} threads owns a tile of columns of one product and one slice of k:
 * <ul>
 *   <li>B is read in 16-byte vectors along its rows (8 columns of 16 bits, 4 of float32), one a thread: {@code lanes}
 *   threads side by side cover the tile's width (4 to 32 vectors, at most {@value #COLUMNS} columns), and the block's
 *   {@value #THREADS} / {@code lanes} groups of them take the slice's rows in turn, so a warp reads whole 64- to
 *   512-byte runs of rows. A thread loads 2 or 4 rows at once (the loads of a step issued before its first product)
 *   and keeps the sums of its vector's columns for every row of A (at most 8 by 8 floats); each element of A is one
 *   load that its group's threads share. B is read this way where its rows, its address and its products' distance
 *   are whole 16-byte vectors; anything else takes the same kernel with one column a thread (a warp's 32 lanes on 32
 *   columns of one row).</li>
 *   <li>The groups in a warp are added by shuffles, the block's eight warps through shared memory, in a fixed order.</li>
 *   <li>Where the batch's tiles are fewer than one block an SM, or a thread would have more than two steps of rows, k is
 *   split among blocks ({@code blockIdx.z}; {@link #split} chooses the tile width and the slices, one wave of blocks
 *   at most). Each block then writes its float32 partial tile to a scratch buffer and its thread 0 counts the block
 *   in on the tile's counter (an acquire-release {@code atom.add}, after the barrier that follows the block's writes);
 *   the block that arrives last adds the partials of slice 0, 1, 2, ... (the same order every call, so the result
 *   does not depend on which block came last), stores C and sets the counter back to 0, so that every launch, a
 *   replay of a CUDA graph included, finds the counters at zero. The scratch ({@value #SCRATCH_FLOATS} floats) and
 *   the {@value #COUNTERS} counters belong to this object, zeroed once when it is made; where a split's partials would
 *   not fit, k is not split. Launches of one instance are ordered by their stream, so they share the scratch.</li>
 * </ul>
 * Why not more blocks: measured on an H100 (a CUDA graph of 200 launches, programmatic, B in L2 or read from
 * memory), a split costs about a microsecond (the partials' trip through L2, the count, the last block's loads),
 * a step of rows about half of one, a second wave of blocks more than either, and 256 blocks were slower than 128
 * where both did the same steps. So the cut aims at about one block an SM, in one wave, with one or two steps a thread.
 * On a 132-SM GPU the values' product (4 rows, k = 544, n = 128, 8 products, bf16) is 4 tiles of 32 columns by 4
 * slices of 136 rows, 128 blocks: 3.9 µs (4.6 with B read from memory) where the earlier kernel took 5.9 (10.4) and
 * cuBLAS 2.9 (3.3); at k = 4096, 8 slices of 512 rows, 256 blocks: 6.3 µs (8.6) against 29 (57) and cuBLAS 7.9. The
 * scores (k = 128, n = 544) are 17 tiles of 32 columns, unsplit, 136 blocks: 3.3 µs (3.8), as the earlier kernel, and
 * cuBLAS 2.4 (2.8). Every kernel waits first ({@code GATUN_DEPENDENT_START}) and needs no stack. Accumulates in
 * float32 and rounds once, as cuBLAS's bf16 products with float32 compute do (the order of the sum differs).
 */
final class CudaSmallMatmul implements AutoCloseable {
    static final int MAX_ROWS = 8;
    /** Threads of a block; the widest tile, in columns (the shared memory of the warps' sums is 8 x 8 x this floats). */
    static final int THREADS = 256, COLUMNS = 128;
    /** The narrowest tile of the 16-byte path, in threads (64 bytes of a row). */
    static final int MIN_LANES = 4;
    /** Blocks an SM holds at once (SM_RESIDENT: the registers are capped to fit them); the most slices of k. */
    static final int RESIDENT = 2, MAX_SPLITS = 8;
    /** The scratch of partial tiles (4 MiB) and the counters of tiles, both device memory of this instance. */
    static final int SCRATCH_FLOATS = 1 << 20, COUNTERS = 16384;

    static final String SOURCE = Programmatic.SOURCE + """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>

            #define SM_THREADS 256
            #define SM_WARPS 8
            #define SM_COLUMNS 128
            // blocks an SM holds at once (registers capped to fit them): a launch is at most one wave of them
            #define SM_RESIDENT 2

            __device__ __forceinline__ float sm_load(const float* p) { return *p; }
            __device__ __forceinline__ float sm_load(const __half* p) { return __half2float(*p); }
            __device__ __forceinline__ float sm_load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
            // through the read-only cache (A: the same elements for every thread of a group)
            __device__ __forceinline__ float sm_ldg(const float* p) { return __ldg(p); }
            __device__ __forceinline__ float sm_ldg(const __half* p) { return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p)))); }
            __device__ __forceinline__ float sm_ldg(const __nv_bfloat16* p) { return __uint_as_float((unsigned) __ldg(reinterpret_cast<const unsigned short*>(p)) << 16); }
            __device__ __forceinline__ void sm_store(float* p, float v) { *p = v; }
            __device__ __forceinline__ void sm_store(__half* p, float v) { *p = __float2half_rn(v); }
            __device__ __forceinline__ void sm_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

            // the two 16-bit floats of a 32-bit word, low one first
            __device__ __forceinline__ void sm_pair(const __half*, unsigned w, float& lo, float& hi) {
                lo = __half2float(__ushort_as_half((unsigned short) (w & 0xffffu)));
                hi = __half2float(__ushort_as_half((unsigned short) (w >> 16)));
            }
            __device__ __forceinline__ void sm_pair(const __nv_bfloat16*, unsigned w, float& lo, float& hi) {
                lo = __uint_as_float(w << 16);
                hi = __uint_as_float(w & 0xffff0000u);
            }

            // V consecutive elements at p as floats: one element, or one 16-byte vector (p 16-byte aligned)
            template <typename T>
            __device__ __forceinline__ void sm_load_vec(const T* p, float (&v)[1]) { v[0] = sm_load(p); }
            __device__ __forceinline__ void sm_load_vec(const float* p, float (&v)[4]) {
                const float4 u = __ldg(reinterpret_cast<const float4*>(p));
                v[0] = u.x; v[1] = u.y; v[2] = u.z; v[3] = u.w;
            }
            template <typename T>
            __device__ __forceinline__ void sm_load_vec(const T* p, float (&v)[8]) {
                const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
                sm_pair(p, u.x, v[0], v[1]); sm_pair(p, u.y, v[2], v[3]); sm_pair(p, u.z, v[4], v[5]); sm_pair(p, u.w, v[6], v[7]);
            }

            // C[i] (m x n, rows ldc apart) = A[i] (m x k, row-major) B[i] (k x n, row-major), products sa, sb, sc elements
            // apart. blockIdx.x: a tile of lanes x V columns, blockIdx.y: the product, blockIdx.z: rows [z rows, (z + 1) rows)
            // of k. Thread t: the V columns of vector t % lanes of the tile, rows t / lanes + q (256 / lanes) of the slice.
            // More than one slice: the partial tiles go to scratch, and the last block of a tile to count itself in on its
            // counter adds them in the order of the slices, stores C and sets the counter back to 0.
            template <typename T, int M, bool VEC>
            __device__ void small_matmul(const T* __restrict__ a, const T* __restrict__ b, T* __restrict__ c, int m, int n, int k,
                                         long long sa, long long sb, long long sc, long long ldc, int lanes, int rows,
                                         float* __restrict__ scratch, unsigned* __restrict__ counters) {
                constexpr int V = VEC ? 16 / (int) sizeof(T) : 1;
                __shared__ float part[SM_WARPS][M][SM_COLUMNS];
                __shared__ bool last;
                const int t = threadIdx.x, lane = t & 31, warp = t >> 5, shift = __ffs(lanes) - 1;
                const int v = t & (lanes - 1), g = t >> shift, groups = SM_THREADS >> shift, width = lanes * V;
                const int tile = blockIdx.x, tiles = gridDim.x, split = blockIdx.z, splits = gridDim.z;
                const long long i = blockIdx.y;
                const int j0 = tile * width + v * V;
                const T* A = a + i * sa;
                const T* B = b + i * sb;
                float acc[M][V];
                #pragma unroll
                for (int r = 0; r < M; r++)
                    #pragma unroll
                    for (int x = 0; x < V; x++) acc[r][x] = 0.0f;
                const int p1 = min(k, (split + 1) * rows);
                if (j0 < n) {
                    // U rows a step (step() in Java), every load of the step issued before its first product; a row past
                    // the slice is not loaded and counts as zeros; rows of A past m load row m - 1 (never stored)
                    constexpr int U = M * V <= 32 ? 4 : 2;
                    for (int p = split * rows + g; p < p1; p += U * groups) {
                        float bv[U][V], av[U][M];
                        #pragma unroll
                        for (int u = 0; u < U; u++) {
                            const int q = p + u * groups;
                            #pragma unroll
                            for (int x = 0; x < V; x++) bv[u][x] = 0.0f;
                            #pragma unroll
                            for (int r = 0; r < M; r++) av[u][r] = 0.0f;
                            if (q < p1) {
                                sm_load_vec(B + (long long) q * n + j0, bv[u]);
                                #pragma unroll
                                for (int r = 0; r < M; r++) av[u][r] = sm_ldg(A + (long long) min(r, m - 1) * k + q);
                            }
                        }
                        #pragma unroll
                        for (int u = 0; u < U; u++)
                            #pragma unroll
                            for (int r = 0; r < M; r++)
                                #pragma unroll
                                for (int x = 0; x < V; x++) acc[r][x] = fmaf(av[u][r], bv[u][x], acc[r][x]);
                    }
                }
                // the groups of a warp (lanes apart), then the warps through shared memory
                for (int off = lanes; off < 32; off <<= 1)
                    #pragma unroll
                    for (int r = 0; r < M; r++)
                        if (r < m)
                            #pragma unroll
                            for (int x = 0; x < V; x++) acc[r][x] += __shfl_xor_sync(0xffffffffu, acc[r][x], off);
                if (lane < lanes)
                    #pragma unroll
                    for (int r = 0; r < M; r++)
                        if (r < m)
                            #pragma unroll
                            for (int x = 0; x < V; x++) part[warp][r][v * V + x] = acc[r][x];
                __syncthreads();
                const int elems = m * width;
                T* C = c + i * sc;
                // this product's tile's partials: elems floats a slice
                float* P = scratch + (i * tiles + tile) * (long long) splits * elems;
                for (int e = t; e < elems; e += SM_THREADS) {
                    const int r = e / width, col = e - r * width, j = tile * width + col;
                    float s = 0.0f;
                    #pragma unroll
                    for (int w = 0; w < SM_WARPS; w++) s += part[w][r][col];
                    if (splits == 1) {
                        if (j < n) sm_store(C + r * ldc + j, s);
                    } else {
                        P[(long long) split * elems + e] = s;
                    }
                }
                if (splits == 1) return;
                // the block's partials written (the barrier), thread 0 counts the block in with an acquire-release add:
                // release publishes the partials the barrier ordered before it, acquire (in the last block) orders the
                // reads of the others' partials after their counts (__threadfence around an atomicAdd, sequentially
                // consistent fences, took 0.3 to 0.4 us longer a launch on an H100)
                __syncthreads();
                unsigned* counter = counters + i * tiles + tile;
                if (t == 0) {
                    unsigned before;
                    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counter) : "memory");
                    last = before == (unsigned) splits - 1;
                }
                __syncthreads();
                if (!last) return;
                for (int e = t; e < elems; e += SM_THREADS) {
                    const int r = e / width, col = e - r * width, j = tile * width + col;
                    if (j >= n) continue;
                    // eight slices' loads issued at a time (past the last slice: the last again, not added), added in order
                    float s = 0.0f;
                    for (int q0 = 0; q0 < splits; q0 += 8) {
                        float ps[8];
                        #pragma unroll
                        for (int u = 0; u < 8; u++) ps[u] = __ldcg(P + (long long) min(q0 + u, splits - 1) * elems + e);
                        #pragma unroll
                        for (int u = 0; u < 8; u++)
                            if (q0 + u < splits) s += ps[u];
                    }
                    sm_store(C + r * ldc + j, s);
                }
                if (t == 0) *counter = 0u;
            }

            #define SM_ENTRY(T, NAME, M, VEC, KIND) \\
                extern "C" __global__ void __launch_bounds__(SM_THREADS, SM_RESIDENT) small_matmul##KIND##_##NAME##_##M(const T* a, const T* b, T* c, \\
                        int m, int n, int k, long long sa, long long sb, long long sc, long long ldc, int lanes, int rows, float* scratch, \\
                        unsigned* counters) { GATUN_DEPENDENT_START(); small_matmul<T, M, VEC>(a, b, c, m, n, k, sa, sb, sc, ldc, lanes, rows, scratch, counters); }
            #define SM_ENTRIES(T, NAME) SM_ENTRY(T, NAME, 4, true, _vec) SM_ENTRY(T, NAME, 8, true, _vec) \\
                SM_ENTRY(T, NAME, 4, false, ) SM_ENTRY(T, NAME, 8, false, )
            SM_ENTRIES(float, f32)
            SM_ENTRIES(__half, f16)
            SM_ENTRIES(__nv_bfloat16, bf16)
            """;

    /**
     * How a product is cut among blocks: {@code vector} elements a load (16 bytes' worth, or 1), {@code lanes} threads
     * across a tile (its width: {@code lanes * vector} columns), {@code tiles} tiles across n, k cut into {@code splits}
     * slices of {@code rows} rows (the last one shorter).
     */
    record Split(int vector, int lanes, int tiles, int splits, int rows) {
        int width() { return lanes * vector; }

        /** The threads of a block that take a slice's rows in turn. */
        int groups() { return THREADS / lanes; }

        long blocks(int batches) { return (long) tiles * splits * batches; }

        /** The floats of partial tiles a launch of {@code m} rows writes (none unsplit). */
        long partials(int m, int batches) { return splits == 1 ? 0 : blocks(batches) * m * width(); }
    }

    private final LazyProgram program;
    private final boolean programmatic;
    private final int sms;
    private final SplitScratch split;

    /**
     * The kernels for {@code device}, with their scratch and counters; the counters are zeroed on {@code stream}, the
     * stream every launch of this instance is ordered by (no wait for the whole device: ranks sharing a GPU may be
     * running kernels that wait for this one's rank).
     */
    CudaSmallMatmul(Device device, LazyProgram.Compiler compiler, boolean programmatic, Stream stream) {
        this.program = new LazyProgram(compiler, "gatun_small_matmul", SOURCE);
        this.programmatic = programmatic;
        this.sms = device.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT);
        this.split = SplitScratch.allocate(device, SCRATCH_FLOATS, COUNTERS, stream);
    }

    /** Whether this kernel serves a product: 16- or 32-bit floats, neither operand transposed, 1 to 8 rows, a grid that fits. */
    static boolean applies(DType t, boolean transA, boolean transB, int m, int n, int k, long batches) {
        return (t == DType.FLOAT32 || t == DType.FLOAT16 || t == DType.BFLOAT16) && !transA && !transB && m >= 1 && m <= MAX_ROWS
                && n >= 1 && k >= 1 && batches >= 1 && batches <= 65_535;
    }

    /**
     * Whether B (at byte address {@code b}, products {@code sb} elements apart, rows of {@code n}) is read in 16-byte
     * vectors: its rows, its address and the distance of its products are whole vectors.
     */
    static boolean vectorizable(DType t, int n, long b, long sb) {
        long e = t.byteSize();
        return n * e % 16 == 0 && (b & 15) == 0 && (sb * e & 15) == 0;
    }

    /**
     * The cut of {@code batches} products of {@code m} rows by {@code n} columns of length {@code k} for a GPU of
     * {@code sms} SMs, B read in vectors where {@code vector}. The tile is as wide as the row needs (at most
     * {@value #COLUMNS} columns) and is halved, down to {@value #MIN_LANES} vectors, while the batch's tiles are fewer
     * than one block an SM and the halved ones still fit one wave ({@value #RESIDENT} blocks an SM). k is then split
     * into as many slices as make one block an SM, or as keep each thread at two steps of rows, whichever is more;
     * never past one wave, {@value #MAX_SPLITS} slices (the last block loads all of a tile's partials at once), a row
     * for each group of the block, or what the scratch and counters hold.
     */
    static Split split(DType t, boolean vector, int m, int n, int k, int batches, int sms) {
        if (t != DType.FLOAT32 && t != DType.FLOAT16 && t != DType.BFLOAT16) throw new IllegalArgumentException("small matmul of " + t);
        if (m < 1 || m > MAX_ROWS || n < 1 || k < 1 || batches < 1 || sms < 1)
            throw new IllegalArgumentException("small matmul of " + batches + " products of " + m + " x " + k + " by " + k + " x " + n + " on " + sms + " SMs");
        int v = vector ? 16 / t.byteSize() : 1;
        if (n % v != 0) throw new IllegalArgumentException("rows of " + n + " elements are not whole 16-byte vectors of " + t);
        long units = Math.ceilDiv(n, v), target = sms, wave = (long) RESIDENT * sms;
        int lanes = vector ? Math.min(32, COLUMNS / v) : 32, fewest = vector ? MIN_LANES : 32;
        while (lanes > fewest && lanes / 2 >= units) lanes /= 2;
        while (lanes > fewest && Math.ceilDiv(units, lanes) * batches < target && Math.ceilDiv(units, lanes / 2) * batches <= wave) lanes /= 2;
        long tiles = Math.ceilDiv(units, lanes), tileSets = tiles * batches;
        int groups = THREADS / lanes;
        long splits = 1;
        if (tileSets < wave && tileSets <= COUNTERS) {
            long want = Math.max(target / tileSets, Math.ceilDiv(Math.ceilDiv(k, groups), 2L * step(m, v)));
            long perSplit = tileSets * m * lanes * v;
            splits = Math.min(Math.min(want, wave / tileSets), Math.min(MAX_SPLITS, Math.min(Math.ceilDiv(k, groups), SCRATCH_FLOATS / perSplit)));
            splits = Math.max(1, splits);
        }
        int rows = Math.toIntExact(Math.ceilDiv(k, splits));
        return new Split(v, lanes, Math.toIntExact(tiles), Math.ceilDiv(k, rows), rows);
    }

    /** Rows a thread loads at once (the kernel's U) for {@code m} rows of A and {@code vector} columns a load. */
    static int step(int m, int vector) { return (m <= 4 ? 4 : 8) * vector <= 32 ? 4 : 2; }

    static String kernel(DType t, int m, boolean vector) {
        String suffix = switch (t) {
            case FLOAT32 -> "f32";
            case FLOAT16 -> "f16";
            case BFLOAT16 -> "bf16";
            default -> throw new IllegalArgumentException("small matmul of " + t);
        };
        return "small_matmul" + (vector ? "_vec_" : "_") + suffix + "_" + (m <= 4 ? 4 : 8);
    }

    /** Loads every kernel now (ranks sharing a GPU load nothing mid-session). */
    void loadNow() {
        for (DType t : new DType[]{DType.FLOAT32, DType.FLOAT16, DType.BFLOAT16})
            for (int m : new int[]{4, 8}) for (boolean vector : new boolean[]{true, false}) program.loadNow(kernel(t, m, vector));
    }

    /**
     * {@code batches} products {@code C = A B}: A {@code m x k} and B {@code k x n} row-major at {@code a} and {@code b},
     * C's rows {@code ldc} elements apart at {@code c}; the products' operands {@code sa}, {@code sb}, {@code sc} elements apart.
     */
    void run(DType t, int m, int n, int k, long ldc, long a, long sa, long b, long sb, long c, long sc, int batches, Stream stream) {
        boolean vector = vectorizable(t, n, b, sb);
        Split s = split(t, vector, m, n, k, batches, sms);
        var config = new LaunchConfig(new Dim3(s.tiles(), batches, s.splits()), Dim3.of(THREADS), 0, stream);
        Programmatic.launch(program.kernel(kernel(t, m, vector)), programmatic, config, a, b, c, m, n, k, sa, sb, sc, ldc, s.lanes(), s.rows(),
                split.scratch().address(), split.counters().address());
    }

    /** Frees the scratch and the counters (again: nothing). */
    @Override public void close() { split.close(); }
}
