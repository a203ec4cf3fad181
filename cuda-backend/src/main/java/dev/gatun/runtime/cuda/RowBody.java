package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.planner.LaunchChoice;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.cuda.CudaExpressions.Domain;
import dev.gatun.runtime.cuda.KernelScope.RowAccess;

import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;
import java.util.function.Function;

import static dev.gatun.runtime.cuda.CudaCodegen.storageType;
import static dev.gatun.runtime.cuda.CudaCodegen.valueType;
import static dev.gatun.runtime.cuda.CudaExpressions.identity;
import static dev.gatun.runtime.cuda.CudaExpressions.strip;
import static dev.gatun.runtime.cuda.KernelScope.aligned;
import static dev.gatun.runtime.cuda.KernelScope.loadsOf;

/**
 * The body of a row kernel (reductions with the pointwise work around them): one block per row (grid-stride over rows),
 * each thread accumulating its part of the row, then warp shuffles, one partial per warp in shared memory, one
 * barrier, and every thread folds the partials in the same order. A row of constant length that fits is loaded once
 * into registers (16-byte vectors where aligned, about 16 elements a thread) and later phases read it there; weights
 * shared by every row come in as vectors per chunk; an element value a later phase needs again may be kept in
 * registers too ({@link PhasePlan}). Without a fixed block size the block is a multiple of 32 (see
 * {@link KernelSource#geometry}); any reduction length, including 0, works. A row kernel whose element store is
 * transposed is written by {@link TiledRowBody} instead; the per-row stores are written here for both.
 *
 * <p><b>A warp a row.</b> Where the plan says so ({@code LaunchChoice.Rows}, {@code rows[warp]}), each warp takes its
 * own rows: blocks of {@value #WARP_BLOCK_WARPS} warps, the grid the blocks resident at once, each warp going over rows
 * {@code blockIdx.x * warps + warp}, then a grid's warps on. A row held in registers is at most {@value #WARP_MAX_CHUNKS}
 * vectors a lane (a 16-bit row stays packed, two values a register, converted per phase); each phase folds its lane's
 * elements, then the same shuffle tree as a block's warp ({@code __shfl_down_sync}, halving), and lane 0's value goes
 * to every lane by one more shuffle: no shared memory, no barrier, so a warp's loads never wait on another warp. Its
 * sums differ from the block form's only in which elements each thread folds first (a lane takes every 32nd vector, a
 * block's thread every blockDim-th), float32 either way. Values kept for a later phase only while a lane holds at most
 * {@value #WARP_KEEP_MAX_ELEMENTS} elements (softmax over 4096 bf16 columns would keep 128 floats a lane: computed
 * again instead). With {@code rows[warp, ahead]} a warp loads its next row before it reduces this one. A row too
 * long to hold (over 16 vectors a lane, or elements where it is not a whole number of vectors: over 512 of them; only
 * where the plan options force the form) is looped over by the warp's lanes.
 */
final class RowBody {
    private final KernelScope scope;
    private final CudaExpressions ex;
    private final Kernel k;
    private final DType[] inTypes, outTypes;
    private final int rank, dims;
    private final boolean tile;
    /** A warp a row ({@code rows[warp]}), and loading its next row ahead ({@code rows[warp, ahead]}). */
    private final boolean warp, ahead;

    /**
     * The longest row (bytes of its widest input) a block loads ahead ({@link #prefetch}). Measured on an H200
     * (bf16, 32768 rows): RMSNorm over 1024 columns (2 KB rows) went from 0.87 to 0.99 of a copy's bandwidth; rows of
     * 4 KB and more (f32 1024, any 4096) and rows with a value kept for a later phase (softmax's exponentials, 59
     * registers a thread) got slower: the fewer blocks resident and the last rows' uneven share cost more than the
     * overlap gives.
     */
    static final int PREFETCH_MAX_ROW_BYTES = 2048;

    /** Most vectors a thread holds per input; longer rows are looped over. */
    static final int MAX_ROW_CHUNKS = 8;

