package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.distributed.Rendezvous;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Which ranks of a world run on which physical GPU, learned by one all-gather of (GPU UUID, process, multiprocessor
 * count, MPS) at session start, so every rank reaches the same decisions from the same facts.
 *
 * <p>Several ranks may share a GPU only when asked ({@code CompileOptions.ranksPerGpu}, {@code gatun-run
 * --ranks-per-gpu}). The symmetric collectives' barriers spin until every rank of the group has arrived, so all of
 * their blocks must be resident on the device at once: the grid of each rank is the device's multiprocessors
 * divided by the ranks sharing it ({@link #mostRanksOnOneGpu()}). Threads of one process share one context and
 * their streams run concurrently. Separate processes on one GPU are time-sliced unless the Multi-Process Service
 * serves them: then one rank's spinning kernel can hold the GPU while the rank it waits for never runs, so such a
 * world is refused before anything is launched. NCCL refuses two ranks on one device in any mode.
 */
record GpuSharing(List<Rank> ranks, int ranksPerGpu, int hardwareQueues) {

    /** What one rank reported: its GPU, its process, the GPU's multiprocessors and whether MPS serves it. */
    record Rank(int rank, String gpu, long pid, int multiprocessors, boolean mps) {}

    /** {@code hardwareQueues}: streams feed the GPU through this many hardware queues per process (CUDA_DEVICE_MAX_CONNECTIONS, default 8). */
    static GpuSharing of(Rendezvous rendezvous, String prefix, Device device, int ranksPerGpu, int hardwareQueues, Duration timeout) {
        byte[] uuid = device.uuid().getBytes(StandardCharsets.US_ASCII);
        var mine = ByteBuffer.allocate(4 + uuid.length + 8 + 4 + 1).putInt(uuid.length).put(uuid).putLong(ProcessHandle.current().pid())
                .putInt(device.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT)).put((byte) (mps(device) ? 1 : 0));
        var ranks = new ArrayList<Rank>();
        List<byte[]> all = rendezvous.allGather(prefix + "/gpu", mine.array(), timeout);
        for (int r = 0; r < all.size(); r++) {
            var in = ByteBuffer.wrap(all.get(r));
            byte[] u = new byte[in.getInt()];
            in.get(u);
            ranks.add(new Rank(r, new String(u, StandardCharsets.US_ASCII), in.getLong(), in.getInt(), in.get() == 1));
        }
        return new GpuSharing(List.copyOf(ranks), ranksPerGpu, hardwareQueues);
    }

    private static boolean mps(Device device) {
        try {
            return device.attribute(DeviceAttribute.MPS_ENABLED) == 1;
        } catch (RuntimeException e) {
            return false; // a driver that does not know the attribute has no MPS to report
        }
    }

    /** The ranks on each GPU, by UUID, in rank order. */
    Map<String, List<Rank>> byGpu() {
        var out = new TreeMap<String, List<Rank>>();
        for (Rank r : ranks) out.computeIfAbsent(r.gpu(), g -> new ArrayList<>()).add(r);
        return out;
    }

    int mostRanksOnOneGpu() {
        return byGpu().values().stream().mapToInt(List::size).max().orElse(1);
    }

    int fewestMultiprocessors() {
        return ranks.stream().mapToInt(Rank::multiprocessors).min().orElse(1);
    }

    /**
     * Refuses, on every rank alike, a world that cannot run {@code plan}: ranks sharing a GPU without having asked
     * to; NCCL with ranks sharing a GPU; spin barriers between processes time-sliced on one GPU (no MPS).
     */
    void check(String plan, boolean spinBarriers, boolean nccl) {
        for (var e : byGpu().entrySet()) {
            List<Rank> on = e.getValue();
            if (on.size() < 2) continue;
            List<Integer> who = on.stream().map(Rank::rank).toList();
            if (ranksPerGpu < 2)
                throw new GatunRuntimeException("plan '" + plan + "': ranks " + who + " all run on GPU " + e.getKey() + ". Several ranks on one GPU"
                        + " is opt-in: compile with CompileOptions.ranksPerGpu(" + on.size() + ") (threads of one process) or start the ranks with"
                        + " gatun-run --ranks-per-gpu " + on.size() + "; otherwise give each rank its own GPU (LOCAL_RANK, CUDA_VISIBLE_DEVICES)");
            if (nccl)
                throw new GatunRuntimeException("plan '" + plan + "': ranks " + who + " share GPU " + e.getKey() + " but the plan runs a collective"
                        + " through NCCL, which refuses two ranks on one device; compile with ranksPerGpu(" + ranksPerGpu + ") on every rank so"
                        + " lowering serves collectives with symmetric memory");
            boolean processes = on.stream().map(Rank::pid).distinct().count() > 1;
            long threads = on.stream().map(Rank::pid).distinct().mapToLong(pid -> on.stream().filter(r -> r.pid() == pid).count()).max().orElse(1);
            if (spinBarriers && threads > hardwareQueues)
                throw new GatunRuntimeException("plan '" + plan + "': " + threads + " ranks of one process share GPU " + e.getKey() + ", but CUDA feeds"
                        + " a process's streams through " + hardwareQueues + " hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), so two ranks"
                        + " would share one and a spinning collective could hold up its peer's kernels. Start the process with"
                        + " CUDA_DEVICE_MAX_CONNECTIONS=32, or put at most " + hardwareQueues + " ranks on the GPU");
            boolean mps = on.stream().allMatch(Rank::mps);
            if (spinBarriers && processes && !mps)
                throw new GatunRuntimeException("plan '" + plan + "': ranks " + who + " share GPU " + e.getKey() + " from separate processes without"
                        + " the Multi-Process Service. The GPU then runs one process's kernels at a time, and the symmetric collectives'"
                        + " barriers spin until every rank's kernel has arrived, so they could wait for a rank that never gets the GPU."
                        + " Run the ranks as threads of one process (LocalWorld with CompileOptions.ranksPerGpu), start MPS"
                        + " (nvidia-cuda-mps-control -d) before the ranks, or give each rank its own GPU");
        }
    }
}
