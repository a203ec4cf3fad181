package dev.gatun.runtime.cuda;

import dev.gatun.cuda.CompileException;
import dev.gatun.cuda.CudaException;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Event;
import dev.gatun.cuda.GraphExec;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.Program;
import dev.gatun.cuda.ProgramOptions;
import dev.gatun.cuda.Stream;
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

import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
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
    static final System.Logger LOG = System.getLogger("dev.gatun.cuda");

    final Plan plan;
    final CompileOptions options;
    final Device device;
    /** "cuda:N" */
    final String deviceName;
    final Stream stream;
    final int multiprocessors;
    final Map<String, DeviceBuffer> pools = new LinkedHashMap<>();
    /** staging[input buffer id]: the device buffer a static-shape graph input is staged into, at a fixed address. */
    final DeviceBuffer[] staging;
    /** By buffer id: every placed buffer's and staged input's address, and where each staged input is read from; fixed. */
    final long[] fixedAddress, fixedSource;
    /** Every launch of the plan, compiled. */
    final PlanKernels kernels;

    /** The product step {@code s} runs: a product's own, or a tiled product's; else null. */
    static Step.Matmul productOf(Step s) {
        return switch (s) {
            case Step.Matmul m -> m;
            case Step.TiledProduct t -> t.product();
            default -> null;
        };
    }

    final CudaMatmul matmul;
    final CudaIndexSelect indexSelect;
    final CudaTopK topk;
    final CudaGatherScatter gatherScatter;
    final CudaExpertMatmul expertMatmul;
    final CudaArgmax argmax;
    final CudaSample sample;
    final CudaFlashAttention flash;
    final CudaFlashAttentionBackward flashBackward;
    final CudaUpdateSlice updateSlice;
    final CudaAttention attention;
    /** By buffer id: an input a GEMV product (Step.Matmul.gemv) or expert_matmul reads, which is read in place only where it lies 16-byte aligned. */
    final boolean[] gemvOperand;
    /** Where index_select, gather, scatter_add, update_slice and attention kernels say why they stopped a call (null: the plan has none). */
    final DeviceFault fault;
    /** The captured partitions, per set of input addresses. */
    final CapturedGraphs graphs;
    /** Null for a world of one rank. */
    final Distributed dist;
    final AtomicBoolean closed = new AtomicBoolean();
    /** Memory of arrays this executable owns (toDevice, copy): freed when it closes. */
    final Set<CudaMemory> owned = ConcurrentHashMap.newKeySet();
    /** Page-locked host arrays ({@link #allocateHost}) and the staging of host arrays that are not page-locked. */
    final HostStaging hostStaging;
    /** Recorded when work on another stream is about to read this memory ({@link #markWritten}), and after a call that read another's. */
    final Event written;
    /** Executables that read this one's memory since its last call: the next call waits for them. */
    final Set<CudaExecutable> readers = ConcurrentHashMap.newKeySet();
    /** The inputs' bound values, and the inputs bound in place. */
    final Bindings bindings = new Bindings(this);
    /** The last call's per-call buffers: outputs may live there until the next call. */
    List<DeviceBuffer> lastCall = List.of();
    /** Counts calls; an output of call g may be used while this is still g. */
    volatile long generation;
    /** The plan's outputs, geometry precomputed where it is static. */
    final List<Output> outputs = new ArrayList<>();

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
            checkLaunches(plan, device);
            this.written = device.createEvent(Event.Flag.DISABLE_TIMING);
            this.hostStaging = new HostStaging(device, stream, plan.buffers().size());
            this.graphs = new CapturedGraphs(plan, stream);
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
            this.fixedAddress = new long[plan.buffers().size()];
            this.fixedSource = new long[plan.buffers().size()];
            for (PlanBuffer b : plan.buffers()) {
                var p = b.placement();
                if (p != null) fixedAddress[b.id()] = pools.get(p.pool()).address() + p.offset();
            }
            for (var e : plan.outputs().entrySet()) outputs.add(Output.declared(e.getKey(), e.getValue(), plan.name()));
            writeConstants();
            this.kernels = new PlanKernels(plan, options, multiprocessors, stream, this::compile, this::allocate);
            this.gemvOperand = new boolean[plan.buffers().size()];
            for (Step s : plan.steps())
                for (Step part : s.parts())
                    if (part instanceof Step.Matmul m && m.gemv()) {
                        gemvOperand[m.a().storage().id()] = true;
                        gemvOperand[m.b().storage().id()] = true;
                    }
                    // expert_matmul reads x and w by the GEMV's 16-byte vectors too
                    else if (part instanceof Step.OpCall o && o.spec() == dev.gatun.ir.ops.ExpertMatmul.SPEC) {
                        gemvOperand[o.input(0).storage().id()] = true;
                        gemvOperand[o.input(1).storage().id()] = true;
                    }
            this.matmul = plan.steps().stream().anyMatch(s -> productOf(s) != null) ? new CudaMatmul(device, this::module) : null;
            this.fault = DeviceFault.needed(plan) ? new DeviceFault(device, plan, stream) : null;
            this.indexSelect = calls(plan, dev.gatun.ir.ops.IndexSelect.SPEC) ? new CudaIndexSelect(this::module) : null;
            this.argmax = calls(plan, dev.gatun.ir.ops.Argmax.SPEC) ? new CudaArgmax(this::module) : null;
            this.topk = calls(plan, dev.gatun.ir.ops.TopK.SPEC) ? new CudaTopK(this::module) : null;
            this.gatherScatter = calls(plan, dev.gatun.ir.ops.Gather.SPEC) || calls(plan, dev.gatun.ir.ops.ScatterAdd.SPEC) ? new CudaGatherScatter(this::module) : null;
            this.expertMatmul = calls(plan, dev.gatun.ir.ops.ExpertMatmul.SPEC)
                    ? new CudaExpertMatmul(this::module, multiprocessors) : null;
            this.sample = calls(plan, dev.gatun.ir.ops.Sample.SPEC) ? new CudaSample(this::module, plan) : null;
            this.flash = calls(plan, dev.gatun.ir.ops.FlashAttention.SPEC) ? new CudaFlashAttention(this::module) : null;
            this.flashBackward = calls(plan, dev.gatun.ir.ops.FlashAttentionBackward.SPEC) ? new CudaFlashAttentionBackward(this::module) : null;
            this.updateSlice = plan.steps().stream().anyMatch(s -> dev.gatun.planner.UpdateSliceCall.is(s) || s instanceof Step.UpdateSlices)
                    ? new CudaUpdateSlice(this::module) : null;
            this.attention = plan.steps().stream().anyMatch(s -> CudaAttention.attentionOf(s) != null) ? new CudaAttention(device, this::module, plan, stream) : null;
            if (sharesGpu()) prepareForSharedGpu();
            this.dist = plan.worldSize() > 1 ? new Distributed(plan, device, stream, pools, vmmPools, options) : null;
            ok = true;
        } finally {
            if (!ok) device.close();
        }
    }

    Plan plan() { return plan; }

    /** Whether a step of {@code plan} calls the registered op {@code spec}. */
    private static boolean calls(Plan plan, dev.gatun.ir.graph.OpSpec spec) {
        return plan.steps().stream().anyMatch(s -> s instanceof Step.OpCall o && o.spec() == spec);
    }

    /**
     * Refuses a plan that asks for programmatic launches ({@link Plan#launches()}, made per step: {@code Plan.choice})
     * on a GPU without them: the backend launches what the plan says or nothing. A session plans for its own GPU
     * ({@link CudaBackend#adapt}), so only a plan made for another target gets here.
     */
    private static void checkLaunches(Plan plan, Device device) {
        var cc = device.computeCapability();
        if (plan.launches().programmatic() && cc.major() < 9)
            throw new GatunRuntimeException("plan '" + plan.name() + "' launches its kernels programmatically (printed under its pools), which GPU "
                    + device.ordinal() + " (compute capability " + cc.major() + "." + cc.minor() + ") does not have; plan it for this GPU"
                    + " (PlanOptions.withTarget, as a session does) or with programmatic launches off (PlanOptions.withProgrammaticLaunch(OFF))");
    }

    /** One call of the plan with every step run (none replayed), listing the launches it makes ({@link CudaRun#launched}). */
    @Override public List<String> launchList(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        var r = new CudaRun(this, inputsPerRank.getFirst(), false);
        r.recordLaunches();
        run(r);
        return r.launched();
    }

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
        hostStaging.reserveReads(largestOutput);
        if (argmax != null) argmax.loadNow();
        if (sample != null) sample.loadNow();
        if (attention != null) attention.loadNow(plan);
        if (flash != null)
            for (Step s : plan.steps())
                if (s instanceof Step.OpCall o && o.spec() == dev.gatun.ir.ops.FlashAttention.SPEC) flash.loadNow(o.input(0).dtype(), o.input(0).shape().sizes()[3]);
        if (flashBackward != null)
            for (Step s : plan.steps())
                if (s instanceof Step.OpCall o && o.spec() == dev.gatun.ir.ops.FlashAttentionBackward.SPEC)
                    flashBackward.loadNow(o.input(0).dtype(), o.input(0).shape().sizes()[3]);
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

    volatile boolean aborted;

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
    GraphExec[] partitions() { return graphs.last(); }

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

    /** {@code kernelName} of {@code source}, compiled once for every kernel of the plan that is the same program ({@link SameSourceKernels}). */
    Kernel compile(String programName, String source, String kernelName) { return sameSource.kernel(programName, source, kernelName); }

    private final SameSourceKernels sameSource = new SameSourceKernels(this::module);

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
        return hostStaging.allocate(dtype, shape, sharesGpu());
    }

    /**
     * Copies the value into the input's staging buffer, which keeps it for every later call; a state's value into its
     * slot (null: zeros), which the next call reads and updates.
     */
    @Override public void bind(int rankIndex, String input, ArrayLike value) {
        checkOpen("bind");
        if (value == null) bindings.unbind(input);
        else bindings.bind(Map.of(input, value));
    }

    /** Every value's copy queued first, then one wait for them all (the values may change or close once bind returns). */
    @Override public void bind(int rankIndex, Map<String, ? extends ArrayLike> values) {
        checkOpen("bind");
        bindings.bind(values);
    }

    /** The caller's array itself for every later call: its address becomes the input's, read in place ({@link Bindings}). */
    @Override public void bindInPlace(int rankIndex, String input, DeviceArray array) {
        checkOpen("bindInPlace");
        bindings.bindInPlace(input, array);
    }

    /**
     * Device to host on this executable's stream, after the work that writes the memory; waits for it. A CUDA error
     * (a failed call's kernel ends the wait) is the library's exception, naming the plan, the GPU and the rank.
     */
    void readToHost(long src, MemorySegment dst, long bytes) {
        try {
            hostStaging.read(src, dst, bytes, sharesGpu());
        } catch (CudaException e) {
            throw failed(" (reading its memory back)", e);
        }
    }

    /** {@link #readToHost(long, MemorySegment, long)} into a host array ({@link HostStaging#read(long, NDArray, long, boolean)}). */
    void readToHost(long src, NDArray dst, long bytes) {
        try {
            hostStaging.read(src, dst, bytes, sharesGpu());
        } catch (CudaException e) {
            throw failed(" (reading its memory back)", e);
        }
    }

    /** Host to device on this executable's stream; waits for it (the caller may reuse its memory at once). */
    void writeFromHost(long dst, MemorySegment src, long bytes) { hostStaging.write(dst, src, bytes); }

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
        graphs.close(failed);
        if (dist != null) quietly(failed, dist::close);
        for (DeviceBuffer b : lastCall) quietly(failed, b::close);
        for (CudaMemory m : List.copyOf(owned)) quietly(failed, m::close);
        hostStaging.close(failed);
        quietly(failed, written::close);
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
    static void quietly(List<RuntimeException> failed, Runnable release) {
        try {
            release.run();
        } catch (RuntimeException e) {
            failed.add(e);
        }
    }
}
