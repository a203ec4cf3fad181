package dev.gatun.runtime.cuda;

/**
 * CUDA C of the collectives on symmetric memory, compiled once per device with NVRTC.
 *
 * <p>Protocol (docs/DESIGN.md): every block starts with a barrier among the group's ranks on signal pads (per block,
 * per peer 32-bit slots): a {@code st.release.sys} of an increasing epoch into each peer's pad, then an
 * {@code ld.acquire.sys} spin on one's own. One-shot, reduce-scatter and all-gather end with another; two-shot's
 * second barrier follows its last remote access and only local copying comes after it. Either way, when the
 * kernel finishes on a rank, every peer has finished its remote accesses of this collective: what the plan's
 * "ends with a barrier" relies on. Epochs live in device memory and advance inside the kernel, so CUDA-graph
 * replays stay in step. The signal's release (with the block barrier before it) orders the block's earlier
 * writes, so no full system fence is needed. A spin is bounded by {@code %globaltimer}: past the timeout it
 * prints a recognisable message and traps instead of hanging. Data moves in 16-byte vectors, accumulates in
 * float in rank order (bit-identical results on every rank). Grids are capped so every block is resident, and
 * block b handles the same tile of elements on every rank and in every phase.
 */
final class SymmetricKernels {
    private SymmetricKernels() {}

    /** Signal-pad slots per rank and peer: the largest grid a collective may use. */
    static final int MAX_BLOCKS = 256;

    static final int THREADS = 512;

    /**
     * Elements a thread of a barrier-free all-reduce takes before its grid grows (up to the cap): elements of any dtype
     * (four, as an f32 one-shot's 16-byte vector holds). Its loops move 16-byte vectors where the buffers allow, so in a
     * bf16 or f16 tile half the threads have no vector of their own (measured as is; not re-tuned).
     */
    static final int BARRIER_FREE_ELEMENTS_PER_THREAD = 4;

    /**
     * The most blocks of a barrier-free launch, plain or fused. With more, on two H200s, most calls of an all-reduce of
     * 1 MiB or more took 1-2.4 ms where the rest took 20-50 µs ({@code BarrierFreeStallBench}, 1,000 calls a cell, a GPU
     * a rank): at 128 blocks every cell at 1 and 4 MiB, f32 and bf16, stalled (pipelined 740-1,190 µs a call), at 64 two
     * of the four, at 32 none (median within 1.3x of p10; pipelined 12-36 µs). Two ranks sharing one GPU, with at most
     * 66 blocks, never stalled. What stalls is the polling beside the peer's pushes: tens of thousands of threads
     * reading their own memory while the pushes arrive over NVLink (a fence after the pushes, or a backoff between
     * polls, each removed part of the stalls; pushing and polling 16-byte vectors did not).
     */
    static final int BARRIER_FREE_MAX_BLOCKS = 32;

    /**
     * The grid of a symmetric launch: a block for every {@code threads * perThread} of {@code items} (elements,
     * 16-byte vectors' worth, bytes), at least one, at most {@code most} (every block of every rank resident at once).
     */
    static long grid(long items, int threads, int perThread, long most) {
        return Math.max(1, Math.min(most, Math.ceilDiv(items, (long) threads * perThread)));
    }

    /** All-reduces per launch of one_shot_multi. */
    static final int MULTI_MAX = dev.gatun.planner.PlanOptions.MAX_BATCH; // one_shot_multi takes this many slots

