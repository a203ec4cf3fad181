package dev.gatun.planner;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.planner.kernel.Kernel;

import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;

/**
 * The choices of how each step is launched that a GPU backend used to make by itself, made here so that the plan
 * text shows every one ({@link LaunchChoice}, printed on the step's line, in the fingerprint):
 * <ul>
 *   <li><b>Programmatic launch, per edge.</b> Where the plan's kernels are programmatic ({@link Plan#launches()}), each
 *   step that launches Gatun's own kernels (which start by waiting for the launch before them) is launched so; a library
 *   GEMM, a collective, a user op is not.</li>
 *   <li><b>The GEMV's form.</b> A product the few-row kernel takes ({@link Step.Matmul#gemv}): the tensor cores' kernel
 *   at 2 to 8 rows of a 16-bit type, the CUDA cores' at one row or float32 (measured on an H200: the faster of the two
 *   there); its rows cut into k-slices, doubled (to 16) while there are fewer than 16 warps for each multiprocessor of the
 *   target GPU ({@link PlanOptions.Target}) and each slice keeps at least one unrolled loop; and whether the weight's
 *   first loop is loaded before the wait (a weight no step of the call writes); launched programmatically, its grid
 *   capped at {@link #RESIDENT_WARPS} warps a multiprocessor where that is above 0 (measured: not on an H200).</li>
 *   <li><b>Attention's early load.</b> An attention whose launch before it is the update of its caches at its position
 *   (a graph input), or that is joined with that update, loads its position and cache slice before it waits.</li>
 *   <li><b>Attention's cut.</b> A decode step's attention is a warp for each slice of the cache and {@value #ATTENTION_ROWS}
 *   query rows: a slice is 32 positions (a lane each), or 16 or 8 with each position's dot product split over 2 or 4
 *   lanes (8 only where the plan options force it). The kernel's time at a short cache is one warp's chain (its loads,
 *   its reductions, the merge of the slices), not bandwidth: the slices are halved (to {@value #ATTENTION_FEWEST}
 *   positions) while the GPU has fewer than {@value #ATTENTION_WARPS_PER_SM} warps for each
 *   multiprocessor and the slices still merge in one round ({@value #ATTENTION_MERGE} at most: the merging warp reads
 *   the slices' maxima and sums a lane each). A long cache, or many query rows, keep 32: the GPU is full and fewer
 *   slices mean fewer float32 partials to write and merge.</li>
 *   <li><b>A row kernel's form</b> ({@link #rows}). A warp a row where the row is short and there are rows enough to
 *   give every multiprocessor of the target {@value #WARP_ROWS_PER_SM} warps: the row's length a constant and a
 *   multiple of the 16-byte vector of its widest element, at most {@value #WARP_MAX_ROW_BYTES} bytes of that element
 *   (bf16 1024 columns), and at least {@value #WARP_ROWS_PER_SM} rows for each multiprocessor. Else a block a row.
 *   Only a kernel the warp form can run takes it: a launch of its own (not a part of a fused collective or a product's
 *   epilogue, which run on their caller's blocks), every element store row-major, no fold of its rows, no table read
 *   through indices. Loading the next row ahead is a form the options may force, never the rule's.</li>
 * </ul>
 */
final class LaunchChoices {
    private LaunchChoices() {}

    /** The GEMV's constants (the CUDA backend's kernels: columns a warp's tile, 16-byte vectors a step, steps unrolled). */
    static final int MMA_COLS = 8, FMA_COLS = 4, MMA_STEP = 4, FMA_STEP = 32, MMA_UNROLL = 4, FMA_UNROLL = 2;
    static final int MAX_SLICES = 16, BLOCK_WARPS = 8, WARPS_PER_SM = 16;
    /**
     * The most warps a multiprocessor a programmatically launched GEMV keeps resident (0: no cap, the whole grid at
     * once). A grid capped so loops: a block computes several blocks' columns in turn, the same sums in the same order.
     * The cap was to leave the next kernel of a chain room to become resident, and its GEMV to issue its weight loads
     * before its wait, beside this one. Measured on an H200 (GemvChainBench, the Llama-3.2-1B decode products back to
     * back in a CUDA graph, bf16, one row, weights loaded before the wait, 2026-11-30), µs a layer of four products:
     * the whole grid 31.63 (3.85 TB/s; each product within 0.2 µs of a kernel streaming the same bytes, gate|up 0.8 µs
     * under it); capped at 8, 12, 16, 24 warps 45.68, 45.64, 37.60, 38.95. So no cap: the products were never short of
     * their streaming floor once they load ahead (the 1.5-1.8 µs gap first measured was the bench's products not loading
     * before the wait). The capped form stays for the bench and for targets where it may pay.
     */
    static final int RESIDENT_WARPS = 0;
    /** The attention's constants (the CUDA backend's kernel: query rows a warp; the rule's warps a multiprocessor, slices a merge round). */
    static final int ATTENTION_ROWS = 4, ATTENTION_WARPS_PER_SM = 4, ATTENTION_MERGE = 32;
    /**
     * The fewest positions a warp the rule halves to. Measured on an H200 (AttentionBench, bf16, heads of 64 and 128,
     * batch 1 and 8, caches 160 to 4096): 8 positions a warp was never the fastest cut and lost badly past 544; 16 was
     * the fastest at a cache of 160 in three of four shapes (by 0.3-0.6 µs a layer of 7-11).
     */
    static final int ATTENTION_FEWEST = 16;

