package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Nccl;
import dev.gatun.cuda.NcclComm;
import dev.gatun.cuda.NcclUniqueId;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.CollectiveKind;
import dev.gatun.ir.graph.ProcessGroup;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.ir.Algorithm;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.distributed.Fingerprints;
import dev.gatun.runtime.distributed.Rendezvous;

import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * One rank's share of a distributed plan: the rendezvous, the plan-fingerprint check, the symmetric heap,
 * the symmetric collective kernels and NCCL communicators (one per group that needs NCCL).
 */
final class Distributed implements AutoCloseable {
    /** Sessions made per rendezvous: every rank makes them in the same order, so the count names one session everywhere. */
    private static final Map<Rendezvous, AtomicInteger> SESSIONS = java.util.Collections.synchronizedMap(new java.util.WeakHashMap<>());

    final int rank, world;
    private final Rendezvous rendezvous;
    private final dev.gatun.runtime.ExecutionOptions.Cuda settings;
    private final Device device;
    private final Map<String, List<Integer>> members = new HashMap<>();
    private final Map<String, List<List<Integer>>> slices = new HashMap<>();
    private final SymmetricHeap heap;
    private final Map<String, NcclComm> comms = new HashMap<>();
    private final Map<String, Kernel> kernels = new HashMap<>();
    private final int blocks;
    /** The most ranks that share one GPU in this world (1 unless ranksPerGpu asked for sharing). */
    private final int colocated;
    private final long timeoutNanos;
    /** This session's keys in the rendezvous: the same on every rank. */
    private final String prefix;

    Distributed(Plan plan, Device device, Stream stream, Map<String, DeviceBuffer> localPools, Map<String, SymmetricHeap.VmmBuffer> vmmPools,
                dev.gatun.runtime.CompileOptions options) {
        Duration timeout = options.timeout();
        this.rendezvous = options.world().rendezvous();
        this.settings = options.execution().cuda();
        this.device = device;
        this.rank = rendezvous.rank();
        this.world = rendezvous.worldSize();
        if (world != plan.worldSize())
            throw new GatunRuntimeException("plan '" + plan.name() + "' is for a world of " + plan.worldSize() + " but this process is rank "
                    + rank + " of " + world);
        this.timeoutNanos = timeout.toNanos();
        // every rank compiles sessions in the same order, so the counter names the same session everywhere
        this.prefix = "session" + SESSIONS.computeIfAbsent(rendezvous, r -> new AtomicInteger()).incrementAndGet() + "/"
                + plan.fingerprint().substring(0, 16);
        Fingerprints.check(rendezvous, plan.name(), plan.fingerprint(), timeout);
        // each group as this rank sees it: the ranks of its own slice (a mesh axis has several), empty outside the group
        for (ProcessGroup g : plan.groups().values()) {
            members.put(g.name(), g.members(world, rank));
            slices.put(g.name(), g.slices(world));
        }
        var barrierGroups = new java.util.ArrayList<String>();
        var rotating = new java.util.ArrayList<dev.gatun.planner.RotatingSlots>();
        boolean nccl = false;
        for (Step s : plan.steps()) {
            if (s instanceof Step.Barrier b) barrierGroups.add(b.group());
            for (Step.Collective c : s.collectives()) {
                if (c.slots() != null) rotating.add(c.slots());
                if (c.call().algorithm().isSymmetric()) barrierGroups.add(c.call().group());
                // an all_to_all on symmetric memory runs SymmetricAllToAll's kernel; through NCCL, its grouped send and receive
                if (c.call().algorithm() == Algorithm.NCCL) nccl = true;
            }
        }
        // the same grid on every rank, small enough that every block of every rank is resident at once, also where
        // several ranks share one GPU (their spin barriers wait for each other's blocks)
        var sharing = GpuSharing.of(rendezvous, prefix, device, options.ranksPerGpu(), settings.hardwareQueues(), timeout);
        // a barrier-free all-reduce spins on its peers' data as a barrier spins on their signals
        sharing.check(plan.name(), !barrierGroups.isEmpty() || !rotating.isEmpty(), nccl);
        this.colocated = sharing.mostRanksOnOneGpu();
        this.blocks = Math.max(1, Math.min(SymmetricKernels.MAX_BLOCKS, Math.min(128, sharing.fewestMultiprocessors() / colocated)));
        this.heap = new SymmetricHeap(device, stream, rendezvous, prefix);
        heap.open(plan, members, barrierGroups, localPools, vmmPools, timeout);
        // rotating regions start with zero call counters and every slot holding the sentinel (all bits set)
        for (var r : rotating) {
            DeviceBuffer pool = localPools.get(r.pool());
            if (pool == null) continue; // a rank outside the group
            DeviceBuffer.wrap(device, pool.address() + r.offset(), dev.gatun.planner.RotatingSlots.HEADER).memsetAsync(0, stream);
            DeviceBuffer.wrap(device, pool.address() + r.offset() + dev.gatun.planner.RotatingSlots.HEADER, r.bytes() - dev.gatun.planner.RotatingSlots.HEADER)
                    .memsetAsync(0xFF, stream);
        }
        if (!rotating.isEmpty()) stream.synchronize();
        if (!barrierGroups.isEmpty() || !rotating.isEmpty() || colocated > 1) loadKernels(plan.name());
        if (nccl) openComms(plan, prefix, timeout);
        // Loading a module or freeing memory may wait for every kernel of the context. Where ranks share a GPU (and
        // its context), a rank still loading must not wait for a peer's collective that spins until this rank
        // arrives: no rank launches before every rank has loaded everything.
        this.abortFlag = abortFlag(prefix, device.ordinal());
        try {
            rendezvous.barrier(prefix + "/loaded", timeout);
        } catch (RuntimeException e) {
            releaseAbortFlag(prefix);
            throw e;
        }
    }

