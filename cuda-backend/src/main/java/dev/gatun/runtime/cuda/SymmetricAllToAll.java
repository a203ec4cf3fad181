package dev.gatun.runtime.cuda;

/**
 * CUDA C of the all_to_all on symmetric memory ({@code all_to_all.symm_mem}), even and uneven, compiled with
 * {@link SymmetricKernels#SOURCE} (its barrier) and {@link DeviceFault#SOURCE} (its record).
 *
 * <p>Protocol (docs/DESIGN.md, "all-to-all"): the group's block barrier first, so every member's rows and row counts
 * are in its communication buffers and every member is at this step (nothing of an earlier step or call still uses
 * the receive buffer); then every block reads the members' counts (the peers' i64 vectors, through the heap: they
 * never go to the host), checks them by {@code AllToAllCounts}' rule in its order, and moves its share of the bytes:
 * <ul>
 *   <li><b>push</b> (an uneven all_to_all whose result is a receive buffer in symmetric memory): this rank writes its
 *   rows for member d straight into d's receive buffer, after the rows of the members before it there, and zeroes
 *   its own receive buffer after the rows it receives (disjoint from every push, the counts being the same everywhere);</li>
 *   <li><b>pull</b> (an even all_to_all, or an uneven one whose result is in regular memory): this rank copies its
 *   part of every member's rows out of that member's communication buffer into its result, then zeroes the rest.</li>
 * </ul>
 * The trailing block barrier is the signal: each block's release store of a new epoch into every member's pad, after
 * its pushes (or reads), and an acquire spin, bounded by the timeout, on its own pad for every member's. When the
 * kernel ends on a rank, every peer has pushed all its rows into this rank's receive buffer and read all it reads of
 * this rank's buffers: what the planner's "ends with a barrier" and its receive-buffer rule rely on. Epochs live in
 * device memory, so captured graphs replay in step and no host synchronisation is needed.
 *
 * <p>Counts that {@code AllToAllCounts} refuses (a negative count, a sender's counts past its rows, a receiver's rows
 * past the capacity) are never truncated: no block moves a byte, block 0 writes the executable's fault record (naming
 * the step, {@link DeviceFault#ALL_TO_ALL}), every block still meets the trailing barrier (so every member, each with
 * the same counts, has written its record before any traps: ranks that share a GPU share its context), and block 0
 * then traps. The call fails with the record's words.
 *
 * <p>Joined all_to_alls ({@code Step.JoinedAllToAll}, {@link #PARTS_KERNEL}): one launch, one starting barrier, each
 * part's counts read, checked and its rows moved in turn (the blocks' shared state reused part after part), one ending
 * barrier: what the separate kernels do with one barrier pair for all, where each alone had its own. A part's
 * refusal is recorded with its number (kind + 256 x part, so the record names the part's step line); that part and
 * the later ones move nothing (the counts are the same on every rank, so every rank stops at the same part), every
 * block still meets the ending barrier, and block 0 traps. The parts' fields are kernel parameters (no table in device
 * memory to fill before each launch, so a captured graph replays them as they are).
 */
final class SymmetricAllToAll {
    private SymmetricAllToAll() {}

    /**
     * The most members of an all_to_all's group: the kernel keeps the members' counts (a {@code world x world} i64
     * matrix, 8 KiB at 32) and each member's offsets in shared memory.
     */
    static final int MAX_WORLD = 32;

    /** The kernel's name in the module. */
    static final String KERNEL = "gatun_all_to_all";

    /** The joined all_to_alls' kernel ({@code Step.JoinedAllToAll}): one barrier pair around its parts' moves. */
    static final String PARTS_KERNEL = "gatun_all_to_all_parts";

    /** The most parts the joined kernel takes (its parameters hold four): the planner's largest batch. */
    static final int MAX_PARTS = dev.gatun.planner.PlanOptions.MAX_BATCH;

    /** {@code macro(0), macro(1), ...}: one for each of the joined kernel's parts. */
    static String each(String macro) {
        return String.join(", ", java.util.stream.IntStream.range(0, MAX_PARTS).mapToObj(i -> macro + "(" + i + ")").toList());
    }

