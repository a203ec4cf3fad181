package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.ArrayLike;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.Elements;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.RankFailedException;
import dev.gatun.runtime.spi.Executable;
import dev.gatun.runtime.spi.StepLoop;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.LockSupport;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A plan loaded on the host backend: every rank is a thread of this JVM with its own pools (memory
 * segments); a communication pool is one segment per rank that peers read at the same offsets, so the
 * collectives run the GPU algorithms with the same barriers, and a slot reused too early shows up as a
 * wrong result here too.
 *
 * <p>Where the session is one rank of a world of sessions (a {@link dev.gatun.runtime.World.Local} or
 * {@link dev.gatun.runtime.World.Launched} world of several), it drives that rank only, and its collectives reach
 * the other ranks through a {@link Transport} ({@link RankCollectives}), which it owns and closes. Arrays indexed
 * "by rank" below are indexed by the position of the rank among those this executable drives.
 */
final class HostExecutable implements Executable {
    private final Plan plan;
    private final CompileOptions options;
    private final int world;
    /** The ranks this executable drives: every rank of the world, or its own one. */
    private final List<Integer> driven;
    /** How this rank reaches the others of a world of sessions; null where every rank is simulated here. */
    private final Transport transport;
    private final Arena arena = Arena.ofShared();
    /** placed[rank][buffer id]: the slot of every placed storage on every rank. */
    private final MemorySegment[][] placed;
    /** pools[rank]: every pool of every rank, by name. */
    private final List<Map<String, MemorySegment>> pools = new ArrayList<>();
    /** Each group's slices: the sets of ranks that run its collectives together. */
    private final Map<String, List<List<Integer>>> groups = new HashMap<>();
    private final ExecutorService threads;
    private final AtomicBoolean closed = new AtomicBoolean();
    private final AtomicLong calls = new AtomicLong();
    /** Memory this executable owns for arrays (toDevice, copies, bound host arrays): freed when it closes. */
    final java.util.Set<HostMemory> owned = java.util.concurrent.ConcurrentHashMap.newKeySet();
    /** bound[rank]: the inputs bound once for every call (copies this executable owns). */
    private final List<Map<String, DeviceArray>> bound = new ArrayList<>();
    /** inPlace[rank]: the inputs bound in place (the caller's arrays, read where they lie). */
    private final List<Map<String, DeviceArray>> inPlace = new ArrayList<>();
    /** callMemory[rank]: the last call's dynamic storage and input copies, kept while its outputs may be read. */
    private final Arena[] callMemory;
    /** Counts calls; an output of call g may be used while this is still g. */
    private volatile long generation;

