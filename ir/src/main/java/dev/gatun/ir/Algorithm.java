package dev.gatun.ir;

import java.util.Locale;

/** How a collective is carried out. The symmetric ones read peers' memory directly; NCCL copies through its own buffers. */
public enum Algorithm {
    /** All-reduce: every rank reads every peer's whole input. Best for small messages. */
    ONE_SHOT,
    /** All-reduce: reduce one's slice from all peers, then all-gather the slices. Medium messages. */
    TWO_SHOT,
    /** Reduce-scatter or all-gather on symmetric memory. */
    SYMM_MEM,
    /** Through NCCL: dynamic shapes, large messages, other dtypes, ranks on other hosts. */
    NCCL;

    public boolean isSymmetric() { return this != NCCL; }

    /**
     * Whether the collective ends with a barrier among the ranks, so every peer has finished reading its
     * input when it returns. The planner frees the input slot there; otherwise only at the next such barrier.
     */
    public boolean endsWithBarrier() { return this != NCCL; }

    public String opName() { return name().toLowerCase(Locale.ROOT); }
}