    /**
     * The row form's constants. Measured on an H200 (`GpuSuite --row-forms`, each form forced, the fraction of a
     * device-to-device copy in the same process, 2026-11-30): at rows of 2 KB (bf16 1024 columns, 32768 rows) a warp a
     * row beat a block a row in LayerNorm (0.95 against 0.87) and softmax (0.92 against 0.79) and tied in RMSNorm
     * (0.99); at 4 KB (f32 1024) a block won every norm (1.00-1.03 against 0.89-0.98), and at 8 KB (bf16 4096 columns)
     * by far (0.72-0.94 against 0.43-0.73: a warp holding a whole 8 KB row takes 254 registers a thread, so few warps
     * are resident); at 16 KB a block holds what a warp cannot (f32 4096: 0.93-0.97 against 0.31-0.39, the warp
     * looping over its row). Loading the next row ahead in the warp form was slower than not in all three at 2 KB
     * (0.80-0.94). A warp holds at most {@value #WARP_HOLD_ROW_BYTES} bytes of a row (16 vectors a lane); loading
     * ahead holds two rows, at most half that. Below {@value #WARP_ROWS_PER_SM} rows a multiprocessor a block a row
     * spreads each row over more threads and keeps more of the GPU busy (not measured against the warp form).
     */
    static final int WARP_MAX_ROW_BYTES = 2048, WARP_HOLD_ROW_BYTES = 8192, WARP_ROWS_PER_SM = 8;

    /** Each step's choice, and each part's of a joined step, by identity; steps without one are absent. */
    static Map<Step, LaunchChoice> of(List<Step> steps, Plan.Launches launches, PlanOptions options) {
        PlanOptions.Target target = options.target();
        var out = new IdentityHashMap<Step, LaunchChoice>();
        boolean programmatic = launches.programmatic();
        for (int i = 0; i < steps.size(); i++) {
            Step s = steps.get(i);
            if (!s.isDeviceWork()) continue;   // placements and other bookkeeping (half the steps): nothing launched, plain
            for (Step p : s.parts()) if (p != s) put(out, p, choice(p, programmatic, false, null, options));
            put(out, s, choice(s, programmatic, early(steps, i), s instanceof Step.Launch l ? rows(l.kernel(), options) : null, options));
        }
        return out;
    }

    private static void put(Map<Step, LaunchChoice> out, Step s, LaunchChoice c) {
        if (!c.equals(LaunchChoice.PLAIN)) out.put(s, c);
    }

    private static LaunchChoice choice(Step s, boolean programmatic, boolean early, LaunchChoice.Rows rows, PlanOptions options) {
        LaunchChoice.Gemv gemv = switch (s) {
            case Step.Matmul m when m.gemv() -> gemv(m, options.target(), false, programmatic);
            case Step.TiledProduct t -> gemv(t.product(), options.target(), true, programmatic);
            default -> null;
        };
        AttentionCall a = attentionOf(s);
        LaunchChoice.Attention attention = a == null ? null : attention(a, early, options);
        return new LaunchChoice(programmatic && ownKernels(s), gemv, attention, rows);
    }

