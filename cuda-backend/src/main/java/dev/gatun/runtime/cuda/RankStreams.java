package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.Stream;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * One stream per (GPU, rank) for the life of the process, for ranks that share a GPU.
 *
 * <p>The GPU feeds streams through a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 unless set), streams taken
 * round-robin as they are created. Work in one queue starts in order, so when two ranks' streams share a queue, a
 * rank's collective spinning for its peer can hold the queue while the peer's kernel waits behind the spinner's
 * next step: a deadlock the barrier timeout only reports. Creating each rank's stream when the rank first needs it
 * is not enough: every stream the process creates in between (a world-1 session's, another library's) moves the
 * round-robin on, and rank 2's stream can land in rank 0's queue. So the first rank to ask creates a whole round,
 * one stream per queue, back to back and under one lock; rank {@code r} takes stream {@code r} of the round, in a
 * queue of its own while the ranks sharing the GPU are no more than the queues ({@link GpuSharing} refuses more
 * where a collective spins). A plan without spinning collectives may have more ranks than queues: ranks past the
 * round get streams of their own after it (sharing queues is harmless there; sharing a stream never is).
 */
final class RankStreams {
    private RankStreams() {}

    private static final Map<Integer, List<Stream>> STREAMS = new HashMap<>();

    static synchronized Stream of(int ordinal, int rank, int hardwareQueues) {
        List<Stream> streams = STREAMS.computeIfAbsent(ordinal, o -> new ArrayList<>(Device.open(o).createStreams(Math.max(1, hardwareQueues))));
        if (rank >= streams.size()) streams.addAll(Device.open(ordinal).createStreams(rank + 1 - streams.size()));
        return streams.get(rank);
    }
}
