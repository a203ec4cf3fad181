package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.Layout;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.ir.lower.Buffer;
import dev.gatun.ir.lower.ConstantBuffer;
import dev.gatun.ir.lower.InputBuffer;
import dev.gatun.ir.lower.ViewBuffer;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Pool;
import dev.gatun.planner.Step;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.Elements;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.RankFailedException;
import dev.gatun.runtime.spi.Executable;

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
    /** pools[rank] : pool name -> memory */
    private final List<Map<String, MemorySegment>> pools = new ArrayList<>();
    /** Each group's slices: the sets of ranks that run its collectives together. */
    private final Map<String, List<List<Integer>>> groups = new HashMap<>();
    private final ExecutorService threads;
    private final AtomicBoolean closed = new AtomicBoolean();
    private final AtomicLong calls = new AtomicLong();

    HostExecutable(Plan plan, CompileOptions options) {
        this.plan = plan;
        this.options = options;
        this.world = plan.worldSize();
        for (ProcessGroup g : plan.lowered().graph().groups().values()) groups.put(g.name(), g.slices(world));
        for (int r = 0; r < world; r++) {
            var m = new LinkedHashMap<String, MemorySegment>();
            for (Pool p : plan.pools()) m.put(p.name(), allocate(p, r));
            pools.add(m);
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
        for (Buffer b : plan.lowered().buffers()) {
            if (!(b instanceof ConstantBuffer c)) continue;
            MemorySegment seg = placed(rank, b.name());
            double[] v = c.values();
            for (int i = 0; i < v.length; i++) Elements.set(seg, b.type().dtype(), i, v[i]);
        }
    }

    /** A placed buffer's memory on a rank. */
    MemorySegment placed(int rank, String buffer) {
        Plan.Placement p = plan.placement(buffer);
        return pools.get(rank).get(p.pool()).asSlice(p.offset(), p.bytes());
    }

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

    /** One rank's execution of one call. */
    static final class RankRun {
        private final HostExecutable exe;
        private final HostWorld world;
        private final int rank;
        private final Map<String, NDArray> inputs;
        private final Map<String, MemorySegment> storage = new HashMap<>();
        private final Map<String, Long> env = new HashMap<>();

        RankRun(HostExecutable exe, HostWorld world, int rank, Map<String, NDArray> inputs) {
            this.exe = exe;
            this.world = world;
            this.rank = rank;
            this.inputs = inputs;
        }

        Map<String, NDArray> run() {
            Plan plan = exe.plan;
            for (InputBuffer in : plan.lowered().inputs().values()) {
                NDArray a = inputs.get(in.inputName());
                long[] shape = a.shape();
                for (int d = 0; d < shape.length; d++)
                    if (!in.type().shape().dim(d).isStatic()) env.put(in.type().shape().dim(d).toString(), shape[d]);
                if (plan.placement(in.name()) == null) storage.put(in.name(), a.segment());
            }
            for (var p : plan.placements().values()) storage.put(p.buffer(), exe.placed(rank, p.buffer()));
            try (Arena dynamic = Arena.ofConfined()) {
                List<Step> steps = plan.steps();
                for (int i = 0; i < steps.size(); i++) {
                    world.maybeDelay(rank);
                    world.checkFailed(rank);
                    execute(i, steps.get(i), dynamic);
                }
                var out = new LinkedHashMap<String, NDArray>();
                plan.outputs().forEach((name, buf) -> out.put(name, readOut(plan.buffer(buf))));
                return out;
            }
        }

        private void execute(int index, Step s, Arena dynamic) {
            switch (s) {
                case Step.AllocPool a -> { }
                case Step.Place p -> { }
                case Step.Release r -> { }
                case Step.AllocDynamic d -> storage.put(d.buffer(), dynamic.allocate(Math.max(1, bytes(exe.plan.buffer(d.buffer()))), 16));
                case Step.CopyIn c -> MemorySegment.copy(inputs.get(c.input()).segment(), 0, storage.get(c.buffer()), 0, bytes(exe.plan.buffer(c.buffer())));
                case Step.Launch l -> launch(l.kernel());
                case Step.Collective c -> HostCollectives.run(this, index, c);
                case Step.Matmul m -> HostMatmul.run(segment(m.a()), exe.plan.buffer(m.a()), segment(m.b()), exe.plan.buffer(m.b()),
                        segment(m.output()), exe.plan.buffer(m.output()), env);
                case Step.CallUserOp u -> HostUserOps.run(this, u);
                case Step.Barrier b -> barrier(b.group(), "barrier(\"" + b.group() + "\")");
            }
        }

        private void launch(Kernel k) {
            int n = k.inputs().size(), m = k.stores().size();
            var in = new MemorySegment[n];
            var inT = new DType[n];
            for (int i = 0; i < n; i++) {
                in[i] = storage.get(k.inputs().get(i));
                inT[i] = exe.plan.buffer(k.inputs().get(i)).type().dtype();
            }
            var out = new MemorySegment[m];
            var outT = new DType[m];
            for (int i = 0; i < m; i++) {
                String name = k.stores().get(i).buffer();
                out[i] = storage.get(name);
                outT[i] = exe.plan.buffer(name).type().dtype();
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

        long bytes(Buffer b) { return b.type().shape().symNumel().eval(env) * b.type().dtype().byteSize(); }

        long numel(Buffer b) { return b.type().shape().symNumel().eval(env); }

        /** The memory of a buffer (a view starts at its offset inside its storage). */
        MemorySegment segment(String name) {
            Buffer b = exe.plan.buffer(name);
            MemorySegment base = storage.get(b.storage().name());
            if (b instanceof ViewBuffer v) {
                long off = v.layout().offset().eval(env) * b.type().dtype().byteSize();
                return base.asSlice(off);
            }
            return base;
        }

        /** A peer's memory for a symmetric buffer: the same pool offset on rank {@code peer}. */
        MemorySegment peer(int peer, String name) {
            Buffer b = exe.plan.buffer(name).storage();
            if (!b.isSymmetric()) throw new IllegalStateException(name + " is not in symmetric memory");
            return exe.placed(peer, b.name());
        }

        /** An output as a fresh row-major array (views are read through their strides). */
        private NDArray readOut(Buffer b) {
            Layout.Fixed l = b.layout().fix();
            return NDArray.gather(storage.get(b.storage().name()), b.type().dtype(), b.type().shape().sizes(env), l.offset().eval(env),
                    KernelInterpreter.eval(l.strides(), env));
        }
    }
}
