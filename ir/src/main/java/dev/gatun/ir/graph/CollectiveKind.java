package dev.gatun.ir.graph;

/**
 * Collectives over a process group. {@link #ALL_TO_ALL} is PyTorch's {@code all_to_all_single}: dimension 0 split
 * into one part per member (evenly, or by per-destination row counts read at run time), part j sent to member j, the
 * received parts concatenated in member order.
 */
public enum CollectiveKind {
    ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER, BROADCAST, ALL_TO_ALL;

    /** Whether the collective only moves elements (any dtype, nothing combined). */
    public boolean movesOnly() { return this == ALL_GATHER || this == BROADCAST || this == ALL_TO_ALL; }

    public String opName() { return name().toLowerCase(java.util.Locale.ROOT); }
}