    /** The warp form's warps a block, vectors a lane per input at most, and elements a lane at most with values kept. */
    static final int WARP_BLOCK_WARPS = 4, WARP_MAX_CHUNKS = 16, WARP_KEEP_MAX_ELEMENTS = 32;

    /** The distinct loads of the inputs read along the row ({@code "input|base"}), held in registers where the row is. */
    private final List<String> along = new ArrayList<>();
    private final List<KExpr.Load> alongLoads = new ArrayList<>();
    /** The distinct loads of weights shared by every row, read along the row as a vector per chunk. */
    private final List<String> weights = new ArrayList<>();
    private final List<KExpr.Load> weightLoads = new ArrayList<>();
    /** Threads per block, vectors per thread and elements per vector of a row kept in registers; 0 when looped. */
    private int rowBlock, rowChunks, rowVector = 1;
    /** Whether the row is held in registers. */
    private final boolean held;
    /**
     * Whether each block loops over rows and loads its next row while it works on this one (a row held in registers
     * as vectors, not a tile's): the grid is then sized to the blocks resident at once ({@link KernelSource#persistent}).
     */
    private boolean prefetch;
    /** How many element values a row kernel keeps in registers for later phases (see {@link PhasePlan}). */
    private int keptValues;

    RowBody(KernelScope scope, CudaExpressions ex, LaunchChoice.Rows form) {
        if (form != null && form.warp() && scope.tile) throw new IllegalStateException("kernel " + scope.k.name() + " runs on its caller's blocks: it has no warp form");
        warp = form != null && form.warp();
        ahead = warp && form.ahead();
        this.scope = scope;
        this.ex = ex;
        k = scope.k;
        inTypes = scope.inTypes;
        outTypes = scope.outTypes;
        rank = scope.rank;
        dims = scope.dims;
        tile = scope.tile;
        holdInRegisters(alongTheRow());
        held = rowBlock > 0;
        // a weight shared by every row (LayerNorm's scale and shift), read along the row as a vector per chunk
        if (held && rowVector > 1)
            for (KExpr.Load l : scope.loads())
                if (scope.rowAccess(l) == RowAccess.ALONG && !scope.movesWithRow(l) && !weights.contains(l.input() + "|" + scope.rowBase(l))) {
                    weights.add(l.input() + "|" + scope.rowBase(l));
                    weightLoads.add(l);
                }
    }

    /** Notes the inputs read along the row; returns the widest element size along the row, theirs and the element stores'. */
    private int alongTheRow() {
        int widest = 1;
        // inputs read along the row are held in registers; a weight shared by every row is read from cache instead
        for (KExpr.Load l : scope.loads())
            if (scope.rowAccess(l) == RowAccess.ALONG && scope.movesWithRow(l)) {
                String key = l.input() + "|" + scope.rowBase(l);
                if (!along.contains(key)) {
                    along.add(key);
                    alongLoads.add(l);
                    widest = Math.max(widest, inTypes[l.input()].byteSize());
                }
            }
        for (int s = 0; s < outTypes.length; s++) if (!k.stores().get(s).perRow() && k.stores().get(s).isRowMajor()) widest = Math.max(widest, outTypes[s].byteSize());
        return widest;
    }

