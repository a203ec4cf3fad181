package dev.gatun.planner;

/**
 * Options of planning.
 *
 * @param commGranularity    allocation granularity of symmetric memory the backend reports (host: 1; CUDA VMM: 2 MiB)
 * @param regularGranularity allocation granularity of the regular arena
 * @param reorder            try memory-aware orders and keep the best (never worse than the plain order)
 * @param inPlace            let an elementwise kernel write over a dead input of identical size (regular buffers only)
 */
public record PlanOptions(long commGranularity, long regularGranularity, boolean reorder, boolean inPlace) {
    public static final PlanOptions DEFAULT = new PlanOptions(1, 1, true, true);

    public PlanOptions {
        if (commGranularity < 1 || regularGranularity < 1) throw new IllegalArgumentException("granularities must be positive");
    }

    public PlanOptions withCommGranularity(long g) { return new PlanOptions(g, regularGranularity, reorder, inPlace); }
    public PlanOptions withReorder(boolean on) { return new PlanOptions(commGranularity, regularGranularity, on, inPlace); }
    public PlanOptions withInPlace(boolean on) { return new PlanOptions(commGranularity, regularGranularity, reorder, on); }
}
