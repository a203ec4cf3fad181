package dev.gatun.runtime.distributed;

import java.util.List;

/**
 * A rendezvous wait cannot finish because a rank it waits for left: its connection dropped (the process died)
 * or it closed its client before arriving.
 */
public class RankLeftException extends RendezvousException {
    private final List<Integer> leftRanks;
    private final List<Integer> missingRanks;

    public RankLeftException(String message, List<Integer> leftRanks, List<Integer> missingRanks) {
        super(message);
        this.leftRanks = List.copyOf(leftRanks);
        this.missingRanks = List.copyOf(missingRanks);
    }

    /** The ranks that left (disconnected or closed) without arriving. */
    public List<Integer> leftRanks() { return leftRanks; }

    /** Every rank the wait was still waiting for, including those that left. */
    public List<Integer> missingRanks() { return missingRanks; }
}
