package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.Stream;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * One stream per (GPU, rank) for the life of the process, for ranks that share a GPU.
 *
 * <p>The GPU feeds streams through a few hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 unless set), streams taken
 * round-robin as they are created. Work in one queue starts in order, so when two ranks' streams share a queue, a
 * rank's collective spinning for its peer can hold the queue while the peer's kernel waits behind the spinner's
 * next step: a deadlock the barrier timeout only reports. A stream per session (ranks x live sessions of them)
 * soon wraps around the queues; a stream per rank, created once, keeps each rank in a queue of its own while the
 * ranks sharing a GPU are no more than the queues ({@link GpuSharing} refuses more).
 */
final class RankStreams {
    private RankStreams() {}

    private static final Map<Integer, Device> DEVICES = new ConcurrentHashMap<>();
    private static final Map<String, Stream> STREAMS = new ConcurrentHashMap<>();

    static Stream of(int ordinal, int rank) {
        return STREAMS.computeIfAbsent(ordinal + "/" + rank, k -> DEVICES.computeIfAbsent(ordinal, Device::open).createStream());
    }
}
