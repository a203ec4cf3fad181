package dev.gatun.planner;

import java.util.StringJoiner;

/**
 * How a backend launches one step, as the planner decided it ({@code LaunchChoices}): printed on the step's line
 * ({@code # launch: programmatic, gemv[fma, slices=4, preload]}) and so covered by the plan's fingerprint. A backend
 * that has such launches makes exactly these and decides none of them itself; a backend without them (the host's)
 * computes the same values either way.
 *
 * @param programmatic the step's kernels are programmatic dependent launches: each may be scheduled while the launch
 *                     before it still runs (the edge into this step), and waits for it before touching memory
 * @param gemv         the few-row product's kernel form ({@code Step.Matmul.gemv}), or null for none
 * @param early        an attention loads its position and cache slice before it waits for the launch before it (which
 *                     wrote this step's keys and values at that position, a graph input, or nothing it reads)
 */
public record LaunchChoice(boolean programmatic, Gemv gemv, boolean early) {
    /** No choice to make: a plain launch, or no launch. */
    public static final LaunchChoice PLAIN = new LaunchChoice(false, null, false);

    /**
     * The GEMV's form: the tensor cores' kernel ({@code mma}, float16 and bfloat16 at 2 to 8 rows) or the CUDA cores'
     * ({@code fma}); {@code slices} k-slices in blocks of {@code warps} warps (0 and 0 in a product with epilogues, whose
     * blocks its column tiles decide); {@code preload}: the weight is written by no step of the call (a graph input or
     * a constant), so its first loop is loaded before the wait for the launch before.
     */
    public record Gemv(boolean tensorCores, int slices, int warps, boolean preload) {
        public String describe() {
            var sj = new StringJoiner(", ", "gemv[", "]");
            sj.add(tensorCores ? "mma" : "fma");
            if (slices > 0) sj.add("slices=" + slices).add("warps=" + warps);
            if (preload) sj.add("preload");
            return sj.toString();
        }
    }

    /** The choices as printed on the step's line ("" for a plain launch). */
    public String describe() {
        var sj = new StringJoiner(", ");
        if (programmatic) sj.add("programmatic");
        if (gemv != null) sj.add(gemv.describe());
        if (early) sj.add("attention[early]");
        return sj.toString();
    }
}