    /** Chooses how a row of constant length that fits is held in registers (rowBlock stays 0 where it is looped over). */
    private void holdInRegisters(int widest) {
        SymInt countSym = SymInt.ONE;
        for (SymInt r : k.reductionRanges()) countSym = countSym.times(r);
        rowBlock = 0;
        if (countSym.isConstant() && countSym.constant() > 0) {
            long count = countSym.constant();
            int vw = 16 / widest;
            if (vw < 2 || count % vw != 0 || alongLoads.isEmpty()) vw = 1;
            long vectors = count / vw;
            if (warp) {
                if (vectors > 32L * WARP_MAX_CHUNKS) return;
                rowVector = vw;
                rowBlock = 32;
                rowChunks = (int) Math.ceilDiv(vectors, 32);
                return;
            }
            if (vectors <= 1024L * MAX_ROW_CHUNKS) {
                // about 16 elements a thread (4 vectors of f32, 2 of a half type): more threads share a row of
                // short elements, so each row's chain of phases is as short as a float row's (measured on an H100:
                // 32 bf16 elements a thread, or 8, are both slower at 4096 columns)
                int target = Math.clamp(16 / vw, 1, 4);
                int block = (int) Math.clamp((Math.ceilDiv(vectors, target) + 31) / 32 * 32, 32, 1024);
                // a tile function runs on its caller's block: the row is spread over that many threads, or looped over
                if (scope.tileBlock > 0) block = scope.tileBlock;
                if (Math.ceilDiv(vectors, block) > MAX_ROW_CHUNKS) return;
                rowVector = vw;
                rowBlock = block;
                rowChunks = (int) Math.ceilDiv(vectors, block);
            }
        }
    }

    /**
     * A row kernel: one block per row (grid-stride over rows). When the row's length is a constant and fits, each
     * thread first loads its elements of every input read along the row into registers (16-byte vectors where
     * aligned), so the phases read registers and the row comes from memory once; otherwise each phase loops over
     * the row reading memory. Each phase folds its reduction, then a tree (warp shuffles, one partial per warp in
     * shared memory, a last shuffle) gives the result to every thread through shared memory; the last phase stores
     * the elements, thread 0 the per-row values.
     */
    KernelLayout write() {
        int phases = k.reductions().size();
        scope.extents();
        scope.line(1, "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;", "blockDim.x is a multiple of 32");
        if (!warp)
            for (int p = 0; p < phases; p++) {
                var r = k.reductions().get(p);
                Domain acc = Domain.of(k.locals().get(r.local()).dtype());
                scope.line(1, "__shared__ " + acc.c + " gt_part" + p + "[32];", "reduction r" + p + ": one partial per warp");
            }
        var plan = new PhasePlan(scope, held && (!warp || rowChunks * rowVector <= WARP_KEEP_MAX_ELEMENTS));
        for (boolean kept : plan.kept) if (kept) keptValues++;
        prefetch = warp ? ahead && held
                : held && !tile && rowVector > 1 && keptValues == 0 && (long) rowChunks * rowBlock * 16 <= PREFETCH_MAX_ROW_BYTES;
        if (prefetch) loadFirstRow();
        if (tile) scope.line(1, "for (long long o = gt_lo; o < gt_hi; o++) {", "the rows of this block's tile");
        else if (warp) scope.line(1, "for (long long o = " + firstRow() + "; o < total; o += " + rowStride() + ") {", "this warp's rows, one at a time");
        else scope.line(1, "for (long long o = blockIdx.x; o < total; o += gridDim.x) {", prefetch ? "the block's rows, one at a time" : "one row per block");
        if (prefetch) {
            loadNextRow();
            unravelMaybeUnused(2);
        } else scope.unravel(2, "o", 0, rank);
        Function<KExpr.Load, String> load = held ? loadRow() : l -> switch (scope.rowAccess(l)) {
            case ALONG -> "in" + l.input() + "[" + scope.rowBase(l) + " + r]";
            case ROW -> "in" + l.input() + "[" + scope.rowBase(l) + "]";
            case GENERAL -> "in" + l.input() + "[" + scope.index(l) + "]";
        };
        for (int i = 0; i < plan.kept.length; i++)
            if (plan.kept[i]) scope.line(2, rowArray(k.held(k.locals().get(i).dtype()), "gt_k" + i), "t" + i + " for the later phases, this thread's elements");
        for (int p = 0; p < phases; p++) {
            if (p > 0) opaqueRow();
            phase(plan, p, load);
        }
        if (k.stores().stream().anyMatch(st -> !st.perRow())) {
            if (phases > 0) opaqueRow();
            elementStores(plan, load);
        }
        if (k.stores().stream().anyMatch(Kernel.Store::perRow)) {
            scope.line(2, warp ? "if (lane == 0) {" : "if (threadIdx.x == 0) {", "what is one value per row");
            rowStores(scope, ex, 3, load, rowStoreNeeds(k));
            scope.line(2, "}", null);
        }
        if (!warp) scope.line(2, "__syncthreads();", "shared memory is reused by the next row");
        if (prefetch) {
            scope.line(2, "#pragma unroll", null);
            scope.line(2, "for (int j = 0; j < " + rowChunks + "; j++) {", "the next row becomes this one");
            for (int q = 0; q < alongLoads.size(); q++) scope.line(3, "gt_c" + q + "[j] = gt_n" + q + "[j];", null);
            scope.line(2, "}", null);
        }
        scope.line(1, "}", null);
        return KernelLayout.rows(rowBlock, rowChunks, rowVector, keptValues, prefetch, warp ? WARP_BLOCK_WARPS : 0);
    }

