package dev.gatun.runtime.cuda;

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
import dev.gatun.cuda.PinnedHostBuffer;
import dev.gatun.cuda.Program;
import dev.gatun.cuda.ProgramOptions;
import dev.gatun.cuda.Stream;
import dev.gatun.cuda.StreamCapture;
import dev.gatun.ir.DType;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;
import dev.gatun.runtime.ArrayLike;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
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
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A plan loaded on one GPU. Pools are device allocations made once; each capturable partition is captured on the
 * first call and replayed after, one graph launch per partition.
 *
 * <p>Inputs. A host array is copied into the input's staging buffer (fixed address, made on first need, so an input
 * always passed as a device array read in place costs no memory of its own). A device array is read where it is, and
 * the captured graphs are kept per set of input addresses (a few sets; inputs that keep arriving at new addresses are
 * staged from then on, one device copy each). Each rank keeps its own graphs: a rank whose inputs moved captures
 * again by itself, without meeting its peers (the ranks meet once, after the first call's captures). Where ranks
 * share a GPU a device array is copied into the staging buffer instead: a capture there would have to meet the peers,
 * whose kernels share the GPU with it. A bound input is copied into its staging buffer once, when bound.
 *
 * <p>Outputs are views of the executable's memory, valid until its next call; the call is not waited for. The
 * {@code written} event is recorded when another executable is about to read this one's memory (so nothing is
 * recorded on a call that nobody else reads): it waits for it on its own stream, and registers as a reader whose
 * end of call this one's next call waits for in turn.
 */
final class CudaExecutable implements Executable {
    private static final System.Logger LOG = System.getLogger("dev.gatun.cuda");

    private final Plan plan;
    private final CompileOptions options;
    private final Device device;
    /** "cuda:N" */
    private final String deviceName;
    private final Stream stream;
    private final int multiprocessors;
    private final Map<String, DeviceBuffer> pools = new LinkedHashMap<>();
    /** staging[input buffer id]: the device buffer a static-shape graph input is staged into, at a fixed address. */
    private final DeviceBuffer[] staging;
    /** By buffer id: every placed buffer's and staged input's address, and where each staged input is read from; fixed. */
    private final long[] fixedAddress, fixedSource;
    private final Map<dev.gatun.planner.kernel.Kernel, Compiled> kernels = new IdentityHashMap<>();
    private final Map<String, Kernel> userKernels = new HashMap<>();
    /** The fused collective launches ({@link CollectiveCodegen}), by step. */
    private final Map<Step, Fused> fused = new IdentityHashMap<>();

    /** A fused collective launch's source and its function. */
    record Fused(CollectiveCodegen.FusedSource source, Kernel function) {}

    /** The products with epilogues ({@link TiledProductCodegen}), by step. */
    private final Map<Step, Tiled> tiled = new IdentityHashMap<>();

    /** A product with epilogues: its source, its function, its column and item tables on the device. */
    record Tiled(TiledProductCodegen.TiledSource source, Kernel function, DeviceBuffer cols, DeviceBuffer items) {}

    /** The product step {@code s} runs: a product's own, or a tiled product's; else null. */
    static Step.Matmul productOf(Step s) {
        return switch (s) {
            case Step.Matmul m -> m;
            case Step.TiledProduct t -> t.product();
            default -> null;
        };
    }

    private final CudaMatmul matmul;
    private final CudaIndexSelect indexSelect;
    private final CudaArgmax argmax;
    private final CudaSample sample;
    private final CudaUpdateSlice updateSlice;
    private final CudaAttention attention;
    /** Whether this plan's own kernels are programmatic dependent launches (see {@link Programmatic}). */
    private final boolean programmatic;
    /** By buffer id: an input a GEMV product reads (Step.Matmul.gemv), which is read in place only where it lies 16-byte aligned. */
    private final boolean[] gemvOperand;
    /** Where index_select, update_slice and attention kernels say why they stopped a call (null: the plan has none). */
    private final DeviceFault fault;
    /** Captured partitions per set of input addresses (one set where every input is staged), least recently used first. */
    private final Map<AddressKey, GraphExec[]> graphs = new LinkedHashMap<>(8, 0.75f, true);
    /** The graphs the last call replayed, and the input addresses they were captured for. */
    private GraphExec[] lastGraphs;
    private AddressKey lastKey;
    /** How many times inputs arrived at a new set of addresses after the first capture. */
    private int recaptures;
    /** False once inputs arrived at new addresses too often: device inputs are staged from then on. */
    private boolean readInPlace = true;
    /** Whether the ranks met after this executable's first captures (once: see {@link CudaRun#captureAll}). */
    private boolean metAfterCapture;
    /** Null for a world of one rank. */
    private final Distributed dist;
    private final AtomicBoolean closed = new AtomicBoolean();
    /** Memory of arrays this executable owns (toDevice, copy): freed when it closes. */
    private final Set<CudaMemory> owned = ConcurrentHashMap.newKeySet();
    /** Page-locked host arrays ({@link #allocateHost}); their segments belong to {@code hostArena}, closed before they go. */
    private final List<PinnedHostBuffer> pinned = new ArrayList<>();
    private final Arena hostArena = Arena.ofShared();
    /**
     * Page-locked staging for host arrays that are not page-locked themselves: inputs by buffer id (made on first use),
     * and one buffer for reads, grown as needed. One bulk copy into or out of it, then a DMA at full speed.
     */
    private final PinnedHostBuffer[] hostIn;
    private PinnedHostBuffer hostOut;
    /** Each chunk's arrival in {@code hostOut} ({@link StagedCopies#out}); made on first need, guarded by {@code hostIn}. */
    private Event[] chunkRead;
    /** Recorded after a call's copies out of the page-locked staging: the next call's bulk copies into it wait for them. */
    private final Event copiedIn;
    /** Recorded when work on another stream is about to read this memory ({@link #markWritten}), and after a call that read another's. */
    private final Event written;
    /** Executables that read this one's memory since its last call: the next call waits for them. */
    private final Set<CudaExecutable> readers = ConcurrentHashMap.newKeySet();
    /** Inputs whose staging buffer holds a bound value. */
    private final Set<String> bound = ConcurrentHashMap.newKeySet();
    /** An input bound in place: the caller's array, read where it lies by every call, and its address when bound. */
    private record InPlace(DeviceArray array, long address) {}
    private final Map<String, InPlace> boundInPlace = new ConcurrentHashMap<>();
    /** The last call's per-call buffers: outputs may live there until the next call. */
    private List<DeviceBuffer> lastCall = List.of();
    /** Counts calls; an output of call g may be used while this is still g. */
    private volatile long generation;
    /** The plan's outputs, geometry precomputed where it is static. */
    private final List<Output> outputs = new ArrayList<>();

    /** Captured graph sets kept at once, and new address sets tolerated before device inputs are staged instead. */
    private static final int GRAPH_SETS = 4, RECAPTURES = 8;

    /** The addresses a set of captured graphs reads its inputs from. */
    private record AddressKey(long[] addresses) {
        @Override public boolean equals(Object o) { return o instanceof AddressKey k && Arrays.equals(addresses, k.addresses); }
        @Override public int hashCode() { return Arrays.hashCode(addresses); }
    }

    /** A plan kernel, its CUDA source and function, and (for folds) the zeroed word its blocks count themselves done on. */
    record Compiled(dev.gatun.planner.kernel.Kernel kernel, KernelSource source, Kernel function, DeviceBuffer counter) {}