    /**
     * The form of row kernel {@code k} launched on its own ({@link LaunchChoice.Rows}), by the rule above or as the
     * options force it where the warp form can run it; null for a kernel without reductions.
     */
    static LaunchChoice.Rows rows(Kernel k, PlanOptions options) {
        if (!k.isReduction()) return null;
        String misfit = warpMisfit(k);
        if (misfit != null) return new LaunchChoice.Rows(false, false, "a block a row: " + misfit);
        long count = constant(k.reductionRanges()), rows = constant(k.ranges());
        int widest = widest(k);
        long bytes = count * widest;
        int sms = options.target().multiprocessors();
        String shape = (rows < 0 ? "a symbolic number of" : Long.toString(rows)) + " rows of " + count + " x " + widest + " B";
        switch (options.rowForm()) {
            case BLOCK -> { return new LaunchChoice.Rows(false, false, "a block a row, as the plan options ask: " + shape); }
            case WARP -> { return new LaunchChoice.Rows(true, false, "a warp a row, as the plan options ask: " + shape); }
            case WARP_AHEAD -> {
                // two rows held at once: at most half of what a warp holds (8 KB rows ahead spill, measured with nvcc -Xptxas -v)
                boolean two = count > 0 && bytes <= WARP_HOLD_ROW_BYTES / 2 && count % (16 / widest) == 0;
                return new LaunchChoice.Rows(true, two, "a warp a row" + (two ? " loading the next ahead" : "") + ", as the plan options ask: " + shape
                        + (two ? "" : " (not ahead: two such rows do not fit a warp's registers)"));
            }
            case AUTO -> { }
        }
        if (bytes > WARP_MAX_ROW_BYTES) return new LaunchChoice.Rows(false, false, "a block a row: " + shape + " is over " + WARP_MAX_ROW_BYTES + " B, where a block a row measured faster");
        if (count % (16 / widest) != 0)
            return new LaunchChoice.Rows(false, false, "a block a row: " + shape + " is not a whole number of 16-byte vectors");
        if (rows < (long) WARP_ROWS_PER_SM * sms)
            return new LaunchChoice.Rows(false, false, "a block a row: " + shape + ", under " + WARP_ROWS_PER_SM + " rows for each of " + sms + " multiprocessors");
        return new LaunchChoice.Rows(true, false, "a warp a row: " + shape + ", at most " + WARP_MAX_ROW_BYTES + " B, at least " + WARP_ROWS_PER_SM
                + " rows for each of " + sms + " multiprocessors");
    }

    /** Why the warp form cannot run row kernel {@code k}, or null where it can. */
    static String warpMisfit(Kernel k) {
        if (constant(k.reductionRanges()) <= 0) return "its rows' length is not a constant above 0";
        if (!k.folds().isEmpty()) return "it folds its rows' values";
        if (k.gathers()) return "it reads a table through indices";
        for (var st : k.stores()) if (!st.perRow() && !st.isRowMajor()) return "it stores " + st.buffer().name() + " through strides";
        return null;
    }

    /** The product of {@code xs}, or -1 where one is symbolic. */
    private static long constant(List<SymInt> xs) {
        long p = 1;
        for (SymInt x : xs) {
            if (!x.isConstant()) return -1;
            p = Math.multiplyExact(p, x.constant());
        }
        return p;
    }

    /** The widest element a row kernel reads or stores along its rows (its inputs and element stores, at most 16 bytes). */
    private static int widest(Kernel k) {
        int w = 1;
        for (var in : k.inputs()) w = Math.max(w, in.dtype().byteSize());
        for (var st : k.stores()) if (!st.perRow()) w = Math.max(w, st.buffer().dtype().byteSize());
        return Math.min(w, 16);
    }

    /** The attention step {@code s} launches: an attention call's, or one joined with the update of its caches; else null. */
    static AttentionCall attentionOf(Step s) {
        return switch (s) {
            case Step.OpCall o when AttentionCall.is(o) -> AttentionCall.of(o);
            case Step.UpdateAttention u -> u.attention();
            default -> null;
        };
    }

    /** {@code a}'s cut for the options' target (or as the options force it), and its early load. */
    static LaunchChoice.Attention attention(AttentionCall a, boolean early, PlanOptions options) {
        long[] q = a.q().shape().sizes();
        long tiles = q[0] * Math.ceilDiv(q[1], ATTENTION_ROWS), len = a.keysT().shape().sizes()[2];
        int sms = options.target().multiprocessors();
        if (options.attentionPositions() != 0) {
            int p = options.attentionPositions();
            return new LaunchChoice.Attention(p, early, p + " positions a warp, as the plan options ask: " + tiles + " tiles x "
                    + Math.ceilDiv(len, p) + " slices of a cache of " + len);
        }
        int p = attentionPositions(tiles, len, sms);
        long warps = tiles * Math.ceilDiv(len, p);
        String why = p + " positions a warp: " + tiles + " tiles (" + ATTENTION_ROWS + " query rows each) x " + Math.ceilDiv(len, p)
                + " slices of a cache of " + len + " = " + warps + " warps for " + sms + " multiprocessors"
                + (p == 32 ? "" : " (halved from 32 while under " + ATTENTION_WARPS_PER_SM + " warps a multiprocessor and at most "
                + ATTENTION_MERGE + " slices)");
        return new LaunchChoice.Attention(p, early, why);
    }

    /**
     * Positions a warp for {@code tiles} tiles of query rows over a cache of {@code len} on {@code sms} multiprocessors:
     * 32, halved (to {@value #ATTENTION_FEWEST} at least) while there are fewer than {@value #ATTENTION_WARPS_PER_SM} warps a multiprocessor and
     * the halved slices are at most {@value #ATTENTION_MERGE}.
     */
    static int attentionPositions(long tiles, long len, int sms) {
        int p = 32;
        while (p > ATTENTION_FEWEST && tiles * Math.ceilDiv(len, p) < (long) ATTENTION_WARPS_PER_SM * sms && Math.ceilDiv(len, p / 2) <= ATTENTION_MERGE) p /= 2;
        return p;
    }

