package dev.gatun.runtime.distributed;

import java.util.List;

/**
 * A rendezvous wait ran out of time or could not finish because a rank left; {@link #missingRanks()} lists the
 * ranks that never arrived (empty for a {@code get} of a key that nobody set).
 */
public class RendezvousTimeoutException extends RendezvousException {
    private final List<Integer> missingRanks;

    public RendezvousTimeoutException(String message, List<Integer> missingRanks) {
        super(message);
        this.missingRanks = List.copyOf(missingRanks);
    }

    /** The ranks the wait was still waiting for. */
    public List<Integer> missingRanks() { return missingRanks; }
}
