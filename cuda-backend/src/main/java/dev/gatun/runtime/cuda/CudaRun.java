package dev.gatun.runtime.cuda;

import dev.gatun.cuda.CudaException;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Event;
import dev.gatun.cuda.GraphExec;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.planner.AttentionCall;
import dev.gatun.planner.LaunchChoice;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Step;
import dev.gatun.planner.UpdateSliceCall;
import dev.gatun.runtime.ArrayLike;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.spi.LaunchList;
import dev.gatun.runtime.spi.StepLoop;

import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.function.BiConsumer;

/**
 * One call of a {@link CudaExecutable}: stage inputs, run or replay the plan's steps through the shared
 * {@link StepLoop}; outputs stay on the GPU. What lives across calls (memory, graphs, kernels) is the executable's;
 * what this call alone has (its dynamic buffers, where its inputs are read from, its profiling events) is here.
 */
final class CudaRun implements StepLoop.Steps {
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
    /** {@link CudaExecutable#launchList} only: each launch this call makes, with the choices it passes ({@link LaunchList#entry}). */
    private List<String> launched;
    /** Profiling only: the event recorded before each timed step (by step index), and the one after the last. */
    private final Event[] marks;
    private Event end;
    /** Profiling only: whether the steps are being captured (each mark an event node of its own) or run one by one. */
    private boolean marksCaptured;

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
        // a node of its own in a partition being captured; a plain record where the steps run one by one (an external
        // record outside a capture was refused on two H200s: cudaErrorIllegalState at a distributed plan's profile)
        if (marksCaptured) marks[index].recordExternal(exe.stream);
        else marks[index].record(exe.stream);
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
        if (launched != null) {
            StepLoop.run(plan, this, false);   // every launch made, none replayed
            return;
        }
        if (marks == null) {
            executeSteps(exe.options.cudaGraphs());
            return;
        }
        boolean graphs = exe.options.cudaGraphs() && exe.dist == null;
        marksCaptured = graphs;
        try {
            if (graphs) {
                graphSet = new GraphExec[plan.partitions().size()];
                exe.graphs.captureMissing(graphSet, this, exe.dist);
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
            exe.graphs.captureMissing(graphSet, this, exe.dist);
        }
        StepLoop.run(plan, this, graphs);
    }

    /** The graphs captured for this call's input addresses; inputs at too many new addresses are staged instead. */
    private void chooseGraphs() {
        if (graphSet != null) return;
        graphSet = exe.graphs.forAddresses(inputAddresses(), !inPlace.isEmpty());
        if (graphSet == null) {
            for (var e : inPlace.entrySet()) stage(e.getKey(), e.getValue());
            inPlace.clear();
            graphSet = exe.graphs.forAddresses(inputAddresses(), false);
        }
        exe.graphs.replaying(graphSet);
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
                DeviceArray p = exe.bindings.inPlace(name);
                if (p != null) {
                    a = p;
                    fixed = true;
                } else {
                    if (!exe.bindings.isBound(name))
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
                        MemorySegment from = HostStaging.native_(n);
                        // where ranks share the GPU no page-locked memory is made mid-session: pageable is copied as it is
                        boolean pageable = !exe.sharesGpu() && !exe.hostStaging.isPinned(from);
                        if (pageable && exe.hostStaging.writeDirect(n, dst)) {
                            // page-locked in place (an array used again and again): copied straight, and waited for
                        } else if (pageable && !in.isDynamic()) {
                            if (!stagedOnHost) exe.hostStaging.awaitCopiesOut(); // the last call's copies out of the staging are done
                            exe.hostStaging.stageIn(in, from, dst);
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
                    if (d.isContiguous() && !ownOutput && (fixed || aligned && (in.isDynamic() || !exe.sharesGpu() && exe.graphs.readInPlace()))) {
                        setSource(in, d.address());
                        if (!in.isDynamic() && !fixed) inPlace.put(in, d);
                    } else {
                        stage(in, d);
                    }
                }
            }
        }
        if (stagedOnHost) exe.hostStaging.recordCopiesOut();
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
            Step.Matmul m = CudaExecutable.productOf(s);
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