    CudaExecutable(Plan plan, CompileOptions options, int ordinal) {
        this.plan = plan;
        this.options = options;
        if (ordinal < 0 || ordinal >= Device.count())
            throw new GatunRuntimeException("rank's GPU " + ordinal + " does not exist: this machine has " + Device.count() + " CUDA device(s)");
        this.device = Device.open(ordinal);
        this.deviceName = "cuda:" + ordinal;
        boolean ok = false;
        try {
            // ranks sharing a GPU keep one stream each for the life of the process (see RankStreams)
            this.stream = sharesGpu() ? RankStreams.of(ordinal, options.world().rank(), options.execution().cuda().hardwareQueues())
                    : device.createStream();
            this.multiprocessors = device.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT);
            this.written = device.createEvent(Event.Flag.DISABLE_TIMING);
            this.copiedIn = device.createEvent(Event.Flag.DISABLE_TIMING);
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
                if (p.kind() == Pool.Kind.STATE) pools.get(p.name()).memsetAsync(0, stream);   // states start at zeros
            }
            this.staging = new DeviceBuffer[plan.buffers().size()];
            this.hostIn = new PinnedHostBuffer[plan.buffers().size()];
            this.fixedAddress = new long[plan.buffers().size()];
            this.fixedSource = new long[plan.buffers().size()];
            for (PlanBuffer b : plan.buffers()) {
                var p = b.placement();
                if (p != null) fixedAddress[b.id()] = pools.get(p.pool()).address() + p.offset();
            }
            for (var e : plan.outputs().entrySet()) outputs.add(Output.declared(e.getKey(), e.getValue(), plan.name()));
            writeConstants();
            compileKernels();
            // programmatic launches where the plan says (Plan.launches), on a GPU that has them (compute capability 9.0 and later)
            this.programmatic = device.computeCapability().major() >= 9 && plan.launches().programmatic();
            this.gemvOperand = new boolean[plan.buffers().size()];
            for (Step s : plan.steps())
                for (Step part : s.parts())
                    if (part instanceof Step.Matmul m && m.gemv()) {
                        gemvOperand[m.a().storage().id()] = true;
                        gemvOperand[m.b().storage().id()] = true;
                    }
            this.matmul = plan.steps().stream().anyMatch(s -> productOf(s) != null) ? new CudaMatmul(device, this::module, programmatic) : null;
            this.fault = DeviceFault.needed(plan) ? new DeviceFault(device, plan, stream) : null;
            this.indexSelect = plan.steps().stream().anyMatch(s -> s instanceof Step.OpCall o && o.spec() == dev.gatun.ir.ops.IndexSelect.SPEC) ? new CudaIndexSelect(this::module) : null;
            this.argmax = plan.steps().stream().anyMatch(s -> s instanceof Step.OpCall o && o.spec() == dev.gatun.ir.ops.Argmax.SPEC) ? new CudaArgmax(this::module, programmatic) : null;
            this.sample = plan.steps().stream().anyMatch(s -> s instanceof Step.OpCall o && o.spec() == dev.gatun.ir.ops.Sample.SPEC) ? new CudaSample(this::module, programmatic, plan) : null;
            this.updateSlice = plan.steps().stream().anyMatch(s -> s instanceof Step.UpdateSlice || s instanceof Step.UpdateSlices)
                    ? new CudaUpdateSlice(this::module) : null;
            this.attention = plan.steps().stream().anyMatch(s -> CudaAttention.attentionOf(s) != null) ? new CudaAttention(device, this::module, plan, programmatic, stream) : null;
            if (sharesGpu()) prepareForSharedGpu();
            this.dist = plan.worldSize() > 1 ? new Distributed(plan, device, stream, pools, vmmPools, options) : null;
            ok = true;
        } finally {
            if (!ok) device.close();
        }
    }

    Plan plan() { return plan; }

    /**
     * Where ranks share a GPU, a peer's collective spins on the device until this rank's kernels arrive, so a CUDA call
     * that waits for every kernel of the context would wait for that spin for ever (until the collective's timeout):
     * loading a module or a cuBLAS kernel on first use, allocating or freeing page-locked host memory, {@code cudaFree}.
     * What calls would otherwise make on first need is made here, before the ranks first meet: the staging of every
     * static input, a page-locked buffer for the largest static output, the built-in programs, and one run of each
     * static-shape matmul. Calls then allocate only stream-ordered device memory (dynamic shapes), copy host inputs
     * from pageable memory (no page-locked copy of every input, weights included) and read larger outputs through
     * pageable memory ({@link #readToHost}); arrays a caller makes or frees mid-session ({@code toDevice},
     * {@code copy}, {@code close}, {@code allocateHost}) use stream-ordered device memory and plain host memory. Not
     * covered: cuBLAS loading a kernel for a dynamic shape's first product.
     */
    private void prepareForSharedGpu() {
        // at world 2 and more a device array is copied into its input's staging too: every static input needs one
        for (PlanBuffer in : plan.inputs()) if (!in.isDynamic()) stagingOf(in);
        long largestOutput = 1;
        for (PlanBuffer out : plan.outputs().values()) if (!out.isDynamic()) largestOutput = Math.max(largestOutput, out.type().byteSize());
        hostOut = device.allocatePinned(largestOutput);
        if (argmax != null) argmax.loadNow();
        if (sample != null) sample.loadNow();
        if (attention != null) attention.loadNow(plan);
        if (matmul != null) {
            matmul.loadNow();
            new CudaRun(this, Map.of(), false).warmUpMatmuls();
        }
    }

    /** Whether ranks share this GPU (see {@link #prepareForSharedGpu}). */
    boolean sharesGpu() { return options.ranksPerGpu() > 1; }

    /**
     * Device memory made after the ranks first met (a call's dynamic shapes, {@code toDevice}, {@code copy}): where
     * ranks share the GPU, stream-ordered, so neither allocating nor freeing it waits for the context's other streams
     * (see {@link #prepareForSharedGpu}); plain memory otherwise, and while the stream is being captured.
     */
    DeviceBuffer laterBuffer(String what, long bytes) {
        if (!sharesGpu() || stream.isCapturing()) return allocate(what, bytes);
        try {
            return stream.allocate(Math.max(1, bytes));
        } catch (CudaException e) {
            throw allocationFailed(what, bytes, e);
        }
    }

    /**
     * The staging buffer of a static-shape input, made on its first need (a host array passed, a device array copied,
     * a value bound): its address becomes the input's fixed one.
     */
    DeviceBuffer stagingOf(PlanBuffer in) {
        DeviceBuffer b = staging[in.id()];
        if (b == null) {
            b = allocate("input '" + in.input() + "'", in.type().byteSize());
            staging[in.id()] = b;
            if (in.placement() == null) fixedAddress[in.id()] = b.address();
            fixedSource[in.id()] = b.address();
        }
        return b;
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
    /** The captured graphs the last call replayed (for the benchmarks' bare-replay floor). */
    GraphExec[] partitions() { return lastGraphs; }

    @Override public String device(int rankIndex) { return deviceName(); }

    String deviceName() { return deviceName; }

    boolean isClosed() { return closed.get(); }

    long streamHandle() { return stream.handle().address(); }

    void awaitWork() { stream.synchronize(); }

    /** The event after everything queued on this stream so far: what another stream waits for before reading this memory. */
    Event markWritten() {
        synchronized (written) {
            written.record(stream);
            return written;
        }
    }

    @Override public void synchronize() {
        if (!closed.get()) stream.synchronize();
    }

    private DeviceBuffer allocate(String what, long bytes) {
        try {
            return device.allocate(Math.max(1, bytes));
        } catch (CudaException e) {
            throw allocationFailed(what, bytes, e);
        }
    }

    /** The failure of allocating {@code what}, with the GPU's free memory. */
    private GatunRuntimeException allocationFailed(String what, long bytes, CudaException e) {
        long[] info = device.memoryInfo();
        return new GatunRuntimeException("plan '" + plan.name() + "': allocating " + what + " of " + bytes + " bytes on GPU "
                + device.ordinal() + " failed (" + info[0] + " bytes free of " + info[1] + "): " + e.getMessage(), e);
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
            DeviceBuffer counter = null;
            if (src.counter()) {
                counter = allocate("kernel " + k.name() + "'s block counter", 4);
                counter.memsetAsync(0, stream); // before the first launch on this stream; the last block sets it back to 0
            }
            kernels.put(k, new Compiled(k, src, compile(src.name(), src.source(), src.name()), counter));
            // progress for plans with many kernels (NVRTC takes up to a second each when the disk cache misses)
            long ms = (System.nanoTime() - t0) / 1_000_000;
            done++;
            if (n >= 8 && ms > 500 && (done % 8 == 0 || done == n))
                LOG.log(System.Logger.Level.INFO, "plan {0}: {1}/{2} kernels ready ({3} ms)", plan.name(), done, n, ms);
        }
        String defines = SymmetricKernels.defines(options.execution().cuda());   // the fused launches are symmetric kernels too
        for (Step s : plan.steps()) {
            // ranks outside the group run the three parts one by one (the kernels above); a world of one has no collective step
            if (s instanceof Step.FusedCollective f && plan.worldSize() > 1) {
                var src = CollectiveCodegen.generate(f);
                fused.put(f, new Fused(src, compile(src.name(), defines + src.source(), src.name())));
            }
            // a batch of barrier-free all-reduces is such a launch too, with nothing around it
            if (s instanceof Step.CollectiveBatch b && b.first().slots() != null && plan.worldSize() > 1) {
                var src = CollectiveCodegen.generate("barrier_free_batch_" + fused.size(), null, b, null);
                fused.put(b, new Fused(src, compile(src.name(), defines + src.source(), src.name())));
            }
            if (s instanceof Step.TiledProduct t) tiled.put(t, compileTiled(t));
            if (s instanceof Step.CallUserOp u && !userKernels.containsKey(u.op().name())) {
                if (u.op().cudaSource() == null)
                    throw new GatunRuntimeException("user op '" + u.op().name() + "' has no CUDA source, so the CUDA backend cannot run it");
                userKernels.put(u.op().name(), compile(u.op().name(), u.op().cudaSource(), u.op().kernelName()));
            }
        }
    }

    /** A product with epilogues compiled, its tables on the device. */
    private Tiled compileTiled(Step.TiledProduct t) {
        var src = TiledProductCodegen.generate(t, multiprocessors);
        Kernel function = compile(src.name(), src.source(), src.name());
        DeviceBuffer cols = allocate(t.name() + "'s column table", (long) src.cols().length * Integer.BYTES);
        cols.copyFrom(src.cols());
        DeviceBuffer items = allocate(t.name() + "'s item table", (long) src.items().length * Long.BYTES);
        items.copyFrom(src.items());
        return new Tiled(src, function, cols, items);
    }

    Kernel compile(String programName, String source, String kernelName) { return module(programName, source).kernel(kernelName); }

    /** A program compiled and loaded for this executable's device. */
    dev.gatun.cuda.Module module(String programName, String source) {
        return compile(device, options.execution().cuda().cudaHome(), plan.name(), programName, source);
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

    @Override public List<Map<String, DeviceArray>> run(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        return run(new CudaRun(this, inputsPerRank.getFirst(), false));
    }

    /** One call with an event before each timed step (graph nodes inside the partitions), read once the call is done. */
    @Override public double[] profile(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        // a first call captures its graphs and makes the ranks meet after; a profiled call captures nothing, so a peer
        // would wait there for this rank: a distributed plan is profiled after its first call, on a call every rank makes
        if (dist != null && generation == 0)
            throw new GatunRuntimeException("plan '" + plan.name() + "': profile a distributed plan after its first call (run it once on every rank first)");
        var r = new CudaRun(this, inputsPerRank.getFirst(), true);
        try {
            run(r);
            return r.stepMicros();
        } finally {
            r.closeMarks();
        }
    }

    private List<Map<String, DeviceArray>> run(CudaRun r) {
        if (closed.get()) throw new GatunRuntimeException("plan '" + plan.name() + "' was released");
        if (aborted()) throw new GatunRuntimeException("plan '" + plan.name() + "' was aborted and cannot run again; compile a new session");
        try {
            var out = List.of(r.run());
            if (aborted()) throw new GatunRuntimeException("plan '" + plan.name() + "': the call was aborted (Session.abort); its results are void");
            return out;
        } catch (CudaException e) {
            throw failed("", e);
        }
    }

    /**
     * A CUDA error of a call (or of reading what it wrote: {@code while}) as the library's exception: first what a
     * kernel of this plan recorded when it stopped the call on purpose (a bad index or position, naming the step),
     * then the CUDA error, then the hints.
     */
    private GatunRuntimeException failed(String while_, CudaException e) {
        String why = fault == null ? null : fault.describe(plan);
        return new GatunRuntimeException("plan '" + plan.name() + "' failed on GPU " + device.ordinal() + (dist == null ? "" : " (rank " + dist.rank + ")")
                + while_ + ": " + (why == null ? "" : why + "; ") + e.getMessage() + failureHints(dist != null), e);
    }

    /**
     * What a failed call's message adds where ranks meet: a collective gives up waiting for a peer with a printed line
     * GATUN_BARRIER_TIMEOUT. (A bad index or position is named from the {@link DeviceFault} record instead.)
     */
    static String failureHints(boolean distributed) {
        return distributed ? "; if a line GATUN_BARRIER_TIMEOUT was printed, a peer rank stopped or fell behind and this rank's collective gave up waiting for it" : "";
    }

    /** Why an output of call {@code call} may no longer be used, or null. */
    String expired(long call) {
        if (closed.get()) return "belongs to a closed session";
        long now = generation;
        return now == call ? null : "was overwritten by a later call of plan '" + plan.name() + "' (it is from call " + call + ", the session has run "
                + now + "); copy() an output to keep it past the next call";
    }

    /** An output's geometry, computed once where its shape is static (evaluated per call where it is symbolic). */
    record Output(String name, PlanBuffer buffer, boolean isStatic, long[] shape, long[] strides, long offset, long bytes, String origin) {
        static Output declared(String name, PlanBuffer b, String plan) {
            boolean isStatic = !b.isDynamic() && b.offset().isConstant() && b.strides().stream().allMatch(dev.gatun.ir.SymInt::isConstant);
            return isStatic ? of(name, b, Map.of(), plan) : new Output(name, b, false, null, null, 0, 0, "output '" + name + "' of plan '" + plan + "' call ");
        }

        static Output of(String name, PlanBuffer b, Map<String, Long> env, String plan) {
            long[] shape = b.shape().sizes(env);
            long[] strides = new long[shape.length];
            long off = b.offset().eval(env), extent = off + 1;
            for (int k = 0; k < shape.length; k++) {
                strides[k] = b.strides().get(k).eval(env);
                if (shape[k] == 0) extent = 0;
                else if (extent > 0) extent += (shape[k] - 1) * strides[k];
            }
            boolean isStatic = !b.isDynamic() && b.offset().isConstant() && b.strides().stream().allMatch(dev.gatun.ir.SymInt::isConstant);
            return new Output(name, b, isStatic, shape, strides, off, Math.max(1, extent * b.dtype().byteSize()),
                    "output '" + name + "' of plan '" + plan + "' call ");
        }
    }

    /** The graphs captured for inputs at {@code addresses}, or null where there are none and no more may be captured. */
    private GraphExec[] graphsFor(long[] addresses, boolean mayStage) {
        if (lastKey != null && Arrays.equals(lastKey.addresses(), addresses)) return lastGraphs; // the usual case: as last call
        var key = new AddressKey(addresses);
        GraphExec[] g = graphs.get(key);
        if (g != null) {
            lastKey = key;
            return g;
        }
        if (!graphs.isEmpty()) {
            if (mayStage && ++recaptures > RECAPTURES) {
                readInPlace = false;
                LOG.log(System.Logger.Level.INFO, "plan {0}: device inputs arrived at {1} different addresses; they are copied into fixed staging"
                        + " buffers from now on (one device copy each) instead of capturing the graphs again", plan.name(), recaptures);
                return null;
            }
            if (graphs.size() >= GRAPH_SETS) {
                var eldest = graphs.entrySet().iterator().next();
                stream.synchronize(); // the eldest graphs may still be running
                for (GraphExec e : eldest.getValue()) if (e != null) e.close();
                graphs.remove(eldest.getKey());
            }
        }
        g = new GraphExec[plan.partitions().size()];
        graphs.put(key, g);
        lastKey = key;
        return g;
    }

    /** One call: stage inputs, run or replay the plan's steps through the shared {@link StepLoop}; outputs stay on the GPU. */
    static final class CudaRun implements StepLoop.Steps {
        private final CudaExecutable exe;
        private final Plan plan;
        private final Map<String, ? extends ArrayLike> inputs;
        private final Map<String, Long> env = new HashMap<>();
        /** address[storage id]: device address of every storage this call has (0: none yet). */
        private final long[] address;
        /** source[input buffer id]: where this call reads the input from (its staging buffer, or the caller's array). */
        private final long[] source;
        private final List<DeviceBuffer> perCall = new ArrayList<>();
        /** Static inputs read where the caller's device array is, by buffer id (not where ranks share a GPU). */
        private final Map<PlanBuffer, DeviceArray> inPlace = new LinkedHashMap<>();
        /** Executables whose memory this call reads: it waited for their work, they wait for this call's. */
        private final Set<CudaExecutable> sources = new HashSet<>();
        /** Whether a host input went through the page-locked staging (a copy the next call must wait for). */
        private boolean stagedOnHost;
        /** Whether any host input was copied to the device this call. */
        private boolean hostCopies;
        private GraphExec[] graphSet;
        /** Profiling only: the event recorded before each timed step (by step index), and the one after the last. */
        private final Event[] marks;
        private Event end;

        CudaRun(CudaExecutable exe, Map<String, ? extends ArrayLike> inputs, boolean profile) {
            this.exe = exe;
            this.plan = exe.plan;
            this.inputs = inputs;
            this.address = exe.fixedAddress.clone();
            this.source = exe.fixedSource.clone();
            this.marks = profile ? new Event[plan.steps().size()] : null;
        }

        @Override public void before(int index, Step step) {
            if (marks == null || !dev.gatun.runtime.Profile.timed(step)) return;
            marks[index] = exe.device.createEvent();
            marks[index].recordExternal(exe.stream); // a node of its own in a partition being captured
        }

        /** Microseconds from each timed step's event to the next one's (the last: to the end of the call). */
        double[] stepMicros() {
            end.synchronize();
            return dev.gatun.runtime.spi.StepTimes.between(marks.length, i -> marks[i] != null,
                    (i, next) -> 1e3 * Event.elapsedMillis(marks[i], next < marks.length ? marks[next] : end));
        }

        void closeMarks() {
            for (Event e : marks) if (e != null) e.close();
            if (end != null) end.close();
        }

        Map<String, DeviceArray> run() {
            // a session that read the last call's outputs must be done before this call overwrites them
            for (CudaExecutable r : exe.readers) exe.stream.waitFor(r.written);
            exe.readers.clear();
            List<DeviceBuffer> previous = exe.lastCall;
            exe.lastCall = perCall;
            try {
                stageInputs(); // before the last call's buffers go: one of its outputs may be an input of this one
            } finally {
                for (DeviceBuffer b : previous) b.close();
            }
            long call = ++exe.generation;
            executeSteps();
            if (!sources.isEmpty()) {
                exe.written.record(exe.stream); // the end of this call, which the sources' next calls wait for
                for (CudaExecutable src : sources) src.readers.add(exe);
            }
            // where ranks share a GPU, no copy may wait in a copy engine's queue behind this rank's collectives (a
            // peer's copy queued behind it could never run): the call is waited for before anything reads its outputs.
            if (exe.dist != null && exe.dist.sharesGpu()) exe.stream.synchronize();
            return outputs(call);
        }

        /**
         * The plan's steps on the stream. Profiled (marks set): partitions are captured afresh with an event node
         * before each step and replayed once, so the device runs them back to back as in any call and a step's time
         * is its own, not the host's launch gap; the graphs are dropped after. Where ranks of a distributed plan
         * would have to meet after capturing, the steps run one by one instead.
         */
        void executeSteps() {
            if (marks == null) {
                executeSteps(exe.options.cudaGraphs());
                return;
            }
            boolean graphs = exe.options.cudaGraphs() && exe.dist == null;
            try {
                if (graphs) {
                    graphSet = new GraphExec[plan.partitions().size()];
                    captureAll();
                }
                StepLoop.run(plan, this, graphs);
                end = exe.device.createEvent();
                end.record(exe.stream);
                end.synchronize(); // the graphs may go once their one replay is done
            } finally {
                if (graphs && graphSet != null) for (GraphExec g : graphSet) if (g != null) g.close();
            }
        }

        /** The plan's steps on the stream: with {@code graphs}, captured partitions replay and the rest runs eagerly. */
        void executeSteps(boolean graphs) {
            if (graphs) {
                chooseGraphs();
                captureAll();
            }
            StepLoop.run(plan, this, graphs);
        }

        /** The graphs captured for this call's input addresses; inputs at too many new addresses are staged instead. */
        private void chooseGraphs() {
            if (graphSet != null) return;
            graphSet = exe.graphsFor(inputAddresses(), !inPlace.isEmpty());
            if (graphSet == null) {
                for (var e : inPlace.entrySet()) stage(e.getKey(), e.getValue());
                inPlace.clear();
                graphSet = exe.graphsFor(inputAddresses(), false);
            }
            exe.lastGraphs = graphSet;
        }

        private long[] inputAddresses() {
            var key = new long[plan.inputs().size()];
            int i = 0;
            for (PlanBuffer in : plan.inputs()) key[i++] = in.isDynamic() ? 0 : source[in.id()];
            return key;
        }

        void release() {
            for (DeviceBuffer b : perCall) b.close();
            perCall.clear();
        }

        /**
         * Every partition not yet captured for this call's input addresses is captured and instantiated before any is
         * launched. After the first call's captures the ranks meet: instantiating may wait for every kernel of the
         * context, and where ranks share a GPU a peer's collective spins until this rank's kernels arrive.
         */
        private void captureAll() {
            boolean captured = false;
            for (Plan.Partition part : plan.partitions()) {
                if (graphSet[part.index()] != null) continue;
                CudaGraph graph;
                try (StreamCapture capture = exe.stream.beginCapture()) {
                    StepLoop.run(plan, part.first(), part.last(), this);
                    graph = capture.end();
                }
                graphSet[part.index()] = graph.instantiate();
                LOG.log(System.Logger.Level.DEBUG, "plan {0}: captured partition {1} ({2} nodes)", plan.name(), part.index(), graph.nodeCount());
                graph.close(); // the executable graph is all replays need
                captured = true;
            }
            // the first call's captures are made on every rank, so the ranks meet there; a later capture is one rank's
            // own (its inputs moved: only where ranks do not share a GPU, as they stage inputs) and meets nobody
            if (captured && exe.dist != null && !exe.metAfterCapture) {
                exe.dist.meet("captured");
                exe.metAfterCapture = true;
            }
        }

        @Override public boolean replay(Plan.Partition part) {
            graphSet[part.index()].launch(exe.stream);
            return true;
        }

        /**
         * Where each input is read from this call: a host array is copied into the staging buffer; a device array is
         * read in place (world 1, contiguous, not this executable's own output) or copied there; a bound input is
         * already there. A path-2 input is copied on into its symmetric slot by the plan's copy_in step (or its
         * collective).
         */
        void stageInputs() {
            for (PlanBuffer in : plan.inputs()) {
                String name = in.input();
                ArrayLike a = inputs.get(name);
                boolean fixed = false;   // bound in place: read where it lies, whatever the ranks
                if (a == null) {
                    InPlace p = exe.boundInPlace.get(name);
                    if (p != null) {
                        a = p.array();
                        fixed = true;
                    } else {
                        if (!exe.bound.contains(name))
                            throw new GatunRuntimeException("plan '" + plan.name() + "': input '" + name + "' was neither passed nor bound");
                        continue; // its staging buffer holds the bound value
                    }
                }
                if (in.isDynamic()) {
                    long[] shape = a.shape();
                    for (int d = 0; d < shape.length; d++)
                        if (!in.shape().dim(d).isStatic()) env.put(in.shape().dim(d).toString(), shape[d]);
                }
                switch (a) {
                    case NDArray n -> {
                        DeviceBuffer dst = stagingFor(in, n.byteSize());
                        if (n.byteSize() > 0) {
                            hostCopies = true;
                            MemorySegment from = native_(n);
                            // where ranks share the GPU no page-locked memory is made mid-session: pageable is copied as it is
                            if (!exe.isPinned(from) && !in.isDynamic() && !exe.sharesGpu()) {
                                if (!stagedOnHost) exe.copiedIn.synchronize(); // the last call's copies out of the staging are done
                                StagedCopies.in(from, exe.pinnedStaging(in, from.byteSize()), dst, exe.stream);
                                stagedOnHost = true;
                            } else {
                                // an allocateHost array is read by the copy engine after run returns (as a non-blocking copy)
                                dst.copyFromAsync(from, 0, exe.stream);
                            }
                        }
                        setSource(in, dst.address());
                    }
                    case DeviceArray d -> {
                        CudaMemory m = d.memory() instanceof CudaMemory cm && cm.owner == exe && d.whyUnusable() == null ? cm
                                : exe.memoryOf(d, "input '" + name + "'");
                        // one wait per other executable a call reads from, however many of its arrays it reads
                        if (m.owner != exe && sources.add(m.owner)) exe.stream.waitFor(m.owner.markWritten());
                        boolean ownOutput = m.owner == exe && m.callMemory;
                        // a GEMV reads its operands in 16-byte vectors: an input that does not lie so aligned is staged (its
                        // staging buffer is), as the plan's choice of that kernel assumes
                        boolean aligned = !exe.gemvOperand[in.id()] || (d.address() & 15) == 0;
                        if (d.isContiguous() && !ownOutput && (fixed || aligned && (in.isDynamic() || !exe.sharesGpu() && exe.readInPlace))) {
                            setSource(in, d.address());
                            if (!in.isDynamic() && !fixed) inPlace.put(in, d);
                        } else {
                            stage(in, d);
                        }
                    }
                }
            }
            if (stagedOnHost) exe.copiedIn.record(exe.stream);
            // where ranks share a GPU, their streams may share a hardware queue: a copy queued behind a peer's spinning
            // collective could never run, so this rank's copies are done before any of its kernels is queued
            if (hostCopies && exe.dist != null && exe.dist.sharesGpu()) exe.stream.synchronize();
        }

        /** Copies a device array into the input's staging buffer (a per-call buffer where the shape is dynamic). */
        private void stage(PlanBuffer in, DeviceArray d) {
            DeviceBuffer dst = stagingFor(in, d.byteSize());
            if (d.byteSize() == 0) {
                // nothing to copy
            } else if (d.isContiguous()) {
                copy(d.address(), dst.address(), d.byteSize());
            } else {
                // a strided view (an output that is a transposed view) is laid out row-major through the host
                dst.copyFromAsync(d.toHost().segment(), 0, exe.stream);
                exe.stream.synchronize();
            }
            setSource(in, dst.address());
        }

        private DeviceBuffer stagingFor(PlanBuffer in, long bytes) {
            if (!in.isDynamic()) return exe.stagingOf(in);
            DeviceBuffer dst = exe.laterBuffer("input '" + in.input() + "'", bytes);
            perCall.add(dst);
            return dst;
        }

        private void setSource(PlanBuffer in, long at) {
            source[in.id()] = at;
            if (in.placement() == null) address[in.id()] = at;
        }

        /**
         * Runs each matmul of static shape once on the plan's memory, before any rank launches: cuBLAS loads its
         * kernels on first use, and loading may wait for every kernel of the context, a peer's spinning collective
         * included, where ranks share a GPU. Nothing is read from what these runs write: every call rewrites it.
         */
        void warmUpMatmuls() {
            for (PlanBuffer in : plan.inputs()) if (!in.isDynamic()) setSource(in, exe.stagingOf(in).address());
            for (Step s : plan.steps()) {
                Step.Matmul m = productOf(s);
                if (m == null) continue;
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
            DeviceBuffer buf = exe.laterBuffer("buffer " + d.buffer().name(), bytes(d.buffer()));
            perCall.add(buf);
            address[d.buffer().id()] = buf.address();
        }

        @Override public void copyIn(Step.CopyIn c) { copyIn(c.buffer()); }

        /** A host array's memory as native memory (arrays over Java heap memory are copied out once). */
        private static MemorySegment native_(NDArray n) {
            MemorySegment seg = n.segment();
            if (seg.isNative()) return seg;
            MemorySegment copy = Arena.ofAuto().allocate(seg.byteSize(), 16);
            copy.copyFrom(seg);
            return copy;
        }

        private void copyIn(PlanBuffer b) { copy(source[b.id()], addressOf(b), bytes(b)); }

        @Override public void launch(Step.Launch l) { launch(exe.kernels.get(l.kernel())); }

        @Override public void matmul(Step.Matmul m) {
            exe.matmul.run(m, addressOf(m.a()), addressOf(m.b()), addressOf(m.output()), env, exe.stream);
        }

        /** One launch: the product on the columns each block holds, then the epilogues on them ({@link TiledProductCodegen}). */
        @Override public void tiledProduct(Step.TiledProduct t) {
            Tiled c = exe.tiled.get(t);
            var src = c.source();
            Step.Matmul m = t.product();
            long x = addressOf(m.a()), w = addressOf(m.b()), y = addressOf(m.output());
            exe.matmul.checkGemv(m, src.dtype(), src.rows(), src.k(), x, w, y);
            var l = src.launch();
            var args = new ArrayList<Object>(List.of(x, w, y, src.positions(), src.k(), (long) src.columns(), src.rows(), l.slices(),
                    CudaGemv.constantDuringCall(m.b()) ? 1 : 0, c.cols().address(), c.items().address()));
            for (int e = 0; e < t.epilogues().size(); e++) kernelArgs(args, t.epilogues().get(e).kernel(), src.epilogueSymbols().get(e));
            var config = new LaunchConfig(Dim3.of(l.blocks()), Dim3.of(32 * l.warps()), l.sharedBytes(), exe.stream);
            try {
                Programmatic.launch(c.function(), exe.programmatic, config, args.toArray());
            } catch (CudaException e) {
                throw new GatunRuntimeException("launching " + t.name() + " (grid " + l.blocks() + ", block " + 32 * l.warps() + ") failed: " + e.getMessage(), e);
            }
        }

        /** A registered op by its spec: argmax, sample and index_select have kernels; CudaBackend refuses a plan with any other when it loads it. */
        @Override public void op(Step.OpCall a) {
            if (a.spec() == dev.gatun.ir.ops.Sample.SPEC) { sample(a); return; }
            if (a.spec() == dev.gatun.ir.ops.IndexSelect.SPEC) { indexSelect(a); return; }
            if (a.spec() != dev.gatun.ir.ops.Argmax.SPEC) throw new GatunRuntimeException(CudaBackend.noKernel(a));
            long[] shape = a.input(0).shape().sizes(env);
            exe.argmax.run(addressOf(a.input(0)), a.input(0).dtype(), addressOf(a.output()), numel(a.output()), shape[shape.length - 1], exe.stream);
        }

        private void sample(Step.OpCall s) {
            long[] shape = s.input(0).shape().sizes(env);
            exe.sample.run(s, addressOf(s.input(0)), addressOf(s.input(1)), addressOf(s.input(2)), addressOf(s.input(3)), addressOf(s.input(4)),
                    addressOf(s.output()), shape[0], shape[1], s.input(4).shape().sizes(env)[1], numel(s.input(3)), exe.stream);
        }

        @Override public void attention(Step.Attention a) {
            exe.attention.run(a, addressOf(a.q()), addressOf(a.keysT()), addressOf(a.values()), addressOf(a.output()), addressOf(a.position()),
                    exe.fault, exe.fault.step(a), exe.stream);
        }

        /** One launch: the attention's kernel writes the new key and value into the caches itself ({@link CudaAttention}). */
        @Override public void updateAttention(Step.UpdateAttention u) {
            var a = u.attention();
            exe.attention.run(u, addressOf(a.q()), addressOf(a.keysT()), addressOf(a.values()), addressOf(a.output()), addressOf(a.position()),
                    addressOf(u.keys().update()), addressOf(u.values().update()), exe.fault, exe.fault.step(u), exe.stream);
        }

        @Override public void updateSlice(Step.UpdateSlice u) {
            exe.updateSlice.run(update(u), addressOf(u.start()), u.start().dtype(), exe.fault, exe.fault.step(u), exe.programmatic, exe.stream);
        }

        /**
         * Two updates at one position: one launch. The batching pass makes no larger batches, and the kernel has two
         * descriptors (a member run alone could not name its step in a fault record: the record names the batch).
         */
        @Override public void updateSlices(Step.UpdateSlices b) {
            if (b.members().size() != 2)
                throw new IllegalStateException(b.format() + ": the CUDA backend launches batches of two updates, the most the batching pass makes");
            var first = b.members().getFirst();
            exe.updateSlice.run(update(first), update(b.members().get(1)), addressOf(first.start()), first.start().dtype(), exe.fault, exe.fault.step(b),
                    exe.programmatic, exe.stream);
        }

        /** An update's geometry for this call (where its runs lie in the update, in bytes). */
        private CudaUpdateSlice.Update update(Step.UpdateSlice u) {
            var r = u.runs(env);
            long e = u.update().dtype().byteSize();
            return new CudaUpdateSlice.Update(addressOf(u.update()), addressOf(u.output()), r.count(), r.size(), r.len(), r.innerBytes(),
                    r.from().inner(), r.from().innerStride() * e, r.from().outerStride() * e);
        }

        private void indexSelect(Step.OpCall s) {
            long rows = s.input(0).shape().sizes(env)[0];
            exe.indexSelect.run(addressOf(s.input(0)), addressOf(s.input(1)), s.input(1).dtype(), addressOf(s.output()), numel(s.input(1)),
                    rows, bytes(s.input(0)) / Math.max(1, rows), exe.fault, exe.fault.step(s), exe.programmatic, exe.stream);
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
            } else if (c.slots() != null) {
                exe.dist.barrierFree(c, src, out, exe.stream);
            } else if (c.call().algorithm().isSymmetric()) {
                var p = in.storage().placement();
                long local = c.copiesIn() ? source[in.id()] : 0; // the kernel copies the caller's tensor in itself
                exe.dist.symmetric(c, p.pool(), src - exe.pools.get(p.pool()).address(), out, local, n, in.dtype(), exe.stream);
            } else {
                if (c.copiesIn()) copyIn(in);
                exe.dist.nccl(c, src, out, n, in.dtype(), exe.stream);
            }
        }

        @Override public void fused(int index, Step.FusedCollective f) {
            Step.Collective first = f.collectives().getFirst();
            Fused compiled = exe.fused.get(f);
            if (exe.dist == null || compiled == null || !exe.dist.isMember(first.call().group())) {
                StepLoop.Steps.super.fused(index, f); // the prologue, the input passed through, the epilogue
                return;
            }
            launchFused(f.name(), compiled, f.prologue(), f.collective(), f.epilogue());
        }

        /** One launch of a fused collective ({@link CollectiveCodegen}'s ABI). */
        private void launchFused(String name, Fused compiled, Step.Launch prologue, Step collective, Step.Launch epilogue) {
            Step.Collective first = collective.collectives().getFirst();
            var src = compiled.source();
            boolean free = first.slots() != null;
            String pool = free ? first.slots().pool() : first.input().storage().placement().pool();
            long base = exe.pools.get(pool).address();
            var args = new ArrayList<Object>(exe.dist.fusedArgs(first, pool));
            for (Step.Collective c : collective.collectives()) {
                args.add(free ? c.slots().offset() : addressOf(c.input()) - base);
                args.add(addressOf(c.output()));
                args.add(free ? addressOf(c.input()) : c.copiesIn() ? source[c.input().id()] : 0L);
            }
            if (prologue != null) kernelArgs(args, prologue.kernel(), src.prologueSymbols());
            if (epilogue != null) kernelArgs(args, epilogue.kernel(), src.epilogueSymbols());
            long grid = src.grid(exe.dist.blocks());
            var config = new LaunchConfig(Dim3.of(Math.toIntExact(grid)), Dim3.of(src.block()), 0, exe.stream);
            try {
                compiled.function().launch(config, args.toArray());
            } catch (CudaException e) {
                throw new GatunRuntimeException("launching " + name + " (grid " + grid + ", block " + src.block() + ") failed: " + e.getMessage(), e);
            }
        }

        /** A tile function's arguments: its kernel's buffers, then its symbols' values. */
        private void kernelArgs(List<Object> args, dev.gatun.planner.kernel.Kernel k, List<String> symbols) {
            for (PlanBuffer b : CollectiveCodegen.pointers(k)) args.add(addressOf(b));
            for (String sym : symbols) args.add(env.get(sym));
        }

        @Override public void batch(int index, Step.CollectiveBatch b) {
            if (exe.dist == null || !exe.dist.isMember(b.first().call().group())) {
                for (Step.Collective c : b.members()) collective(index, c);
                return;
            }
            if (exe.fused.containsKey(b)) { // barrier-free all-reduces: one launch, member after member in each block
                launchFused("barrier-free batch", exe.fused.get(b), null, b, null);
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
            if (k.elements() == 0 && c.counter() == null) return; // a fold of no rows still writes its value (one block)
            var args = new ArrayList<Object>();
            var kernel = c.kernel();
            for (PlanBuffer in : kernel.inputs()) args.add(addressOf(in));
            for (var st : kernel.stores()) args.add(addressOf(st.buffer()));
            for (var f : kernel.folds()) args.add(addressOf(f.buffer()));
            for (String sym : src.symbols()) args.add(env.get(sym));
            if (c.counter() != null) args.add(c.counter().address());
            var config = new LaunchConfig(Dim3.of(Math.toIntExact(k.grid())), Dim3.of(k.block()), k.sharedBytes(), exe.stream);
            try {
                Programmatic.launch(c.function(), exe.programmatic, config, args.toArray());
            } catch (CudaException e) {
                throw new GatunRuntimeException("launching kernel " + src.name() + " (grid " + k.grid() + ", block " + k.block()
                        + ", shared " + k.sharedBytes() + " B) failed: " + e.getMessage(), e);
            }
        }

        /** The outputs as views of this call's memory, valid until the next call. */
        private Map<String, DeviceArray> outputs(long call) {
            var out = new LinkedHashMap<String, DeviceArray>();
            for (Output o : exe.outputs) {
                Output g = o.isStatic ? o : Output.of(o.name, o.buffer, env, plan.name());
                var memory = CudaMemory.callMemory(exe, address[g.buffer.storage().id()], g.bytes);
                out.put(g.name, DeviceArray.view(g.buffer.dtype(), g.shape, g.strides, g.offset, memory, () -> exe.expired(call), g.origin + call));
            }
            return out;
        }
    }

    // ------------------------------------------------------------------ arrays

    /** The CUDA memory behind an array given to this executable ({@code what}: "input 'x'"), checked: of this backend, on this GPU, open. */
    CudaMemory memoryOf(DeviceArray d, String what) {
        String why = d.whyUnusable();
        if (why != null) throw new GatunRuntimeException("plan '" + plan.name() + "': " + what + ": " + why);
        if (!(d.memory() instanceof CudaMemory m))
            throw new GatunRuntimeException("plan '" + plan.name() + "': " + what + " is an array of another backend (" + d.device() + "); toHost() it first");
        if (m.owner.device.ordinal() != device.ordinal())
            throw new GatunRuntimeException("plan '" + plan.name() + "': " + what + " is on " + m.device() + " but the plan runs on " + deviceName()
                    + "; copy it with toHost() and toDevice()");
        return m;
    }

    private void checkOpen(String op) {
        if (closed.get()) throw new GatunRuntimeException("plan '" + plan.name() + "' was released: " + op + " needs an open session");
    }

    @Override public DeviceArray toDevice(int rankIndex, NDArray host) {
        checkOpen("toDevice");
        DeviceBuffer b = laterBuffer("an array of " + host.byteSize() + " bytes (toDevice)", host.byteSize());
        var m = CudaMemory.owned(this, b);
        owned.add(m);
        if (host.byteSize() > 0) writeFromHost(b.address(), host.segment(), host.byteSize());
        return DeviceArray.owned(host.dtype(), host.shape(), m, "array copied to " + deviceName() + " by toDevice");
    }

    @Override public DeviceArray wrap(int rankIndex, long address, DType dtype, long[] shape, Runnable release) {
        checkOpen("wrap");
        long n = 1;
        for (long d : shape) {
            if (d < 0) throw new GatunRuntimeException("wrap: negative dimension in shape " + Arrays.toString(shape));
            n = Math.multiplyExact(n, d);
        }
        long bytes = Math.multiplyExact(n, dtype.byteSize());
        long[] alloc = device.allocationOf(address);
        String at = "0x" + Long.toHexString(address);
        if (alloc == null)
            throw new GatunRuntimeException("wrap: " + at + " is not device memory CUDA allocated (a host pointer, or freed memory?)");
        if (alloc[2] != device.ordinal())
            throw new GatunRuntimeException("wrap: " + at + " is memory of cuda:" + alloc[2] + " but the session runs on " + deviceName());
        if (address + bytes > alloc[0] + alloc[1])
            throw new GatunRuntimeException("wrap: " + dtype.shortName() + Arrays.toString(shape) + " needs " + bytes + " bytes from " + at
                    + " but its allocation ends " + (alloc[0] + alloc[1] - address) + " bytes after it");
        var m = CudaMemory.wrapped(this, address, Math.max(1, bytes), release);
        return DeviceArray.borrowed(dtype, shape, m, "wrapped pointer " + at + " on " + deviceName());
    }

    @Override public NDArray allocateHost(int rankIndex, DType dtype, long[] shape) {
        checkOpen("allocateHost");
        long n = 1;
        for (long d : shape) n = Math.multiplyExact(n, d);
        long bytes = Math.max(1, Math.multiplyExact(n, dtype.byteSize()));
        if (sharesGpu()) {
            // page-locked memory made mid-session would wait for a peer's spinning collective (see prepareForSharedGpu);
            // where ranks share the GPU every copy waits for its call anyway, so plain host memory does as well
            MemorySegment seg = hostArena.allocate(bytes, 16);
            return NDArray.wrap(dtype, n == 0 ? seg.asSlice(0, 0) : seg.asSlice(0, n * dtype.byteSize()), shape);
        }
        PinnedHostBuffer b;
        try {
            b = device.allocatePinned(bytes);
        } catch (CudaException e) {
            throw new GatunRuntimeException("allocateHost: " + bytes + " bytes of page-locked host memory: " + e.getMessage(), e);
        }
        synchronized (pinned) {
            pinned.add(b);
        }
        MemorySegment seg = b.segment().reinterpret(bytes, hostArena, null);
        seg.fill((byte) 0);
        return NDArray.wrap(dtype, n == 0 ? seg.asSlice(0, 0) : seg.asSlice(0, n * dtype.byteSize()), shape);
    }

    /**
     * Copies the value into the input's staging buffer, which keeps it for every later call; a state's value into its
     * slot (null: zeros), which the next call reads and updates.
     */
    @Override public void bind(int rankIndex, String input, ArrayLike value) {
        checkOpen("bind");
        if (value == null) {
            PlanBuffer state = plan.state(input);
            if (state != null) {
                DeviceBuffer.wrap(device, fixedAddress[state.id()], state.type().byteSize()).memsetAsync(0, stream);
                stream.synchronize();
            }
            bound.remove(input);
            if (boundInPlace.containsKey(input)) bindInPlace(rankIndex, input, null);
            return;
        }
        bind(rankIndex, Map.of(input, value));
    }

    /** Every value's copy queued first, then one wait for them all (the values may change or close once bind returns). */
    @Override public void bind(int rankIndex, Map<String, ? extends ArrayLike> values) {
        checkOpen("bind");
        boolean wait = false;
        for (var e : values.entrySet()) wait |= queueBind(e.getKey(), e.getValue());
        if (wait) stream.synchronize();
        bound.addAll(values.keySet());
    }

    /**
     * The caller's array itself for every later call: its address becomes the input's, read in place. Where ranks share
     * a GPU the address may change only before the first call ({@link #checkAddressKept}).
     */
    @Override public void bindInPlace(int rankIndex, String input, DeviceArray array) {
        checkOpen("bindInPlace");
        inputNamed(input);
        if (array == null) {
            checkAddressKept(input, 0);
            boundInPlace.remove(input);
            bound.remove(input);
            return;
        }
        CudaMemory m = memoryOf(array, "the array bound in place to '" + input + "'");
        if (m.owner == this && m.callMemory)
            throw new GatunRuntimeException("plan '" + plan.name() + "': bindInPlace(\"" + input + "\"): " + array.origin()
                    + " is an output of this session, which its next call overwrites; copy() it first");
        checkAddressKept(input, array.address());
        bound.remove(input);   // its staging buffer is no longer read
        boundInPlace.put(input, new InPlace(array, array.address()));
    }

    private PlanBuffer inputNamed(String input) {
        PlanBuffer in = plan.input(input);
        if (in == null) throw new GatunRuntimeException("plan '" + plan.name() + "' has no input '" + input + "'");
        return in;
    }

    /**
     * Refuses a new address for an input bound in place once ranks sharing a GPU have captured their graphs: a rank
     * that alone saw a new address would capture again, and its capture could wait for a peer's spinning kernels.
     */
    private void checkAddressKept(String input, long address) {
        InPlace old = boundInPlace.get(input);
        if (dist != null && sharesGpu() && generation > 0 && (old == null ? address != 0 : old.address() != address))
            throw new GatunRuntimeException("plan '" + plan.name() + "': '" + input + "' may be bound in place, or moved from its place, only before the"
                    + " first call where ranks share a GPU (a rank that alone saw a new address would capture its graphs again while its"
                    + " peers' kernels spin on the same GPU); bind(...) copies into the input's own buffer instead");
    }

    /** Queues the copy of a bound value into its input's staging buffer (or state's slot); whether it must be waited for. */
    private boolean queueBind(String input, ArrayLike value) {
        if (boundInPlace.containsKey(input)) {
            checkAddressKept(input, 0);
            boundInPlace.remove(input);
        }
        PlanBuffer state = plan.state(input);
        PlanBuffer in = state != null ? state : inputNamed(input);
        DeviceBuffer dst = state != null ? DeviceBuffer.wrap(device, fixedAddress[state.id()], state.type().byteSize()) : in.isDynamic() ? null : stagingOf(in);
        if (dst == null) throw new GatunRuntimeException("bind(\"" + input + "\"): the input's shape is symbolic; only inputs of static shape can be bound");
        bound.remove(input);
        switch (value) {
            case NDArray n -> {
                if (n.byteSize() > 0) writeFromHost(dst.address(), n.segment(), n.byteSize());
                return false;
            }
            case DeviceArray d -> {
                CudaMemory m = memoryOf(d, "the value bound to '" + input + "'");
                if (m.owner != this) stream.waitFor(m.owner.markWritten());
                if (d.byteSize() == 0) {
                    // nothing to copy
                } else if (d.isContiguous()) {
                    DeviceBuffer.wrap(device, dst.address(), d.byteSize()).copyFromAsync(DeviceBuffer.wrap(device, d.address(), d.byteSize()), stream);
                } else {
                    writeFromHost(dst.address(), d.toHost().segment(), d.byteSize());
                }
                if (m.owner != this) m.owner.readers.add(this);
                return true;
            }
        }
    }

    /**
     * Device to host on this executable's stream, after the work that writes the memory; waits for it. A CUDA error
     * (a failed call's kernel ends the wait) is the library's exception, naming the plan, the GPU and the rank.
     */
    void readToHost(long src, MemorySegment dst, long bytes) {
        try {
            readToHostWaiting(src, dst, bytes);
        } catch (CudaException e) {
            throw failed(" (reading its memory back)", e);
        }
    }

    private void readToHostWaiting(long src, MemorySegment dst, long bytes) {
        if (bytes == 0) return;
        if (isPinned(dst)) {
            DeviceBuffer.wrap(device, src, bytes).copyToAsync(dst.asSlice(0, bytes), 0, stream);
            stream.synchronize();
            return;
        }
        synchronized (hostIn) {
            if (sharesGpu() && (hostOut == null || hostOut.size() < bytes)) {
                // no page-locked allocation once ranks sharing the GPU may spin (see prepareForSharedGpu): pageable memory
                try (Arena a = Arena.ofConfined()) {
                    MemorySegment to = dst.isNative() ? dst.asSlice(0, bytes) : a.allocate(bytes, 16);
                    DeviceBuffer.wrap(device, src, bytes).copyToAsync(to, 0, stream);
                    stream.synchronize();
                    if (!dst.isNative()) MemorySegment.copy(to, 0, dst, 0, bytes);
                }
                return;
            }
            if (hostOut == null || hostOut.size() < bytes) {
                if (hostOut != null) hostOut.close();
                hostOut = device.allocatePinned(bytes);
            }
            if (chunkRead == null) chunkRead = StagedCopies.events(device);
            StagedCopies.out(device, src, hostOut.segment(), dst, bytes, stream, chunkRead);
        }
    }

    /** Whether host memory is page-locked memory of this executable ({@link #allocateHost}). */
    boolean isPinned(MemorySegment seg) {
        if (!seg.isNative()) return false;
        long a = seg.address(), end = a + seg.byteSize();
        synchronized (pinned) {
            for (PinnedHostBuffer b : pinned) if (a >= b.address() && end <= b.address() + b.size()) return true;
        }
        return false;
    }

    /** The first {@code bytes} of a host input's page-locked staging ({@link StagedCopies#in} copies into it). */
    private MemorySegment pinnedStaging(PlanBuffer in, long bytes) {
        PinnedHostBuffer st = hostIn[in.id()];
        if (st == null) st = hostIn[in.id()] = device.allocatePinned(Math.max(1, in.type().byteSize()));
        return st.segment().asSlice(0, bytes);
    }

    /** Host to device on this executable's stream; waits for it (the caller may reuse its memory at once). */
    void writeFromHost(long dst, MemorySegment src, long bytes) {
        if (bytes == 0) return;
        MemorySegment from = src.isNative() ? src.asSlice(0, bytes) : Arena.ofAuto().allocate(bytes, 16).copyFrom(src.asSlice(0, bytes));
        DeviceBuffer.wrap(device, dst, bytes).copyFromAsync(from, 0, stream);
        stream.synchronize();
    }

    /** New memory this executable owns, holding {@code bytes} bytes copied from {@code src} (of which {@code valid} exist). */
    CudaMemory copyOnDevice(long src, long bytes, long valid) {
        checkOpen("copy");
        DeviceBuffer b = laterBuffer("a copy of " + bytes + " bytes", bytes);
        var m = CudaMemory.owned(this, b);
        owned.add(m);
        if (valid > 0) DeviceBuffer.wrap(device, b.address(), valid).copyFromAsync(DeviceBuffer.wrap(device, src, valid), stream);
        return m;
    }

    /**
     * Frees an owned array's buffer once the work on this stream is done, and every other stream's reading it: cudaFree
     * waits for them, and where ranks share the GPU (stream-ordered memory, freed on this stream) every call has
     * finished on the device before it returns.
     */
    void free(CudaMemory m, DeviceBuffer b) {
        if (!owned.remove(m)) return; // the executable's close freed it
        try {
            stream.synchronize();
        } finally {
            b.close();
        }
    }

    /**
     * Synchronizes, then releases graphs, kernels, pools and the device context; idempotent. Every resource is released
     * even where one fails to (after a call that failed, a trap say, the GPU context is lost and the driver's frees
     * fail); then the first failure is thrown, the others suppressed in it.
     */
    @Override public void close() {
        if (!closed.compareAndSet(false, true)) return;
        try {
            stream.synchronize();
        } catch (RuntimeException e) {
            LOG.log(System.Logger.Level.WARNING, "plan {0}: the GPU reported an error while closing: {1}", plan.name(), e.getMessage());
        }
        var failed = new ArrayList<RuntimeException>();
        // captured graphs may hold NCCL work: they go before the communicators
        for (GraphExec[] set : graphs.values()) for (GraphExec g : set) if (g != null) quietly(failed, g::close);
        graphs.clear();
        if (dist != null) quietly(failed, dist::close);
        for (DeviceBuffer b : lastCall) quietly(failed, b::close);
        for (CudaMemory m : List.copyOf(owned)) quietly(failed, m::close);
        quietly(failed, hostArena::close);
        synchronized (pinned) {
            for (PinnedHostBuffer b : pinned) quietly(failed, b::close);
        }
        for (PinnedHostBuffer b : hostIn) if (b != null) quietly(failed, b::close);
        if (hostOut != null) quietly(failed, hostOut::close);
        if (chunkRead != null) for (Event e : chunkRead) quietly(failed, e::close);
        quietly(failed, written::close);
        quietly(failed, copiedIn::close);
        if (fault != null) quietly(failed, fault::close);
        if (matmul != null) quietly(failed, matmul::close);
        if (attention != null) quietly(failed, attention::close);
        quietly(failed, device::close);
        if (failed.isEmpty()) return;
        var e = new GatunRuntimeException("plan '" + plan.name() + "': releasing its resources on " + deviceName() + " failed (" + failed.size()
                + " error(s); after a failed call the GPU context is lost, and the driver frees its memory when the process ends): "
                + failed.getFirst().getMessage(), failed.getFirst());
        for (int i = 1; i < failed.size(); i++) e.addSuppressed(failed.get(i));
        throw e;
    }

    /** Runs one release of {@link #close}, keeping its failure for later instead of stopping the others. */
    private static void quietly(List<RuntimeException> failed, Runnable release) {
        try {
            release.run();
        } catch (RuntimeException e) {
            failed.add(e);
        }
    }
}
