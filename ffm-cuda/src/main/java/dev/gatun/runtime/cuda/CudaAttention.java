package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;
import dev.gatun.runtime.GatunRuntimeException;

/**
 * {@code attention} on the GPU ({@link Step.Attention}): a decode step's scores, mask, softmax and weighted values in
 * one launch, where the graph of products had three (the scores' product, a softmax kernel, the values' product).
 * q is [B, R, d], the keys transposed [B, d, S], the values [B, S, d]; only positions 0 to the position read on the
 * device are read, so a captured graph replays with each call's position and a step early in a long cache costs little.
 *
 * <p>The cut, flash-decoding's: a block takes {@value #ROWS} query rows of one batch entry ({@code blockIdx.y}, and
 * {@code blockIdx.z} for the rows past the first {@value #ROWS}) and one slice of the positions ({@code blockIdx.x});
 * {@link #cut} cuts the positions into as many slices as make at most two blocks an SM, none shorter than
 * {@value #MIN_POSITIONS} positions. Within its slice, a block goes through chunks of {@value #CHUNK} positions. A
 * chunk's loads, keys and values, are issued together in 16-byte vectors, the first chunk's with the position and the
 * thread's elements of q, each next chunk's before the chunk before it is worked on, so a chunk costs about one trip to
 * memory and the kernel's first trip is not waited on twice:
 * <ul>
 *   <li>the scores: a thread takes a vector of positions (8 at 16 bits) in some rows e of kT and sums q (scaled, in
 *   registers) times them for every query row; the threads holding the same positions add their sums by shuffles
 *   and through shared memory (a key row whose length is not a whole number of vectors is read element by
 *   element);</li>
 *   <li>the softmax, online: a warp a row finds the chunk's largest score, rescales the row's running sum and keeps
 *   the exponentials in shared memory;</li>
 *   <li>the weighted values: threads take 16-byte vectors of a value row ({@code d / 8} threads a row at 16 bits),
 *   each adding its vector, weighted, into float32 accumulators for every row, rescaled first by the chunk's change of
 *   the running maximum.</li>
 * </ul>
 * The threads' sums are added by shuffles and through shared memory. With one slice the block stores
 * {@code acc / sum}; with several, each writes its float32 partial (accumulators, maximum, sum) to this object's
 * scratch and counts itself in on its (batch, row block)'s counter with an acquire-release add; the block that comes
 * last merges the slices in order 0, 1, 2, ... (all their partials loaded at once; each weighted by {@code exp(max_i - max)}: the same order every call,
 * whichever block came last), stores, and sets the counter back to 0 for the next launch. A slice past the position
 * is empty (its maximum -inf, its weight 0). A position outside [0, S) writes the executable's {@link DeviceFault}
 * record and traps, naming the step. Every sum in float32; the result rounded once.
 *
 * <p>Takes head sizes of 16, 32, 64 and 128 whose row is a whole number of 16-byte vectors (float32, float16,
 * bfloat16; at 256 the accumulators spill); {@link #check} refuses others when the executable is made, naming the step.
 */
final class CudaAttention implements AutoCloseable {
    static final int THREADS = 256, ROWS = 4, CHUNK = 64, MIN_POSITIONS = 64, MAX_SPLITS = 16;
    static final int[] HEAD_SIZES = {16, 32, 64, 128};

    /** Blocks an SM holds at once (the kernels' launch bounds): two up to head size 64, one at 128. */
    static int resident(int d) { return d <= 64 ? 2 : 1; }

