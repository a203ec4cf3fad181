package dev.gatun.runtime.spi;

import dev.gatun.ir.DType;
import dev.gatun.runtime.ArrayLike;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.NDArray;

import java.util.List;
import java.util.Map;

/**
 * A plan loaded on a backend: pools allocated, kernels ready. Ranks are addressed by their index in {@link #ranks()}.
 * Closing releases everything, the arrays it owns included; it is idempotent.
 */
public interface Executable extends AutoCloseable {
    /** The ranks this process drives, in the order {@link #run} takes them: all of them, or its own one. */
    List<Integer> ranks();

    /** Where a rank's arrays live: "cuda:0", "host". */
    String device(int rankIndex);

    /**
     * Runs every rank this process drives. Inputs are validated and hold every unbound input; bound ones are the
     * executable's. Outputs are views of the executable's memory, valid until its next call; the call may still be in
     * flight on the device when this returns (an output's memory orders reads after it).
     */
    List<Map<String, DeviceArray>> run(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank);

    /**
     * Runs like {@link #run} and times each step of the first rank this process drives: microseconds per index of the
     * plan's steps, NaN for bookkeeping steps (see {@link dev.gatun.runtime.Profile}). Waits for the call to end.
     */
    default double[] profile(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        throw new dev.gatun.runtime.GatunRuntimeException("this backend cannot time a plan's steps");
    }

    /**
     * Binds {@code input} for every later call of one rank, or unbinds it (null): the value is copied now into memory the
     * executable keeps resident, so later changes to it are not seen.
     */
    void bind(int rankIndex, String input, ArrayLike value);

    /**
     * Binds {@code input} of one rank to {@code array} itself (null: unbinds it): every later call reads the array where
     * it lies, with no copy now or per call, in order after the work that writes it. The caller keeps it open.
     */
    void bindInPlace(int rankIndex, String input, DeviceArray array);

    /**
     * Binds several inputs of one rank at once (none null), as {@link #bind(int, String, ArrayLike)} does each; a backend
     * may wait once for all the copies instead of once for each.
     */
    default void bind(int rankIndex, java.util.Map<String, ? extends ArrayLike> values) {
        values.forEach((input, value) -> bind(rankIndex, input, value));
    }

    /** A copy of {@code host} in memory of the rank's device that the executable owns until the array or it is closed. */
    DeviceArray toDevice(int rankIndex, NDArray host);

    /** A zeroed host array the rank's device transfers to and from at full speed (pinned), freed on close. */
    NDArray allocateHost(int rankIndex, DType dtype, long[] shape);

    /** Views memory the caller allocated on the rank's device; {@code release} (or nothing, if null) runs on close. */
    DeviceArray wrap(int rankIndex, long address, DType dtype, long[] shape, Runnable release);

    /** Waits until the work this executable queued on its devices (calls, copies) is done. */
    void synchronize();

    /**
     * Stops a call in flight on every rank this process drives, promptly, as {@code ncclCommAbort} does: its ranks
     * stop waiting for each other and the call fails; the executable cannot run again. Safe from any thread; returns
     * without waiting for the call to end.
     */
    void abort();

    /**
     * One call of the plan, listing the launches it makes in order, each with the launch choices it made
     * ({@link LaunchList#entry}). The host backend lists the plan's ({@link LaunchList#of}); a backend with launches of
     * its own records them. Two backends given the same plan list the same launches.
     */
    default List<String> launchList(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        throw new dev.gatun.runtime.GatunRuntimeException("this backend cannot list its launches");
    }

    @Override void close();
}