    private void loadKernels(String planName) {
        // the measuring switches (GATUN_FENCE_SC, GATUN_BARRIER_FREE_BACKOFF_NS): see SymmetricKernels.defines
        String source = SymmetricKernels.defines(settings) + SymmetricKernels.SOURCE + DeviceFault.SOURCE + SymmetricAllToAll.SOURCE;
        var module = CudaExecutable.compile(device, settings.cudaHome(), planName, "gatun_symmetric", source);
        for (String op : List.of("one_shot", "one_shot_multi", "two_shot", "reduce_scatter", "all_gather", "broadcast", "barrier_free"))
            for (String t : List.of("f32", "f16", "bf16")) kernels.put(op + "_" + t, module.kernel(op + "_" + t));
        for (String op : List.of("all_gather", "broadcast"))
            for (String t : List.of("b8", "b16", "b32", "b64")) kernels.put(op + "_" + t, module.kernel(op + "_" + t));
        kernels.put("gatun_barrier", module.kernel("gatun_barrier"));
        kernels.put(SymmetricAllToAll.KERNEL, module.kernel(SymmetricAllToAll.KERNEL));
        kernels.put(SymmetricAllToAll.PARTS_KERNEL, module.kernel(SymmetricAllToAll.PARTS_KERNEL));
        kernels.put("gatun_copy", module.kernel("gatun_copy"));
    }

    private void openComms(Plan plan, String prefix, Duration timeout) {
        byte[] id = rank == 0 ? Nccl.uniqueId().bytes() : null;
        if (rank == 0) rendezvous.set(prefix + "/nccl-id", id);
        else id = rendezvous.get(prefix + "/nccl-id", timeout);
        NcclComm worldComm = NcclComm.init(device, NcclUniqueId.of(id), world, rank);
        comms.put(ProcessGroup.WORLD_NAME, worldComm);
        for (var e : members.entrySet()) {
            if (e.getKey().equals(ProcessGroup.WORLD_NAME)) continue;
            // one communicator per slice (a mesh axis has several): the colour is the slice's index; ranks keep
            // their order inside it, as the slice lists them sorted
            int color = slices.get(e.getKey()).indexOf(e.getValue());
            NcclComm c = worldComm.split(color < 0 ? NcclComm.NO_COLOR : color, e.getValue().indexOf(rank));
            if (c != null) comms.put(e.getKey(), c);
        }
    }