    /**
     * Before a later phase of a warp a row holding its row: the row's registers marked as changed ({@code gt_opaque}, no
     * instruction), so the compiler converts the 16-bit values and computes the element values again in this phase
     * rather than holding an earlier phase's (measured with {@code nvcc -Xptxas -v}: RMSNorm over 4096 bf16 columns held
     * 236 registers a thread without it, 128 floats for 64 registers of packed row).
     */
    private void opaqueRow() {
        if (!warp || !held || alongLoads.isEmpty()) return;
        scope.helpers.add("opaque");
        var calls = new ArrayList<String>();
        for (int q = 0; q < alongLoads.size(); q++) calls.add("gt_opaque(gt_c" + q + "[j]);");
        scope.line(2, "#pragma unroll", null);
        scope.line(2, "for (int j = 0; j < " + rowChunks + "; j++) { " + String.join(" ", calls) + " }", "this phase converts the row again: nothing held from the last");
    }

    /** The first row this block (a block a row) or warp (a warp a row) takes. */
    private String firstRow() { return warp ? "(long long) blockIdx.x * warps + warp" : "(long long) blockIdx.x"; }

    /** Rows from one of its rows to its next. */
    private String rowStride() { return warp ? "(long long) gridDim.x * warps" : "gridDim.x"; }

    /** This thread's index among those sharing a row. */
    private String tid() { return warp ? "lane" : "threadIdx.x"; }

    /**
     * Loads this thread's elements of the row of every input read along it into registers, once; returns how the
     * phases read a load: from those registers, a weight's vector of the chunk, or memory.
     */
    private Function<KExpr.Load, String> loadRow() {
        int vw = rowVector;
        if (!prefetch) {
            declareRow(2, "gt_c", null);
            vectorCheck(2);
        }
        if (vw > 1 && !weights.isEmpty()) {
            var checks = new ArrayList<String>();
            for (KExpr.Load l : weightLoads) checks.add(aligned("(in" + l.input() + " + " + scope.rowBase(l) + ")", inTypes[l.input()], vw));
            scope.line(2, "const bool gt_wvectors = " + String.join(" && ", checks.stream().distinct().toList()) + ";", "weights shared by the rows, read as vectors too");
        }
        if (!prefetch) loadLoop(2, "gt_c");
        return l -> switch (scope.rowAccess(l)) {
            case ALONG -> scope.movesWithRow(l) ? rowElement("gt_c" + along.indexOf(l.input() + "|" + scope.rowBase(l)))
                    : weights.contains(l.input() + "|" + scope.rowBase(l)) ? "gt_w" + weights.indexOf(l.input() + "|" + scope.rowBase(l)) + ".e[l]"
                    : "in" + l.input() + "[" + scope.rowBase(l) + " + r]";
            case ROW -> "in" + l.input() + "[" + scope.rowBase(l) + "]";
            case GENERAL -> "in" + l.input() + "[" + scope.index(l) + "]";
        };
    }