    /** The device functions the collectives are made of, without kernels: what a fused collective launch includes. */
    static final String DEVICE = """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>

            typedef unsigned int u32;
            typedef unsigned long long u64;

            // ---- ordering primitives across GPUs (system scope)
            __device__ __forceinline__ void st_release_sys(u32* p, u32 v) {
                asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(p), "r"(v) : "memory");
            }
            __device__ __forceinline__ u32 ld_acquire_sys(const u32* p) {
                u32 v;
                asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
                return v;
            }
            __device__ __forceinline__ u64 now_ns() {
                u64 t;
                asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
                return t;
            }

            // Barrier of block blockIdx.x among `world` ranks. pads[r] is rank r's pad: [block][peer] slots. Where the
            // host sets *abort (pinned host memory, Session.abort), the spin gives up at once, without a trap: the
            // kernel ends early, the call fails on the host, and the context stays usable.
            __device__ void block_barrier(u32* const* pads, int rank, int world, u32* epochs, u64 timeout_ns, const volatile u32* abort) {
                __shared__ u32 epoch;
                __syncthreads();
                if (threadIdx.x == 0) {
                    epoch = epochs[blockIdx.x] + 1;
                    epochs[blockIdx.x] = epoch;
                }
                __syncthreads();
                u32 e = epoch;
                if (threadIdx.x < world) {
                    int peer = threadIdx.x;
                    #ifdef GATUN_FENCE_SC
                    __threadfence_system();  // only for comparison: the release store below already orders earlier writes
                    #endif
                    st_release_sys(pads[peer] + blockIdx.x * world + rank, e);
                    const u32* mine = pads[rank] + blockIdx.x * world + peer;
                    u64 start = now_ns();
                    unsigned spins = 0;
                    while ((int) (ld_acquire_sys(mine) - e) < 0) {
                        if ((spins & 1023u) == 1023u && *abort) break;
                        if ((++spins & 1023u) == 0 && now_ns() - start > timeout_ns) {
                            printf("GATUN_BARRIER_TIMEOUT rank %d waited %llu ms for rank %d (block %d, epoch %u)\\n",
                                   rank, (u64) (timeout_ns / 1000000ull), peer, (int) blockIdx.x, e);
                            __trap();
                        }
                    }
                }
                __syncthreads();
            }

            // ---- element types: load/store 16-byte vectors as floats
            template <typename T> struct Vec;
            template <> struct Vec<float> {
                static constexpr int N = 4;
                __device__ static void load(const void* p, float* f) {
                    float4 v = *(const float4*) p; f[0] = v.x; f[1] = v.y; f[2] = v.z; f[3] = v.w;
                }
                __device__ static void store(void* p, const float* f) { *(float4*) p = make_float4(f[0], f[1], f[2], f[3]); }
                __device__ static float get(const void* p, long long i) { return ((const float*) p)[i]; }
                __device__ static void set(void* p, long long i, float v) { ((float*) p)[i] = v; }
            };
            template <> struct Vec<__half> {
                static constexpr int N = 8;
                __device__ static void load(const void* p, float* f) {
                    uint4 v = *(const uint4*) p; const __half2* h = (const __half2*) &v;
                    for (int i = 0; i < 4; i++) { float2 x = __half22float2(h[i]); f[2 * i] = x.x; f[2 * i + 1] = x.y; }
                }
                __device__ static void store(void* p, const float* f) {
                    uint4 v; __half2* h = (__half2*) &v;
                    for (int i = 0; i < 4; i++) h[i] = __floats2half2_rn(f[2 * i], f[2 * i + 1]);
                    *(uint4*) p = v;
                }
                __device__ static float get(const void* p, long long i) { return __half2float(((const __half*) p)[i]); }
                __device__ static void set(void* p, long long i, float v) { ((__half*) p)[i] = __float2half_rn(v); }
            };
            template <> struct Vec<__nv_bfloat16> {
                static constexpr int N = 8;
                __device__ static void load(const void* p, float* f) {
                    uint4 v = *(const uint4*) p; const __nv_bfloat162* h = (const __nv_bfloat162*) &v;
                    for (int i = 0; i < 4; i++) { float2 x = __bfloat1622float2(h[i]); f[2 * i] = x.x; f[2 * i + 1] = x.y; }
                }
                __device__ static void store(void* p, const float* f) {
                    uint4 v; __nv_bfloat162* h = (__nv_bfloat162*) &v;
                    for (int i = 0; i < 4; i++) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
                    *(uint4*) p = v;
                }
                __device__ static float get(const void* p, long long i) { return __bfloat162float(((const __nv_bfloat16*) p)[i]); }
                __device__ static void set(void* p, long long i, float v) { ((__nv_bfloat16*) p)[i] = __float2bfloat16_rn(v); }
            };

            // Raw elements of 1, 2, 4 and 8 bytes, for the collectives that only move data (all-gather, broadcast)
            // of any dtype: copy_range needs nothing but the vector width.
            typedef unsigned char b8; typedef unsigned short b16; typedef unsigned int b32; typedef unsigned long long b64;
            template <> struct Vec<b8> { static constexpr int N = 16; };
            template <> struct Vec<b16> { static constexpr int N = 8; };
            template <> struct Vec<b32> { static constexpr int N = 4; };
            template <> struct Vec<b64> { static constexpr int N = 2; };

            // op: 0 sum, 1 avg, 2 max, 3 min (max and min propagate NaN)
            __device__ __forceinline__ float combine(int op, float a, float b) {
                if (op <= 1) return a + b;
                if (isnan(a) || isnan(b)) return __int_as_float(0x7fffffff);
                return op == 2 ? fmaxf(a, b) : fminf(a, b);
            }
            __device__ __forceinline__ float finish(int op, float a, int world) { return op == 1 ? a / world : a; }

            __device__ __forceinline__ bool aligned16(const void* p) { return (((u64) p) & 15ull) == 0; }

            // Elements [begin, end) are split into one contiguous tile per block, a multiple of 8 elements long so
            // tiles stay 16-byte aligned. The split depends only on the range and the grid, never on alignment or
            // rank, so block b of every rank handles the same elements: that is what per-block barriers rely on.
            __device__ __forceinline__ bool block_tile(long long begin, long long end, long long* b, long long* e) {
                long long tile = ((end - begin + gridDim.x - 1) / gridDim.x + 7) / 8 * 8;
                long long s = begin + blockIdx.x * tile, t = s + tile;
                *b = s < end ? s : end;
                *e = t < end ? t : end;
                return *b < *e;
            }

            // The vector part of a tile for a world size known at compile time: every peer's load is issued before
            // any is used, so remote loads overlap instead of waiting one after another.
            template <typename T, int W>
            __device__ void reduce_vectors(const char* const* peers, long long offset, void* dst, long long dst_shift,
                                           long long b, long long vend, int op, bool push) {
                constexpr int N = Vec<T>::N;
                const char* src[W];
                #pragma unroll
                for (int p = 0; p < W; p++) src[p] = peers[p] + offset;
                for (long long i = b + threadIdx.x * (long long) N; i < vend; i += (long long) blockDim.x * N) {
                    float x[W][N];
                    #pragma unroll
                    for (int p = 0; p < W; p++) Vec<T>::load(src[p] + i * sizeof(T), x[p]);
                    #pragma unroll
                    for (int p = 1; p < W; p++)
                        #pragma unroll
                        for (int k = 0; k < N; k++) x[0][k] = combine(op, x[0][k], x[p][k]);
                    #pragma unroll
                    for (int k = 0; k < N; k++) x[0][k] = finish(op, x[0][k], W);
                    Vec<T>::store((char*) dst + (i - dst_shift) * sizeof(T), x[0]);
                    if (push)
                        #pragma unroll
                        for (int p = 0; p < W; p++) Vec<T>::store((char*) src[p] + i * sizeof(T), x[0]);
                }
            }

            // Reduces this block's elements [b, e) of every peer's slot (base + offset) into dst, in rank order; with push,
            // also stores each result into every peer's slot at the same place (two-shot's gather by remote stores).
            template <typename T>
            __device__ void reduce_tile(const char* const* peers, long long offset, void* dst, long long dst_shift,
                                        long long b, long long e, int world, int op, bool push = false) {
                constexpr int N = Vec<T>::N;
                bool vec = (b % N) == 0 && (dst_shift % N) == 0 && aligned16(dst);
                for (int p = 0; p < world && vec; p++) vec = aligned16(peers[p] + offset);
                long long vend = vec ? b + (e - b) / N * N : b;
                switch (vec ? world : 0) {
                    case 2: reduce_vectors<T, 2>(peers, offset, dst, dst_shift, b, vend, op, push); break;
                    case 4: reduce_vectors<T, 4>(peers, offset, dst, dst_shift, b, vend, op, push); break;
                    case 8: reduce_vectors<T, 8>(peers, offset, dst, dst_shift, b, vend, op, push); break;
                    default:
                        for (long long i = b + threadIdx.x * (long long) N; i < vend; i += (long long) blockDim.x * N) {
                            float acc[N], x[N];
                            Vec<T>::load(peers[0] + offset + i * sizeof(T), acc);
                            for (int p = 1; p < world; p++) {
                                Vec<T>::load(peers[p] + offset + i * sizeof(T), x);
                                for (int k = 0; k < N; k++) acc[k] = combine(op, acc[k], x[k]);
                            }
                            for (int k = 0; k < N; k++) acc[k] = finish(op, acc[k], world);
                            Vec<T>::store((char*) dst + (i - dst_shift) * sizeof(T), acc);
                            if (push) for (int p = 0; p < world; p++) Vec<T>::store((char*) peers[p] + offset + i * sizeof(T), acc);
                        }
                }
                for (long long i = vend + threadIdx.x; i < e; i += blockDim.x) {
                    float acc = Vec<T>::get(peers[0] + offset, i);
                    for (int p = 1; p < world; p++) acc = combine(op, acc, Vec<T>::get(peers[p] + offset, i));
                    acc = finish(op, acc, world);
                    Vec<T>::set(dst, i - dst_shift, acc);
                    if (push) for (int p = 0; p < world; p++) Vec<T>::set((void*) (peers[p] + offset), i, acc);
                }
            }

            // Reduces elements [begin, end), this block's tile of them.
            template <typename T>
            __device__ void reduce_range(const char* const* peers, long long offset, void* dst, long long dst_shift,
                                         long long begin, long long end, int world, int op, bool push = false) {
                long long b, e;
                if (block_tile(begin, end, &b, &e)) reduce_tile<T>(peers, offset, dst, dst_shift, b, e, world, op, push);
            }

            // Copies this block's elements [b, e) of src into dst at the same index minus dst_shift.
            template <typename T>
            __device__ void copy_tile(const char* src, void* dst, long long dst_shift, long long b, long long e) {
                constexpr int N = Vec<T>::N;
                bool vec = (b % N) == 0 && (dst_shift % N) == 0 && aligned16(src) && aligned16(dst);
                long long vend = vec ? b + (e - b) / N * N : b;
                for (long long i = b + threadIdx.x * (long long) N; i < vend; i += (long long) blockDim.x * N)
                    *(uint4*) ((char*) dst + (i - dst_shift) * sizeof(T)) = *(const uint4*) (src + i * sizeof(T));
                for (long long i = vend + threadIdx.x; i < e; i += blockDim.x)
                    ((T*) dst)[i - dst_shift] = ((const T*) src)[i];
            }

            // Copies elements [begin, end) of src into dst at the same index minus dst_shift (this block's tile).
            template <typename T>
            __device__ void copy_range(const char* src, void* dst, long long dst_shift, long long begin, long long end) {
                long long b, e;
                if (block_tile(begin, end, &b, &e)) copy_tile<T>(src, dst, dst_shift, b, e);
            }

            // ---- barrier-free all-reduce (the planner's RotatingSlots): regions[p] is member p's rotating pool; a region
            // at offset holds one u32 per block, the round of its next call (HEADER bytes; counted modulo 3, so it never
            // wraps out of step as a call count would at 2^32), then three rounds of `world` slots of n
            // elements, round_bytes apart. Block b handles the same tile of elements on every rank: it pushes its tile
            // into its own slot of this call's round on every member, reduces its tile of its own round as each element
            // arrives (an element holds all ones, a NaN no pushed element has, until its value lands), and clears its
            // tile of the last call's round. No barrier: a member can be at most one call ahead, and the round it pushes
            // into then is neither the one read nor the one cleared.
            template <typename T> struct Raw;
            template <> struct Raw<float> {
                typedef u32 U; static constexpr u32 NAN_BITS = 0x7FC00000u;
                __device__ static float value(U v) { return __uint_as_float(v); }
            };
            template <> struct Raw<__half> {
                typedef unsigned short U; static constexpr u32 NAN_BITS = 0x7E00u;
                __device__ static float value(U v) { return __half2float(__ushort_as_half(v)); }
            };
            template <> struct Raw<__nv_bfloat16> {
                typedef unsigned short U; static constexpr u32 NAN_BITS = 0x7FC0u;
                __device__ static float value(U v) { return __bfloat162float(__ushort_as_bfloat16(v)); }
            };

            // 16 bytes of raw elements, loaded by one instruction that bypasses L1 (a peer's push lands in L2)
            __device__ __forceinline__ uint4 ld_volatile16(const void* p) {
                uint4 v;
                asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p) : "memory");
                return v;
            }

            // Waits for element or vector `at` of a slot until `arrived` holds; false where the session was aborted. A wait
            // past timeout_ns prints what it waited for and traps.
            template <typename V, typename Load, typename Arrived>
            __device__ __forceinline__ bool bf_wait(V& v, Load load, Arrived arrived, int rank, int peer, long long i, u32 this_round,
                                                    u64 timeout_ns, const volatile u32* abort) {
                if (arrived(v)) return true;
                u64 start = now_ns();
                unsigned spins = 0;
                while (!arrived(v = load())) {
                #ifdef GATUN_BF_BACKOFF_NS
                    if (spins >= 64u) __nanosleep(GATUN_BF_BACKOFF_NS);   // an experiment: see ExecutionOptions.Cuda
                #endif
                    if ((++spins & 1023u) == 0) {
                        if (*abort) return false;
                        if (now_ns() - start > timeout_ns) {
                            printf("GATUN_BARRIER_TIMEOUT rank %d waited %llu ms for rank %d's element %lld (barrier-free all-reduce, block %d, round %u)\\n",
                                   rank, (u64) (timeout_ns / 1000000ull), peer, i, (int) blockIdx.x, this_round);
                            __trap();
                        }
                    }
                }
                return true;
            }

            // This block's tile [b, e) of the barrier-free all-reduce (b == e: the block only counts the call). False where
            // the session was aborted while it waited. Where the input, the output and every member's slots allow, it moves
            // 16-byte vectors ([b, vend): 4 f32 or 8 bf16/f16 elements a push and a poll; a vector has arrived once none of
            // its elements holds the sentinel, so a vector that lands in parts is waited for until whole), the rest element
            // by element. Element by element, a bf16 all-reduce of 1 MiB stalled for milliseconds on two H200s (half a
            // million two-byte stores crossing NVLink into memory that thousands of threads poll); each element is summed
            // in member order either way, so the two forms give the same bits.
            template <typename T>
            __device__ bool barrier_free_tile(const char* const* regions, long long offset, void* out, const char* in, long long n,
                                              long long b, long long e, int rank, int world, int op, long long header,
                                              long long round_bytes, u64 timeout_ns, const volatile u32* abort) {
                typedef typename Raw<T>::U U;
                constexpr int N = 16 / sizeof(U);
                const U sentinel = (U) ~0u;
                __shared__ u32 this_round;
                char* mine = (char*) regions[rank] + offset;
                __syncthreads();  // a batch's earlier member has read this_round
                if (threadIdx.x == 0) {
                    u32* next = (u32*) mine + blockIdx.x;
                    this_round = *next;
                    *next = (this_round + 1u) % 3u;
                }
                __syncthreads();
                if (b >= e) return true;
                const long long slot_bytes = n * (long long) sizeof(T), round = (long long) this_round;
                bool vec = (b % N) == 0 && (slot_bytes % 16) == 0 && (round_bytes % 16) == 0 && aligned16(in) && aligned16(out);
                for (int p = 0; p < world && vec; p++) vec = aligned16(regions[p] + offset + header);
                const long long vend = vec ? b + (e - b) / N * N : b;
                // push: this rank's slot of the round on every member, starting with the next one
                for (int j = 1; j <= world; j++) {
                    int p = (rank + j) % world;
                    char* dst = (char*) regions[p] + offset + header + round * round_bytes + rank * slot_bytes;
                    for (long long i = b + threadIdx.x * (long long) N; i < vend; i += (long long) blockDim.x * N) {
                        union { uint4 w; U u[N]; } v;
                        v.w = *(const uint4*) (in + i * sizeof(T));
                        #pragma unroll
                        for (int k = 0; k < N; k++) if (v.u[k] == sentinel) v.u[k] = (U) Raw<T>::NAN_BITS;
                        *(uint4*) (dst + i * sizeof(T)) = v.w;
                    }
                    for (long long i = vend + threadIdx.x; i < e; i += blockDim.x) {
                        U v = ((const U*) in)[i];
                        ((U*) dst)[i] = v == sentinel ? (U) Raw<T>::NAN_BITS : v;
                    }
                }
            #ifdef GATUN_FENCE_SC
                __threadfence_system();   // only to measure: whether the pushes' stores, unfenced, reach a peer late
            #endif
                // reduce: each element of each slot once it has arrived, in member order
                const char* rounds = mine + header + round * round_bytes;
                for (long long i = b + threadIdx.x * (long long) N; i < vend; i += (long long) blockDim.x * N) {
                    float acc[N];
                    for (int p = 0; p < world; p++) {
                        const char* at = rounds + p * slot_bytes + i * sizeof(T);
                        union { uint4 w; U u[N]; } v;
                        v.w = ld_volatile16(at);
                        auto arrived = [&](const uint4& w) {
                            union { uint4 w; U u[N]; } x;
                            x.w = w;
                            bool all = true;
                            #pragma unroll
                            for (int k = 0; k < N; k++) all &= x.u[k] != sentinel;
                            return all;
                        };
                        if (!bf_wait(v.w, [&] { return ld_volatile16(at); }, arrived, rank, p, i, this_round, timeout_ns, abort)) return false;
                        #pragma unroll
                        for (int k = 0; k < N; k++) {
                            float f = Raw<T>::value(v.u[k]);
                            acc[k] = p == 0 ? f : combine(op, acc[k], f);
                        }
                    }
                    #pragma unroll
                    for (int k = 0; k < N; k++) acc[k] = finish(op, acc[k], world);
                    Vec<T>::store((char*) out + i * sizeof(T), acc);
                }
                for (long long i = vend + threadIdx.x; i < e; i += blockDim.x) {
                    float acc = 0.0f;
                    for (int p = 0; p < world; p++) {
                        const volatile U* at = (const volatile U*) (rounds + p * slot_bytes) + i;
                        U v = *at;
                        if (!bf_wait(v, [&] { return *at; }, [&](U x) { return x != sentinel; }, rank, p, i, this_round, timeout_ns, abort)) return false;
                        float f = Raw<T>::value(v);
                        acc = p == 0 ? f : combine(op, acc, f);
                    }
                    Vec<T>::set(out, i, finish(op, acc, world));
                }
                // clear this block's tile of the last call's round, in every slot: it is used again two calls from now,
                // and a member pushes into it only after this rank's next push, which a later kernel makes once this
                // one (its clearing stores included) is complete: no fence needed
                char* last = mine + header + ((round + 2) % 3) * round_bytes;
                for (int p = 0; p < world; p++) {
                    char* slot = last + p * slot_bytes;
                    for (long long i = b + threadIdx.x * (long long) N; i < vend; i += (long long) blockDim.x * N)
                        *(uint4*) (slot + i * sizeof(T)) = make_uint4(~0u, ~0u, ~0u, ~0u);
                    for (long long i = vend + threadIdx.x; i < e; i += blockDim.x) ((U*) slot)[i] = sentinel;
                }
                return true;
            }

            template <typename T>
            __device__ void barrier_free(const char* const* regions, long long offset, void* out, const char* in, long long n,
                                         int rank, int world, int op, long long header, long long round_bytes, u64 timeout_ns,
                                         const volatile u32* abort) {
                long long b, e;
                if (!block_tile(0, n, &b, &e)) b = e = 0;
                barrier_free_tile<T>(regions, offset, out, in, n, b, e, rank, world, op, header, round_bytes, timeout_ns, abort);
            }
            """;

