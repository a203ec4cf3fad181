package dev.gatun.cuda.backend;

import dev.gatun.cuda.Cuda;
import dev.gatun.cuda.CudaProbe;
import dev.gatun.planner.Plan;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.spi.Backend;
import dev.gatun.runtime.spi.Executable;

/**
 * Runs plans on an NVIDIA GPU: generated kernels compiled with NVRTC, cuBLAS for matmul, pools as device
 * allocations, capturable partitions replayed as CUDA graphs. One rank per process (the GPU named by
 * {@code LOCAL_RANK}, default 0).
 */
public final class CudaBackend implements Backend {
    /** VMM granularity of H100/H200; communication pools round up to it so they can later be mapped by peers. */
    static final long GRANULARITY = 2L << 20;

    @Override public String name() { return "cuda"; }

    @Override public int priority() { return 10; }

    @Override public String unavailableReason() {
        CudaProbe p = Cuda.probe();
        if (!p.available()) return p.summary();
        return p.deviceCount() > 0 ? null : "unavailable: no CUDA device";
    }

    /** One rank per process: a world of one, or this process started as one rank of the world (gatun-run). */
    @Override public String cannotRun(int worldSize) {
        if (worldSize == 1) return null;
        String env = System.getenv("WORLD_SIZE");
        if (env != null && env.trim().equals(Integer.toString(worldSize)) && System.getenv("RANK") != null) {
            int local = localRank();
            int gpus = dev.gatun.cuda.Device.count();
            return local < gpus ? null : "LOCAL_RANK " + local + " has no GPU: this machine has " + gpus + " (a world of " + worldSize
                    + " needs one GPU per local rank)";
        }
        return "the CUDA backend drives one rank per process and this session has " + worldSize
                + " ranks; start one process per GPU with gatun-run, or use the host backend to simulate the ranks";
    }

    /**
     * Without peer access between every pair of the world's GPUs, symmetric memory cannot work: every collective
     * falls back to NCCL, and the log says so.
     */
    @Override public CompileOptions adapt(CompileOptions options) {
        int world = options.worldSize();
        if (world == 1 || !options.lowering().symmetricMemory()) return options;
        String local = System.getenv("LOCAL_WORLD_SIZE");
        if (local != null && Integer.parseInt(local.trim()) < world) {
            System.getLogger("dev.gatun.cuda").log(System.Logger.Level.WARNING,
                    "the world of {0} ranks spans hosts ({1} on this one): every collective runs through NCCL", world, local.trim());
            return options.symmetricMemory(false);
        }
        int gpus = dev.gatun.cuda.Device.count();
        if (world > gpus) return options;
        for (int i = 0; i < world; i++) {
            for (int j = 0; j < world; j++) {
                if (i == j) continue;
                try (var a = dev.gatun.cuda.Device.open(i); var b = dev.gatun.cuda.Device.open(j)) {
                    if (!a.canAccessPeer(b)) {
                        System.getLogger("dev.gatun.cuda").log(System.Logger.Level.WARNING,
                                "GPUs {0} and {1} have no peer access: every collective falls back to NCCL", i, j);
                        return options.symmetricMemory(false);
                    }
                }
            }
        }
        return options;
    }

    static int localRank() {
        String local = System.getenv("LOCAL_RANK");
        return local == null ? 0 : Integer.parseInt(local.trim());
    }

    @Override public long commGranularity() { return GRANULARITY; }

    @Override public Executable load(Plan plan, CompileOptions options) {
        return new CudaExecutable(plan, options, localRank());
    }
}