    /**
     * Set by {@link #abort}: a word of pinned host memory every spin of the collectives' barriers reads now and then.
     * The ranks of this session in this process share it (threads mode), so an abort stops all of them.
     */
    private final dev.gatun.cuda.PinnedHostBuffer abortFlag;

    /** A session's abort flag and the ranks of this process using it; the last to close frees it. */
    private record AbortFlag(Device device, dev.gatun.cuda.PinnedHostBuffer buffer, AtomicInteger users) {}

    /** Abort flags by session, for the ranks of one session that are threads of this process. */
    private static final Map<String, AbortFlag> ABORT_FLAGS = new HashMap<>();

    private static synchronized dev.gatun.cuda.PinnedHostBuffer abortFlag(String session, int ordinal) {
        var f = ABORT_FLAGS.computeIfAbsent(session, k -> {
            Device d = Device.open(ordinal);
            var b = d.allocatePinned(4);
            b.segment().set(java.lang.foreign.ValueLayout.JAVA_INT, 0, 0);
            return new AbortFlag(d, b, new AtomicInteger());
        });
        f.users().incrementAndGet();
        return f.buffer();
    }

    private static synchronized void releaseAbortFlag(String session) {
        var f = ABORT_FLAGS.get(session);
        if (f == null || f.users().decrementAndGet() > 0) return;
        ABORT_FLAGS.remove(session);
        f.device().close(); // closes the buffer with it
    }

    /** Makes every barrier of this session's ranks in this process give up: their kernels end early, no trap. */
    void abort() { abortFlag.segment().set(java.lang.foreign.ValueLayout.JAVA_INT, 0, 1); }

    /** Whether this session was aborted, by this rank or another rank of it in this process. */
    boolean wasAborted() { return abortFlag.segment().get(java.lang.foreign.ValueLayout.JAVA_INT, 0) != 0; }

    /** Whether another rank runs on this rank's GPU. */
    boolean sharesGpu() { return colocated > 1; }

    /**
     * A device-to-device copy as a kernel on this rank's stream. Where ranks share a GPU, a copy-engine copy queued
     * behind this rank's spinning collective would hold up a peer's copies queued after it in the engine, and the
     * collective would wait for that peer forever; a kernel waits in this rank's own queue only.
     */
    void copy(long src, long dst, long bytes, Stream stream) {
        int threads = 256;
        long grid = SymmetricKernels.grid(bytes, threads, 16, blocks);
        kernels.get("gatun_copy").launch(new LaunchConfig(Dim3.of((int) grid), Dim3.of(threads), 0, stream), src, dst, bytes);
    }

    /** A host-side meeting of every rank of the world (once per name and session). */
    void meet(String what) { rendezvous.barrier(prefix + "/" + what, java.time.Duration.ofNanos(timeoutNanos)); }

    boolean isMember(String group) { return members.get(group).contains(rank); }

    /**
     * A collective on symmetric memory: {@code offset} is the input slot's offset in {@code pool} (same on every
     * rank); {@code local}, when not 0, is this rank's input in ordinary memory, which the kernel copies into the
     * slot itself before its first barrier (path 2's copy, fused).
     */
    void symmetric(Step.Collective c, String pool, long offset, long out, long local, long n, DType t, Stream stream) {
        var call = c.call();
        var sp = heap.pool(pool);
        var g = sp.group();
        String fn = switch (call.kind()) {
            case ALL_REDUCE -> call.algorithm() == Algorithm.ONE_SHOT ? "one_shot" : "two_shot";
            case REDUCE_SCATTER -> "reduce_scatter";
            case ALL_GATHER -> "all_gather";
            case BROADCAST -> "broadcast";
            case ALL_TO_ALL -> throw new IllegalStateException("all_to_all on symmetric memory runs through symmetricAllToAll");
        } + "_" + (call.kind() == CollectiveKind.ALL_GATHER || call.kind() == CollectiveKind.BROADCAST ? movedAs(t) : suffix(t));
        kernels.get(fn).launch(launchConfig(n, t, stream),
                sp.peerTable().address(), offset, out, local, n, g.groupRank(), g.members().size(),
                call.kind() == CollectiveKind.BROADCAST ? call.root() : opCode(call.reduceOp()), g.padTable().address(), g.epochs().address(), timeoutNanos,
                abortFlag.address());
    }

