package dev.gatun.cuda;

import java.lang.foreign.MemorySegment;

/**
 * A symmetric NCCL window ({@code ncclCommWindowRegister} with {@code NCCL_WIN_COLL_SYMMETRIC}, NCCL 2.27 or newer):
 * device memory that every rank of a communicator registered together, at the same size, so that collectives whose
 * send and receive buffers lie in it (at the same offset on every rank) may run NCCL's low-latency symmetric kernels.
 *
 * <p>Why a resource of its own: registration and deregistration are collective calls, and the memory under a window
 * must outlive it. {@link NcclComm#allocateWindow} makes a window that owns its memory ({@code ncclMemAlloc}); closing
 * it deregisters and then frees, in that order, and a failed registration frees the memory before the error reaches
 * the caller. {@link NcclComm#registerWindow} registers memory the caller owns ({@link Nccl#memAlloc}, or cuMem (VMM)
 * memory with exportable handles); the caller closes the window before freeing it. Closing is idempotent and
 * thread-safe, and the window is a child of its device, closed (before its communicator, which was made earlier)
 * when the device closes. After the communicator closed, NCCL has already released its windows: closing then only
 * frees owned memory.
 *
 * <p>NCCL may <em>decline</em>: {@code ncclCommWindowRegister} returns success and no window where symmetric memory
 * is unsupported or switched off ({@code NCCL_WIN_ENABLE=0}, no cuMem). Then {@link #isSymmetric()} is false and
 * collectives on the memory run NCCL's ordinary kernels; callers that measure say so rather than report such a run as
 * the symmetric kernels'.
 */
public final class NcclWindow extends Resource {
    /** {@code NCCL_WIN_COLL_SYMMETRIC}: the window may be used by symmetric collective kernels. */
    public static final int COLL_SYMMETRIC = 0x01;

    /** What a window needs of its communicator: {@link NcclComm} is one; tests pass a fake. */
    interface Owner {
        /** The raw {@code ncclComm_t}. */
        MemorySegment commHandle();

        boolean isClosed();
    }

    private final Owner comm;
    private final MemorySegment handle;
    private final long address;
    private final long bytes;
    private final boolean ownsMemory;
    private final NcclWindowCalls calls;

    private NcclWindow(Device device, Owner comm, MemorySegment handle, long address, long bytes, boolean ownsMemory,
                       NcclWindowCalls calls) {
        super(device, device != null);
        this.comm = comm;
        this.handle = handle;
        this.address = address;
        this.bytes = bytes;
        this.ownsMemory = ownsMemory;
        this.calls = calls;
    }

    /** Registers {@code buffer}, which the caller keeps owning (see {@link NcclComm#registerWindow}). */
    static NcclWindow register(Device device, Owner comm, DeviceBuffer buffer, NcclWindowCalls calls) {
        checkCanRegister(comm, "NcclComm.registerWindow");
        if (buffer.isClosed()) {
            throw new IllegalStateException("NcclComm.registerWindow: " + buffer + " is closed");
        }
        if (device != null && buffer.device() != device) {
            throw new IllegalArgumentException("NcclComm.registerWindow: " + buffer + " is on device "
                    + buffer.device().ordinal() + ", the communicator on device " + device.ordinal());
        }
        switch (buffer.kind()) {
            case NCCL, VIEW -> { }
            case CUDA_MALLOC, STREAM_ORDERED, IPC -> throw new IllegalArgumentException("NcclComm.registerWindow: "
                    + buffer + " is " + buffer.kind() + " memory, which NCCL cannot register as a window (it needs "
                    + "memory from ncclMemAlloc or cuMem with exportable handles); use NcclComm.allocateWindow(bytes) "
                    + "or a buffer from Nccl.memAlloc");
        }
        enter(device);
        MemorySegment w = calls.register(comm.commHandle(), buffer.address(), buffer.size(), COLL_SYMMETRIC);
        return adopt(device, comm, w, buffer.address(), buffer.size(), false, calls);
    }

    /** Allocates {@code bytes} with {@code ncclMemAlloc} and registers them; the window owns the memory. */
    static NcclWindow allocate(Device device, Owner comm, long bytes, NcclWindowCalls calls) {
        checkCanRegister(comm, "NcclComm.allocateWindow");
        if (bytes <= 0) {
            throw new IllegalArgumentException("NcclComm.allocateWindow: the size must be positive, not " + bytes);
        }
        enter(device);
        long address = calls.memAlloc(bytes);
        MemorySegment w;
        try {
            w = calls.register(comm.commHandle(), address, bytes, COLL_SYMMETRIC);
        } catch (RuntimeException e) {
            try {
                calls.memFree(address);
            } catch (RuntimeException f) {
                e.addSuppressed(f);
            }
            throw e;
        }
        return adopt(device, comm, w, address, bytes, true, calls);
    }

    /** The new window, a child of its device; where that fails (the device closed meanwhile), nothing is left behind. */
    private static NcclWindow adopt(Device device, Owner comm, MemorySegment w, long address, long bytes, boolean owns,
                                   NcclWindowCalls calls) {
        try {
            return new NcclWindow(device, comm, w, address, bytes, owns, calls);
        } catch (RuntimeException e) {
            try {
                if (!w.equals(MemorySegment.NULL)) calls.deregister(comm.commHandle(), w);
                if (owns) calls.memFree(address);
            } catch (RuntimeException f) {
                e.addSuppressed(f);
            }
            throw e;
        }
    }

    private static void checkCanRegister(Owner comm, String call) {
        if (comm.isClosed()) {
            throw new IllegalStateException(call + ": the communicator is closed");
        }
        if (Nccl.inGroup()) {
            throw new IllegalStateException(call + " inside Nccl.group: NCCL fills in the window only at "
                    + "ncclGroupEnd; register windows outside a group");
        }
    }

    private static void enter(Device device) {
        if (device != null) device.enter();
    }

    /** Whether NCCL made a window ({@code false}: it declined, and collectives here run its ordinary kernels). */
    public boolean isSymmetric() {
        return !handle.equals(MemorySegment.NULL);
    }

    /** The raw {@code ncclWindow_t} ({@link MemorySegment#NULL} where NCCL declined). */
    public MemorySegment handle() {
        ensureOpen();
        return handle;
    }

    /** The window's memory as a view (not freed by closing it); slices of it keep the same offsets on every rank. */
    public DeviceBuffer buffer() {
        ensureOpen();
        return DeviceBuffer.wrap(device, address, bytes);
    }

    public long address() { return address; }

    public long size() { return bytes; }

    /** Whether closing the window frees its memory (made by {@link NcclComm#allocateWindow}). */
    public boolean ownsMemory() { return ownsMemory; }

    @Override
    void release() {
        RuntimeException first = null;
        if (isSymmetric() && !comm.isClosed()) {
            try {
                calls.deregister(comm.commHandle(), handle);
            } catch (RuntimeException e) {
                first = e;
            }
        }
        if (ownsMemory) {
            try {
                calls.memFree(address);
            } catch (RuntimeException e) {
                if (first == null) first = e;
                else first.addSuppressed(e);
            }
        }
        if (first != null) throw first;
    }

    @Override
    public String toString() {
        return "NcclWindow[0x" + Long.toHexString(address) + ", " + bytes + " B, "
                + (isSymmetric() ? "symmetric" : "declined by NCCL") + (ownsMemory ? ", owns its memory" : "") + "]";
    }
}
