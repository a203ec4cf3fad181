package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Cuda;
import dev.gatun.cuda.CudaProbe;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.World;
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

    /**
     * One rank per process (a world of one, or this process started as one rank of the world by gatun-run), or one
     * rank per thread with a rendezvous; each rank's GPU must exist (several ranks share one with ranksPerGpu).
     */
    @Override public String cannotRun(CompileOptions options) {
        int worldSize = options.worldSize();
        if (worldSize == 1) return null;
        if (!options.world().drivesEveryRank()) {
            int k = options.ranksPerGpu(), gpu = gpu(options);
            int gpus = dev.gatun.cuda.Device.count();
            if (gpu < gpus) return null;
            return "local rank " + options.world().localRank() + " has no GPU: this machine has " + gpus + (k > 1 ? " and " + k + " ranks share each" : "")
                    + " (a world of " + worldSize + " needs " + Math.ceilDiv(worldSize, k) + "; ranksPerGpu(" + Math.ceilDiv(worldSize, gpus)
                    + ") or gatun-run --ranks-per-gpu " + Math.ceilDiv(worldSize, gpus) + " lets ranks share GPUs)";
        }
        return "the CUDA backend drives one rank per process and this session has " + worldSize
                + " ranks; start one process per GPU with gatun-run, or use the host backend to simulate the ranks";
    }

    /**
     * The plan's launch choices are made for this rank's GPU ({@link #target}). Without peer access between every pair
     * of the world's GPUs, symmetric memory cannot work: every collective falls back to NCCL, and the log says so. So
     * it does where the world spans hosts.
     */
    @Override public CompileOptions adapt(CompileOptions options) {
        int gpu = gpu(options);
        if (gpu < dev.gatun.cuda.Device.count()) options = options.planning(options.planning().withTarget(target(gpu)));
        int world = options.worldSize();
        if (world == 1) return options;
        if (!options.lowering().symmetricMemory()) return options;
        var job = options.world() instanceof World.Launched l ? l.job() : null;
        if (job != null && job.localWorldSize() != null && job.localWorldSize() < world) {
            System.getLogger("dev.gatun.cuda").log(System.Logger.Level.WARNING,
                    "the world of {0} ranks spans hosts ({1} on this one): every collective runs through NCCL", world, job.localWorldSize());
            return options.symmetricMemory(false);
        }
        int used = Math.ceilDiv(world, options.ranksPerGpu()), gpus = dev.gatun.cuda.Device.count();
        if (used > gpus) return options;
        String missing = missingPeerAccess(used);
        if (missing != null) {
            System.getLogger("dev.gatun.cuda").log(System.Logger.Level.WARNING, "{0}: every collective falls back to NCCL", missing);
            return options.symmetricMemory(false);
        }
        return options;
    }

    private static final java.util.Map<Integer, PlanOptions.Target> TARGETS = new java.util.concurrent.ConcurrentHashMap<>();

    /** What the planner's launch choices depend on of GPU {@code gpu} (its multiprocessors, compute capability 9.0 or later); asked once per process. */
    static PlanOptions.Target target(int gpu) {
        return TARGETS.computeIfAbsent(gpu, g -> {
            try (var d = dev.gatun.cuda.Device.open(g)) {
                return new PlanOptions.Target(d.attribute(dev.gatun.cuda.DeviceAttribute.MULTIPROCESSOR_COUNT), d.computeCapability().major() >= 9);
            }
        });
    }

    /** This rank's GPU: its local rank divided by the ranks that share each GPU. */
    static int gpu(CompileOptions options) { return options.world().localRank() / options.ranksPerGpu(); }

    private static final java.util.Map<Integer, java.util.Optional<String>> PEER_ACCESS = new java.util.concurrent.ConcurrentHashMap<>();

    /** The first pair of the world's GPUs without peer access, or null; asked once per process and world size. */
    static String missingPeerAccess(int world) {
        return PEER_ACCESS.computeIfAbsent(world, w -> {
            for (int i = 0; i < w; i++)
                for (int j = 0; j < w; j++)
                    if (i != j && !dev.gatun.cuda.Device.canAccessPeer(i, j))
                        return java.util.Optional.of("GPUs " + i + " and " + j + " have no peer access");
            return java.util.Optional.empty();
        }).orElse(null);
    }

    @Override public long commGranularity() { return GRANULARITY; }

    @Override public String generatedSource(dev.gatun.planner.Plan plan) {
        var sb = new StringBuilder();
        var forms = PlanKernels.rowForms(plan);
        for (var k : plan.kernels())
            sb.append(CudaCodegen.generate(k, forms.get(k)).source()).append('\n');
        return sb.toString();
    }

    @Override public Executable load(Plan plan, CompileOptions options) {
        refuseOpsWithoutKernels(plan);
        refuseAllToAllOnSharedGpus(plan, options.ranksPerGpu());
        return new CudaExecutable(plan, options, gpu(options));
    }

    /**
     * An all_to_all on symmetric memory runs {@link SymmetricAllToAll}'s kernel, also where ranks share a GPU; one through
     * NCCL (past the symmetric threshold, or with symmetric memory off) runs NCCL's send and receive, and NCCL refuses two
     * ranks on one device: where ranks share GPUs, a plan with one is refused naming it.
     */
    static void refuseAllToAllOnSharedGpus(Plan plan, int ranksPerGpu) {
        if (ranksPerGpu < 2) return;
        for (var s : plan.steps())
            for (var c : s.collectives())
                if (c.call().kind() == dev.gatun.ir.graph.CollectiveKind.ALL_TO_ALL && c.call().algorithm() == dev.gatun.ir.Algorithm.NCCL)
                    throw new dev.gatun.ir.CompilationException("plan '" + plan.name() + "': " + c.format().strip() + " runs through NCCL's send and"
                            + " receive on the GPU, and NCCL refuses " + ranksPerGpu + " ranks on one device; keep it on symmetric memory"
                            + " (symmetricMemory(true), at most the symmetric threshold: LoweringOptions.twoShotMaxBytes), give each rank its own GPU,"
                            + " or run this graph on the host backend");
    }

    /** The registered ops ({@link dev.gatun.ir.graph.OpSpec}) this backend has a kernel for: {@link CudaRun#OPS}' names. */
    static final java.util.Set<String> REGISTERED_OPS_WITH_KERNELS = CudaRun.OPS.keySet();

    /**
     * Refuses, before any GPU work, a plan that calls a registered op this backend has no kernel for, or calls one with
     * operands its kernel does not take ({@link CudaGatherScatter#refusal}, {@link CudaExpertMatmul#refusal}), or an all_to_all whose row counts are read
     * at run time off symmetric memory (NCCL's send and receive take their counts from the host; {@link SymmetricAllToAll} reads them on the device).
     */
    static void refuseOpsWithoutKernels(Plan plan) {
        for (var s : plan.steps())
            for (var part : s.parts()) {
                if (part instanceof dev.gatun.planner.Step.OpCall o) {
                    String why = !REGISTERED_OPS_WITH_KERNELS.contains(o.spec().name()) ? noKernel(o) : CudaGatherScatter.refusal(o);
                    if (why == null) why = CudaExpertMatmul.refusal(o);
                    if (why != null) throw new dev.gatun.ir.CompilationException("plan '" + plan.name() + "': " + why);
                }
                for (var c : part.collectives()) {
                    refuseLargeSymmetricAllToAll(plan, c);
                    if (c.uneven() && !c.call().algorithm().isSymmetric())
                        throw new dev.gatun.ir.CompilationException("plan '" + plan.name() + "': " + c.call().opName() + " with row counts read at run time ("
                                + c.format().strip() + ") has no CUDA path through NCCL (its send and receive take their counts from the host; the"
                                + " symmetric-memory all_to_all reads them on the device). Keep it on symmetric memory (symmetricMemory(true), GPUs"
                                + " of one host with peer access, a group of more than one rank), or run this graph on the host backend");
                }
            }
    }

    /** {@link SymmetricAllToAll} keeps each member's offsets in shared memory: at most {@link SymmetricAllToAll#MAX_WORLD} members. */
    private static void refuseLargeSymmetricAllToAll(Plan plan, dev.gatun.planner.Step.Collective c) {
        if (c.call().kind() != dev.gatun.ir.graph.CollectiveKind.ALL_TO_ALL || !c.call().algorithm().isSymmetric()) return;
        var g = plan.groups().get(c.call().group());
        Integer size = g == null ? null : g.size(plan.worldSize());
        if (size != null && size > SymmetricAllToAll.MAX_WORLD)
            throw new dev.gatun.ir.CompilationException("plan '" + plan.name() + "': " + c.format().strip() + ": the symmetric-memory all_to_all takes at most "
                    + SymmetricAllToAll.MAX_WORLD + " members and group \"" + c.call().group() + "\" has " + size + "; compile with symmetricMemory(false)"
                    + " to run an even one through NCCL");
    }

    static String noKernel(dev.gatun.planner.Step.OpCall o) {
        return o.spec().name() + " has no CUDA kernel yet (" + o.format().strip() + "); run this graph on the host backend, or write it from other ops";
    }
}