    /**
     * A barrier-free all-reduce ({@link dev.gatun.planner.RotatingSlots}): pushes {@code in} into this rank's slot of
     * the call's round on every member, reduces its own round into {@code out} as the elements arrive, clears the last
     * call's round. The grid is the one-shot's (the same on every rank: block b takes the same tile everywhere).
     */
    void barrierFree(Step.Collective c, long in, long out, Stream stream) {
        var r = c.slots();
        var sp = heap.pool(r.pool());
        var g = sp.group();
        long roundBytes = r.round(1) - r.round(0);
        kernels.get("barrier_free_" + suffix(r.dtype())).launch(barrierFreeConfig(r.elements(), stream),
                sp.peerTable().address(), r.offset(), out, in, r.elements(), g.groupRank(), g.members().size(), opCode(c.call().reduceOp()),
                dev.gatun.planner.RotatingSlots.HEADER, roundBytes, timeoutNanos, abortFlag.address());
    }

    /**
     * The protocol's arguments of a fused collective launch ({@link CollectiveCodegen}) whose members' slots are in
     * {@code pool}: the peers' pools, this rank and the group's size, the operation, the barrier's pads and epochs (0 for
     * a barrier-free all-reduce), the timeout and abort flag, the rotating regions' header and round bytes (0 for a
     * one-shot).
     */
    List<Object> fusedArgs(Step.Collective first, String pool) {
        var sp = heap.pool(pool);
        var g = sp.group();
        var r = first.slots();
        return List.of(sp.peerTable().address(), g.groupRank(), g.members().size(), opCode(first.call().reduceOp()),
                r == null ? g.padTable().address() : 0L, r == null ? g.epochs().address() : 0L, timeoutNanos, abortFlag.address(),
                r == null ? 0L : dev.gatun.planner.RotatingSlots.HEADER, r == null ? 0L : r.round(1) - r.round(0));
    }

    /** The most blocks a collective launch may use: every block of every rank resident at once. */
    int blocks() { return blocks; }

    /**
     * A barrier-free all-reduce's grid: every element (or 16-byte vector) a thread of {@code barrier_free_tile} takes
     * costs it a round trip per member in turn, so the grid follows the element count, not the bytes: at most
     * {@link SymmetricKernels#BARRIER_FREE_ELEMENTS_PER_THREAD} elements a thread before the cap, the resident one or
     * {@link SymmetricKernels#BARRIER_FREE_MAX_BLOCKS}, whichever is lower (more blocks stalled on two GPUs). Sized by 16-byte
     * vectors as the one-shot is, a bf16 or f16 all-reduce got half the blocks of an f32 one of as many elements (twice
     * the serial waits a thread: bf16 64x64 took 9.91 µs pipelined against f32's 6.79 on H200s).
     */
    static long barrierFreeGrid(long elements, int blocks) {
        return SymmetricKernels.grid(elements, SymmetricKernels.THREADS, SymmetricKernels.BARRIER_FREE_ELEMENTS_PER_THREAD,
                Math.min(blocks, SymmetricKernels.BARRIER_FREE_MAX_BLOCKS));
    }

    private LaunchConfig barrierFreeConfig(long elements, Stream stream) {
        return new LaunchConfig(Dim3.of((int) barrierFreeGrid(elements, blocks)), Dim3.of(SymmetricKernels.THREADS), 0, stream);
    }