    HostExecutable(Plan plan, CompileOptions options) {
        this.plan = plan;
        this.options = options;
        this.world = plan.worldSize();
        boolean oneRank = !options.world().drivesEveryRank() && world > 1;
        this.driven = oneRank ? List.of(options.world().rank()) : java.util.stream.IntStream.range(0, world).boxed().toList();
        for (ProcessGroup g : plan.groups().values()) groups.put(g.name(), g.slices(world));
        int n = driven.size();
        this.placed = new MemorySegment[n][plan.buffers().size()];
        for (int r = 0; r < n; r++) {
            var m = new LinkedHashMap<String, MemorySegment>();
            for (Pool p : plan.pools()) m.put(p.name(), allocate(p, driven.get(r)));
            pools.add(m);
            for (PlanBuffer b : plan.buffers()) {
                var at = b.placement();
                if (at != null) placed[r][b.id()] = m.get(at.pool()).asSlice(at.offset(), at.bytes());
            }
            writeConstants(r);
            initializeRotatingSlots(r);
        }
        for (int r = 0; r < n; r++) {
            bound.add(new HashMap<>());
            inPlace.add(new java.util.concurrent.ConcurrentHashMap<>());
        }
        this.callMemory = new Arena[n];
        try {
            this.transport = oneRank ? Transports.open(plan, options) : null;
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
        threads = Executors.newFixedThreadPool(n, Thread.ofPlatform().name("gatun-host-rank-", 0).daemon(true).factory());
        // a session dropped without close() still gives its rank threads, memory and transport back once it is unreachable
        this.cleanup = CLEANER.register(this, new Release(transport, threads, arena, owned, callMemory));
    }

    private static final java.lang.ref.Cleaner CLEANER = java.lang.ref.Cleaner.create(Thread.ofPlatform().name("gatun-host-cleaner").daemon(true).factory());
    private final java.lang.ref.Cleaner.Cleanable cleanup;

    /** What closing releases; holds no reference to the executable, so the executable can become unreachable. */
    private record Release(Transport transport, ExecutorService threads, Arena arena, java.util.Set<HostMemory> owned, Arena[] callMemory)
            implements Runnable {
        @Override public void run() {
            if (transport != null) transport.close();   // first: a rank still waiting for its peers stops
            threads.shutdownNow();
            arena.close();
            for (HostMemory m : List.copyOf(owned)) m.close();
            for (Arena a : callMemory) if (a != null) a.close();
        }
    }

    /** A pool of one simulated rank; every rank's pools live in this JVM, so a pool too large for it is named, not an OutOfMemoryError. */
    private MemorySegment allocate(Pool p, int rank) {
        try {
            return arena.allocate(Math.max(1, p.allocationBytes()), 128);
        } catch (OutOfMemoryError | IllegalArgumentException e) {   // the JDK's refusals of a size it cannot allocate, said by name
            arena.close();
            throw new GatunRuntimeException("plan '" + plan.name() + "': the host backend cannot allocate " + p.name() + " of "
                    + dev.gatun.ir.ByteSize.format(p.allocationBytes()) + " for rank " + rank + " (" + e.getMessage() + "); it keeps every"
                    + " simulated rank's pools in this process's memory: run smaller shapes on the host, or this plan on a GPU", e);
        }
    }

    private void writeConstants(int rank) {
        for (PlanBuffer b : plan.buffers()) {
            if (b.kind() != PlanBuffer.Kind.CONSTANT) continue;
            double[] v = plan.constant(b);
            for (int i = 0; i < v.length; i++) Elements.set(placed[rank][b.id()], b.dtype(), i, v[i]);
        }
    }

    /** Sets up every barrier-free all-reduce's rotating region of a rank: empty slots, the call counter at zero. */
    private void initializeRotatingSlots(int index) {
        for (Step st : plan.steps())
            for (Step.Collective c : st.collectives()) if (c.slots() != null) BarrierFreeAllReduce.initialize(region(index, c.slots()), c.slots());
    }

    /** A barrier-free all-reduce's rotating region on a simulated rank (its index is its rank). */
    MemorySegment region(int rank, dev.gatun.planner.RotatingSlots s) { return pools.get(rank).get(s.pool()).asSlice(s.offset(), s.bytes()); }

    /** A placed storage's memory on a simulated rank (its index is its rank). */
    MemorySegment placed(int rank, PlanBuffer storage) { return placed[rank][storage.id()]; }

    /** How this rank reaches the others, where the session is one rank of a world of sessions; else null. */
    Transport transport() { return transport; }

    Plan plan() { return plan; }

    @Override public List<Integer> ranks() { return driven; }

    @Override public String device(int rankIndex) { return "host"; }

    @Override public DeviceArray toDevice(int rankIndex, NDArray host) {
        HostMemory m = HostMemory.allocate(host.byteSize(), owned);
        m.write(0, host.segment(), host.byteSize());
        return DeviceArray.owned(host.dtype(), host.shape(), m, "array copied to the host backend by toDevice");
    }

    @Override public DeviceArray wrap(int rankIndex, long address, DType dtype, long[] shape, Runnable release) {
        long n = 1;
        for (long d : shape) {
            if (d < 0) throw new GatunRuntimeException("wrap: negative dimension in shape " + java.util.Arrays.toString(shape));
            n = Math.multiplyExact(n, d);
        }
        long bytes = Math.multiplyExact(n, dtype.byteSize());
        var m = HostMemory.wrapped(MemorySegment.ofAddress(address).reinterpret(Math.max(1, bytes)), owned, release);
        return DeviceArray.borrowed(dtype, shape, m, "wrapped memory at 0x" + Long.toHexString(address));
    }

    /**
     * The value is copied into memory of this executable's own (a snapshot), which a later bind or close frees; a
     * state's value is copied into its slot, which the next call reads and updates.
     */
    @Override public void bind(int rankIndex, String input, ArrayLike value) {
        PlanBuffer state = plan.state(input);
        if (state != null) {
            MemorySegment slot = placed[rankIndex][state.id()];
            switch (value) {
                case null -> slot.fill((byte) 0);
                case NDArray n -> MemorySegment.copy(n.segment(), 0, slot, 0, state.type().byteSize());
                case DeviceArray d -> d.copyTo(NDArray.wrap(d.dtype(), slot, d.shape()));
            }
            return;
        }
        DeviceArray copy = switch (value) {
            case null -> null;
            case NDArray n -> toDevice(rankIndex, n);
            case DeviceArray d -> toDevice(rankIndex, d.toHost());
        };
        inPlace.get(rankIndex).remove(input);
        DeviceArray old = copy == null ? bound.get(rankIndex).remove(input) : bound.get(rankIndex).put(input, copy);
        if (old != null) old.close();
    }

    /** The caller's array itself, read in place by every later call (a bound copy of the input is freed). */
    @Override public void bindInPlace(int rankIndex, String input, DeviceArray array) {
        if (array != null && !(array.memory() instanceof HostMemory m && m.pool != this))
            throw new GatunRuntimeException("bindInPlace(\"" + input + "\"): " + array.origin() + (array.memory() instanceof HostMemory
                    ? " is this session's own memory, which its next call overwrites; copy() it first" : " is not memory of the host backend"));
        DeviceArray old = bound.get(rankIndex).remove(input);
        if (old != null) old.close();
        if (array == null) inPlace.get(rankIndex).remove(input);
        else inPlace.get(rankIndex).put(input, array);
    }

    @Override public NDArray allocateHost(int rankIndex, DType dtype, long[] shape) { return NDArray.zeros(dtype, shape); }

    @Override public List<Map<String, DeviceArray>> run(List<? extends Map<String, ? extends ArrayLike>> given) {
        if (closed.get()) throw new GatunRuntimeException("plan '" + plan.name() + "' was released");
        if (unusable != null) throw new GatunRuntimeException("plan '" + plan.name() + "' cannot run again: " + unusable + "; close the session and compile a new one");
        // inputs are resolved before the last call's memory goes: one of its outputs may be an input of this call
        int n = driven.size();
        var inputsPerRank = new ArrayList<Inputs>();
        var memory = new Arena[n];
        for (int r = 0; r < n; r++) {
            memory[r] = Arena.ofShared();
            inputsPerRank.add(resolveInputs(r, given.get(r), memory[r]));
        }
        for (int r = 0; r < n; r++) {
            if (callMemory[r] != null) callMemory[r].close();
            callMemory[r] = memory[r];
        }
        long call = ++generation;
        var hw = new HostWorld(groups, world, options.timeout().toNanos(), options.delaySeed(), calls.getAndIncrement());
        if (transport != null) hw.onFailure(transport::abort);   // the peers stop too
        current = hw;
        if (aborted) hw.fail(-1, new HostWorld.Stopped("aborted"));
        var futures = new ArrayList<Future<Map<String, DeviceArray>>>();
        var finished = new java.util.concurrent.atomic.AtomicIntegerArray(n);
        for (int r = 0; r < n; r++) {
            int index = r, rank = driven.get(r);
            futures.add(threads.submit(() -> {
                try {
                    return new RankRun(this, hw, rank, index, inputsPerRank.get(index), memory[index], call).run();
                } catch (Throwable t) {
                    hw.fail(rank, t);
                    throw t;
                } finally {
                    finished.set(index, 1);
                }
            }));
        }
        var out = new ArrayList<Map<String, DeviceArray>>();
        var stuck = new ArrayList<Integer>();
        long stopBy = 0;
        for (int r = 0; r < n; r++) {
            Future<Map<String, DeviceArray>> f = futures.get(r);
            try {
                while (!f.isDone()) {
                    // once a rank failed, the others get a short grace to stop; a rank still busy after it is left behind
                    if (hw.failure() != null && stopBy == 0) stopBy = System.nanoTime() + STOP_GRACE_NANOS;
                    if (stopBy != 0 && System.nanoTime() - stopBy > 0) break;
                    try {
                        f.get(10, TimeUnit.MILLISECONDS);
                    } catch (TimeoutException notYet) {
                        // poll again
                    }
                }
                if (!f.isDone()) {
                    f.cancel(true); // interrupts the rank: a sleep or a wait ends, a busy loop does not
                    stuck.add(driven.get(r));
                    out.add(null);
                } else {
                    out.add(f.get());
                }
            } catch (ExecutionException | java.util.concurrent.CancellationException e) {
                out.add(null);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                hw.fail(-1, e);
                throw new GatunRuntimeException("interrupted while running '" + plan.name() + "'", e);
            }
        }
        if (!stuck.isEmpty()) awaitStuck(stuck, finished);
        HostWorld.Failure f = hw.failure();
        if (aborted) throw new GatunRuntimeException("graph '" + plan.name() + "': the call was aborted (Session.abort) and its ranks stopped");
        if (f != null) {
            // a failed call leaves pushes in the slots and the ranks' call counters apart: every rank has stopped (or
            // the plan is unusable), so the regions start again as new before the next call
            if (unusable == null) for (int r = 0; r < n; r++) initializeRotatingSlots(r);
            // the ranks of a world of sessions no longer agree where their exchanges are: the transport stays broken
            if (transport != null && unusable == null) unusable = "a call failed, and this rank's links to the other ranks were closed with it";
            throw failed(f, stuck);
        }
        return out;
    }

    /** Gives ranks left behind by a failed call a last grace to stop; the executable is unusable while one is still busy. */
    private void awaitStuck(List<Integer> stuck, java.util.concurrent.atomic.AtomicIntegerArray finished) {
        long until = System.nanoTime() + STOP_GRACE_NANOS;
        while (stuck.stream().anyMatch(r -> finished.get(driven.indexOf(r)) == 0) && System.nanoTime() - until < 0) LockSupport.parkNanos(5_000_000);
        var busy = stuck.stream().filter(r -> finished.get(driven.indexOf(r)) == 0).toList();
        if (!busy.isEmpty())
            unusable = "ranks " + busy + " of an earlier call never stopped (busy in a host user op that ignores interrupts?), so their threads are"
                    + " not free for another call";
    }

    /**
     * Each input's memory for one rank's call, by buffer id: a host array or a contiguous device array is read where it
     * is; a strided view, or memory this executable writes during the call (one of its own outputs), is copied first.
     */
    private Inputs resolveInputs(int rank, Map<String, ? extends ArrayLike> given, Arena memory) {
        var seg = new MemorySegment[plan.buffers().size()];
        var env = new HashMap<String, Long>();
        for (PlanBuffer in : plan.inputs()) {
            ArrayLike a = given.get(in.input());
            if (a == null) a = inPlace.get(rank).get(in.input());
            if (a == null) a = bound.get(rank).get(in.input());
            if (a == null) throw new GatunRuntimeException("plan '" + plan.name() + "' rank " + driven.get(rank) + ": input '" + in.input() + "' was neither passed nor bound");
            long[] shape = a.shape();
            for (int d = 0; d < shape.length; d++)
                if (!in.shape().dim(d).isStatic()) env.put(in.shape().dim(d).toString(), shape[d]);
            seg[in.id()] = switch (a) {
                case NDArray n -> n.segment();
                case DeviceArray d -> {
                    d.checkUsable("input '" + in.input() + "'");
                    HostMemory m = (HostMemory) d.memory();
                    if (d.isContiguous() && m.pool != this)
                        yield m.segment.asSlice(d.offset() * d.dtype().byteSize(), d.byteSize());
                    MemorySegment copy = memory.allocate(Math.max(1, d.byteSize()), 128);
                    d.copyTo(NDArray.wrap(d.dtype(), copy, d.shape()));
                    yield copy;
                }
            };
        }
        return new Inputs(seg, env);
    }

    /** One rank's inputs for a call: memory by buffer id, and the symbols their shapes bind. */
    record Inputs(MemorySegment[] memory, Map<String, Long> env) {}

    /** The call in flight (or the last one). */
    private volatile HostWorld current;
    private volatile boolean aborted;

    /** Fails the call in flight: every rank stops at its next barrier or wait, and waiting ranks wake at once. */
    @Override public void abort() {
        aborted = true;
        unusable = "it was aborted";
        HostWorld hw = current;
        if (hw != null) hw.fail(-1, new HostWorld.Stopped("the call was aborted"));
        if (transport != null) transport.abort("its session was aborted");
    }

    /** How long ranks get to stop after the first failure before the call returns without them. */
    private static final long STOP_GRACE_NANOS = 500_000_000L;

    /** Why this executable cannot run another call, or null. */
    private volatile String unusable;

    /**
     * The failure as the caller should see it: a timeout names the rank that never arrived (not the one that
     * waited for it), and ranks that did not stop are listed.
     */
    private RankFailedException failed(HostWorld.Failure f, List<Integer> stuck) {
        Throwable c = f.cause();
        String left = stuck.isEmpty() ? "" : "; ranks " + stuck + " did not stop within " + STOP_GRACE_NANOS / 1_000_000 + " ms and were left behind";
        if (c instanceof HostWorld.Timeout t && !t.missing.isEmpty()) {
            int missing = t.missing.getFirst();
            return new RankFailedException(missing, "graph '" + plan.name() + "': rank " + missing + " did not arrive in time: " + c.getMessage() + left, c);
        }
        if (c instanceof RankFailedException peer && transport != null)   // a transport's: it names the peer at fault
            return new RankFailedException(peer.rank(), "graph '" + plan.name() + "': " + c.getMessage() + left, c);
        return new RankFailedException(f.rank(), "graph '" + plan.name() + "': rank " + f.rank() + " failed: " + c.getMessage()
                + (world > 1 ? "; the other ranks stopped" : "") + left, c);
    }

    boolean isClosed() { return closed.get(); }

    /** Calls on the host backend are done when they return. */
    @Override public void synchronize() {}

    @Override public void close() {
        if (closed.compareAndSet(false, true)) cleanup.clean();
    }

    /** Why an output of call {@code call} may no longer be used, or null. */
    String expired(long call) {
        if (closed.get()) return "belongs to a closed session";
        long now = generation;
        return now == call ? null : "was overwritten by a later call of plan '" + plan.name() + "' (it is from call " + call + ", the session has run "
                + now + "); copy() an output to keep it past the next call";
    }

    /** For tests: called with every step each rank runs, in the order it runs them. */
    volatile java.util.function.BiConsumer<Integer, Step> trace;

    /** While a call is profiled: rank 0's clock before each timed step (by step index), then after its last. */
    private volatile long[] stamps;

    /** One call, rank 0's steps timed by the wall clock (the host backend runs a step to its end before the next). */
    /** The plan's launches: every rank runs each step of the plan as it is (the host has no launch choices of its own). */
    @Override public List<String> launchList(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        return dev.gatun.runtime.spi.LaunchList.of(plan);
    }

    @Override public double[] profile(List<? extends Map<String, ? extends ArrayLike>> inputsPerRank) {
        var t = new long[plan.steps().size() + 1];
        stamps = t;
        try {
            run(inputsPerRank);
        } finally {
            stamps = null;
        }
        return dev.gatun.runtime.spi.StepTimes.between(plan.steps().size(), i -> t[i] != 0, (i, next) -> (t[next] - t[i]) / 1e3);
    }

    /** One rank's execution of one call: the plan's steps through the shared {@link StepLoop}. */
    static final class RankRun implements StepLoop.Steps {
        private final HostExecutable exe;
        private final Plan plan;
        private final HostWorld world;
        private final int rank;
        /** The rank's position among those the executable drives (its rank where every rank is simulated). */
        private final int index;
        /** inputs[buffer id]: each input's memory for this call. */
        private final MemorySegment[] inputs;
        private final Inputs given;
        /** storage[buffer id]: the memory of every storage this call has. */
        private final MemorySegment[] storage;
        private final Map<String, Long> env = new HashMap<>();
        /** Dynamic storage: kept until the next call, since outputs may live there. */
        private final Arena dynamic;
        private final long call;

        RankRun(HostExecutable exe, HostWorld world, int rank, int index, Inputs inputs, Arena dynamic, long call) {
            this.exe = exe;
            this.plan = exe.plan;
            this.world = world;
            this.rank = rank;
            this.index = index;
            this.given = inputs;
            this.inputs = inputs.memory();
            this.dynamic = dynamic;
            this.call = call;
            this.storage = exe.placed[index].clone();
        }

        Map<String, DeviceArray> run() {
            env.putAll(given.env());
            for (PlanBuffer in : plan.inputs())
                if (in.placement() == null) storage[in.id()] = inputs[in.id()];
            StepLoop.run(plan, this, false);
            long[] clock = exe.stamps;
            if (clock != null && index == 0) clock[clock.length - 1] = System.nanoTime();
            var out = new LinkedHashMap<String, DeviceArray>();
            plan.outputs().forEach((name, buf) -> out.put(name, readOut(name, buf)));
            return out;
        }

        @Override public void before(int index, Step step) {
            long[] clock = exe.stamps;
            if (clock != null && this.index == 0 && dev.gatun.runtime.Profile.timed(step)) clock[index] = System.nanoTime();
            stepIndex = index;
            var t = exe.trace;
            if (t != null) t.accept(rank, step);
            world.maybeDelay(rank);
            world.checkFailed(rank);
        }

        @Override public void allocDynamic(Step.AllocDynamic d) { storage[d.buffer().id()] = dynamic.allocate(Math.max(1, bytes(d.buffer())), 16); }

        @Override public void copyIn(Step.CopyIn c) { copyIn(c.buffer()); }

        private void copyIn(PlanBuffer b) { MemorySegment.copy(inputs[b.id()], 0, storage[b.id()], 0, bytes(b)); }

        @Override public void launch(Step.Launch l) { launch(l.kernel()); }

        @Override public void collective(int index, Step.Collective c) {
            if (c.copiesIn()) copyIn(c.input());
            if (exe.transport != null) RankCollectives.run(this, index, c);
            else HostCollectives.run(this, index, c);
        }

        @Override public void batch(int index, Step.CollectiveBatch b) {
            if (exe.transport != null) RankCollectives.batch(this, index, b);
            else HostCollectives.batch(this, b);
        }

        @Override public void joinedAllToAll(int index, Step.JoinedAllToAll j) {
            for (Step.Collective c : j.members()) if (c.copiesIn()) copyIn(c.input());
            if (exe.transport != null) RankCollectives.joined(this, index, j);
            else HostCollectives.joined(this, j);
        }

        /** The index of the step running (set before each), which names a barrier's exchange. */
        private int stepIndex = -1;

        @Override public void matmul(Step.Matmul m) {
            HostMatmul.run(segment(m.a()), m.a(), m.transA(), segment(m.b()), m.b(), m.transB(), segment(m.output()), m.output(), env);
        }

        @Override public void userOp(Step.CallUserOp u) { HostUserOps.run(this, u); }

        @Override public void op(Step.OpCall s) { HostUserOps.run(this, s); }

        @Override public void barrier(Step.Barrier b) {
            if (exe.transport != null) RankCollectives.barrier(this, stepIndex, b);
            else barrier(b.group(), "barrier(\"" + b.group() + "\")");
        }

        private void launch(Kernel k) {
            int n = k.inputs().size(), m = k.outputs().size();
            var in = new MemorySegment[n];
            var inT = new DType[n];
            for (int i = 0; i < n; i++) {
                in[i] = segment(k.inputs().get(i));
                inT[i] = k.inputs().get(i).dtype();
            }
            var out = new MemorySegment[m];
            var outT = new DType[m];
            for (int i = 0; i < m; i++) {
                PlanBuffer b = k.outputs().get(i); // the stores', then the folds'
                out[i] = segment(b);   // a part of a concatenation: its slice of the concatenation's storage
                outT[i] = b.dtype();
            }
            KernelInterpreter.run(k, new KernelInterpreter.Bound(in, inT, out, outT), env);
        }

        int rank() { return rank; }
        HostWorld world() { return world; }
        Transport transport() { return exe.transport; }
        HostExecutable executable() { return exe; }
        Map<String, Long> env() { return env; }

        void barrier(String group, String where) {
            if (!world.members(group, rank).isEmpty()) world.barrier(group, rank).await(rank, where);
        }

        long bytes(PlanBuffer b) { return numel(b) * b.dtype().byteSize(); }

        long numel(PlanBuffer b) { return b.shape().symNumel().eval(env); }

        /** The memory of a buffer (a view starts at its offset inside its storage). */
        MemorySegment segment(PlanBuffer b) {
            MemorySegment base = storage[b.storage().id()];
            return b.isView() ? base.asSlice(b.offset().eval(env) * b.dtype().byteSize()) : base;
        }

        /** A peer's memory for a symmetric buffer: the same pool offset on rank {@code peer}. */
        MemorySegment peer(int peer, PlanBuffer b) {
            if (!b.isSymmetric()) throw new IllegalStateException(b.name() + " is not in symmetric memory");
            return exe.placed(peer, b.storage());
        }

        /** An output as a view of this call's memory, valid until the next call. */
        private DeviceArray readOut(String name, PlanBuffer b) {
            long call = this.call;
            HostExecutable exe = this.exe;
            return DeviceArray.view(b.dtype(), b.shape().sizes(env), KernelInterpreter.eval(b.strides(), env), b.offset().eval(env),
                    HostMemory.borrowed(storage[b.storage().id()], exe), () -> exe.expired(call),
                    "output '" + name + "' of plan '" + plan.name() + "'" + (exe.world > 1 ? " rank " + rank : "") + ", call " + call);
        }
    }
}