    private void copyIn(PlanBuffer b) { copy(source[b.id()], addressOf(b), bytes(b)); }

    /** Records each launch of this call from now on ({@link #launched}); the call then runs every step, none replayed. */
    void recordLaunches() { launched = new ArrayList<>(); }

    /** The launches this call made, in order. */
    List<String> launched() { return List.copyOf(launched); }

    /** The plan's launch choices for step {@code s}, which its launch passes on; recorded where asked. */
    private LaunchChoice choice(Step s) {
        LaunchChoice c = plan.choice(s);
        if (launched != null) launched.add(LaunchList.entry(s, c));
        return c;
    }

    @Override public void launch(Step.Launch l) {
        // a kernel that reads a table through its indices reports a bad one in the executable's fault record
        launch(exe.kernels.kernel(l.kernel()), choice(l).programmatic(), l.kernel().gathers() ? exe.fault.site(l) : null);
    }

    @Override public void matmul(Step.Matmul m) {
        exe.matmul.run(m, choice(m), addressOf(m.a()), addressOf(m.b()), addressOf(m.output()), env, exe.stream);
    }

    /** One launch: the product on the columns each block holds, then the epilogues on them ({@link TiledProductCodegen}). */
    @Override public void tiledProduct(Step.TiledProduct t) {
        PlanKernels.Tiled c = exe.kernels.tiled(t);
        LaunchChoice choice = choice(t);
        var src = c.source();
        Step.Matmul m = t.product();
        long x = addressOf(m.a()), w = addressOf(m.b()), y = addressOf(m.output());
        exe.matmul.checkGemv(m, src.dtype(), src.rows(), src.k(), x, w, y);
        var l = src.launch();
        var args = new ArrayList<Object>(List.of(x, w, y, src.positions(), src.k(), (long) src.columns(), src.rows(), l.slices(),
                choice.gemv().preload() ? 1 : 0, c.cols().address(), c.items().address()));
        for (int e = 0; e < t.epilogues().size(); e++) kernelArgs(args, t.epilogues().get(e).kernel(), src.epilogueSymbols().get(e));
        int grid = l.grid(exe.multiprocessors, choice.gemv().resident());   // the kernel loops over the packing's blocks past it
        var config = new LaunchConfig(Dim3.of(grid), Dim3.of(32 * l.warps()), l.sharedBytes(), exe.stream);
        try {
            Programmatic.launch(c.function(), choice.programmatic(), config, args.toArray());
        } catch (CudaException e) {
            throw new GatunRuntimeException("launching " + t.name() + " (grid " + grid + ", block " + 32 * l.warps() + ") failed: " + e.getMessage(), e);
        }
    }

    /**
     * The registered ops this backend has kernels for, by spec name, and each one's launch; {@link CudaBackend} refuses a
     * plan that calls any other when it loads it.
     */
    static final Map<String, BiConsumer<CudaRun, Step.OpCall>> OPS = Map.ofEntries(
            Map.entry(dev.gatun.ir.ops.Argmax.SPEC.name(), CudaRun::argmax),
            Map.entry(dev.gatun.ir.ops.Sample.SPEC.name(), CudaRun::sample),
            Map.entry(dev.gatun.ir.ops.IndexSelect.SPEC.name(), CudaRun::indexSelect),
            Map.entry(dev.gatun.ir.ops.TopK.SPEC.name(), CudaRun::topk),
            Map.entry(dev.gatun.ir.ops.Gather.SPEC.name(), CudaRun::gather),
            Map.entry(dev.gatun.ir.ops.ScatterAdd.SPEC.name(), CudaRun::scatterAdd),
            Map.entry(dev.gatun.ir.ops.ExpertMatmul.SPEC.name(), CudaRun::expertMatmul),
            Map.entry(dev.gatun.ir.ops.FlashAttention.SPEC.name(), CudaRun::flashAttention),
            Map.entry(dev.gatun.ir.ops.FlashAttentionBackward.SPEC.name(), CudaRun::flashAttentionBackward),
            Map.entry(dev.gatun.ir.ops.UpdateSlice.SPEC.name(), (run, call) -> run.updateSlice(UpdateSliceCall.of(call))),
            Map.entry(dev.gatun.ir.ops.Snapshot.SPEC.name(), CudaRun::snapshot),
            Map.entry(dev.gatun.ir.ops.Attention.SPEC.name(), (run, call) -> run.attention(AttentionCall.of(call))));

