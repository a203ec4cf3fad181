package dev.gatun.runtime.spi;

import dev.gatun.runtime.NDArray;

import java.util.List;
import java.util.Map;

/** A plan loaded on a backend: pools allocated, kernels ready. Closing releases everything; it is idempotent. */
public interface Executable extends AutoCloseable {
    /** The ranks this process drives, in the order {@link #run} takes them: all of them, or its own one. */
    List<Integer> ranks();

    /** Runs every rank this process drives; inputs and outputs per rank. Inputs are already validated. */
    List<Map<String, NDArray>> run(List<Map<String, NDArray>> inputsPerRank);

    /**
     * Stops a call in flight on every rank this process drives, promptly, as {@code ncclCommAbort} does: its ranks
     * stop waiting for each other and the call fails; the executable cannot run again. Safe from any thread; returns
     * without waiting for the call to end.
     */
    void abort();

    @Override void close();
}