    /** Whether {@code s} launches Gatun's own kernels only, each of which waits for the launch before it first. */
    static boolean ownKernels(Step s) {
        return switch (s) {
            case Step.Matmul m -> m.gemv();
            case Step.Launch l -> true;
            case Step.TiledProduct t -> true;
            case Step.OpCall o -> true;   // a registered op: the backend's own kernel, or refused at load
            case Step.UpdateSlices u -> true;
            case Step.UpdateAttention u -> true;
            default -> false;
        };
    }

    /**
     * The GEMV's form for {@code m}: the kernel, and (a plain product) its k-slices and warps a block on the target;
     * {@code tiled}: a product with epilogues, whose blocks its column tiles decide.
     */
    static LaunchChoice.Gemv gemv(Step.Matmul m, PlanOptions.Target target, boolean tiled, boolean programmatic) {
        DType t = m.a().dtype();
        long[] a = m.a().shape().sizes();
        int rows = (int) a[a.length - 2], k = (int) a[a.length - 1];
        long n = m.b().shape().sizes()[m.b().shape().rank() - 1];   // b is the weight's transposed view, [k, n]
        boolean mma = rows > 1 && t != DType.FLOAT32;
        var kind = m.b().storage().kind();
        boolean preload = kind == PlanBuffer.Kind.INPUT || kind == PlanBuffer.Kind.CONSTANT;
        int resident = programmatic ? RESIDENT_WARPS : 0;
        if (tiled) return new LaunchChoice.Gemv(mma, 0, 0, preload, resident);
        int slices = slices(t, mma, n, k, target.multiprocessors());
        return new LaunchChoice.Gemv(mma, slices, Math.max(BLOCK_WARPS, slices), preload, resident);
    }

    /**
     * k-slices of a product of {@code n} columns of length {@code k}: doubled while there are fewer than
     * {@value #WARPS_PER_SM} warps for each of {@code sms} multiprocessors and each slice keeps one unrolled loop.
     */
    static int slices(DType t, boolean mma, long n, int k, int sms) {
        int vectors = k / (16 / t.byteSize());
        long tiles = Math.ceilDiv(n, mma ? MMA_COLS : FMA_COLS);
        int steps = Math.ceilDiv(vectors, mma ? MMA_STEP : FMA_STEP), unroll = mma ? MMA_UNROLL : FMA_UNROLL;
        int slices = 1;
        while (slices < MAX_SLICES && tiles * slices < (long) WARPS_PER_SM * sms && steps / (2 * slices) >= unroll) slices *= 2;
        return slices;
    }

    /**
     * Whether the attention step {@code i} may load the position and its cache before it waits for the step before it:
     * that step is the update of its keys and values at its position (one position each, along the cache's positions),
     * the position is a graph input, and the update writes nothing else the attention reads. A decode step's layer: the
     * new key and value written, then attended to. The kernel loads the written position again after the wait.
     */
    static boolean early(List<Step> steps, int i) {
        if (!AttentionCall.is(steps.get(i)) && !(steps.get(i) instanceof Step.UpdateAttention)) return false;
        int before = i - 1;
        while (before >= 0 && !steps.get(before).isDeviceWork()) before--;
        if (steps.get(i) instanceof Step.UpdateAttention u) {
            // the update is this launch's own: early where the step before writes neither cache nor the position
            if (u.attention().position().storage().kind() != PlanBuffer.Kind.INPUT) return false;
            return before < 0 || !writesAny(steps.get(before), List.of(u.attention().keysT().storage(), u.attention().values().storage()));
        }
        // apart: early where the step before is the update the planner could have joined with it (the same rules)
        var a = AttentionCall.of((Step.OpCall) steps.get(i));
        return before >= 0 && steps.get(before) instanceof Step.UpdateSlices updates && Step.UpdateAttention.misfit(updates, a) == null
                && a.position().storage().kind() == PlanBuffer.Kind.INPUT;
    }

    /**
     * Whether step {@code s} writes any of {@code storages}, by the buffers it names as written ({@link Step#writes});
     * a collective may write more than it names (a barrier-free one pushes into its members' rotating slots) and a
     * user op is the user's code, so those are taken to write anything.
     */
    private static boolean writesAny(Step s, List<PlanBuffer> storages) {
        if (!s.collectives().isEmpty() || s instanceof Step.CallUserOp) return true;
        for (var w : s.writes()) if (storages.contains(w.storage())) return true;
        return false;
    }
}