    /** Before the loop over rows: the arrays of this row, and the block's first row loaded into them. */
    private void loadFirstRow() {
        declareRow(1, "gt_c", null);
        scope.line(1, "if (" + firstRow() + " < total) {", "the first row");
        scope.line(2, "const long long o = " + (warp ? firstRow() : "blockIdx.x") + ";", null);
        unravelMaybeUnused(2);
        loadInto(2, "gt_c");
        scope.line(1, "}", null);
    }

    /** At the top of a turn: the next row's arrays, loaded (where there is a next row) while this one is worked on. */
    private void loadNextRow() {
        declareRow(2, "gt_n", "the next row's, loaded while this one is worked on");
        scope.line(2, "if (o + " + rowStride() + " < total) {", null);
        scope.line(3, "const long long gt_next = o + " + rowStride() + ";", null);
        scope.line(3, "{", null);
        scope.line(4, "const long long o = gt_next;", null);
        unravelMaybeUnused(4);
        loadInto(4, "gt_n");
        scope.line(3, "}", null);
        scope.line(2, "}", null);
    }

    /** The arrays {@code <prefix><q>} of this thread's part of a row of each input read along it; {@code note} null: "x's row". */
    private void declareRow(int indent, String prefix, String note) {
        for (int q = 0; q < alongLoads.size(); q++) {
            KExpr.Load l = alongLoads.get(q);
            scope.line(indent, rowArray(inTypes[l.input()], prefix + q), note != null ? note : k.inputs().get(l.input()).name() + "'s row, this thread's elements");
        }
    }

    /** Row {@code o}'s digits, each marked used: a loop of rows loaded ahead may read none of them after the loads. */
    private void unravelMaybeUnused(int indent) {
        scope.unravel(indent, "o", 0, rank);
        var digits = new ArrayList<String>(List.of("(void) o;"));
        for (int d = 0; d < rank; d++) if (scope.usedDims.contains(d)) digits.add("(void) i" + d + ";");
        scope.line(indent, String.join(" ", digits), null);
    }

    /**
     * This thread's elements of the row (the one whose digits are declared) of every input read along it, into the
     * arrays {@code <prefix><q>}: 16-byte vectors where every row base is aligned, elements otherwise.
     */
    private void loadInto(int indent, String prefix) {
        vectorCheck(indent);
        loadLoop(indent, prefix);
    }

    /** {@code gt_vectors}: whether the row's loads are 16-byte aligned, so it is read as vectors. */
    private void vectorCheck(int indent) {
        if (rowVector == 1) return;
        var checks = new ArrayList<String>();
        for (KExpr.Load l : alongLoads) checks.add(aligned("(in" + l.input() + " + " + scope.rowBase(l) + ")", inTypes[l.input()], rowVector));
        scope.line(indent, "const bool gt_vectors = " + String.join(" && ", checks.stream().distinct().toList()) + ";", null);
    }

    /** The loop loading this thread's chunks of the row into {@code <prefix><q>[j]}. */
    private void loadLoop(int indent, String prefix) {
        int vw = rowVector;
        scope.line(indent, "#pragma unroll", null);
        scope.line(indent, "for (int j = 0; j < " + rowChunks + "; j++) {", "load the row once");
        scope.line(indent + 1, "const long long r0 = ((long long) j * " + rowBlock + " + " + tid() + ") * " + vw + ";", null);
        scope.line(indent + 1, "if (r0 < count) {", null);
        for (int q = 0; q < alongLoads.size(); q++) {
            KExpr.Load l = alongLoads.get(q);
            String base = "in" + l.input() + " + " + scope.rowBase(l) + " + r0";
            String st = storageType(inTypes[l.input()]);
            if (vw > 1) {
                String v = "gt_vec<" + st + ", " + vw + ">";
                scope.line(indent + 2, "if (gt_vectors) " + prefix + q + "[j] = *reinterpret_cast<const " + v + "*>(" + base + ");", null);
                scope.line(indent + 2, "else for (int l = 0; l < " + vw + "; l++) " + prefix + q + "[j].e[l] = (" + base + ")[l];", null);
            } else {
                scope.line(indent + 2, prefix + q + "[j] = *(" + base + ");", null);
            }
        }
        scope.line(indent + 1, "}", null);
        scope.line(indent, "}", null);
    }

