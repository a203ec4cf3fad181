package dev.gatun.planner;

import java.util.StringJoiner;

/**
 * How a backend launches one step, as the planner decided it ({@code LaunchChoices}): printed on the step's line
 * ({@code # launch: programmatic, gemv[fma, slices=4, warps=8, preload, resident=16]}, {@code attention[early, positions=8, lanes=4]}) and so
 * covered by the plan's fingerprint. A backend
 * that has such launches makes exactly these and decides none of them itself; a backend without them (the host's)
 * computes the same values either way.
 *
 * @param programmatic the step's kernels are programmatic dependent launches: each may be scheduled while the launch
 *                     before it still runs (the edge into this step), and waits for it before touching memory
 * @param gemv         the few-row product's kernel form ({@code Step.Matmul.gemv}), or null for none
 * @param attention    a decode step's attention's cut and early load ({@code Step.UpdateAttention} or an {@code attention}
 *                     call), or null for none
 * @param rows         a row kernel's form ({@code Step.Launch} of a kernel with reductions: {@code rows[block]},
 *                     {@code rows[warp]}, {@code rows[warp, ahead]}), or null for none
 */
public record LaunchChoice(boolean programmatic, Gemv gemv, Attention attention, Rows rows) {
    /** No choice to make: a plain launch, or no launch. */
    public static final LaunchChoice PLAIN = new LaunchChoice(false, null, null, null);

    public LaunchChoice(boolean programmatic, Gemv gemv, Attention attention) { this(programmatic, gemv, attention, null); }

    /** Whether an attention loads its position and cache slice early ({@link Attention#early}). */
    public boolean early() { return attention != null && attention.early(); }

    /**
     * The GEMV's form: the tensor cores' kernel ({@code mma}, float16 and bfloat16 at 2 to 8 rows) or the CUDA cores'
     * ({@code fma}); {@code slices} k-slices in blocks of {@code warps} warps (0 and 0 in a product with epilogues, whose
     * blocks its column tiles decide); {@code preload}: the weight is written by no step of the call (a graph input or
     * a constant), so its first loop is loaded before the wait for the launch before; {@code resident}: at most that many
     * warps a multiprocessor (the grid capped, each block then computing several blocks' columns in turn, the same sums),
     * so that the next kernel of a programmatic chain is resident beside it; 0 for the whole grid at once.
     */
    public record Gemv(boolean tensorCores, int slices, int warps, boolean preload, int resident) {
        public Gemv {
            if (resident < 0) throw new dev.gatun.ir.CompilationException("a GEMV's resident warps a multiprocessor are 0 (no cap) or more, not " + resident);
        }

        public String describe() {
            var sj = new StringJoiner(", ", "gemv[", "]");
            sj.add(tensorCores ? "mma" : "fma");
            if (slices > 0) sj.add("slices=" + slices).add("warps=" + warps);
            if (preload) sj.add("preload");
            if (resident > 0) sj.add("resident=" + resident);
            return sj.toString();
        }
    }

    /**
     * An attention's cut ({@code LaunchChoices.attention}): {@code positions} positions of the cache a warp (32, 16 or 8),
     * each position's dot product with the query rows split over {@code 32 / positions} lanes (its {@link #lanes()}), so a
     * slice of the cache is a warp and the step is {@code ceil(cache / positions)} slices for every 4 query rows;
     * {@code early}: it loads its position and cache slice before it waits for the launch before it (which wrote this
     * step's keys and values at that position, a graph input, or nothing it reads). {@code why}: how the cut was chosen,
     * for {@code Plan.explain()} (not printed on the step's line).
     */
    public record Attention(int positions, boolean early, String why) {
        public Attention {
            if (positions != 8 && positions != 16 && positions != 32)
                throw new dev.gatun.ir.CompilationException("an attention's cut is 8, 16 or 32 positions a warp, not " + positions);
        }

        /** Lanes a position: its dot products split over them. */
        public int lanes() { return 32 / positions; }

        public String describe() {
            return "attention[" + (early ? "early, " : "") + "positions=" + positions + ", lanes=" + lanes() + "]";
        }
    }

    /**
     * A row kernel's form ({@code LaunchChoices.rows}): a block a row ({@code warp} false: each phase's reduction through
     * warp shuffles, a partial per warp in shared memory and a block barrier), or a warp a row (every phase reduced by
     * warp shuffles alone, no shared memory, no barrier; blocks of several warps, each warp its own rows, a grid of the
     * blocks resident at once going over the rows); {@code ahead}: a warp loads its next row before it reduces this one.
     * {@code why}: how the form was chosen, for {@code Plan.explain()} (not printed on the step's line).
     */
    public record Rows(boolean warp, boolean ahead, String why) {
        public Rows {
            if (ahead && !warp) throw new dev.gatun.ir.CompilationException("a row kernel loads ahead in the warp form only");
        }

        public String describe() { return warp ? ahead ? "rows[warp, ahead]" : "rows[warp]" : "rows[block]"; }
    }

    /** The choices as printed on the step's line ("" for a plain launch). */
    public String describe() {
        var sj = new StringJoiner(", ");
        if (programmatic) sj.add("programmatic");
        if (gemv != null) sj.add(gemv.describe());
        if (attention != null) sj.add(attention.describe());
        if (rows != null) sj.add(rows.describe());
        return sj.toString();
    }
}
