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
    NCCL,
    /**
     * All-reduce without a barrier: every rank pushes its input into a slot of every peer's rotating buffers,
     * each element marked valid by its own value (a sentinel no real element takes), and reduces its own slots
     * once every element has arrived. Three rounds rotate call by call, each cleared a call after its use. The
     * input stays where it is (peers never read it); the rounds are the planner's, in symmetric memory.
     */
    BARRIER_FREE;

    /** Whether peers read the collective's input in symmetric memory (so it must be a communication buffer). */
    public boolean isSymmetric() { return this != NCCL && this != BARRIER_FREE; }

    /**
     * Whether the collective ends with a barrier among the ranks, so every peer has finished reading its
     * input when it returns. The planner frees the input slot there; otherwise only at the next such barrier.
     */
    public boolean endsWithBarrier() { return isSymmetric(); }

    public String opName() { return name().toLowerCase(Locale.ROOT); }
}