    /** One block per 16-byte vector per thread, at most the grid every rank can hold resident. */
    private LaunchConfig launchConfig(long elements, DType t, Stream stream) {
        long grid = SymmetricKernels.grid(elements, SymmetricKernels.THREADS, 16 / t.byteSize(), blocks);
        return new LaunchConfig(Dim3.of((int) grid), Dim3.of(SymmetricKernels.THREADS), 0, stream);
    }

    /** One slot of a batched one-shot all-reduce: the input's offset in the group's pool, the output, elements. */
    record Slot(long offset, long out, long n) {}

    /**
     * Independent one-shot all-reduces of one group, pool, dtype and operation in one launch (at most
     * {@link SymmetricKernels#MULTI_MAX}): two barriers for all of them instead of two each.
     */
    void oneShotBatch(Step.Collective first, String pool, List<Slot> slots, DType t, Stream stream) {
        if (slots.isEmpty() || slots.size() > SymmetricKernels.MULTI_MAX) throw new IllegalStateException("batch of " + slots.size());
        var sp = heap.pool(pool);
        var g = sp.group();
        long most = slots.stream().mapToLong(Slot::n).max().orElse(1);
        var args = new java.util.ArrayList<Object>(List.of(sp.peerTable().address(), slots.size()));
        for (int i = 0; i < SymmetricKernels.MULTI_MAX; i++) {
            Slot s = i < slots.size() ? slots.get(i) : new Slot(0, 0, 0);
            args.addAll(List.of(s.offset(), s.out(), s.n()));
        }
        args.addAll(List.<Object>of(g.groupRank(), g.members().size(), opCode(first.call().reduceOp()), g.padTable().address(), g.epochs().address(), timeoutNanos,
                abortFlag.address()));
        kernels.get("one_shot_multi_" + suffix(t)).launch(launchConfig(most, t, stream), args.toArray());
    }

    /** A barrier among a group's ranks on the device (for plan steps where no collective gives one). */
    void barrier(String group, Stream stream) {
        var g = heap.group(group);
        if (g == null) return;
        kernels.get("gatun_barrier").launch(new LaunchConfig(Dim3.of(1), Dim3.of(32), 0, stream),
                g.padTable().address(), g.groupRank(), g.members().size(), g.epochs().address(), timeoutNanos, abortFlag.address());
    }

    void nccl(Step.Collective c, long in, long out, long n, DType t, Stream stream) {
        var call = c.call();
        NcclComm comm = comms.get(call.group());
        Nccl.DataType type = ncclType(t);
        var send = DeviceBuffer.wrap(device, in, Math.max(1, n * t.byteSize()));
        long outElements = switch (call.kind()) {
            case ALL_GATHER -> n * comm.size();
            case REDUCE_SCATTER -> n / comm.size();
            default -> n;
        };
        var recv = DeviceBuffer.wrap(device, out, Math.max(1, outElements * t.byteSize()));
        switch (call.kind()) {
            case ALL_REDUCE -> comm.allReduce(send, recv, n, type, ncclOp(call.reduceOp()), stream);
            case REDUCE_SCATTER -> comm.reduceScatter(send, recv, outElements, type, ncclOp(call.reduceOp()), stream);
            case ALL_GATHER -> comm.allGather(send, recv, n, type, stream);
            case BROADCAST -> comm.broadcast(send, recv, n, type, call.root(), stream);
            case ALL_TO_ALL -> throw new IllegalStateException("all_to_all runs through allToAll");
        }
    }

    /** Where an all_to_all's operand lies in its communication pool: the pool's name and the offset there (the same on every rank). */
    record PoolSlot(String pool, long offset) {}