    static final String SOURCE = """
            // ---- all_to_all on symmetric memory (SymmetricAllToAll)
            #define A2A_MAX_WORLD %d

            // rows member s sends member d: s's counts (i64, in its communication buffer), or even_rows for an even split
            __device__ __forceinline__ long long a2a_count(const char* const* count_peers, long long counts_off, long long even_rows, int s, int d) {
                return counts_off < 0 ? even_rows : ((const long long*) (count_peers[s] + counts_off))[d];
            }

            // AllToAllCounts.refusal's first finding in the counts cm (row s: member s's counts), in its order: 1 a negative
            // count (v: sender, count, receiver), 2 a sender's counts past its rows (sender, total, rows), 3 a receiver's rows
            // past the capacity (receiver, total, capacity); 0 when the counts are fine. Totals saturate instead of overflowing.
            __device__ int a2a_refusal(const long long* cm, int world, long long rows, long long capacity, long long* v) {
                for (int s = 0; s < world; s++) {
                    for (int d = 0; d < world; d++) {
                        long long c = cm[s * world + d];
                        if (c < 0) { v[0] = s; v[1] = c; v[2] = d; return 1; }
                    }
                    long long left = rows, total = 0;
                    bool over = false;
                    for (int d = 0; d < world; d++) {
                        long long c = cm[s * world + d];
                        over |= c > left;
                        if (!over) left -= c;
                        total = c > 0x7fffffffffffffffLL - total ? 0x7fffffffffffffffLL : total + c;
                    }
                    if (over) { v[0] = s; v[1] = total; v[2] = rows; return 2; }
                }
                for (int d = 0; d < world; d++) {
                    long long left = capacity, total = 0;
                    bool over = false;
                    for (int s = 0; s < world; s++) {
                        long long c = cm[s * world + d];
                        over |= c > left;
                        if (!over) left -= c;
                        total = c > 0x7fffffffffffffffLL - total ? 0x7fffffffffffffffLL : total + c;
                    }
                    if (over) { v[0] = d; v[1] = total; v[2] = capacity; return 3; }
                }
                return 0;
            }

            // bytes [0, n) of src to dst by every thread of the grid, in the widest words both addresses allow
            template <typename W> __device__ __forceinline__ long long a2a_move_words(const char* src, char* dst, long long n) {
                long long t = blockIdx.x * (long long) blockDim.x + threadIdx.x, stride = (long long) gridDim.x * blockDim.x, words = n / (long long) sizeof(W);
                for (long long k = t; k < words; k += stride) ((W*) dst)[k] = ((const W*) src)[k];
                return words * (long long) sizeof(W);
            }
            __device__ void a2a_move(const char* src, char* dst, long long n) {
                if (n <= 0) return;
                u64 both = ((u64) src) | ((u64) dst);
                long long done = (both & 15ull) == 0 ? a2a_move_words<uint4>(src, dst, n)
                        : (both & 7ull) == 0 ? a2a_move_words<u64>(src, dst, n)
                        : (both & 3ull) == 0 ? a2a_move_words<u32>(src, dst, n) : 0;
                long long t = blockIdx.x * (long long) blockDim.x + threadIdx.x, stride = (long long) gridDim.x * blockDim.x;
                for (long long k = done + t; k < n; k += stride) dst[k] = src[k];
            }
            __device__ void a2a_zero(char* dst, long long n) {
                if (n <= 0) return;
                long long t = blockIdx.x * (long long) blockDim.x + threadIdx.x, stride = (long long) gridDim.x * blockDim.x, done = 0;
                if ((((u64) dst) & 15ull) == 0) {
                    for (long long k = t; k < n / 16; k += stride) ((uint4*) dst)[k] = make_uint4(0u, 0u, 0u, 0u);
                    done = n / 16 * 16;
                }
                for (long long k = done + t; k < n; k += stride) dst[k] = 0;
            }

            // one part of the step: in_peers/in_off every member's rows; count_peers/counts_off its i64 counts (counts_off < 0:
            // an even split of even_rows rows a member); out_peers/out_off every member's receive buffer (push), or null and
            // out this rank's result (pull). rows: each member's input rows; capacity: the result's rows; row_bytes: bytes a row.
            struct a2a_part {
                const char* const* in_peers; long long in_off; const char* const* count_peers; long long counts_off;
                char* const* out_peers; long long out_off; char* out; long long rows, row_bytes, capacity, even_rows;
            };

            // what the blocks' threads share while they move one part (the next part reuses it)
            struct a2a_shared {
                long long cm[A2A_MAX_WORLD * A2A_MAX_WORLD], from_row[A2A_MAX_WORLD], to_row[A2A_MAX_WORLD], n_rows[A2A_MAX_WORLD];
                long long received;
                int refused;
            };

            // part number `part` of the step, between the barriers: every member's counts read and checked (a refusal recorded
            // once, its kind plus 256 times the part), then, where they are fine, its rows moved and the rest of this rank's
            // result zeroed. Returns the refusal's kind (0: moved), the same on every block and every rank.
            __device__ int a2a_move_part(const a2a_part& p, int part, int rank, int world, int* claim, gatun_fault* rec, int step, a2a_shared& sh) {
                const bool push = p.out_peers != nullptr;
                // every member's counts, read once and at once (remote loads in parallel, not one after another)
                for (int k = threadIdx.x; k < world * world; k += blockDim.x) sh.cm[k] = a2a_count(p.count_peers, p.counts_off, p.even_rows, k / world, k %% world);
                __syncthreads();
                if (threadIdx.x == 0) {
                    long long v[3] = {0, 0, 0};
                    int why = p.counts_off < 0 ? 0 : a2a_refusal(sh.cm, world, p.rows, p.capacity, v);
                    sh.refused = why;
                    if (why != 0 && blockIdx.x == 0 && claim != nullptr && atomicCAS(claim, 0, 1) == 0) {
                        volatile gatun_fault* r = rec;
                        r->v[0] = why + 256 * part; r->v[1] = v[0]; r->v[2] = v[1]; r->v[3] = v[2]; r->step = step;
                        __threadfence_system();
                        r->code = %d;
                        __threadfence_system();
                    }
                    long long got = 0;
                    for (int j = 0; j < world && why == 0; j++) {
                        // push: j is the receiver (this rank's rows for j, after the earlier senders' rows there); pull: the sender
                        int s = push ? rank : j, d = push ? j : rank;
                        long long f = 0, t = 0;
                        for (int k = 0; k < d; k++) f += sh.cm[s * world + k];
                        for (int k = 0; k < s; k++) t += sh.cm[k * world + d];
                        sh.from_row[j] = f;
                        sh.to_row[j] = t;
                        sh.n_rows[j] = sh.cm[s * world + d];
                        got += sh.cm[j * world + rank];
                    }
                    sh.received = got;
                }
                __syncthreads();
                const int refused = sh.refused;
                if (refused == 0) {
                    for (int i = 1; i <= world; i++) {
                        int j = (rank + i) %% world;   // the next member first: the members' traffic spreads over the links
                        const char* src = (push ? p.in_peers[rank] : p.in_peers[j]) + p.in_off + sh.from_row[j] * p.row_bytes;
                        char* dst = (push ? p.out_peers[j] + p.out_off : p.out) + sh.to_row[j] * p.row_bytes;
                        a2a_move(src, dst, sh.n_rows[j] * p.row_bytes);
                    }
                    char* mine = push ? p.out_peers[rank] + p.out_off : p.out;
                    a2a_zero(mine + sh.received * p.row_bytes, (p.capacity - sh.received) * p.row_bytes);
                }
                __syncthreads();   // the shared state is free for the next part
                return refused;
            }

            // one all_to_all: its part's fields as parameters (a2a_part's order)
            extern "C" __global__ void __launch_bounds__(512) gatun_all_to_all(
                    const char* const* in_peers, long long in_off, const char* const* count_peers, long long counts_off,
                    char* const* out_peers, long long out_off, char* out, long long rows, long long row_bytes, long long capacity,
                    long long even_rows, int rank, int world, u32* const* pads, u32* epochs, u64 timeout_ns, const volatile u32* abort,
                    int* claim, gatun_fault* rec, int step) {
                __shared__ a2a_shared sh;
                const a2a_part p = {in_peers, in_off, count_peers, counts_off, out_peers, out_off, out, rows, row_bytes, capacity, even_rows};
                // every member's rows and counts are in place, and every member is at this step
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                int refused = a2a_move_part(p, 0, rank, world, claim, rec, step, sh);
                // the signal: every member's rows for this rank have arrived (push), every member has read this rank's (pull)
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                if (refused != 0 && blockIdx.x == 0 && threadIdx.x == 0) __trap();
            }

            // joined all_to_alls (Step.JoinedAllToAll): `parts` of up to A2A_MAX_PARTS, each part's fields as parameters in
            // a2a_part's order (the unused ones zero), then what the one all_to_all takes after its part
            #define A2A_MAX_PARTS %d
            #define A2A_PART_PARAMS(i) const char* const* in_peers##i, long long in_off##i, const char* const* count_peers##i, \\
                    long long counts_off##i, char* const* out_peers##i, long long out_off##i, char* out##i, long long rows##i, \\
                    long long row_bytes##i, long long capacity##i, long long even_rows##i
            #define A2A_PART_OF(i) a2a_part{in_peers##i, in_off##i, count_peers##i, counts_off##i, out_peers##i, out_off##i, out##i, \\
                    rows##i, row_bytes##i, capacity##i, even_rows##i}
            extern "C" __global__ void __launch_bounds__(512) gatun_all_to_all_parts(int parts,
                    %s,
                    int rank, int world, u32* const* pads, u32* epochs, u64 timeout_ns, const volatile u32* abort,
                    int* claim, gatun_fault* rec, int step) {
                __shared__ a2a_shared sh;
                const a2a_part all[A2A_MAX_PARTS] = {%s};
                // one starting barrier for every part: every member's rows and counts of every part are in place
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                // the parts in order; a refused one moves nothing and stops the rest (its counts are the same on every rank)
                int refused = 0;
                for (int i = 0; i < parts && refused == 0; i++) refused = a2a_move_part(all[i], i, rank, world, claim, rec, step, sh);
                // one ending barrier: every part's rows for this rank have arrived, every member has read what it reads here
                block_barrier(pads, rank, world, epochs, timeout_ns, abort);
                if (refused != 0 && blockIdx.x == 0 && threadIdx.x == 0) __trap();
            }
            """.formatted(MAX_WORLD, DeviceFault.ALL_TO_ALL, MAX_PARTS, each("A2A_PART_PARAMS"), each("A2A_PART_OF"));
}