    /** Phase p: its reduction over this thread's elements, then across the block; every thread gets the result {@code rd<p>}. */
    private void phase(PhasePlan plan, int p, Function<KExpr.Load, String> load) {
        var r = k.reductions().get(p);
        KExpr folded = k.locals().get(r.local());
        Domain acc = Domain.of(folded.dtype());
        String init = identity(r.fn(), acc);
        scope.line(2, valueType(r.dtype()) + " rd" + p + ";", "r" + p + " = " + r.fn().opName() + " of t" + r.local());
        scope.line(2, "{", null);
        scope.line(3, acc.c + " acc = " + init + ";", null);
        rowLocals(plan, 3, p, load);
        boolean digits = plan.usesDigits(p, false);
        elementLoop(3, digits || readsAlongUncached(plan, p), digits, () -> weightVectors(plan, p), () -> {
            int in = held ? 6 : 4;
            elementLocals(plan, in, p, load);
            scope.line(in, "acc = " + ex.combine(r.fn(), acc, "acc", ex.convert("t" + r.local(), folded.dtype(), acc.type)) + ";", null);
        }, () -> { });
        scope.line(3, "for (int d = 16; d > 0; d >>= 1) acc = " + ex.combine(r.fn(), acc, "acc", "__shfl_down_sync(0xffffffffu, acc, d)") + ";", "within each warp");
        if (warp) {
            scope.line(3, "acc = __shfl_sync(0xffffffffu, acc, 0);", "lane 0's, to every lane: no shared memory, no barrier");
            scope.line(3, "rd" + p + " = " + ex.result(r, acc, "acc") + ";", "rounded to " + k.held(r.dtype()));
            scope.line(2, "}", null);
            return;
        }
        scope.line(3, "if (lane == 0) gt_part" + p + "[warp] = acc;", null);
        scope.line(3, "__syncthreads();", "one barrier: then every thread folds the warps' partials, in the same order");
        scope.line(3, "acc = gt_part" + p + "[0];", null);
        scope.line(3, "for (int w = 1; w < warps; w++) acc = " + ex.combine(r.fn(), acc, "acc", "gt_part" + p + "[w]") + ";", null);
        scope.line(3, "rd" + p + " = " + ex.result(r, acc, "acc") + ";", "rounded to " + k.held(r.dtype()));
        scope.line(2, "}", null);
    }

    /** The last phase: the row's element values and their stores (row-major ones of a row held in registers as vectors). */
    private void elementStores(PhasePlan plan, Function<KExpr.Load, String> load) {
        int phases = k.reductions().size();
        scope.line(2, "// the row's elements", null);
        scope.line(2, "{", null);
        rowLocals(plan, 3, phases, load);
        // row-major stores of a row held in registers go out as vectors, gathered over l
        var vectored = new ArrayList<Integer>();
        for (int s = 0; s < outTypes.length; s++)
            if (held && rowVector > 1 && !k.stores().get(s).perRow() && k.stores().get(s).isRowMajor()) vectored.add(s);
        Runnable before = () -> {
            weightVectors(plan, phases);
            for (int s : vectored) scope.line(5, "gt_vec<" + storageType(outTypes[s]) + ", " + rowVector + "> gt_y" + s + ";", null);
        };
        Runnable after = () -> {
            for (int s : vectored) {
                String base = "out" + s + " + o * count + r0";
                String v = "gt_vec<" + storageType(outTypes[s]) + ", " + rowVector + ">";
                scope.line(4, "if " + aligned("(" + base + ")", outTypes[s], rowVector) + " *reinterpret_cast<" + v + "*>(" + base + ") = gt_y" + s + ";", k.stores().get(s).buffer().name());
                scope.line(4, "else for (int l = 0; l < " + rowVector + "; l++) (" + base + ")[l] = gt_y" + s + ".e[l];", null);
            }
        };
        boolean digits = plan.usesDigits(phases, true);
        elementLoop(2, digits || readsAlongUncached(plan, phases) || k.stores().stream().filter(st -> !st.perRow()).count() > vectored.size(),
                digits, before, () -> {
            int in = held ? 6 : 4;
            elementLocals(plan, in, phases, load);
            for (int s = 0; s < outTypes.length; s++) {
                var st = k.stores().get(s);
                if (st.perRow()) continue;
                String v = ex.store("t" + st.local(), k.locals().get(st.local()).dtype(), outTypes[s]);
                if (vectored.contains(s)) scope.line(in, "gt_y" + s + ".e[l] = " + v + ";", st.buffer().name());
                else scope.line(in, "out" + s + "[" + scope.place(st, "o * count + r", 0) + "] = " + v + ";", st.buffer().name());
            }
        }, after);
        scope.line(2, "}", null);
    }