    static final String SOURCE = Programmatic.SOURCE + DeviceFault.SOURCE + """
            #include <cuda_fp16.h>
            #include <cuda_bf16.h>
            #define AT_THREADS 256
            #define AT_ROWS 4
            #define AT_CHUNK 64
            #define AT_WARPS (AT_THREADS / 32)
            #define AT_NEG_INF __int_as_float(0xff800000)
            #define AT_MAX_SPLITS 16

            __device__ __forceinline__ float at_f(float x) { return x; }
            __device__ __forceinline__ float at_f(__half x) { return __half2float(x); }
            __device__ __forceinline__ float at_f(__nv_bfloat16 x) { return __bfloat162float(x); }
            __device__ __forceinline__ void at_store(float* p, float v) { *p = v; }
            __device__ __forceinline__ void at_store(__half* p, float v) { *p = __float2half_rn(v); }
            __device__ __forceinline__ void at_store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
            template <typename T> __device__ __forceinline__ void at_unpack(uint4 raw, float* f) {
                const T* e = reinterpret_cast<const T*>(&raw);
                #pragma unroll
                for (int i = 0; i < (int) (16 / sizeof(T)); i++) f[i] = at_f(e[i]);
            }

            // A chunk's loads: a thread's key vectors (KN rows e of kT, EV positions each, as floats) and value vectors (VN
            // rows). Everything within the cache is loaded, whatever the position: positions past it are masked afterwards.
            template <typename T, int D>
            struct AtChunk {
                static constexpr int EV = 16 / sizeof(T);             // elements a 16-byte vector
                static constexpr int KPV = AT_CHUNK / EV;             // vectors of a key row's chunk (8 at 16 bits)
                static constexpr int KEG = AT_THREADS / KPV;          // key rows read at once: a thread's rows are KEG apart
                static constexpr int KN = (D + KEG - 1) / KEG;        // key vectors a thread loads (rows past D: none)
                static constexpr int VPR = D / EV, G = AT_THREADS / VPR, VN = (AT_CHUNK + G - 1) / G;   // value vectors
                float k[KN][EV];
                uint4 v[VN];
                __device__ __forceinline__ void load(const T* kb, const T* vb, long long S, long long c0, bool rows16, int kp, int ke, int vi, int po) {
                    const long long kpos = c0 + kp * EV;
                    #pragma unroll
                    for (int i = 0; i < KN; i++) {
                        const T* row = kb + (long long) min(ke + KEG * i, D - 1) * S;
                        if (rows16 && kpos + EV <= S) {
                            at_unpack<T>(__ldg(reinterpret_cast<const uint4*>(row + kpos)), k[i]);
                        } else {   // a row not on 16-byte vectors, or the cache's end: element by element
                            #pragma unroll
                            for (int j = 0; j < EV; j++) k[i][j] = kpos + j < S ? at_f(row[kpos + j]) : 0.0f;
                        }
                    }
                    #pragma unroll
                    for (int i = 0; i < VN; i++) {
                        const long long j = c0 + po + G * i;
                        v[i] = po + G * i < AT_CHUNK && j < S ? __ldg(reinterpret_cast<const uint4*>(vb + j * D) + vi) : make_uint4(0u, 0u, 0u, 0u);
                    }
                }
            };

            // One block: rows [blockIdx.z * AT_ROWS, +AT_ROWS) of batch entry blockIdx.y, positions [split * per, +per) up to
            // the position (per: a multiple of 8, so a chunk's first position starts a 16-byte vector of a key row).
            // Shared memory: the chunk's scores (AT_ROWS x AT_CHUNK), per row the running maximum, sum and the last chunk's
            // rescaling, and the warps' sums (AT_WARPS x AT_ROWS x max(D, AT_CHUNK)).
            template <typename T, int D>
            __device__ void attention(const T* __restrict__ q, const T* __restrict__ kT, const T* __restrict__ v, T* __restrict__ out,
                                      const void* pos, int pos64, int R, long long S, float scale, long long per,
                                      float* __restrict__ scratch, unsigned* __restrict__ counters, int* claim, gatun_fault* fault, int step) {
                using C = AtChunk<T, D>;
                constexpr int EV = C::EV, KPV = C::KPV, KEG = C::KEG, KN = C::KN, VPR = C::VPR, G = C::G, VN = C::VN;
                constexpr int W = D > AT_CHUNK ? D : AT_CHUNK;
                extern __shared__ float at_smem[];
                float* p = at_smem;
                float* run_max = p + AT_ROWS * AT_CHUNK;
                float* run_sum = run_max + AT_ROWS;
                float* rescale = run_sum + AT_ROWS;
                float* red = rescale + AT_ROWS;
                const int splits = gridDim.x, split = blockIdx.x, b = blockIdx.y, r0 = blockIdx.z * AT_ROWS;
                const int rows = min(AT_ROWS, R - r0), t = threadIdx.x, lane = t & 31, warp = t >> 5;
                const long long s0 = (long long) split * per;
                const T* kb = kT + (long long) b * D * S;
                const T* vb = v + (long long) b * S * D;
                const bool rows16 = (S * (long long) sizeof(T)) % 16 == 0;   // key rows start on 16-byte vectors
                const int kp = t % KPV, ke = t / KPV;                       // key vector: positions kp*EV.., rows ke + KEG*i
                const int vi = t % VPR, po = t / VPR;                       // value vector vi of positions po + G*i
                // the position, the first chunk and the thread's elements of q all asked for before any is waited on
                const long long last = pos64 ? *(const long long*) pos : (long long) *(const int*) pos;
                C cur;
                if (s0 < S) cur.load(kb, vb, S, s0, rows16, kp, ke, vi, po);
                float qv[AT_ROWS][KN];
                #pragma unroll
                for (int r = 0; r < AT_ROWS; r++)
                    #pragma unroll
                    for (int i = 0; i < KN; i++) {
                        const int e = ke + KEG * i;
                        qv[r][i] = r < rows && e < D ? scale * at_f(q[((long long) b * R + r0 + r) * D + e]) : 0.0f;
                    }
                if (last < 0 || last >= S) gatun_fail(claim, fault, 3, step, last, S, 0, -1);
                const long long s1 = min(s0 + per, last + 1);
                if (t < AT_ROWS) { run_max[t] = AT_NEG_INF; run_sum[t] = 0.0f; rescale[t] = 1.0f; }
                float acc[AT_ROWS][EV];
                #pragma unroll
                for (int r = 0; r < AT_ROWS; r++)
                    #pragma unroll
                    for (int k = 0; k < EV; k++) acc[r][k] = 0.0f;
                for (long long c0 = s0; c0 < s1; c0 += AT_CHUNK) {
                    const int n = (int) min((long long) AT_CHUNK, s1 - c0);
                    // the next chunk's loads go out before this one is worked on
                    const bool more = c0 + AT_CHUNK < s1;
                    C next;
                    if (more) next.load(kb, vb, S, c0 + AT_CHUNK, rows16, kp, ke, vi, po);
                    {   // the scores: each thread's rows e for EV positions, added over the threads sharing the positions
                        float part[AT_ROWS][EV];
                        #pragma unroll
                        for (int r = 0; r < AT_ROWS; r++)
                            #pragma unroll
                            for (int j = 0; j < EV; j++) part[r][j] = 0.0f;
                        #pragma unroll
                        for (int i = 0; i < KN; i++)
                            #pragma unroll
                            for (int r = 0; r < AT_ROWS; r++)
                                #pragma unroll
                                for (int j = 0; j < EV; j++) part[r][j] = fmaf(qv[r][i], cur.k[i][j], part[r][j]);
                        #pragma unroll
                        for (int r = 0; r < AT_ROWS; r++)
                            #pragma unroll
                            for (int j = 0; j < EV; j++)
                                #pragma unroll
                                for (int o = KPV; o < 32; o <<= 1) part[r][j] += __shfl_xor_sync(0xffffffffu, part[r][j], o);
                        if (lane < KPV)
                            #pragma unroll
                            for (int r = 0; r < AT_ROWS; r++)
                                #pragma unroll
                                for (int j = 0; j < EV; j++) red[(warp * AT_ROWS + r) * W + kp * EV + j] = part[r][j];
                    }
                    __syncthreads();
                    {   // thread (row t / AT_CHUNK, position t % AT_CHUNK) adds the warps' sums (AT_THREADS = AT_ROWS * AT_CHUNK)
                        const int r = t / AT_CHUNK, j = t % AT_CHUNK;
                        float s = 0.0f;
                        #pragma unroll
                        for (int w = 0; w < AT_WARPS; w++) s += red[(w * AT_ROWS + r) * W + j];
                        p[r * AT_CHUNK + j] = j < n && r < rows ? s : AT_NEG_INF;
                    }
                    __syncthreads();
                    if (warp < rows) {   // the online softmax: warp r for row r
                        const int r = warp;
                        float* pr = p + r * AT_CHUNK;
                        float most = AT_NEG_INF;
                        for (int j = lane; j < n; j += 32) most = fmaxf(most, pr[j]);
                        #pragma unroll
                        for (int o = 16; o > 0; o >>= 1) most = fmaxf(most, __shfl_xor_sync(0xffffffffu, most, o));
                        const float before = run_max[r], now = fmaxf(before, most);
                        float sum = 0.0f;
                        for (int j = lane; j < AT_CHUNK; j += 32) {
                            const float e = j < n ? __expf(pr[j] - now) : 0.0f;
                            pr[j] = e;
                            sum += e;
                        }
                        #pragma unroll
                        for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
                        if (lane == 0) {
                            const float alpha = __expf(before - now);   // 0 at the first chunk (before = -inf)
                            rescale[r] = alpha;
                            run_sum[r] = run_sum[r] * alpha + sum;
                            run_max[r] = now;
                        }
                    }
                    __syncthreads();
                    #pragma unroll
                    for (int r = 0; r < AT_ROWS; r++) {
                        const float alpha = r < rows ? rescale[r] : 0.0f;
                        #pragma unroll
                        for (int k = 0; k < EV; k++) acc[r][k] *= alpha;
                    }
                    #pragma unroll
                    for (int i = 0; i < VN; i++) {   // the weighted values, from the vectors loaded before
                        const int j = po + G * i;
                        if (j >= n) break;
                        float f[EV];
                        at_unpack<T>(cur.v[i], f);
                        #pragma unroll
                        for (int r = 0; r < AT_ROWS; r++) {
                            const float w = p[r * AT_CHUNK + j];
                            #pragma unroll
                            for (int k = 0; k < EV; k++) acc[r][k] = fmaf(w, f[k], acc[r][k]);
                        }
                    }
                    __syncthreads();   // the chunk's exponentials and the warps' sums are read before the next chunk writes them
                    if (more) cur = next;
                }
                // the position groups' sums: the lanes of a warp holding one vector by shuffles, the warps through shared memory
                #pragma unroll
                for (int r = 0; r < AT_ROWS; r++)
                    #pragma unroll
                    for (int k = 0; k < EV; k++)
                        #pragma unroll
                        for (int o = VPR; o < 32; o <<= 1) acc[r][k] += __shfl_xor_sync(0xffffffffu, acc[r][k], o);
                __syncthreads();   // the block's first writes of run_max (no chunk: nothing synchronized since)
                if (lane < VPR)
                    #pragma unroll
                    for (int r = 0; r < AT_ROWS; r++)
                        #pragma unroll
                        for (int k = 0; k < EV; k++) red[(warp * AT_ROWS + r) * W + vi * EV + k] = acc[r][k];
                __syncthreads();
                const long long tile = (long long) b * gridDim.z + blockIdx.z;
                const int part = AT_ROWS * (D + 2);
                float* mine = scratch + (tile * splits + split) * part;
                for (int i = t; i < AT_ROWS * D; i += AT_THREADS) {
                    const int r = i / D, e = i - r * D;
                    float s = 0.0f;
                    #pragma unroll
                    for (int w = 0; w < AT_WARPS; w++) s += red[(w * AT_ROWS + r) * W + e];
                    if (splits == 1) {
                        if (r < rows) at_store(out + ((long long) b * R + r0) * D + i, s / run_sum[r]);
                    } else {
                        mine[i] = s;
                    }
                }
                if (splits == 1) return;
                if (t < AT_ROWS) { mine[AT_ROWS * D + t] = run_max[t]; mine[AT_ROWS * D + AT_ROWS + t] = run_sum[t]; }
                // the partial written (the barrier), thread 0 counts the block in (release: the partial; acquire, in the last
                // block: the others' partials)
                __syncthreads();
                __shared__ int at_last;
                if (t == 0) {
                    unsigned before;
                    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(counters + tile) : "memory");
                    at_last = before == (unsigned) splits - 1;
                    if (at_last) counters[tile] = 0u;   // for the next launch, which the stream orders after this one
                }
                __syncthreads();
                if (!at_last) return;
                // the slices merged in order, every slice's loads issued at once (at most AT_MAX_SPLITS slices)
                const float* parts = scratch + tile * splits * part;
                for (int i = t; i < AT_ROWS * D; i += AT_THREADS) {
                    const int r = i / D;
                    if (r >= rows) continue;
                    float m[AT_MAX_SPLITS], l[AT_MAX_SPLITS], a[AT_MAX_SPLITS];
                    #pragma unroll
                    for (int k = 0; k < AT_MAX_SPLITS; k++) {
                        const float* pk = parts + (k < splits ? k : 0) * part;
                        m[k] = k < splits ? __ldcg(pk + AT_ROWS * D + r) : AT_NEG_INF;
                        l[k] = __ldcg(pk + AT_ROWS * D + AT_ROWS + r);
                        a[k] = __ldcg(pk + i);
                    }
                    float most = AT_NEG_INF;
                    #pragma unroll
                    for (int k = 0; k < AT_MAX_SPLITS; k++) most = fmaxf(most, m[k]);
                    float sum = 0.0f, value = 0.0f;
                    #pragma unroll
                    for (int k = 0; k < AT_MAX_SPLITS; k++) {
                        if (m[k] == AT_NEG_INF) continue;   // a slice past the position, or past the last slice
                        const float w = __expf(m[k] - most);
                        sum += w * l[k];
                        value += w * a[k];
                    }
                    at_store(out + ((long long) b * R + r0) * D + i, value / sum);
                }
            }

            // two blocks an SM up to head size 64 (at most 128 registers a thread, none spilled), one at 128
            #define AT_ENTRY(T, NAME, D) \\
                extern "C" __global__ void __launch_bounds__(AT_THREADS, (D <= 64 ? 2 : 1)) attention_##NAME##_##D(const T* q, const T* kT, const T* v, T* out, \\
                        const void* pos, int pos64, int R, long long S, float scale, long long per, float* scratch, unsigned* counters, \\
                        int* claim, gatun_fault* fault, int step) { \\
                    GATUN_DEPENDENT_START(); \\
                    attention<T, D>(q, kT, v, out, pos, pos64, R, S, scale, per, scratch, counters, claim, fault, step); }
            #define AT_ENTRIES(D) AT_ENTRY(float, f32, D) AT_ENTRY(__half, f16, D) AT_ENTRY(__nv_bfloat16, bf16, D)
            AT_ENTRIES(16) AT_ENTRIES(32) AT_ENTRIES(64) AT_ENTRIES(128)
            """;