    /** A registered op by its spec ({@link #OPS}). */
    @Override public void op(Step.OpCall a) {
        var launch = OPS.get(a.spec().name());
        if (launch == null) throw new GatunRuntimeException(CudaBackend.noKernel(a));
        launch.accept(this, a);
    }

    /** snapshot: output 0 is input 0 in place; output 1 a device-to-device copy of it. */
    private void snapshot(Step.OpCall s) {
        copy(addressOf(s.input(0)), addressOf(s.outputs().get(1)), bytes(s.input(0)));
    }

    private void argmax(Step.OpCall a) {
        long[] shape = a.input(0).shape().sizes(env);
        exe.argmax.run(addressOf(a.input(0)), a.input(0).dtype(), addressOf(a.output()), numel(a.output()), shape[shape.length - 1],
                choice(a).programmatic(), exe.stream);
    }

    /** sample's inputs: logits, params, seeds, steps, context. */
    private void sample(Step.OpCall s) {
        long[] shape = s.input(0).shape().sizes(env);
        exe.sample.run(s, addressOf(s.input(0)), addressOf(s.input(1)), addressOf(s.input(2)), addressOf(s.input(3)), addressOf(s.input(4)),
                addressOf(s.output()), shape[0], shape[1], s.input(4).shape().sizes(env)[1], numel(s.input(3)), choice(s).programmatic(), exe.stream);
    }

    /** topk's outputs: the values, the indices. */
    private void topk(Step.OpCall t) {
        long[] shape = t.input(0).shape().sizes(env);
        long cols = shape[shape.length - 1];
        exe.topk.run(addressOf(t.input(0)), t.input(0).dtype(), addressOf(t.outputs().get(0)), addressOf(t.outputs().get(1)), numel(t.input(0)) / cols,
                cols, t.attrs().integer("k"), choice(t).programmatic(), exe.stream);
    }

    /** gather's inputs: x, the index. */
    private void gather(Step.OpCall g) {
        long[] x = g.input(0).shape().sizes(env);
        exe.gatherScatter.run(CudaGatherScatter.gather(addressOf(g.input(0)), g.input(0).dtype(), x, addressOf(g.input(1)), g.input(1).dtype(),
                g.input(1).shape().sizes(env), dim(g, x.length), addressOf(g.output()), exe.fault.site(g)), choice(g).programmatic(), exe.stream);
    }

    /** scatter_add's inputs: x, the index, the source. */
    private void scatterAdd(Step.OpCall s) {
        long[] x = s.input(0).shape().sizes(env);
        exe.gatherScatter.run(CudaGatherScatter.scatterAdd(addressOf(s.input(0)), s.input(0).dtype(), x, addressOf(s.input(1)), s.input(1).dtype(),
                s.input(1).shape().sizes(env), addressOf(s.input(2)), s.input(2).shape().sizes(env), dim(s, x.length), addressOf(s.output()), exe.fault.site(s)),
                choice(s).programmatic(), exe.stream);
    }