    /**
     * A thread's part of a row held in registers: an array of its vectors (8 bf16 values then sit in 4 registers,
     * two to a register, not in 8), or of elements where there are no vectors.
     */
    private String rowArray(DType t, String name) {
        return rowVector > 1 ? "gt_vec<" + storageType(t) + ", " + rowVector + "> " + name + "[" + rowChunks + "];"
                : storageType(t) + " " + name + "[" + rowChunks + "];";
    }

    /** Element {@code l} of chunk {@code j} of a {@link #rowArray}. */
    private String rowElement(String name) { return rowVector > 1 ? name + "[j].e[l]" : name + "[j]"; }

    /** Loads this chunk's vector of each weight that phase {@code q} reads (its element {@code l} is {@code gt_w<n>.e[l]}). */
    private void weightVectors(PhasePlan plan, int q) {
        var used = new TreeSet<Integer>();
        for (int i = 0; i < plan.element.length; i++)
            if (plan.compute[q][i] && plan.element[i])
                for (KExpr.Load l : loadsOf(k.locals().get(i))) {
                    int w = weights.indexOf(l.input() + "|" + scope.rowBase(l));
                    if (w >= 0) used.add(w);
                }
        for (int w : used) {
            KExpr.Load l = weightLoads.get(w);
            String v = "gt_vec<" + storageType(inTypes[l.input()]) + ", " + rowVector + ">", base = "in" + l.input() + " + " + scope.rowBase(l) + " + r0";
            scope.line(5, v + " gt_w" + w + ";", k.inputs().get(l.input()).name() + ", this chunk's elements");
            scope.line(5, "if (gt_wvectors) gt_w" + w + " = *reinterpret_cast<const " + v + "*>(" + base + ");", null);
            scope.line(5, "else for (int l = 0; l < " + rowVector + "; l++) gt_w" + w + ".e[l] = (" + base + ")[l];", null);
        }
    }

    /** Whether phase q reads along the row from memory element by element (a looped row, or a weight where there are no vectors). */
    private boolean readsAlongUncached(PhasePlan plan, int q) {
        return plan.reads(q, l -> scope.rowAccess(l) == RowAccess.ALONG && (rowBlock == 0 || !scope.movesWithRow(l) && rowVector == 1));
    }

    /** Phase q's row values (once per row, before its loop over the elements). */
    private void rowLocals(PhasePlan plan, int indent, int q, Function<KExpr.Load, String> load) {
        for (int i = 0; i < plan.element.length; i++)
            if (plan.compute[q][i] && !plan.element[i])
                scope.line(indent, "const " + valueType(k.locals().get(i).dtype()) + " t" + i + " = " + strip(ex.expr(k.locals().get(i), load)) + ";",
                        "t" + i + " = " + k.format(k.locals().get(i)) + " (once per row)");
    }