    /** The cut of one step: {@code splits} slices of {@code per} positions, {@code rowBlocks} blocks of {@value #ROWS} rows. */
    record Cut(int batch, int rowBlocks, int splits, long per) {
        int tiles() { return batch * rowBlocks; }
        /** Floats of scratch the step's partials need (none with one slice). */
        long scratchFloats(int d) { return splits == 1 ? 0 : (long) tiles() * splits * ROWS * (d + 2); }
    }

    private final LazyProgram program;
    private final boolean programmatic;
    private final int sms;
    private final DeviceBuffer scratch, counters;

    /**
     * The kernels, and scratch and counters enough for every attention step of {@code plan}; the counters are zeroed on
     * {@code stream}, the stream every launch of this instance is ordered by.
     */
    CudaAttention(Device device, LazyProgram.Compiler compiler, Plan plan, boolean programmatic, Stream stream) {
        this.program = new LazyProgram(compiler, "gatun_attention", SOURCE);
        this.programmatic = programmatic;
        this.sms = device.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT);
        long floats = 1, tiles = 1;
        for (Step s : plan.steps())
            if (s instanceof Step.Attention a) {
                check(a);
                Cut c = cut(a, sms);
                floats = Math.max(floats, c.scratchFloats(d(a)));
                tiles = Math.max(tiles, c.tiles());
            }
        DeviceBuffer sc = null, co = null;
        try {
            sc = device.allocate(floats * Float.BYTES);
            co = device.allocate(tiles * Integer.BYTES);
            co.memsetAsync(0, stream);
        } catch (RuntimeException e) {
            if (co != null) co.close();
            if (sc != null) sc.close();
            throw e;
        }
        this.scratch = sc;
        this.counters = co;
    }

    private static int d(Step.Attention a) { return (int) a.q().shape().sizes()[2]; }

    /** Refuses, naming the step, a head size the kernels do not take. */
    static void check(Step.Attention a) {
        DType t = a.q().dtype();
        int d = d(a);
        // a row of whole 16-byte vectors
        boolean size = java.util.Arrays.stream(HEAD_SIZES).anyMatch(h -> h == d) && (long) d * t.byteSize() % 16 == 0;
        if (t != DType.FLOAT32 && t != DType.FLOAT16 && t != DType.BFLOAT16)
            throw new GatunRuntimeException(a.format().strip() + ": attention on the GPU takes float32, float16 or bfloat16, not " + t);
        if (!size)
            throw new GatunRuntimeException(a.format().strip() + ": attention on the GPU takes a head size of 16, 32, 64 or 128 whose row is a"
                    + " whole number of 16-byte vectors, not " + d + " of " + t + "; compose it from matmul and softmax instead");
    }

    /**
     * The cut of {@code a} on a GPU of {@code sms} SMs: row blocks of {@value #ROWS}; the positions in as many slices as
     * make at most one wave of blocks ({@link #resident} an SM), none shorter than {@value #MIN_POSITIONS} positions, at most
     * {@value #MAX_SPLITS} (the last block loads every slice's partial at once).
     */
    static Cut cut(Step.Attention a, int sms) {
        long[] q = a.q().shape().sizes();
        long len = a.keysT().shape().sizes()[2];
        int batch = (int) q[0], rowBlocks = (int) Math.ceilDiv(q[1], ROWS);
        long tiles = (long) batch * rowBlocks;
        long splits = Math.max(1, Math.min(Math.min((long) resident((int) q[2]) * sms / tiles, MAX_SPLITS), Math.ceilDiv(len, MIN_POSITIONS)));
        long per = Math.ceilDiv(Math.ceilDiv(len, splits), 8) * 8;   // a slice starts a 16-byte vector of a key row
        return new Cut(batch, rowBlocks, (int) Math.ceilDiv(len, per), per);
    }

    /** Loads the kernels of every attention step of {@code plan} now (where ranks share a GPU nothing may load mid-session). */
    void loadNow(Plan plan) {
        for (Step s : plan.steps()) if (s instanceof Step.Attention a) program.loadNow(kernel(a));
    }

    private static String kernel(Step.Attention a) {
        DType t = a.q().dtype();
        return "attention_" + (t == DType.FLOAT32 ? "f32" : t == DType.FLOAT16 ? "f16" : "bf16") + "_" + d(a);
    }

    /** One launch of {@code a} at these addresses; a bad position is reported in {@code fault} as plan step {@code step}. */
    void run(Step.Attention a, long q, long keysT, long values, long out, long position, DeviceFault fault, int step, Stream stream) {
        Cut c = cut(a, sms);
        int d = d(a);
        long len = a.keysT().shape().sizes()[2];
        int shared = (ROWS * CHUNK + 3 * ROWS + (THREADS / 32) * ROWS * Math.max(d, CHUNK)) * Float.BYTES;
        var config = new LaunchConfig(new Dim3(c.splits(), c.batch(), c.rowBlocks()), Dim3.of(THREADS), shared, stream);
        Programmatic.launch(program.kernel(kernel(a)), programmatic, config, q, keysT, values, out, position,
                a.position().dtype() == DType.INT64 ? 1 : 0, (int) a.q().shape().sizes()[1], len, (float) a.scale(), c.per(),
                scratch.address(), counters.address(), fault.claim(), fault.record(), step);
    }

    /** Frees the scratch and the counters (again: nothing). */
    @Override public void close() {
        try {
            counters.close();
        } finally {
            scratch.close();
        }
    }
}