    /** expert_matmul's inputs: x, w [E, Out, In], ids [N, k]. */
    private void expertMatmul(Step.OpCall m) {
        long[] x = m.input(0).shape().sizes(env), w = m.input(1).shape().sizes(), ids = m.input(2).shape().sizes(env);
        boolean rowPerChoice = x.length == 3 && x[1] == ids[1] && ids[1] > 1;
        exe.expertMatmul.run(CudaExpertMatmul.launches(m.input(0).dtype(), addressOf(m.input(0)), addressOf(m.input(1)), addressOf(m.input(2)),
                addressOf(m.output()), ids[0] * ids[1], (int) ids[1], rowPerChoice, (int) w[0], (int) w[1], (int) w[2], exe.expertMatmul.sms, exe.fault.site(m)),
                choice(m).programmatic(), exe.stream);
    }

    /** The dimension an op's {@code dim} attribute names in a tensor of rank {@code rank} (negative counts from the end). */
    private static int dim(Step.OpCall o, int rank) {
        long d = o.attrs().integer("dim");
        return (int) (d < 0 ? d + rank : d);
    }

    private void attention(AttentionCall a) {
        exe.attention.run(a, addressOf(a.q()), addressOf(a.keysT()), addressOf(a.values()), addressOf(a.output()), addressOf(a.position()),
                exe.fault, exe.fault.step(a.call()), choice(a.call()), exe.stream);
    }

    /** One launch: the attention's kernel writes the new key and value into the caches itself ({@link CudaAttention}). */
    @Override public void updateAttention(Step.UpdateAttention u) {
        var a = u.attention();
        exe.attention.run(u, addressOf(a.q()), addressOf(a.keysT()), addressOf(a.values()), addressOf(a.output()), addressOf(a.position()),
                addressOf(u.keys().update()), addressOf(u.values().update()), exe.fault, exe.fault.step(u), choice(u), exe.stream);
    }