    /** Phase q's element values (in its loop): computed, and kept where a later phase reads them, or read where kept. */
    private void elementLocals(PhasePlan plan, int indent, int q, Function<KExpr.Load, String> load) {
        for (int i = 0; i < plan.element.length; i++) {
            if (!plan.element[i]) continue;
            String t = valueType(k.locals().get(i).dtype());
            // a half value is kept in its storage type (exactly: it is representable), half the registers
            DType dt = k.held(k.locals().get(i).dtype());
            String held = rowElement("gt_k" + i);
            if (plan.fromKept[q][i]) scope.line(indent, "const " + t + " t" + i + " = " + (dt == DType.FLOAT16 ? "__half2float(" + held + ")"
                    : dt == DType.BFLOAT16 ? "__bfloat162float(" + held + ")" : held) + ";", "t" + i + ", kept from phase " + plan.first[i]);
            else if (plan.compute[q][i]) {
                scope.line(indent, "const " + t + " t" + i + " = " + strip(ex.expr(k.locals().get(i), load)) + ";", "t" + i + " = " + k.format(k.locals().get(i)));
                if (plan.kept[i] && plan.first[i] == q) scope.line(indent, held + " = " + ex.store("t" + i, dt, dt) + ";", null);
            }
        }
    }

    /**
     * The loop over this thread's elements of the row: {@code r} is the element's position in the row (declared where
     * {@code needsR}), its digits declared where {@code digits}. A row held in registers goes chunk by chunk
     * ({@code j}) and within each over the vector's elements ({@code l}), running {@code before} and {@code after}
     * around each chunk's elements; a looped row goes element by element.
     */
    private void elementLoop(int indent, boolean needsR, boolean digits, Runnable before, Runnable body, Runnable after) {
        if (held) {
            scope.line(indent, "#pragma unroll", null);
            scope.line(indent, "for (int j = 0; j < " + rowChunks + "; j++) {", null);
            scope.line(indent + 1, "const long long r0 = ((long long) j * " + rowBlock + " + " + tid() + ") * " + rowVector + ";", null);
            scope.line(indent + 1, "if (r0 < count) {", null);
            before.run();
            scope.line(indent + 2, "#pragma unroll", null);
            scope.line(indent + 2, "for (int l = 0; l < " + rowVector + "; l++) {", null);
            if (needsR) scope.line(indent + 3, "const long long r = r0 + l;", null);
            if (digits) scope.unravel(indent + 3, "r", rank, dims);
            body.run();
            scope.line(indent + 2, "}", null);
            after.run();
            scope.line(indent + 1, "}", null);
            scope.line(indent, "}", null);
        } else {
            scope.line(indent, warp ? "for (long long r = lane; r < count; r += 32) {" : "for (long long r = threadIdx.x; r < count; r += blockDim.x) {", null);
            if (digits) scope.unravel(indent + 1, "r", rank, dims);
            body.run();
            scope.line(indent, "}", null);
        }
    }

    /** The locals the per-row stores need that are one value per row (what they read, not the row's elements). */
    static boolean[] rowStoreNeeds(Kernel k) {
        boolean[] element = k.perElement(), needs = new boolean[k.locals().size()];
        for (var st : k.stores()) if (st.perRow()) needs[st.local()] = true;
        k.withReads(needs);
        for (int i = 0; i < needs.length; i++) needs[i] &= !element[i];
        return needs;
    }

    /** The per-row values ({@code needs}, from {@link #rowStoreNeeds}) and their stores at the row {@code o}. */
    static void rowStores(KernelScope scope, CudaExpressions ex, int indent, Function<KExpr.Load, String> load, boolean[] needs) {
        Kernel k = scope.k;
        ex.locals(indent, load, needs);
        for (int s = 0; s < scope.outTypes.length; s++) {
            var st = k.stores().get(s);
            if (st.perRow()) scope.line(indent, "out" + s + "[" + scope.place(st, "o", 0) + "] = " + ex.store("t" + st.local(), k.locals().get(st.local()).dtype(), scope.outTypes[s]) + ";", st.buffer().name());
        }
    }
}