    /**
     * What the symmetric kernels are compiled with beside their source: the measuring switches of the CUDA settings
     * (a full fence before every signal; a backoff in the barrier-free all-reduce's polling).
     */
    static String defines(dev.gatun.runtime.ExecutionOptions.Cuda settings) {
        return (settings.fenceSc() ? "#define GATUN_FENCE_SC\n" : "")
                + (settings.barrierFreeBackoffNs() > 0 ? "#define GATUN_BF_BACKOFF_NS " + settings.barrierFreeBackoffNs() + "u\n" : "");
    }

    static final String SOURCE = DEVICE + """
            // local: when not null, this rank's input in ordinary memory. Each block first copies into its own
            // slot the tiles that block of every peer will read (path 2's copy, fused: no separate copy node),
            // and the first barrier publishes them.
            #define COLLECTIVE_ARGS const char* const* peers, long long offset, void* out, const char* local, long long n, \
                                    int rank, int world, int op, u32* const* pads, u32* epochs, u64 timeout_ns, const volatile u32* abort
            #define MINE ((char*) (peers[rank] + offset))

            template <typename T> __device__ void one_shot(COLLECTIVE_ARGS) {
                if (local) copy_range<T>(local, MINE, 0, 0, n);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                reduce_range<T>(peers, offset, out, 0, 0, n, world, op);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
            }

            // Slices are multiples of 8 elements so each stays 16-byte aligned. Rank r reduces slice r and stores the
            // result into out and into slice r of every rank's slot; after the second barrier each rank copies the
            // other slices from its own slot. Only rank r reads or writes slice r before that barrier, and after it
            // every rank reads only its own slot, so no third barrier is needed. Block b handles the same tile of
            // every slice on every rank, so per-block barriers suffice.
            template <typename T> __device__ void two_shot(COLLECTIVE_ARGS) {
                long long chunk = ((n + world - 1) / world + 7) / 8 * 8;
                if (local)
                    for (int p = 0; p < world; p++) copy_range<T>(local, MINE, 0, p * chunk, p * chunk + chunk < n ? p * chunk + chunk : n);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                long long b = rank * chunk, e = b + chunk < n ? b + chunk : n;
                if (b < e) reduce_range<T>(peers, offset, out, 0, b, e, world, op, true);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                for (int p = 0; p < world; p++) {
                    long long pb = p * chunk, pe = pb + chunk < n ? pb + chunk : n;
                    if (p != rank && pb < pe) copy_range<T>(MINE, out, 0, pb, pe);
                }
            }

            // n: elements of each rank's input; rank r receives [r*n/world, (r+1)*n/world) reduced
            template <typename T> __device__ void reduce_scatter(COLLECTIVE_ARGS) {
                long long m = n / world;
                if (local)
                    for (int p = 0; p < world; p++) copy_range<T>(local, MINE, 0, p * m, p * m + m);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                reduce_range<T>(peers, offset, out, rank * m, rank * m, rank * m + m, world, op);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
            }

            template <typename T> __device__ void all_gather(COLLECTIVE_ARGS) {
                if (local) copy_range<T>(local, MINE, 0, 0, n);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                for (int p = 0; p < world; p++) copy_range<T>(peers[p] + offset, (char*) out + p * n * sizeof(T), 0, 0, n);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
            }

            // op: the root's index in the group. Every rank copies the root's slot; the second barrier keeps the
            // root's slot from being reused before every rank has read it. Every rank, root or not, copies its own
            // input in: the slot is where the plan keeps that input, and other steps of the plan read it there.
            template <typename T> __device__ void broadcast(COLLECTIVE_ARGS) {
                if (local) copy_range<T>(local, MINE, 0, 0, n);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                copy_range<T>(peers[op] + offset, out, 0, 0, n);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
            }

            // Up to four independent one-shot all-reduces of one group in one launch: one barrier before and
            // one after all of them, instead of two per all-reduce.
            #define MULTI_ARGS const char* const* peers, int count, long long o0, void* d0, long long n0, \
                               long long o1, void* d1, long long n1, long long o2, void* d2, long long n2, \
                               long long o3, void* d3, long long n3, int rank, int world, int op, \
                               u32* const* pads, u32* epochs, u64 timeout_ns, const volatile u32* abort
            template <typename T> __device__ void one_shot_multi(MULTI_ARGS) {
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                reduce_range<T>(peers, o0, d0, 0, 0, n0, world, op);
                if (count > 1) reduce_range<T>(peers, o1, d1, 0, 0, n1, world, op);
                if (count > 2) reduce_range<T>(peers, o2, d2, 0, 0, n2, world, op);
                if (count > 3) reduce_range<T>(peers, o3, d3, 0, 0, n3, world, op);
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
            }
            #define INSTANTIATE_MULTI(T, SUFFIX) \
                extern "C" __global__ void __launch_bounds__(512) one_shot_multi_##SUFFIX(MULTI_ARGS) { \
                    one_shot_multi<T>(peers, count, o0, d0, n0, o1, d1, n1, o2, d2, n2, o3, d3, n3, rank, world, op, pads, epochs, timeout_ns, abort); }
            INSTANTIATE_MULTI(float, f32) INSTANTIATE_MULTI(__half, f16) INSTANTIATE_MULTI(__nv_bfloat16, bf16)

            #define INSTANTIATE(NAME, T, SUFFIX) \\
                extern "C" __global__ void __launch_bounds__(512) NAME##_##SUFFIX(COLLECTIVE_ARGS) { \\
                    NAME<T>(peers, offset, out, local, n, rank, world, op, pads, epochs, timeout_ns, abort); }
            #define ALL_TYPES(NAME) INSTANTIATE(NAME, float, f32) INSTANTIATE(NAME, __half, f16) INSTANTIATE(NAME, __nv_bfloat16, bf16)
            ALL_TYPES(one_shot)
            ALL_TYPES(two_shot)
            ALL_TYPES(reduce_scatter)
            ALL_TYPES(all_gather)
            ALL_TYPES(broadcast)
            #define RAW_TYPES(NAME) INSTANTIATE(NAME, b8, b8) INSTANTIATE(NAME, b16, b16) INSTANTIATE(NAME, b32, b32) INSTANTIATE(NAME, b64, b64)
            RAW_TYPES(all_gather)
            RAW_TYPES(broadcast)

            #define BARRIER_FREE_ARGS const char* const* regions, long long offset, void* out, const char* in, long long n, int rank, \
                                      int world, int op, long long header, long long round_bytes, u64 timeout_ns, const volatile u32* abort
            #define INSTANTIATE_BARRIER_FREE(T, SUFFIX) \
                extern "C" __global__ void __launch_bounds__(512) barrier_free_##SUFFIX(BARRIER_FREE_ARGS) { \
                    barrier_free<T>(regions, offset, out, in, n, rank, world, op, header, round_bytes, timeout_ns, abort); }
            INSTANTIATE_BARRIER_FREE(float, f32) INSTANTIATE_BARRIER_FREE(__half, f16) INSTANTIATE_BARRIER_FREE(__nv_bfloat16, bf16)

            // A device-to-device copy by the SMs, for ranks that share a GPU (no copy-engine queue shared with a peer).
            extern "C" __global__ void gatun_copy(const char* src, char* dst, long long bytes) {
                long long i = blockIdx.x * (long long) blockDim.x + threadIdx.x, stride = (long long) gridDim.x * blockDim.x;
                long long head = 0;
                if (((((u64) src) | ((u64) dst)) & 15ull) == 0) {
                    long long n16 = bytes / 16;
                    for (long long k = i; k < n16; k += stride) ((uint4*) dst)[k] = ((const uint4*) src)[k];
                    head = n16 * 16;
                }
                for (long long k = head + i; k < bytes; k += stride) dst[k] = src[k];
            }

            // A barrier alone, for plan steps that need one where no collective gives it.
            extern "C" __global__ void gatun_barrier(u32* const* pads, int rank, int world, u32* epochs, u64 timeout_ns, const volatile u32* abort) {
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
            }
            """;
}
