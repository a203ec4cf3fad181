package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.CompileOptions;
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
 */
final class HostExecutable implements Executable {
    private final Plan plan;
    private final CompileOptions options;
    private final int world;
    private final Arena arena = Arena.ofShared();
    /** placed[rank][buffer id]: the slot of every placed storage on every rank. */
    private final MemorySegment[][] placed;
    /** Each group's slices: the sets of ranks that run its collectives together. */
    private final Map<String, List<List<Integer>>> groups = new HashMap<>();
    private final ExecutorService threads;
    private final AtomicBoolean closed = new AtomicBoolean();
    private final AtomicLong calls = new AtomicLong();

    HostExecutable(Plan plan, CompileOptions options) {
        this.plan = plan;
        this.options = options;
        this.world = plan.worldSize();
        for (ProcessGroup g : plan.groups().values()) groups.put(g.name(), g.slices(world));
        this.placed = new MemorySegment[world][plan.buffers().size()];
        for (int r = 0; r < world; r++) {
            var m = new LinkedHashMap<String, MemorySegment>();
            for (Pool p : plan.pools()) m.put(p.name(), allocate(p, r));
            for (PlanBuffer b : plan.buffers()) {
                var at = b.placement();
                if (at != null) placed[r][b.id()] = m.get(at.pool()).asSlice(at.offset(), at.bytes());
            }
            writeConstants(r);
        }
        threads = Executors.newFixedThreadPool(world, Thread.ofPlatform().name("gatun-host-rank-", 0).daemon(true).factory());
        // a session dropped without close() still gives its rank threads and memory back once it is unreachable
        this.cleanup = CLEANER.register(this, new Release(threads, arena));
    }

    private static final java.lang.ref.Cleaner CLEANER = java.lang.ref.Cleaner.create(Thread.ofPlatform().name("gatun-host-cleaner").daemon(true).factory());
    private final java.lang.ref.Cleaner.Cleanable cleanup;

    /** What closing releases; holds no reference to the executable, so the executable can become unreachable. */
    private record Release(ExecutorService threads, Arena arena) implements Runnable {
        @Override public void run() {
            threads.shutdownNow();
            arena.close();
        }
    }

