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
 */
public record ExecutionOptions(String backend, Duration timeout, boolean cudaGraphs, long delaySeed, boolean verbose, Cuda cuda) {

    public ExecutionOptions {
        if (timeout == null || timeout.isNegative() || timeout.isZero()) throw new GatunRuntimeException("the timeout must be positive, not " + timeout);
        if (backend == null || backend.isBlank()) throw new GatunRuntimeException("name a backend (\"auto\", \"host\" or \"cuda\")");
    }

    /**
     * The CUDA backend's settings.
     *
     * @param cudaHome       where NVRTC finds the CUDA headers (CUDA_HOME, default /usr/local/cuda)
     * @param vmmHandles     share symmetric memory between processes by VMM file descriptors instead of IPC handles
     *                       (GATUN_SYMMETRIC_HANDLES=vmm)
     * @param fenceSc        a full system fence before every signal of the symmetric kernels, only to measure what the
     *                       release store saves (GATUN_FENCE_SC=1)
     * @param hardwareQueues the hardware queues streams feed the GPU through (CUDA_DEVICE_MAX_CONNECTIONS, default 8)
     * @param programmaticLaunch whether the plan's own kernels are programmatic dependent launches on GPUs that have them
     *                       (Hopper and later): each may be scheduled while the one before it finishes, and waits for
     *                       it before touching memory (GATUN_PROGRAMMATIC_LAUNCH=1 on, 0 off; by default
     *                       {@link ProgrammaticLaunch#AUTO}: where measured to pay)
     * @param barrierFreeBackoffNs a barrier-free all-reduce's thread that has polled an element 64 times sleeps this many
     *                       nanoseconds between later polls (0: it spins), only to measure whether the polling slows
     *                       a late peer's writes (GATUN_BARRIER_FREE_BACKOFF_NS)
     */
    public record Cuda(String cudaHome, boolean vmmHandles, boolean fenceSc, int hardwareQueues, ProgrammaticLaunch programmaticLaunch,
                       int barrierFreeBackoffNs) {
        public static final Cuda DEFAULT = new Cuda("/usr/local/cuda", false, false, 8, ProgrammaticLaunch.AUTO, 0);

        public Cuda {
            if (barrierFreeBackoffNs < 0 || barrierFreeBackoffNs > 1_000_000)
                throw new GatunRuntimeException("the barrier-free backoff must be 0 to 1000000 ns, not " + barrierFreeBackoffNs);
        }

        /** Programmatic launches on or off (not by the plan). */
        public Cuda withProgrammaticLaunch(boolean on) {
            return new Cuda(cudaHome, vmmHandles, fenceSc, hardwareQueues, on ? ProgrammaticLaunch.ON : ProgrammaticLaunch.OFF, barrierFreeBackoffNs);
        }

        public Cuda withBarrierFreeBackoffNs(int ns) { return new Cuda(cudaHome, vmmHandles, fenceSc, hardwareQueues, programmaticLaunch, ns); }
    }

    /**
     * When a plan's own kernels are programmatic dependent launches: always, never, or ({@code AUTO}) for plans of one rank
     * whose every product is one of 1 to 8 rows by a weight that is a graph input, which Gatun's own kernel takes (a
     * decode step at batch 1 to 8): there the chain of launches is all Gatun's, and the products load their first weights
     * before they wait (measured through the Llama decoder on an H200: 1.128 to 1.043 ms a token at batch 1, 1.324 to
     * 1.182 ms a step at batch 8). A plan with a cuBLAS product keeps plain launches: a cuBLAS kernel breaks the chain
     * (the batch-8 step when its products were cuBLAS's: 1.380 to 1.468 ms).
     */
    public enum ProgrammaticLaunch { AUTO, ON, OFF }

    public static final ExecutionOptions DEFAULT = new ExecutionOptions("auto", Duration.ofSeconds(60), true, 0, false, Cuda.DEFAULT);

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
        String p = env.getOrDefault("GATUN_PROGRAMMATIC_LAUNCH", "").trim();
        if (!p.isEmpty() && !p.equals("0") && !p.equals("1"))
            throw new GatunRuntimeException("GATUN_PROGRAMMATIC_LAUNCH='" + p + "': use 1 (always), 0 (never), or leave it unset (where it pays: a decode step at batch 1)");
        var launch = p.isEmpty() ? ProgrammaticLaunch.AUTO : p.equals("1") ? ProgrammaticLaunch.ON : ProgrammaticLaunch.OFF;
        var cuda = new Cuda(env.getOrDefault("CUDA_HOME", Cuda.DEFAULT.cudaHome()), handles.equalsIgnoreCase("vmm"),
                "1".equals(env.get("GATUN_FENCE_SC")), queues, launch, backoff);
        boolean verbose = Boolean.getBoolean("gatun.verbose") || "1".equals(env.get("GATUN_VERBOSE"));
        return new ExecutionOptions(DEFAULT.backend, DEFAULT.timeout, DEFAULT.cudaGraphs, DEFAULT.delaySeed, verbose, cuda);
    }

    public ExecutionOptions withBackend(String b) { return new ExecutionOptions(b, timeout, cudaGraphs, delaySeed, verbose, cuda); }
    public ExecutionOptions withTimeout(Duration t) { return new ExecutionOptions(backend, t, cudaGraphs, delaySeed, verbose, cuda); }
    public ExecutionOptions withCudaGraphs(boolean on) { return new ExecutionOptions(backend, timeout, on, delaySeed, verbose, cuda); }
    public ExecutionOptions withDelaySeed(long seed) { return new ExecutionOptions(backend, timeout, cudaGraphs, seed, verbose, cuda); }
    public ExecutionOptions withCuda(Cuda c) { return new ExecutionOptions(backend, timeout, cudaGraphs, delaySeed, verbose, c); }
}
