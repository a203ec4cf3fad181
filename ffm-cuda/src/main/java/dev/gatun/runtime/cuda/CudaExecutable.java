package dev.gatun.runtime.cuda;

import dev.gatun.cuda.CompileException;
import dev.gatun.cuda.CudaException;
import dev.gatun.cuda.CudaGraph;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.GraphExec;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Program;
import dev.gatun.cuda.ProgramOptions;
import dev.gatun.cuda.Stream;
import dev.gatun.cuda.StreamCapture;
import dev.gatun.ir.DType;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.spi.Executable;
import dev.gatun.runtime.spi.StepLoop;

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
    /** staging[input buffer id]: the device buffer a static-shape graph input is staged into, at a fixed address. */
    private final DeviceBuffer[] staging;
    private final Map<dev.gatun.planner.kernel.Kernel, Compiled> kernels = new IdentityHashMap<>();
    private final Map<String, Kernel> userKernels = new HashMap<>();
    private final CudaMatmul matmul;
    private final GraphExec[] partitions;
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
            this.stream = options.ranksPerGpu() > 1 ? RankStreams.of(ordinal, options.world().rank()) : device.createStream();
            this.multiprocessors = device.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT);
            var vmmPools = new HashMap<String, SymmetricHeap.VmmBuffer>();
            // threads of one process share memory directly; VMM file descriptors are for separate processes
            boolean vmm = plan.worldSize() > 1 && options.world() instanceof dev.gatun.runtime.World.Launched && options.execution().cuda().vmmHandles();
            for (Pool p : plan.pools()) {
                if (vmm && p.isSymmetric()) {
                    var v = SymmetricHeap.allocateVmm(device, p.allocationBytes());
                    vmmPools.put(p.name(), v);
                    pools.put(p.name(), v.view());
                } else {
                    pools.put(p.name(), allocate(p.name() + " (" + p.kind().name().toLowerCase() + " pool)", p.allocationBytes()));
                }
            }
            this.staging = new DeviceBuffer[plan.buffers().size()];
            for (PlanBuffer in : plan.inputs())
                if (!in.isDynamic()) staging[in.id()] = allocate("input '" + in.input() + "'", in.type().byteSize());
            writeConstants();
            compileKernels();
            this.matmul = plan.steps().stream().anyMatch(s -> s instanceof Step.Matmul) ? new CudaMatmul(device, this::compile) : null;
            this.partitions = new GraphExec[plan.partitions().size()];
            if (options.ranksPerGpu() > 1 && matmul != null) new CudaRun(this, Map.of()).warmUpMatmuls();
            this.dist = plan.worldSize() > 1 ? new Distributed(plan, device, stream, pools, vmmPools, options) : null;
            ok = true;
        } finally {
            if (!ok) device.close();
        }
    }

    Plan plan() { return plan; }

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
        for (PlanBuffer b : plan.buffers()) {
            if (b.kind() != PlanBuffer.Kind.CONSTANT) continue;
            NDArray host = NDArray.of(b.dtype(), plan.constant(b), b.shape().sizes());
            pools.get(b.placement().pool()).copyFrom(host.segment(), b.placement().offset());
        }
    }

    // ------------------------------------------------------------------ compilation

    private void compileKernels() {
        int n = plan.kernels().size(), done = 0;
        long t0 = System.nanoTime();
        for (var k : plan.kernels()) {
            KernelSource src = CudaCodegen.generate(k);
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
        return compile(device, options.execution().cuda().cudaHome(), plan.name(), programName, source).kernel(kernelName);
    }

    /** NVRTC for the device's architecture, cached on disk; a failure saves the source and names the file. */
    static dev.gatun.cuda.Module compile(Device device, String cudaHome, String planName, String programName, String source) {
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

    /** One call: stage inputs, run or replay the plan's steps through the shared {@link StepLoop}, copy outputs back. */
    static final class CudaRun implements StepLoop.Steps {
        private final CudaExecutable exe;
        private final Plan plan;
        private final Map<String, NDArray> inputs;
        private final Map<String, Long> env = new HashMap<>();
        /** address[storage id]: device address of every storage this call has (0: none yet). */
        private final long[] address;
        private final List<DeviceBuffer> perCall = new ArrayList<>();

        CudaRun(CudaExecutable exe, Map<String, NDArray> inputs) {
            this.exe = exe;
            this.plan = exe.plan;
            this.inputs = inputs;
            this.address = new long[plan.buffers().size()];
        }

        Map<String, NDArray> run() {
            try {
                stageInputs();
                executeSteps();
                // where ranks share a GPU, no copy may wait in a copy engine's queue behind this rank's collectives
                // (a peer's copy queued behind it could never run): the results are read once the work is done
                if (exe.dist != null && exe.dist.sharesGpu()) exe.stream.synchronize();
                var out = new LinkedHashMap<String, NDArray>();
                plan.outputs().forEach((name, buf) -> out.put(name, readOut(buf)));
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
            StepLoop.run(plan, this, graphs);
        }

        void release() {
            for (DeviceBuffer b : perCall) b.close();
            perCall.clear();
        }

        /**
         * On the first call, every partition is captured and instantiated before any is launched, and the ranks
         * meet after that: instantiating may wait for every kernel of the context, and where ranks share a GPU
         * a peer's collective spins until this rank's kernels arrive.
         */
        private void captureAll() {
            boolean captured = false;
            for (Plan.Partition part : plan.partitions()) {
                if (exe.partitions[part.index()] != null) continue;
                CudaGraph graph;
                try (StreamCapture capture = exe.stream.beginCapture()) {
                    StepLoop.run(plan, part.first(), part.last(), this);
                    graph = capture.end();
                }
                exe.partitions[part.index()] = graph.instantiate();
                LOG.log(System.Logger.Level.DEBUG, "plan {0}: captured partition {1} ({2} nodes)", plan.name(), part.index(), graph.nodeCount());
                graph.close(); // the executable graph is all replays need
                captured = true;
            }
            if (captured && exe.dist != null) exe.dist.meet("captured");
        }

        @Override public boolean replay(Plan.Partition part) {
            exe.partitions[part.index()].launch(exe.stream);
            return true;
        }

        void stageInputs() {
            bindAddresses();
            for (PlanBuffer in : plan.inputs()) {
                NDArray a = inputs.get(in.input());
                long[] shape = a.shape();
                for (int d = 0; d < shape.length; d++)
                    if (!in.shape().dim(d).isStatic()) env.put(in.shape().dim(d).toString(), shape[d]);
                DeviceBuffer dst = exe.staging[in.id()];
                if (dst == null) {
                    dst = exe.device.allocate(Math.max(1, a.byteSize()));
                    perCall.add(dst);
                }
                dst.copyFromAsync(a.segment(), 0, exe.stream);
                // a path-2 input is copied on into its symmetric slot by the plan's copy_in step (or its collective)
                if (in.placement() == null) address[in.id()] = dst.address();
            }
        }

        /** Every placed buffer's and staged static input's address (the same on every call). */
        void bindAddresses() {
            for (PlanBuffer b : plan.buffers()) {
                var p = b.placement();
                if (p != null) address[b.id()] = exe.pools.get(p.pool()).address() + p.offset();
                else if (b.kind() == PlanBuffer.Kind.INPUT && exe.staging[b.id()] != null) address[b.id()] = exe.staging[b.id()].address();
            }
        }

        /**
         * Runs each matmul of static shape once on the plan's memory, before any rank launches: cuBLAS loads its
         * kernels on first use, and loading may wait for every kernel of the context, a peer's spinning collective
         * included, where ranks share a GPU. Nothing is read from what these runs write: every call rewrites it.
         */
        void warmUpMatmuls() {
            bindAddresses();
            for (Step s : plan.steps()) {
                if (!(s instanceof Step.Matmul m)) continue;
                boolean ready = true;
                for (PlanBuffer b : List.of(m.a(), m.b(), m.output())) ready &= !b.isDynamic() && address[b.storage().id()] != 0;
                if (ready) matmul(m);
            }
            exe.stream.synchronize();
        }

        long bytes(PlanBuffer b) { return numel(b) * b.dtype().byteSize(); }

        long numel(PlanBuffer b) { return b.shape().symNumel().eval(env); }

        /** A buffer's device address (a view's starts at its offset inside its storage). */
        long addressOf(PlanBuffer b) {
            long base = address[b.storage().id()];
            if (base == 0) throw new IllegalStateException("buffer " + b.storage().name() + " has no memory at this point of plan '" + plan.name() + "'");
            return b.isView() ? base + b.offset().eval(env) * b.dtype().byteSize() : base;
        }

        @Override public void barrier(Step.Barrier b) {
            if (exe.dist != null && exe.dist.isMember(b.group())) exe.dist.barrier(b.group(), exe.stream);
        }

        @Override public void allocDynamic(Step.AllocDynamic d) {
            DeviceBuffer buf = exe.device.allocate(Math.max(1, bytes(d.buffer())));
            perCall.add(buf);
            address[d.buffer().id()] = buf.address();
        }

        @Override public void copyIn(Step.CopyIn c) { copyIn(c.buffer()); }

        private void copyIn(PlanBuffer b) { copy(exe.staging[b.id()].address(), addressOf(b), bytes(b)); }

        @Override public void launch(Step.Launch l) { launch(exe.kernels.get(l.kernel())); }

        @Override public void matmul(Step.Matmul m) {
            exe.matmul.run(m.a(), addressOf(m.a()), m.b(), addressOf(m.b()), m.output(), addressOf(m.output()), env, exe.stream);
        }

        @Override public void userOp(Step.CallUserOp u) {
            Kernel fn = exe.userKernels.get(u.op().name());
            long n = numel(u.outputs().getFirst());
            if (n == 0) return;
            int block = u.op().blockSize();
            var args = new ArrayList<Object>();
            for (PlanBuffer in : u.inputs()) args.add(addressOf(in));
            for (PlanBuffer out : u.outputs()) args.add(addressOf(out));
            args.add(n);
            long grid = Math.ceilDiv(n, block);
            var config = new LaunchConfig(Dim3.of(Math.toIntExact(grid)), Dim3.of(block), 0, exe.stream);
            try {
                fn.launch(config, args.toArray());
            } catch (CudaException e) {
                throw new GatunRuntimeException("launching user op '" + u.op().name() + "' (grid " + grid + ", block " + block + ") failed: " + e.getMessage(), e);
            }
        }

        @Override public void collective(int index, Step.Collective c) {
            PlanBuffer in = c.input();
            long src = addressOf(in), out = addressOf(c.output()), n = numel(in);
            boolean member = exe.dist != null && exe.dist.isMember(c.call().group());
            if (!member) {
                // a world of one rank, or a rank outside the group: the input passes through
                if (c.copiesIn()) copyIn(in);
                copy(src, out, bytes(in));
            } else if (c.call().algorithm().isSymmetric()) {
                var p = in.storage().placement();
                long local = c.copiesIn() ? exe.staging[in.id()].address() : 0; // the kernel copies the caller's tensor in itself
                exe.dist.symmetric(c, p.pool(), src - exe.pools.get(p.pool()).address(), out, local, n, in.dtype(), exe.stream);
            } else {
                if (c.copiesIn()) copyIn(in);
                exe.dist.nccl(c, src, out, n, in.dtype(), exe.stream);
            }
        }

        @Override public void batch(int index, Step.CollectiveBatch b) {
            if (exe.dist == null || !exe.dist.isMember(b.first().call().group())) {
                for (Step.Collective c : b.members()) collective(index, c);
                return;
            }
            String pool = b.first().input().storage().placement().pool();
            long base = exe.pools.get(pool).address();
            var slots = new ArrayList<Distributed.Slot>();
            for (Step.Collective c : b.members()) slots.add(new Distributed.Slot(addressOf(c.input()) - base, addressOf(c.output()), numel(c.input())));
            exe.dist.oneShotBatch(b.first(), pool, slots, b.first().input().dtype(), exe.stream);
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
            for (PlanBuffer in : kernel.inputs()) args.add(addressOf(in));
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

        /** An output as a fresh host array; strided views are gathered on the host. */
        private NDArray readOut(PlanBuffer b) {
            DType t = b.dtype();
            long[] shape = b.shape().sizes(env);
            long base = address[b.storage().id()];
            long off = b.offset().eval(env);
            if (b.strides().equals(b.shape().contiguousStrides())) {
                NDArray out = NDArray.zeros(t, shape);
                if (out.byteSize() > 0) DeviceBuffer.wrap(exe.device, base + off * t.byteSize(), out.byteSize()).copyToAsync(out.segment(), 0, exe.stream);
                exe.stream.synchronize();
                return out;
            }
            long[] strides = new long[shape.length];
            long extent = off + 1;
            for (int k = 0; k < shape.length; k++) {
                strides[k] = b.strides().get(k).eval(env);
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
