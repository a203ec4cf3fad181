package dev.gatun.runtime;

import java.time.Duration;
import java.util.Map;

/**
 * How a compiled plan runs: which backend, the collective timeout, CUDA graphs, the host backend's fault-finding
 * delays, and the CUDA backend's settings. The environment's settings are read once, here, by
 * {@link #fromEnvironment(Map)}; nothing deeper reads environment variables.
 *
 * @param backend   "auto" (CUDA where a GPU is present, else host), "host" or "cuda"
 * @param timeout   how long a rank waits for its peers in a collective or barrier
 * @param cudaGraphs CUDA backend: capture partitions as CUDA graphs and replay them
 * @param delaySeed host backend: ranks sleep for random short times at random points, seeded (0: off)
 * @param verbose   log every lowering decision at INFO (GATUN_VERBOSE=1 or -Dgatun.verbose=true)
 * @param cuda      the CUDA backend's settings
 * @param hostTransport host backend, a session that is one rank of a world: how its collectives reach the other ranks
 *                  (GATUN_HOST_TRANSPORT=auto, shm or tcp)
 */
public record ExecutionOptions(String backend, Duration timeout, boolean cudaGraphs, long delaySeed, boolean verbose, Cuda cuda,
                               HostTransport hostTransport) {

    public ExecutionOptions {
        if (timeout == null || timeout.isNegative() || timeout.isZero()) throw new GatunRuntimeException("the timeout must be positive, not " + timeout);
        if (backend == null || backend.isBlank()) throw new GatunRuntimeException("name a backend (\"auto\", \"host\" or \"cuda\")");
        if (hostTransport == null) throw new GatunRuntimeException("name a host transport (AUTO, SHARED_MEMORY or TCP)");
    }

    /**
     * How the host backend's collectives move bytes between the ranks of a world whose ranks are separate sessions
     * (threads with {@link dev.gatun.runtime.distributed.LocalWorld}, or processes started by gatun-run).
     */
    public enum HostTransport {
        /** Shared memory where every rank can map every other's file (one host), else TCP. */
        AUTO,
        /** Memory-mapped files under /dev/shm (else java.io.tmpdir); refused, naming why, where a rank cannot map them. */
        SHARED_MEMORY,
        /** Sockets between every pair of ranks, authenticated with the job's secret. */
        TCP;

        /** GATUN_HOST_TRANSPORT's value: auto, shm or tcp (any case); anything else is refused by name. */
        static HostTransport parse(String v) {
            return switch (v.trim().toLowerCase(java.util.Locale.ROOT)) {
                case "", "auto" -> AUTO;
                case "shm", "shared-memory", "shared_memory" -> SHARED_MEMORY;
                case "tcp" -> TCP;
                default -> throw new GatunRuntimeException("GATUN_HOST_TRANSPORT='" + v + "': use auto (the default), shm or tcp");
            };
        }
    }

    /**
     * The CUDA backend's settings.
     *
     * @param cudaHome       where NVRTC finds the CUDA headers (CUDA_HOME, default /usr/local/cuda)
     * @param vmmHandles     share symmetric memory between processes by VMM file descriptors instead of IPC handles
     *                       (GATUN_SYMMETRIC_HANDLES=vmm)
     * @param fenceSc        a full system fence before every signal of the symmetric kernels, and after a barrier-free
     *                       all-reduce's pushes, only to measure what the release store saves and whether unfenced
     *                       pushes reach a peer late (GATUN_FENCE_SC=1)
     * @param hardwareQueues the hardware queues streams feed the GPU through (CUDA_DEVICE_MAX_CONNECTIONS, default 8)
     * @param barrierFreeBackoffNs a barrier-free all-reduce's thread that has polled an element 64 times sleeps this many
     *                       nanoseconds between later polls (0: it spins), only to measure whether the polling slows
     *                       a late peer's writes (GATUN_BARRIER_FREE_BACKOFF_NS)
     */
    public record Cuda(String cudaHome, boolean vmmHandles, boolean fenceSc, int hardwareQueues, int barrierFreeBackoffNs) {
        public static final Cuda DEFAULT = new Cuda("/usr/local/cuda", false, false, 8, 0);

        public Cuda {
            if (barrierFreeBackoffNs < 0 || barrierFreeBackoffNs > 1_000_000)
                throw new GatunRuntimeException("the barrier-free backoff must be 0 to 1000000 ns, not " + barrierFreeBackoffNs);
        }

        public Cuda withBarrierFreeBackoffNs(int ns) { return new Cuda(cudaHome, vmmHandles, fenceSc, hardwareQueues, ns); }
    }

    public static final ExecutionOptions DEFAULT = new ExecutionOptions("auto", Duration.ofSeconds(60), true, 0, false, Cuda.DEFAULT, HostTransport.AUTO);

    /** The defaults with what this environment sets. */
    public static ExecutionOptions fromEnvironment(Map<String, String> env) {
        String handles = env.getOrDefault("GATUN_SYMMETRIC_HANDLES", "ipc").trim();
        if (!handles.equalsIgnoreCase("ipc") && !handles.equalsIgnoreCase("vmm"))
            throw new GatunRuntimeException("GATUN_SYMMETRIC_HANDLES='" + handles + "': use ipc (the default) or vmm");
        int queues = 8;
        String q = env.get("CUDA_DEVICE_MAX_CONNECTIONS");
        try {
            if (q != null && !q.isBlank()) queues = Integer.parseInt(q.trim());
        } catch (NumberFormatException e) {
            queues = 8; // CUDA ignores it too
        }
        int backoff = 0;
        String b = env.get("GATUN_BARRIER_FREE_BACKOFF_NS");
        try {
            if (b != null && !b.isBlank()) backoff = Integer.parseInt(b.trim());
        } catch (NumberFormatException e) {
            throw new GatunRuntimeException("GATUN_BARRIER_FREE_BACKOFF_NS='" + b + "': give a whole number of nanoseconds, 0 to 1000000");
        }
        var cuda = new Cuda(env.getOrDefault("CUDA_HOME", Cuda.DEFAULT.cudaHome()), handles.equalsIgnoreCase("vmm"),
                "1".equals(env.get("GATUN_FENCE_SC")), queues, backoff);
        boolean verbose = Boolean.getBoolean("gatun.verbose") || "1".equals(env.get("GATUN_VERBOSE"));
        return new ExecutionOptions(DEFAULT.backend, DEFAULT.timeout, DEFAULT.cudaGraphs, DEFAULT.delaySeed, verbose, cuda,
                HostTransport.parse(env.getOrDefault("GATUN_HOST_TRANSPORT", "")));
    }

    public ExecutionOptions withBackend(String b) { return new ExecutionOptions(b, timeout, cudaGraphs, delaySeed, verbose, cuda, hostTransport); }
    public ExecutionOptions withTimeout(Duration t) { return new ExecutionOptions(backend, t, cudaGraphs, delaySeed, verbose, cuda, hostTransport); }
    public ExecutionOptions withCudaGraphs(boolean on) { return new ExecutionOptions(backend, timeout, on, delaySeed, verbose, cuda, hostTransport); }
    public ExecutionOptions withDelaySeed(long seed) { return new ExecutionOptions(backend, timeout, cudaGraphs, seed, verbose, cuda, hostTransport); }
    public ExecutionOptions withHostTransport(HostTransport t) { return new ExecutionOptions(backend, timeout, cudaGraphs, delaySeed, verbose, cuda, t); }
    public ExecutionOptions withCuda(Cuda c) { return new ExecutionOptions(backend, timeout, cudaGraphs, delaySeed, verbose, c, hostTransport); }
}
