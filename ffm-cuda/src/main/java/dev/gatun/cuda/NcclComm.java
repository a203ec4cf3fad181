package dev.gatun.cuda;

import dev.gatun.cuda.ffi.nccl.nccl;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * An NCCL communicator for one rank on one device. Collectives are queued on a stream; byte counts are checked
 * against the buffers. Errors carry {@code ncclGetErrorString} and {@code ncclGetLastError}. Symmetric windows
 * ({@link #allocateWindow}, {@link #registerWindow}; NCCL 2.27 or newer) are {@link NcclWindow}s.
 */
public final class NcclComm extends Resource {
    private final MemorySegment comm;
    private final int rank;
    private final int size;
    private volatile boolean aborted;

    private NcclComm(Device device, MemorySegment comm, int rank, int size) {
        super(device, true);
        this.comm = comm;
        this.rank = rank;
        this.size = size;
    }

    /** {@code ncclCommInitRank}: collective over all {@code nranks} ranks that share {@code id}. */
    public static NcclComm init(Device device, NcclUniqueId id, int nranks, int rank) {
        Nccl.require();
        if (rank < 0 || rank >= nranks) {
            throw new IllegalArgumentException("rank " + rank + " outside [0, " + nranks + ")");
        }
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            MemorySegment idSeg = arena.allocate(NcclUniqueId.SIZE);
            idSeg.copyFrom(MemorySegment.ofArray(id.bytes()));
            Errors.nccl(nccl.ncclCommInitRank(p, nranks, idSeg, rank), "ncclCommInitRank", null);
            return new NcclComm(device, p.get(ValueLayout.ADDRESS, 0), rank, nranks);
        }
    }

    /**
     * {@code ncclCommSplit}: collective over this communicator; ranks with the same {@code color} form a new one,
     * ordered by {@code key}. Returns null for ranks that pass {@link #NO_COLOR}.
     */
    public NcclComm split(int color, int key) {
        ensureOpen();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            check(nccl.ncclCommSplit(comm, color, key, p, MemorySegment.NULL), "ncclCommSplit");
            MemorySegment c = p.get(ValueLayout.ADDRESS, 0);
            if (c.equals(MemorySegment.NULL)) {
                return null;
            }
            MemorySegment out = arena.allocate(ValueLayout.JAVA_INT);
            Errors.nccl(nccl.ncclCommUserRank(c, out), "ncclCommUserRank", c);
            int r = out.get(ValueLayout.JAVA_INT, 0);
            Errors.nccl(nccl.ncclCommCount(c, out), "ncclCommCount", c);
            return new NcclComm(device, c, r, out.get(ValueLayout.JAVA_INT, 0));
        }
    }

    /** The color that leaves a rank out of {@link #split}. */
    public static final int NO_COLOR = nccl.NCCL_SPLIT_NOCOLOR();

    public int rank() { return rank; }

    public int size() { return size; }

    public Device device() { return device; }

    private void check(int rc, String call) {
        Errors.nccl(rc, call, comm);
    }

    private static void fits(DeviceBuffer b, long count, Nccl.DataType t, String what) {
        if (count * t.bytes > b.size()) {
            throw new IllegalArgumentException(what + " holds " + b.size() + " B, needs " + count * t.bytes + " B");
        }
    }

    public void allReduce(DeviceBuffer send, DeviceBuffer recv, long count, Nccl.DataType type, Nccl.RedOp op, Stream stream) {
        ensureOpen();
        fits(send, count, type, "send buffer");
        fits(recv, count, type, "receive buffer");
        device.enter();
        check(nccl.ncclAllReduce(send.pointer(), recv.pointer(), count, type.code, op.code, comm, Stream.handleOf(stream)),
                "ncclAllReduce");
    }

    /** Each rank receives {@code recvCount} reduced elements; send holds {@code size * recvCount}. */
    public void reduceScatter(DeviceBuffer send, DeviceBuffer recv, long recvCount, Nccl.DataType type, Nccl.RedOp op,
                              Stream stream) {
        ensureOpen();
        fits(send, recvCount * size, type, "send buffer");
        fits(recv, recvCount, type, "receive buffer");
        device.enter();
        check(nccl.ncclReduceScatter(send.pointer(), recv.pointer(), recvCount, type.code, op.code, comm,
                Stream.handleOf(stream)), "ncclReduceScatter");
    }

    /** Each rank sends {@code sendCount} elements; recv holds {@code size * sendCount}. */
    public void allGather(DeviceBuffer send, DeviceBuffer recv, long sendCount, Nccl.DataType type, Stream stream) {
        ensureOpen();
        fits(send, sendCount, type, "send buffer");
        fits(recv, sendCount * size, type, "receive buffer");
        device.enter();
        check(nccl.ncclAllGather(send.pointer(), recv.pointer(), sendCount, type.code, comm, Stream.handleOf(stream)),
                "ncclAllGather");
    }

    public void broadcast(DeviceBuffer send, DeviceBuffer recv, long count, Nccl.DataType type, int root, Stream stream) {
        ensureOpen();
        fits(recv, count, type, "receive buffer");
        device.enter();
        check(nccl.ncclBroadcast(send.pointer(), recv.pointer(), count, type.code, root, comm, Stream.handleOf(stream)),
                "ncclBroadcast");
    }

    public void send(DeviceBuffer buf, long count, Nccl.DataType type, int peer, Stream stream) {
        ensureOpen();
        fits(buf, count, type, "send buffer");
        device.enter();
        check(nccl.ncclSend(buf.pointer(), count, type.code, peer, comm, Stream.handleOf(stream)), "ncclSend");
    }

    public void recv(DeviceBuffer buf, long count, Nccl.DataType type, int peer, Stream stream) {
        ensureOpen();
        fits(buf, count, type, "receive buffer");
        device.enter();
        check(nccl.ncclRecv(buf.pointer(), count, type.code, peer, comm, Stream.handleOf(stream)), "ncclRecv");
    }

    /**
     * Registers {@code buffer} as a symmetric window ({@code ncclCommWindowRegister} with
     * {@code NCCL_WIN_COLL_SYMMETRIC}, NCCL 2.27 or newer). Collective: every rank calls it, outside any
     * {@link Nccl#group}, with a buffer of the same size. The buffer must come from {@link Nccl#memAlloc} or be cuMem
     * (VMM) memory with exportable handles (a view of it); cudaMalloc'd memory is refused. The caller keeps owning the
     * buffer and closes the window first. See {@link NcclWindow}.
     */
    public NcclWindow registerWindow(DeviceBuffer buffer) {
        ensureOpen();
        return NcclWindow.register(device, asOwner, buffer, RealNcclWindowCalls.SYSTEM);
    }

    /**
     * Allocates {@code bytes} with {@code ncclMemAlloc} on this communicator's device and registers them as a symmetric
     * window that owns them (closing it deregisters, then frees). Collective like {@link #registerWindow}.
     */
    public NcclWindow allocateWindow(long bytes) {
        ensureOpen();
        return NcclWindow.allocate(device, asOwner, bytes, RealNcclWindowCalls.SYSTEM);
    }

    /** This communicator as its windows see it. */
    private final NcclWindow.Owner asOwner = new NcclWindow.Owner() {
        @Override public MemorySegment commHandle() { return NcclComm.this.commHandle(); }
        @Override public boolean isClosed() { return NcclComm.this.isClosed(); }
    };

    /** The raw {@code ncclComm_t}, for calls Gatun does not bind. */
    public MemorySegment commHandle() {
        ensureOpen();
        return comm;
    }

    /** The asynchronous error state ({@code ncclCommGetAsyncError}); 0 means none. */
    public int asyncError() {
        ensureOpen();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment e = arena.allocate(ValueLayout.JAVA_INT);
            check(nccl.ncclCommGetAsyncError(comm, e), "ncclCommGetAsyncError");
            return e.get(ValueLayout.JAVA_INT, 0);
        }
    }

    /** Throws {@link NcclException} where an asynchronous error is pending. */
    public void checkAsyncError() {
        int e = asyncError();
        if (e != 0 && e != nccl.ncclInProgress()) {
            throw new NcclException("ncclCommGetAsyncError", e, Errors.cString(nccl.ncclGetErrorString(e)),
                    Errors.cString(nccl.ncclGetLastError(comm)));
        }
    }

    /** Aborts outstanding operations and frees the communicator ({@code ncclCommAbort}); close is then a no-op. */
    public void abort() {
        if (!isClosed()) {
            aborted = true;
            close();
        }
    }

    @Override
    void release() {
        if (aborted) {
            Errors.nccl(nccl.ncclCommAbort(comm), "ncclCommAbort", null);
        } else {
            // finalize (collective: flushes outstanding work) before the local destroy, as NCCL recommends
            Errors.nccl(nccl.ncclCommFinalize(comm), "ncclCommFinalize", null);
            Errors.nccl(nccl.ncclCommDestroy(comm), "ncclCommDestroy", null);
        }
    }
}