    /**
     * An all_to_all on symmetric memory ({@link SymmetricAllToAll}), even or uneven: {@code in} and {@code counts} (null
     * for an even one) the input's and the counts' slots; {@code receive} the result's slot where the senders push into
     * it (an uneven all_to_all's receive buffer), else null and {@code out} this rank's result, which it pulls into.
     * {@code rows} each member's input rows, {@code rowBytes} a row's bytes, {@code capacity} the result's rows;
     * {@code site} where a refused count is recorded (null for an even one). The grid follows the static sizes alone,
     * so it is the same on every rank.
     */
    void symmetricAllToAll(Step.Collective c, PoolSlot in, PoolSlot counts, PoolSlot receive, long out, long rows, long rowBytes, long capacity,
                           DeviceFault.Site site, Stream stream) {
        var g = allToAllGroup(c);
        var part = new AllToAllPart(in, counts, receive, out, rows, rowBytes, capacity);
        var args = new ArrayList<Object>(part.args(heap, g.members().size()));
        args.addAll(List.<Object>of(g.groupRank(), g.members().size(), g.padTable().address(), g.epochs().address(), timeoutNanos, abortFlag.address(),
                site == null ? 0L : site.claim(), site == null ? 0L : site.record(), site == null ? -1 : site.step()));
        kernels.get(SymmetricAllToAll.KERNEL).launch(new LaunchConfig(Dim3.of((int) part.grid(blocks)), Dim3.of(SymmetricKernels.THREADS), 0, stream), args.toArray());
    }

    /**
     * One part of a symmetric all_to_all ({@link #symmetricAllToAll}'s operands): {@code counts} null for an even one,
     * {@code receive} null where this rank pulls into {@code out}.
     */
    record AllToAllPart(PoolSlot in, PoolSlot counts, PoolSlot receive, long out, long rows, long rowBytes, long capacity) {
        /** The kernel's arguments for this part, in {@code a2a_part}'s order. */
        List<Object> args(SymmetricHeap heap, int size) {
            long evenRows = counts == null ? rows / size : 0;
            return List.<Object>of(heap.pool(in.pool()).peerTable().address(), in.offset(),
                    counts == null ? 0L : heap.pool(counts.pool()).peerTable().address(), counts == null ? -1L : counts.offset(),
                    receive == null ? 0L : heap.pool(receive.pool()).peerTable().address(), receive == null ? 0L : receive.offset(), receive == null ? out : 0L,
                    rows, rowBytes, capacity, evenRows);
        }

        /** An unused part of the joined kernel: zeros (never read). */
        static List<Object> none() { return List.<Object>of(0L, 0L, 0L, -1L, 0L, 0L, 0L, 0L, 0L, 0L, 0L); }

        /** The grid its bytes take, from the static sizes alone: the same on every rank. */
        long grid(int blocks) { return SymmetricKernels.grid(Math.max(rows, capacity) * rowBytes, SymmetricKernels.THREADS, 16, blocks); }
    }

    private SymmetricHeap.Group allToAllGroup(Step.Collective c) {
        var g = heap.group(c.call().group());
        int size = g.members().size();
        if (size > SymmetricAllToAll.MAX_WORLD)
            throw new GatunRuntimeException(c.format().strip() + ": a symmetric-memory all_to_all takes at most " + SymmetricAllToAll.MAX_WORLD
                    + " members, group \"" + c.call().group() + "\" has " + size + "; compile with symmetricMemory(false) to run it through NCCL");
        return g;
    }