    private void updateSlice(UpdateSliceCall u) {
        exe.updateSlice.run(update(u), addressOf(u.start()), u.start().dtype(), exe.fault, exe.fault.step(u.call()), choice(u.call()).programmatic(), exe.stream);
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
                choice(b).programmatic(), exe.stream);
    }

    /** An update's geometry for this call (where its runs lie in the update, in bytes). */
    private CudaUpdateSlice.Update update(UpdateSliceCall u) {
        var r = u.runs(env);
        long e = u.update().dtype().byteSize();
        return new CudaUpdateSlice.Update(addressOf(u.update()), addressOf(u.output()), r.count(), r.size(), r.len(), r.innerBytes(),
                r.from().inner(), r.from().innerStride() * e, r.from().outerStride() * e);
    }

    /** flash_attention's inputs: q, k, v. */
    private void flashAttention(Step.OpCall s) {
        exe.flash.run(s.label(), s.input(0).dtype(), s.input(0).shape().sizes(env), s.input(1).shape().sizes(env), addressOf(s.input(0)),
                addressOf(s.input(1)), addressOf(s.input(2)), addressOf(s.output()), s.attrs(), choice(s).programmatic(), exe.stream);
    }

    /** flash_attention_backward's inputs: q, k, v, o, dout; its outputs: dq (float32), dk, dv, stats. */
    private void flashAttentionBackward(Step.OpCall s) {
        var out = s.outputs();
        var x = new CudaFlashAttentionBackward.Buffers(addressOf(s.input(0)), addressOf(s.input(1)), addressOf(s.input(2)), addressOf(s.input(3)),
                addressOf(s.input(4)), addressOf(out.get(0)), addressOf(out.get(1)), addressOf(out.get(2)), addressOf(out.get(3)));
        exe.flashBackward.run(s.label(), s.input(0).dtype(), s.input(0).shape().sizes(env), s.input(1).shape().sizes(env), x, s.attrs(),
                choice(s).programmatic(), exe.stream);
    }

    /** index_select's inputs: the table, the indices. */
    private void indexSelect(Step.OpCall s) {
        long rows = s.input(0).shape().sizes(env)[0];
        exe.indexSelect.run(addressOf(s.input(0)), addressOf(s.input(1)), s.input(1).dtype(), addressOf(s.output()), numel(s.input(1)),
                rows, bytes(s.input(0)) / Math.max(1, rows), exe.fault, exe.fault.step(s), choice(s).programmatic(), exe.stream);
    }

    @Override public void userOp(Step.CallUserOp u) {
        choice(u);   // a user's kernel: a plain launch
        Kernel fn = exe.kernels.user(u.op().name());
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
        choice(c);   // NCCL, a symmetric kernel, or copies: plain launches
        PlanBuffer in = c.input();
        long src = addressOf(in), out = addressOf(c.output()), n = numel(in);
        boolean member = exe.dist != null && exe.dist.isMember(c.call().group());
        if (!member) {
            // a world of one rank, or a rank outside the group: the input passes through
            if (c.copiesIn()) copyIn(in);
            copy(src, out, bytes(in));
        } else if (c.call().kind() == dev.gatun.ir.graph.CollectiveKind.ALL_TO_ALL) {
            if (c.copiesIn()) copyIn(in);
            if (c.call().algorithm().isSymmetric()) symmetricAllToAll(c);
            else exe.dist.allToAll(c, src, out, n, in.dtype(), exe.stream);
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

    /**
     * An all_to_all on symmetric memory: its input and counts where the plan put them in the group's communication
     * pool; an uneven one whose result is a receive buffer in symmetric memory has the senders push into it, any other
     * pulls into its result ({@link SymmetricAllToAll}).
     */
    private void symmetricAllToAll(Step.Collective c) {
        var p = allToAllPart(c);
        exe.dist.symmetricAllToAll(c, p.in(), p.counts(), p.receive(), p.out(), p.rows(), p.rowBytes(), p.capacity(), c.uneven() ? exe.fault.site(c) : null, exe.stream);
    }

    /** A symmetric all_to_all's operands: where its input, counts and receive buffer lie, its result's address, its sizes. */
    private Distributed.AllToAllPart allToAllPart(Step.Collective c) {
        PlanBuffer in = c.input(), out = c.output();
        long[] shape = in.shape().sizes(env);
        long rows = shape[0], rowBytes = in.dtype().byteSize();
        for (int d = 1; d < shape.length; d++) rowBytes *= shape[d];
        long capacity = c.uneven() ? out.shape().dim(0).size() : rows;
        boolean push = c.uneven() && out.storage().isSymmetric() && out.storage().placement() != null;
        return new Distributed.AllToAllPart(slot(in), c.uneven() ? slot(c.counts()) : null, push ? slot(out) : null, addressOf(out), rows, rowBytes, capacity);
    }

    /**
     * Joined all_to_alls: one launch, one barrier pair around every part's moves ({@link SymmetricAllToAll}); a rank
     * outside the group (or a world of one) passes each part's input through, listed as the one step the plan shows.
     */
    @Override public void joinedAllToAll(int index, Step.JoinedAllToAll j) {
        choice(j);
        if (exe.dist == null || !exe.dist.isMember(j.group())) {
            List<String> recording = launched;
            launched = null;
            try {
                for (Step.Collective c : j.members()) collective(index, c);
            } finally {
                launched = recording;
            }
            return;
        }
        var parts = new ArrayList<Distributed.AllToAllPart>();
        for (Step.Collective c : j.members()) {
            if (c.copiesIn()) copyIn(c.input());
            parts.add(allToAllPart(c));
        }
        boolean uneven = j.members().stream().anyMatch(Step.Collective::uneven);
        exe.dist.symmetricAllToAlls(j, parts, uneven ? exe.fault.site(j) : null, exe.stream);
    }

    /** Where {@code b} lies in its communication pool (the symmetric path put it there). */
    private Distributed.PoolSlot slot(PlanBuffer b) {
        var p = b.storage().placement();
        if (p == null || !b.storage().isSymmetric())
            throw new IllegalStateException(b.name() + " is read by a symmetric all_to_all but is not in a communication pool");
        return new Distributed.PoolSlot(p.pool(), addressOf(b) - exe.pools.get(p.pool()).address());
    }

    @Override public void fused(int index, Step.FusedCollective f) {
        choice(f);
        Step.Collective first = f.collectives().getFirst();
        PlanKernels.Fused compiled = exe.kernels.fused(f);
        if (exe.dist == null || compiled == null || !exe.dist.isMember(first.call().group())) {
            List<String> recording = launched;
            launched = null;   // listed as the one step the plan shows
            try {
                StepLoop.Steps.super.fused(index, f); // the prologue, the input passed through, the epilogue
            } finally {
                launched = recording;
            }
            return;
        }
        launchFused(f.name(), compiled, f.prologue(), f.collective(), f.epilogue());
    }

    /** One launch of a fused collective ({@link CollectiveCodegen}'s ABI). */
    private void launchFused(String name, PlanKernels.Fused compiled, Step.Launch prologue, Step collective, Step.Launch epilogue) {
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
        choice(b);
        if (exe.dist == null || !exe.dist.isMember(b.first().call().group())) {
            List<String> recording = launched;
            launched = null;   // listed as the one step the plan shows
            try {
                for (Step.Collective c : b.members()) collective(index, c);
            } finally {
                launched = recording;
            }
            return;
        }
        if (exe.kernels.fused(b) != null) { // barrier-free all-reduces: one launch, member after member in each block
            launchFused("barrier-free batch", exe.kernels.fused(b), null, b, null);
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

    /** Launches plan kernel {@code c}; {@code fault} is where it reports a bad index (null: it reads no table through indices). */
    private void launch(PlanKernels.Compiled c, boolean programmatic, DeviceFault.Site fault) {
        KernelSource src = c.source();
        var k = src.geometry(env, exe.multiprocessors, c.resident());
        if (k.elements() == 0 && c.counter() == null) return; // a fold of no rows still writes its value (one block)
        var args = new ArrayList<Object>();
        var kernel = c.kernel();
        for (PlanBuffer in : kernel.inputs()) args.add(addressOf(in));
        for (var st : kernel.stores()) args.add(addressOf(st.buffer()));
        for (var f : kernel.folds()) args.add(addressOf(f.buffer()));
        for (String sym : src.symbols()) args.add(env.get(sym));
        if (c.counter() != null) args.add(c.counter().address());
        if (fault != null) {
            args.add(fault.claim());
            args.add(fault.record());
            args.add(fault.step());
        }
        var config = new LaunchConfig(Dim3.of(Math.toIntExact(k.grid())), Dim3.of(k.block()), k.sharedBytes(), exe.stream);
        try {
            Programmatic.launch(c.function(), programmatic, config, args.toArray());
        } catch (CudaException e) {
            throw new GatunRuntimeException("launching kernel " + src.name() + " (grid " + k.grid() + ", block " + k.block()
                    + ", shared " + k.sharedBytes() + " B) failed: " + e.getMessage(), e);
        }
    }

    /** The outputs as views of this call's memory, valid until the next call. */
    private Map<String, DeviceArray> outputs(long call) {
        var out = new LinkedHashMap<String, DeviceArray>();
        for (CudaExecutable.Output o : exe.outputs) {
            CudaExecutable.Output g = o.isStatic() ? o : CudaExecutable.Output.of(o.name(), o.buffer(), env, plan.name());
            var memory = CudaMemory.callMemory(exe, address[g.buffer().storage().id()], g.bytes());
            out.put(g.name(), DeviceArray.view(g.buffer().dtype(), g.shape(), g.strides(), g.offset(), memory, () -> exe.expired(call), g.origin() + call));
        }
        return out;
    }
}