    /** A pool of one simulated rank; every rank's pools live in this JVM, so a pool too large for it is named, not an OutOfMemoryError. */
    private MemorySegment allocate(Pool p, int rank) {
        try {
            return arena.allocate(Math.max(1, p.allocationBytes()), 128);
        } catch (OutOfMemoryError | IllegalArgumentException e) {
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

    /** A placed storage's memory on a rank. */
    MemorySegment placed(int rank, PlanBuffer storage) { return placed[rank][storage.id()]; }

    Plan plan() { return plan; }

    @Override public List<Integer> ranks() { return java.util.stream.IntStream.range(0, world).boxed().toList(); }

    @Override public List<Map<String, NDArray>> run(List<Map<String, NDArray>> inputsPerRank) {
        if (closed.get()) throw new GatunRuntimeException("plan '" + plan.name() + "' was released");
        if (unusable != null) throw new GatunRuntimeException("plan '" + plan.name() + "' cannot run again: " + unusable + "; close the session and compile a new one");
        var hw = new HostWorld(groups, world, options.timeout().toNanos(), options.delaySeed(), calls.getAndIncrement());
        current = hw;
        if (aborted) hw.fail(-1, new HostWorld.Stopped("aborted"));
        var futures = new ArrayList<Future<Map<String, NDArray>>>();
        var finished = new java.util.concurrent.atomic.AtomicIntegerArray(world);
        for (int r = 0; r < world; r++) {
            int rank = r;
            futures.add(threads.submit(() -> {
                try {
                    return new RankRun(this, hw, rank, inputsPerRank.get(rank)).run();
                } catch (Throwable t) {
                    hw.fail(rank, t);
                    throw t;
                } finally {
                    finished.set(rank, 1);
                }
            }));
        }
        var out = new ArrayList<Map<String, NDArray>>();
        var stuck = new ArrayList<Integer>();
        long stopBy = 0;
        for (int r = 0; r < world; r++) {
            Future<Map<String, NDArray>> f = futures.get(r);
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
                    stuck.add(r);
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
        if (!stuck.isEmpty()) {
            long until = System.nanoTime() + STOP_GRACE_NANOS;
            while (stuck.stream().anyMatch(r -> finished.get(r) == 0) && System.nanoTime() - until < 0) LockSupport.parkNanos(5_000_000);
            var busy = stuck.stream().filter(r -> finished.get(r) == 0).toList();
            if (!busy.isEmpty())
                unusable = "ranks " + busy + " of an earlier call never stopped (busy in a host user op that ignores interrupts?), so their threads are"
                        + " not free for another call";
        }
        HostWorld.Failure f = hw.failure();
        if (aborted) throw new GatunRuntimeException("graph '" + plan.name() + "': the call was aborted (Session.abort) and its ranks stopped");
        if (f != null) throw failed(f, stuck);
        return out;
    }

    /** The call in flight (or the last one). */
    private volatile HostWorld current;
    private volatile boolean aborted;

    /** Fails the call in flight: every rank stops at its next barrier or wait, and waiting ranks wake at once. */
    @Override public void abort() {
        aborted = true;
        unusable = "it was aborted";
        HostWorld hw = current;
        if (hw != null) hw.fail(-1, new HostWorld.Stopped("the call was aborted"));
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
        return new RankFailedException(f.rank(), "graph '" + plan.name() + "': rank " + f.rank() + " failed: " + c.getMessage()
                + (world > 1 ? "; the other ranks stopped" : "") + left, c);
    }

    @Override public void close() {
        if (closed.compareAndSet(false, true)) cleanup.clean();
    }

    /** For tests: called with every step each rank runs, in the order it runs them. */
    volatile java.util.function.BiConsumer<Integer, Step> trace;

    /** One rank's execution of one call: the plan's steps through the shared {@link StepLoop}. */
    static final class RankRun implements StepLoop.Steps {
        private final HostExecutable exe;
        private final Plan plan;
        private final HostWorld world;
        private final int rank;
        private final Map<String, NDArray> inputs;
        /** storage[buffer id]: the memory of every storage this call has. */
        private final MemorySegment[] storage;
        private final Map<String, Long> env = new HashMap<>();
        private Arena dynamic;

        RankRun(HostExecutable exe, HostWorld world, int rank, Map<String, NDArray> inputs) {
            this.exe = exe;
            this.plan = exe.plan;
            this.world = world;
            this.rank = rank;
            this.inputs = inputs;
            this.storage = exe.placed[rank].clone();
        }

        Map<String, NDArray> run() {
            for (PlanBuffer in : plan.inputs()) {
                NDArray a = inputs.get(in.input());
                long[] shape = a.shape();
                for (int d = 0; d < shape.length; d++)
                    if (!in.shape().dim(d).isStatic()) env.put(in.shape().dim(d).toString(), shape[d]);
                if (in.placement() == null) storage[in.id()] = a.segment();
            }
            try (Arena arena = Arena.ofConfined()) {
                dynamic = arena;
                StepLoop.run(plan, this, false);
                var out = new LinkedHashMap<String, NDArray>();
                plan.outputs().forEach((name, buf) -> out.put(name, readOut(buf)));
                return out;
            }
        }

        @Override public void before(int index, Step step) {
            var t = exe.trace;
            if (t != null) t.accept(rank, step);
            world.maybeDelay(rank);
            world.checkFailed(rank);
        }

        @Override public void allocDynamic(Step.AllocDynamic d) { storage[d.buffer().id()] = dynamic.allocate(Math.max(1, bytes(d.buffer())), 16); }

        @Override public void copyIn(Step.CopyIn c) { copyIn(c.buffer()); }

        private void copyIn(PlanBuffer b) { MemorySegment.copy(inputs.get(b.input()).segment(), 0, storage[b.id()], 0, bytes(b)); }

        @Override public void launch(Step.Launch l) { launch(l.kernel()); }

        @Override public void collective(int index, Step.Collective c) {
            if (c.copiesIn()) copyIn(c.input());
            HostCollectives.run(this, index, c);
        }

        @Override public void batch(int index, Step.CollectiveBatch b) { HostCollectives.batch(this, b); }

        @Override public void matmul(Step.Matmul m) {
            HostMatmul.run(segment(m.a()), m.a(), segment(m.b()), m.b(), segment(m.output()), m.output(), env);
        }

        @Override public void userOp(Step.CallUserOp u) { HostUserOps.run(this, u); }

        @Override public void barrier(Step.Barrier b) { barrier(b.group(), "barrier(\"" + b.group() + "\")"); }

        private void launch(Kernel k) {
            int n = k.inputs().size(), m = k.stores().size();
            var in = new MemorySegment[n];
            var inT = new DType[n];
            for (int i = 0; i < n; i++) {
                in[i] = storage[k.inputs().get(i).id()];
                inT[i] = k.inputs().get(i).dtype();
            }
            var out = new MemorySegment[m];
            var outT = new DType[m];
            for (int i = 0; i < m; i++) {
                PlanBuffer b = k.stores().get(i).buffer();
                out[i] = storage[b.id()];
                outT[i] = b.dtype();
            }
            KernelInterpreter.run(k, new KernelInterpreter.Bound(in, inT, out, outT), env);
        }

        int rank() { return rank; }
        HostWorld world() { return world; }
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

        /** An output as a fresh row-major array (views are read through their strides). */
        private NDArray readOut(PlanBuffer b) {
            return NDArray.gather(storage[b.storage().id()], b.dtype(), b.shape().sizes(env), b.offset().eval(env),
                    KernelInterpreter.eval(b.strides(), env));
        }
    }
}