    /**
     * Joined all_to_alls on symmetric memory ({@code Step.JoinedAllToAll}): one launch of {@link SymmetricAllToAll}'s
     * joined kernel, one barrier pair around every part's moves; {@code site} where a refused count is recorded (null
     * where every part is even). The grid is the largest part's, the same on every rank.
     */
    void symmetricAllToAlls(Step.JoinedAllToAll j, List<AllToAllPart> parts, DeviceFault.Site site, Stream stream) {
        if (parts.size() > SymmetricAllToAll.MAX_PARTS)
            throw new IllegalStateException(j.name() + ": " + parts.size() + " parts, the joined kernel takes at most " + SymmetricAllToAll.MAX_PARTS);
        var g = allToAllGroup(j.first());
        var args = new ArrayList<Object>();
        args.add(parts.size());
        long grid = 1;
        for (int i = 0; i < SymmetricAllToAll.MAX_PARTS; i++) {
            args.addAll(i < parts.size() ? parts.get(i).args(heap, g.members().size()) : AllToAllPart.none());
            if (i < parts.size()) grid = Math.max(grid, parts.get(i).grid(blocks));
        }
        args.addAll(List.<Object>of(g.groupRank(), g.members().size(), g.padTable().address(), g.epochs().address(), timeoutNanos, abortFlag.address(),
                site == null ? 0L : site.claim(), site == null ? 0L : site.record(), site == null ? -1 : site.step()));
        kernels.get(SymmetricAllToAll.PARTS_KERNEL).launch(new LaunchConfig(Dim3.of((int) grid), Dim3.of(SymmetricKernels.THREADS), 0, stream), args.toArray());
    }

    /**
     * An even all_to_all of {@code n} elements through NCCL: part j of {@code in} sent to the group's rank j, part i of
     * {@code out} received from rank i, as NCCL's grouped send and receive (one group call, so no pair waits for
     * another). (On symmetric memory it runs {@link #symmetricAllToAll} instead.)
     */
    void allToAll(Step.Collective c, long in, long out, long n, DType t, Stream stream) {
        var call = c.call();
        if (call.algorithm().isSymmetric() || c.uneven())
            throw new IllegalStateException(c.format() + ": only an even all_to_all through NCCL runs through NCCL's send and receive");
        NcclComm comm = comms.get(call.group());
        Nccl.DataType type = ncclType(t);
        int size = comm.size();
        long part = n / size, partBytes = part * t.byteSize();
        if (partBytes > 0)
            Nccl.group(() -> {
                for (int peer = 0; peer < size; peer++) {
                    comm.send(DeviceBuffer.wrap(device, in + peer * partBytes, partBytes), part, type, peer, stream);
                    comm.recv(DeviceBuffer.wrap(device, out + peer * partBytes, partBytes), part, type, peer, stream);
                }
            });
    }

    /** Collectives that only move data use the dtype's own kernel where there is one, else raw elements of its width. */
    static String movedAs(DType t) {
        return switch (t) {
            case FLOAT32, FLOAT16, BFLOAT16 -> suffix(t);
            default -> "b" + 8 * t.byteSize();
        };
    }

    static String suffix(DType t) {
        return switch (t) {
            case FLOAT32 -> "f32";
            case FLOAT16 -> "f16";
            case BFLOAT16 -> "bf16";
            default -> throw new IllegalStateException("no symmetric kernel for " + t);
        };
    }

    static int opCode(ReduceOp op) {
        if (op == null) return 0;
        return switch (op) { case SUM -> 0; case AVG -> 1; case MAX -> 2; case MIN -> 3; };
    }

    static Nccl.RedOp ncclOp(ReduceOp op) {
        return switch (op) { case SUM -> Nccl.RedOp.SUM; case AVG -> Nccl.RedOp.AVG; case MAX -> Nccl.RedOp.MAX; case MIN -> Nccl.RedOp.MIN; };
    }

    static Nccl.DataType ncclType(DType t) {
        return switch (t) {
            case FLOAT32 -> Nccl.DataType.FLOAT32;
            case FLOAT16 -> Nccl.DataType.FLOAT16;
            case BFLOAT16 -> Nccl.DataType.BFLOAT16;
            case FLOAT64 -> Nccl.DataType.FLOAT64;
            case INT8, BOOL -> Nccl.DataType.INT8;
            case INT32 -> Nccl.DataType.INT32;
            case INT64 -> Nccl.DataType.INT64;
        };
    }

    /** NCCL communicators, then the symmetric heap (which waits for every rank before freeing local memory). */
    @Override public void close() {
        for (NcclComm c : comms.values()) c.close();
        heap.close();
        releaseAbortFlag(prefix);
    }
}
