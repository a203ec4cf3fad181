package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Blas;
import dev.gatun.cuda.CompileException;
import dev.gatun.cuda.CudaException;
import dev.gatun.cuda.CudaGraph;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Event;
import dev.gatun.cuda.GraphExec;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Program;
import dev.gatun.cuda.ProgramOptions;
import dev.gatun.cuda.Stream;
import dev.gatun.cuda.StreamCapture;
import dev.gatun.ir.DType;
import dev.gatun.ir.Layout;
import dev.gatun.ir.lower.Buffer;
import dev.gatun.ir.lower.ConstantBuffer;
import dev.gatun.ir.lower.InputBuffer;
import dev.gatun.ir.lower.ViewBuffer;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.spi.Executable;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A plan loaded on one GPU. Pools are device allocations made once; graph inputs are staged into device
 * buffers at fixed addresses (so captured graphs stay valid whatever address the caller's data has); each
 * capturable partition is captured on the first call and replayed after, one graph launch per partition.
 */
final class CudaExecutable implements Executable {
    private static final System.Logger LOG = System.getLogger("dev.gatun.cuda");

    private final Plan plan;
    private final CompileOptions options;
    private final Device device;
    private final Stream stream;
    private final int multiprocessors;
    private final Map<String, DeviceBuffer> pools = new LinkedHashMap<>();
    private final Map<String, DeviceBuffer> staging = new HashMap<>();
    private final Map<dev.gatun.planner.kernel.Kernel, Compiled> kernels = new IdentityHashMap<>();
    private final Map<String, Kernel> userKernels = new HashMap<>();
    private final CudaMatmul matmul;
    private final GraphExec[] partitions;
    /** Path-2 copies done by the symmetric collective that directly follows them (identity: steps are records). */
    private final java.util.Set<Step> fusedCopies = java.util.Collections.newSetFromMap(new IdentityHashMap<>());
    /** Batched one-shot all-reduces: the first step of each batch to the whole batch, and the other members. */
    private final Map<Step, List<Step.Collective>> batches = new IdentityHashMap<>();
    private final java.util.Set<Step> batched = java.util.Collections.newSetFromMap(new IdentityHashMap<>());
    static volatile boolean batchCollectives = !"0".equals(System.getenv("GATUN_BATCH_COLLECTIVES"));
    static volatile boolean fuseInputCopies = !"0".equals(System.getenv("GATUN_FUSE_INPUT_COPY"));
    /** Null for a world of one rank. */
    private final Distributed dist;
    private final AtomicBoolean closed = new AtomicBoolean();

    record Compiled(dev.gatun.planner.kernel.Kernel kernel, KernelSource source, Kernel function) {}

    CudaExecutable(Plan plan, CompileOptions options, int ordinal) {
        this.plan = plan;
        this.options = options;
        if (ordinal >= Device.count())
            throw new GatunRuntimeException("rank's GPU " + ordinal + " does not exist: this machine has " + Device.count() + " CUDA device(s)");
        this.device = Device.open(ordinal);
        boolean ok = false;
        try {
            // ranks sharing a GPU keep one stream each for the life of the process (see RankStreams)
            this.stream = options.ranksPerGpu() > 1 ? RankStreams.of(ordinal, rankOf(options)) : device.createStream();
            this.multiprocessors = device.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT);
            var vmmPools = new HashMap<String, SymmetricHeap.VmmBuffer>();
            // threads of one process share memory directly; VMM file descriptors are for separate processes
            boolean vmm = plan.worldSize() > 1 && options.rendezvous() == null && SymmetricHeap.vmm();
            for (Pool p : plan.pools()) {
                if (vmm && p.isSymmetric()) {
                    var v = SymmetricHeap.allocateVmm(device, p.allocationBytes());
                    vmmPools.put(p.name(), v);
                    pools.put(p.name(), v.view());
                } else {
                    pools.put(p.name(), allocate(p.name() + " (" + p.kind().name().toLowerCase() + " pool)", p.allocationBytes()));
                }
            }
            for (InputBuffer in : plan.lowered().inputs().values())
                if (in.type().shape().isStatic()) staging.put(in.name(), allocate("input '" + in.inputName() + "'", in.type().byteSize()));
            writeConstants();
            compileKernels();
            this.matmul = plan.steps().stream().anyMatch(s -> s instanceof Step.Matmul) ? new CudaMatmul(device, this::compile) : null;
            this.partitions = new GraphExec[plan.partitions().size()];
            if (options.ranksPerGpu() > 1 && matmul != null) new CudaRun(this, Map.of()).warmUpMatmuls();
            this.dist = plan.worldSize() > 1 ? new Distributed(plan, device, stream, pools, vmmPools, options) : null;
            findFusedCopies();
            findBatches();
            ok = true;
        } finally {
            if (!ok) device.close();
        }
    }

    Plan plan() { return plan; }

    private static int rankOf(CompileOptions options) {
        if (options.rendezvous() != null) return options.rendezvous().rank();
        var job = dev.gatun.runtime.distributed.LaunchEnvironment.current();
        return job == null ? 0 : job.rank();
    }

    /**
     * Consecutive one-shot all-reduces (only placements between them) of one group, pool, dtype and operation,
     * none reading another's result, run as one launch with two barriers in all (the seeds' three all-reduces
     * become one). GATUN_BATCH_COLLECTIVES=0 launches each on its own.
     */
    private void findBatches() {
        if (dist == null || !batchCollectives) return;
        var steps = plan.steps();
        for (int i = 0; i < steps.size(); i++) {
            if (!(steps.get(i) instanceof Step.Collective c) || !batchable(c, i)) continue;
            var run = new ArrayList<Step.Collective>(List.of(c));
            int j = i + 1;
            for (; j < steps.size() && run.size() < SymmetricKernels.MULTI_MAX; j++) {
                Step s = steps.get(j);
                if (s instanceof Step.Place) continue;
                if (s instanceof Step.Collective d && batchable(d, j) && joins(run, d)) run.add(d);
                else break;
            }
            if (run.size() > 1) {
                batches.put(c, run);
                batched.addAll(run.subList(1, run.size()));
                i = j - 1;
            }
        }
    }

    private boolean batchable(Step.Collective c, int index) {
        var call = c.call();
        return call.kind() == dev.gatun.ir.graph.CollectiveKind.ALL_REDUCE && call.algorithm() == dev.gatun.ir.lower.Algorithm.ONE_SHOT
                && dist.isMember(call.group()) && !(index > 0 && fusedCopies.contains(plan.steps().get(index - 1)))
                && plan.placement(plan.buffer(c.input()).storage().name()) != null && plan.placement(plan.buffer(c.output()).storage().name()) != null;
    }

    /** Same group, pool, dtype and operation as the batch; input not a result of the batch; output overlapping none of its outputs. */
    private boolean joins(List<Step.Collective> run, Step.Collective d) {
        Step.Collective first = run.getFirst();
        if (!first.call().group().equals(d.call().group()) || first.call().reduceOp() != d.call().reduceOp()
                || plan.buffer(first.input()).type().dtype() != plan.buffer(d.input()).type().dtype()
                || !poolOf(first.input()).equals(poolOf(d.input()))) return false;
        var out = plan.placement(plan.buffer(d.output()).storage().name());
        for (Step.Collective c : run) {
            if (plan.buffer(d.input()).storage().name().equals(plan.buffer(c.output()).storage().name())) return false;
            var o = plan.placement(plan.buffer(c.output()).storage().name());
            if (o.pool().equals(out.pool()) && o.offset() < out.offset() + out.bytes() && out.offset() < o.offset() + o.bytes()) return false;
        }
        return true;
    }

    private String poolOf(String buffer) { return plan.placement(plan.buffer(buffer).storage().name()).pool(); }

    /**
     * A path-2 copy immediately followed by a symmetric collective reading exactly that buffer is left to the
     * collective's kernel, which copies each block's share into the slot before its first barrier: one graph
     * node fewer per call (measured: no difference in time, docs/BENCHMARKS.md). GATUN_FUSE_INPUT_COPY=0 keeps the separate copy.
     */
    private void findFusedCopies() {
        if (dist == null || !fuseInputCopies) return;
        var steps = plan.steps();
        for (int i = 0; i + 1 < steps.size(); i++)
            if (steps.get(i) instanceof Step.CopyIn copy && steps.get(i + 1) instanceof Step.Collective c
                    && c.input().equals(copy.buffer()) && c.call().algorithm().isSymmetric() && dist.isMember(c.call().group())
                    && staging.containsKey(copy.buffer()))
                fusedCopies.add(copy);
    }

    @Override public List<Integer> ranks() { return List.of(dist == null ? 0 : dist.rank); }

    private volatile boolean aborted;

    /**
     * Stops the call in flight: the collectives' barriers of this session's ranks in this process give up at once
     * (their kernels end early, without a trap, so the GPU context stays usable) and the call fails. Kernels without
     * a barrier run to their end. Ranks in other processes wait until their collective timeout.
     */
    @Override public void abort() {
        aborted = true;
        if (dist != null) dist.abort();
    }

    /** Aborted here, or by another rank of this session in this process (they share the flag). */
    private boolean aborted() { return aborted || (dist != null && dist.wasAborted()); }
    Device device() { return device; }
    Stream stream() { return stream; }
    GraphExec[] partitions() { return partitions; }

    private DeviceBuffer allocate(String what, long bytes) {
        try {
            return device.allocate(Math.max(1, bytes));
        } catch (CudaException e) {
            long[] info = device.memoryInfo();
            throw new GatunRuntimeException("plan '" + plan.name() + "': allocating " + what + " of " + bytes + " bytes on GPU "
                    + device.ordinal() + " failed (" + info[0] + " bytes free of " + info[1] + "): " + e.getMessage(), e);
        }
    }

    private void writeConstants() {
        for (Buffer b : plan.lowered().buffers()) {
            if (!(b instanceof ConstantBuffer c)) continue;
            double[] v = c.values();
            NDArray host = NDArray.of(b.type().dtype(), v, b.type().shape().sizes());
            var p = plan.placement(b.name());
            pools.get(p.pool()).copyFrom(host.segment(), p.offset());
        }
    }

    // ------------------------------------------------------------------ compilation

    private void compileKernels() {
        int n = plan.kernels().size(), done = 0;
        long t0 = System.nanoTime();
        for (var k : plan.kernels()) {
            KernelSource src = CudaCodegen.generate(k, name -> plan.buffer(name).type().dtype());
            kernels.put(k, new Compiled(k, src, compile(src.name(), src.source(), src.name())));
            // progress for plans with many kernels (NVRTC takes up to a second each when the disk cache misses)
            long ms = (System.nanoTime() - t0) / 1_000_000;
            done++;
            if (n >= 8 && ms > 500 && (done % 8 == 0 || done == n))
                LOG.log(System.Logger.Level.INFO, "plan {0}: {1}/{2} kernels ready ({3} ms)", plan.name(), done, n, ms);
        }
        for (Step s : plan.steps()) {
            if (s instanceof Step.CallUserOp u && !userKernels.containsKey(u.op().name())) {
                if (u.op().cudaSource() == null)
                    throw new GatunRuntimeException("user op '" + u.op().name() + "' has no CUDA source, so the CUDA backend cannot run it");
                userKernels.put(u.op().name(), compile(u.op().name(), u.op().cudaSource(), u.op().kernelName()));
            }
        }
    }

    Kernel compile(String programName, String source, String kernelName) {
        return compile(device, plan.name(), programName, source).kernel(kernelName);
    }

    /** NVRTC for the device's architecture, cached on disk; a failure saves the source and names the file. */
    static dev.gatun.cuda.Module compile(Device device, String planName, String programName, String source) {
        String cudaHome = System.getenv().getOrDefault("CUDA_HOME", "/usr/local/cuda");
        var program = Program.of(programName, source).withOptions(ProgramOptions.defaults().withIncludePath(cudaHome + "/include"));
        try {
            return program.load(device);
        } catch (CompileException e) {
            Path saved = save(programName, source);
            throw new GatunRuntimeException("kernel '" + programName + "' of plan '" + planName + "' failed to compile; source saved to "
                    + saved + "\n" + e.getMessage(), e);
        }
    }

    private static Path save(String name, String source) {
        try {
            Path p = Files.createTempFile("gatun-" + name.replaceAll("[^A-Za-z0-9_]", "_") + "-", ".cu");
            Files.writeString(p, source);
            return p;
        } catch (IOException io) {
            return Path.of("(could not save: " + io.getMessage() + ")");
        }
    }

    // ------------------------------------------------------------------ running

    @Override public List<Map<String, NDArray>> run(List<Map<String, NDArray>> inputsPerRank) {
        if (closed.get()) throw new GatunRuntimeException("plan '" + plan.name() + "' was released");
        if (aborted()) throw new GatunRuntimeException("plan '" + plan.name() + "' was aborted and cannot run again; compile a new session");
        try {
            var out = List.of(new CudaRun(this, inputsPerRank.getFirst()).run());
            if (aborted()) throw new GatunRuntimeException("plan '" + plan.name() + "': the call was aborted (Session.abort); its results are void");
            return out;
        } catch (CudaException e) {
            String hint = dist == null ? "" : "; if a line GATUN_BARRIER_TIMEOUT was printed, a peer rank stopped or fell behind"
                    + " and this rank's collective gave up waiting for it";
            throw new GatunRuntimeException("plan '" + plan.name() + "' failed on GPU " + device.ordinal()
                    + (dist == null ? "" : " (rank " + dist.rank + ")") + ": " + e.getMessage() + hint, e);
        }
    }

    /** One call: stage inputs, run or replay, copy outputs back. */
    static final class CudaRun {
        private final CudaExecutable exe;
        private final Map<String, NDArray> inputs;
        private final Map<String, Long> env = new HashMap<>();
        private final Map<String, Long> address = new HashMap<>();
        private final List<DeviceBuffer> perCall = new ArrayList<>();
        /** Set by a fused path-2 copy for the collective right after it: the staged input's address. */
        private long fusedLocal;

        CudaRun(CudaExecutable exe, Map<String, NDArray> inputs) {
            this.exe = exe;
            this.inputs = inputs;
        }

        Map<String, NDArray> run() {
            Plan plan = exe.plan;
            try {
                stageInputs();
                executeSteps();
                // where ranks share a GPU, no copy may wait in a copy engine's queue behind this rank's collectives
                // (a peer's copy queued behind it could never run): the results are read once the work is done
                if (exe.dist != null && exe.dist.sharesGpu()) exe.stream.synchronize();
                var out = new LinkedHashMap<String, NDArray>();
                plan.outputs().forEach((name, buf) -> out.put(name, readOut(plan.buffer(buf))));
                exe.stream.synchronize();
                return out;
            } finally {
                release();
            }
        }

        void executeSteps() { executeSteps(exe.options.cudaGraphs()); }

        /** The plan's steps on the stream: with {@code graphs}, captured partitions replay and the rest runs eagerly. */
        void executeSteps(boolean graphs) {
            if (graphs) captureAll();
            List<Step> steps = exe.plan.steps();
            for (int i = 0; i < steps.size(); i++) {
                Plan.Partition part = graphs ? partitionStartingAt(i) : null;
                if (part != null) {
                    replay(part);
                    i = part.last();
                } else {
                    execute(steps.get(i));
                }
            }
        }

        void release() {
            for (DeviceBuffer b : perCall) b.close();
            perCall.clear();
        }

        private Plan.Partition partitionStartingAt(int step) {
            for (Plan.Partition p : exe.plan.partitions()) if (p.first() == step) return p;
            return null;
        }

        /**
         * On the first call, every partition is captured and instantiated before any is launched, and the ranks
         * meet after that: instantiating may wait for every kernel of the context, and where ranks share a GPU
         * a peer's collective spins until this rank's kernels arrive.
         */
        private void captureAll() {
            boolean captured = false;
            for (Plan.Partition part : exe.plan.partitions()) {
                if (exe.partitions[part.index()] != null) continue;
                CudaGraph graph;
                try (StreamCapture capture = exe.stream.beginCapture()) {
                    for (int i = part.first(); i <= part.last(); i++) execute(exe.plan.steps().get(i));
                    graph = capture.end();
                }
                exe.partitions[part.index()] = graph.instantiate();
                LOG.log(System.Logger.Level.DEBUG, "plan {0}: captured partition {1} ({2} nodes)", exe.plan.name(), part.index(), graph.nodeCount());
                graph.close(); // the executable graph is all replays need
                captured = true;
            }
            if (captured && exe.dist != null) exe.dist.meet("captured");
        }

        private void replay(Plan.Partition part) {
            exe.partitions[part.index()].launch(exe.stream);
        }

        void stageInputs() {
            bindAddresses();
            for (InputBuffer in : exe.plan.lowered().inputs().values()) {
                NDArray a = inputs.get(in.inputName());
                long[] shape = a.shape();
                for (int d = 0; d < shape.length; d++)
                    if (!in.type().shape().dim(d).isStatic()) env.put(in.type().shape().dim(d).toString(), shape[d]);
                DeviceBuffer dst = exe.staging.get(in.name());
                if (dst == null) {
                    dst = exe.device.allocate(Math.max(1, a.byteSize()));
                    perCall.add(dst);
                }
                dst.copyFromAsync(a.segment(), 0, exe.stream);
                // a path-2 input is copied on into its symmetric slot by the plan's copy_in step
                if (exe.plan.placement(in.name()) == null) address.put(in.name(), dst.address());
            }
        }

        /** Every placed buffer's and staged static input's address (the same on every call). */
        void bindAddresses() {
            for (var p : exe.plan.placements().values()) address.put(p.buffer(), exe.pools.get(p.pool()).address() + p.offset());
            for (InputBuffer in : exe.plan.lowered().inputs().values())
                if (exe.plan.placement(in.name()) == null && exe.staging.containsKey(in.name())) address.put(in.name(), exe.staging.get(in.name()).address());
        }

        /**
         * Runs each matmul of static shape once on the plan's memory, before any rank launches: cuBLAS loads its
         * kernels on first use, and loading may wait for every kernel of the context, a peer's spinning collective
         * included, where ranks share a GPU. Nothing is read from what these runs write: every call rewrites it.
         */
        void warmUpMatmuls() {
            bindAddresses();
            for (Step s : exe.plan.steps()) {
                if (!(s instanceof Step.Matmul m)) continue;
                boolean ready = true;
                for (String b : List.of(m.a(), m.b(), m.output()))
                    ready &= exe.plan.buffer(b).type().shape().isStatic() && address.containsKey(exe.plan.buffer(b).storage().name());
                if (ready) execute(m);
            }
            exe.stream.synchronize();
        }

        long bytes(Buffer b) { return b.type().shape().symNumel().eval(env) * b.type().dtype().byteSize(); }

        /** A buffer's device address (a view's starts at its offset inside its storage). */
        long addressOf(String name) {
            Buffer b = exe.plan.buffer(name);
            Long base = address.get(b.storage().name());
            if (base == null) throw new IllegalStateException("buffer " + b.storage().name() + " has no memory at this point of plan '" + exe.plan.name() + "'");
            if (b instanceof ViewBuffer v) return base + v.layout().offset().eval(env) * b.type().dtype().byteSize();
            return base;
        }

        private void execute(Step s) {
            switch (s) {
                case Step.AllocPool a -> { }
                case Step.Place p -> { }
                case Step.Release r -> { }
                case Step.Barrier b -> { if (exe.dist != null && exe.dist.isMember(b.group())) exe.dist.barrier(b.group(), exe.stream); }
                case Step.AllocDynamic d -> {
                    DeviceBuffer buf = exe.device.allocate(Math.max(1, bytes(exe.plan.buffer(d.buffer()))));
                    perCall.add(buf);
                    address.put(d.buffer(), buf.address());
                }
                case Step.CopyIn c -> {
                    if (exe.fusedCopies.contains(c)) fusedLocal = exe.staging.get(c.buffer()).address();
                    else copy(exe.staging.get(c.buffer()).address(), addressOf(c.buffer()), bytes(exe.plan.buffer(c.buffer())));
                }
                case Step.Launch l -> launch(exe.kernels.get(l.kernel()));
                case Step.Collective c -> {
                    if (exe.batches.containsKey(c)) batch(exe.batches.get(c));
                    else if (!exe.batched.contains(c)) collective(c);
                }
                case Step.Matmul m -> exe.matmul.run(exe.plan.buffer(m.a()), addressOf(m.a()), exe.plan.buffer(m.b()), addressOf(m.b()),
                        exe.plan.buffer(m.output()), addressOf(m.output()), env, exe.stream);
                case Step.CallUserOp u -> userOp(u);
            }
        }

        private void collective(Step.Collective c) {
            try {
                collectiveStep(c);
            } finally {
                fusedLocal = 0;
            }
        }

        private void batch(List<Step.Collective> run) {
            var slots = new ArrayList<Distributed.Slot>();
            String pool = exe.poolOf(run.getFirst().input());
            long base = exe.pools.get(pool).address();
            for (Step.Collective c : run)
                slots.add(new Distributed.Slot(addressOf(c.input()) - base, addressOf(c.output()),
                        exe.plan.buffer(c.input()).type().shape().symNumel().eval(env)));
            exe.dist.oneShotBatch(run.getFirst(), pool, slots, exe.plan.buffer(run.getFirst().input()).type().dtype(), exe.stream);
        }

        private void collectiveStep(Step.Collective c) {
            Buffer in = exe.plan.buffer(c.input());
            long src = addressOf(c.input()), out = addressOf(c.output()), n = in.type().shape().symNumel().eval(env);
            if (exe.dist == null || !exe.dist.isMember(c.call().group())) {
                // a world of one rank, or a rank outside the group: the input passes through
                copy(src, out, bytes(in));
            } else if (c.call().algorithm().isSymmetric()) {
                var p = exe.plan.placement(in.storage().name());
                exe.dist.symmetric(c, p.pool(), src - exe.pools.get(p.pool()).address(), out, fusedLocal, n, in.type().dtype(), exe.stream);
            } else {
                exe.dist.nccl(c, src, out, n, in.type().dtype(), exe.stream);
            }
        }

        /** A device-to-device copy: the copy engine, or a kernel where ranks share a GPU (see {@link Distributed#copy}). */
        private void copy(long src, long dst, long bytes) {
            if (src == dst || bytes == 0) return;
            if (exe.dist != null && exe.dist.sharesGpu()) exe.dist.copy(src, dst, bytes, exe.stream);
            else DeviceBuffer.wrap(exe.device, dst, bytes).copyFromAsync(DeviceBuffer.wrap(exe.device, src, bytes), exe.stream);
        }

        private void launch(Compiled c) {
            KernelSource src = c.source();
            var k = src.geometry(env, exe.multiprocessors);
            if (k.elements() == 0) return;
            var args = new ArrayList<Object>();
            var kernel = c.kernel();
            for (String in : kernel.inputs()) args.add(addressOf(in));
            for (var st : kernel.stores()) args.add(addressOf(st.buffer()));
            for (String sym : src.symbols()) args.add(env.get(sym));
            var config = new LaunchConfig(Dim3.of(Math.toIntExact(k.grid())), Dim3.of(k.block()), k.sharedBytes(), exe.stream);
            try {
                c.function().launch(config, args.toArray());
            } catch (CudaException e) {
                throw new GatunRuntimeException("launching kernel " + src.name() + " (grid " + k.grid() + ", block " + k.block()
                        + ", shared " + k.sharedBytes() + " B) failed: " + e.getMessage(), e);
            }
        }

        private void userOp(Step.CallUserOp u) {
            Kernel fn = exe.userKernels.get(u.op().name());
            long n = exe.plan.buffer(u.outputs().getFirst()).type().shape().symNumel().eval(env);
            if (n == 0) return;
            int block = u.op().blockSize();
            var args = new ArrayList<Object>();
            for (String in : u.inputs()) args.add(addressOf(in));
            for (String out : u.outputs()) args.add(addressOf(out));
            args.add(n);
            long grid = Math.ceilDiv(n, block);
            var config = new LaunchConfig(Dim3.of(Math.toIntExact(grid)), Dim3.of(block), 0, exe.stream);
            try {
                fn.launch(config, args.toArray());
            } catch (CudaException e) {
                throw new GatunRuntimeException("launching user op '" + u.op().name() + "' (grid " + grid + ", block " + block + ") failed: " + e.getMessage(), e);
            }
        }

        /** An output as a fresh host array; strided views are gathered on the host. */
        private NDArray readOut(Buffer b) {
            DType t = b.type().dtype();
            long[] shape = b.type().shape().sizes(env);
            Layout.Fixed l = b.layout().fix();
            long base = address.get(b.storage().name());
            boolean contiguous = l.strides().equals(b.type().shape().contiguousStrides());
            long off = l.offset().eval(env);
            if (contiguous) {
                NDArray out = NDArray.zeros(t, shape);
                if (out.byteSize() > 0) DeviceBuffer.wrap(exe.device, base + off * t.byteSize(), out.byteSize()).copyToAsync(out.segment(), 0, exe.stream);
                exe.stream.synchronize();
                return out;
            }
            long[] strides = new long[shape.length];
            long extent = off + 1;
            for (int k = 0; k < shape.length; k++) {
                strides[k] = l.strides().get(k).eval(env);
                if (shape[k] > 0) extent += (shape[k] - 1) * strides[k];
            }
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment host = arena.allocate(extent * t.byteSize(), 16);
                DeviceBuffer.wrap(exe.device, base, host.byteSize()).copyToAsync(host, 0, exe.stream);
                exe.stream.synchronize();
                return NDArray.gather(host, t, shape, off, strides);
            }
        }
    }

    /** Synchronizes, then releases graphs, kernels, pools and the device context; idempotent. */
    @Override public void close() {
        if (!closed.compareAndSet(false, true)) return;
        try {
            stream.synchronize();
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.WARNING, "plan {0}: the GPU reported an error while closing: {1}", plan.name(), e.getMessage());
        } finally {
            try {
                // captured graphs may hold NCCL work: they go before the communicators
                for (GraphExec g : partitions) if (g != null) g.close();
                if (dist != null) dist.close();
            } finally {
                device.close();
            }
        }
    }
}
