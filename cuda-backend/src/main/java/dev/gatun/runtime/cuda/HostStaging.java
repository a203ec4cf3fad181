package dev.gatun.runtime.cuda;

import dev.gatun.cuda.CudaException;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Event;
import dev.gatun.cuda.PinnedHostBuffer;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

/**
 * An executable's page-locked host memory, and the copies between host memory and its GPU that go through it. A copy
 * from pageable memory is staged by the driver in small pieces; one bulk copy into page-locked memory and then one DMA
 * runs at the copy engine's full speed. So host arrays that are not page-locked themselves go through staging of this
 * class: inputs by buffer id (made on first use), and one buffer for reads, grown as needed. Host arrays made by
 * {@code allocateHost} are page-locked already and copied directly.
 *
 * <p>Where ranks share a GPU no page-locked memory is made once the ranks may spin (see
 * {@code CudaExecutable.prepareForSharedGpu}): reads larger than the buffer made before then go through pageable
 * memory, and {@code allocateHost} hands out plain host memory.
 */
final class HostStaging {
    private final Device device;
    private final Stream stream;
    /** Page-locked host arrays ({@link #allocate}); their segments belong to {@code hostArena}, closed before they go. */
    private final List<PinnedHostBuffer> pinned = new ArrayList<>();
    private final Arena hostArena = Arena.ofShared();
    /** Inputs' page-locked staging, by buffer id (made on first use); also the lock of the reads' buffer. */
    private final PinnedHostBuffer[] hostIn;
    /** The reads' page-locked staging, grown as needed. */
    private PinnedHostBuffer hostOut;
    /** Each part's arrival in {@code hostOut} ({@link StagedCopies#out}); made on first need, guarded by {@code hostIn}. */
    private Event[] partRead;
    /** Recorded after a call's copies out of the page-locked staging: the next call's bulk copies into it wait for them. */
    private final Event copiedIn;
    /** Ordinary arrays used again and again, page-locked in place (at most {@link #LOCKED_BYTES}). */
    final HostRegistrations registrations;
    /** The most bytes of ordinary arrays a session keeps page-locked ({@link HostRegistrations}). */
    static final long LOCKED_BYTES = 1L << 30;

    /** Staging for a plan of {@code buffers} buffers, whose copies run on {@code stream}. */
    HostStaging(Device device, Stream stream, int buffers) {
        this.device = device;
        this.stream = stream;
        this.copiedIn = device.createEvent(Event.Flag.DISABLE_TIMING);
        this.hostIn = new PinnedHostBuffer[buffers];
        this.registrations = new HostRegistrations(device, LOCKED_BYTES);
    }

    /** Makes the reads' buffer hold {@code bytes} now (before ranks that share a GPU first meet). */
    void reserveReads(long bytes) {
        hostOut = device.allocatePinned(bytes);
    }

    /**
     * A host array of {@code dtype} and {@code shape}, zeroed: page-locked, or (where ranks share the GPU,
     * {@code plain}) plain host memory.
     */
    NDArray allocate(DType dtype, long[] shape, boolean plain) {
        long n = 1;
        for (long d : shape) n = Math.multiplyExact(n, d);
        long bytes = Math.max(1, Math.multiplyExact(n, dtype.byteSize()));
        if (plain) {
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
     * Device to host on the stream, after the work queued on it; waits for it. {@code sharesGpu}: no page-locked
     * memory may be made now, so a read larger than the reads' buffer goes through pageable memory.
     */
    void read(long src, MemorySegment dst, long bytes, boolean sharesGpu) {
        if (bytes == 0) return;
        if (isPinned(dst)) readDirect(src, dst, bytes);
        else readPageable(src, dst, bytes, sharesGpu);
    }

    /**
     * {@link #read} into a host array: straight into its memory where it is page-locked in place ({@link
     * HostRegistrations}; never where ranks share the GPU, which makes no page-locked memory mid-session).
     */
    void read(long src, NDArray dst, long bytes, boolean sharesGpu) {
        if (bytes == 0) return;
        MemorySegment to = dst.segment();
        if (isPinned(to)) readDirect(src, to, bytes);
        else if (sharesGpu || !registrations.copyDirect(dst, () -> readDirect(src, to, bytes))) readPageable(src, to, bytes, sharesGpu);
    }

    /** Device to host into memory the copy engine reaches (page-locked), waited for. */
    private void readDirect(long src, MemorySegment dst, long bytes) {
        DeviceBuffer.wrap(device, src, bytes).copyToAsync(dst.asSlice(0, bytes), 0, stream);
        stream.synchronize();
    }

    /** Device to host into pageable memory: through the reads' page-locked staging, or as it is where ranks share the GPU. */
    private void readPageable(long src, MemorySegment dst, long bytes, boolean sharesGpu) {
        synchronized (hostIn) {
            if (sharesGpu && (hostOut == null || hostOut.size() < bytes)) {
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
            if (partRead == null) partRead = StagedCopies.events(device);
            StagedCopies.out(device, src, hostOut.segment(), dst, bytes, stream, partRead);
        }
    }

    /**
     * Copies an ordinary host array into {@code dst} on the stream and waits for it, if its memory is page-locked in
     * place ({@link HostRegistrations}); false where it is not (the caller stages it).
     */
    boolean writeDirect(NDArray src, DeviceBuffer dst) {
        return registrations.copyDirect(src, () -> {
            dst.copyFromAsync(src.segment(), 0, stream);
            stream.synchronize(); // the caller may change its array once the call returns
        });
    }

    /** Whether host memory is page-locked memory of this staging ({@link #allocate}). */
    boolean isPinned(MemorySegment seg) {
        if (!seg.isNative()) return false;
        long a = seg.address(), end = a + seg.byteSize();
        synchronized (pinned) {
            for (PinnedHostBuffer b : pinned) if (a >= b.address() && end <= b.address() + b.size()) return true;
        }
        return false;
    }

    /** Copies a host input through its page-locked staging into {@code dst}, queued on the stream ({@link StagedCopies#in}). */
    void stageIn(PlanBuffer in, MemorySegment src, DeviceBuffer dst) {
        PinnedHostBuffer st = hostIn[in.id()];
        if (st == null) st = hostIn[in.id()] = device.allocatePinned(Math.max(1, in.type().byteSize()));
        StagedCopies.in(src, st.segment().asSlice(0, src.byteSize()), dst, stream);
    }

    /** Waits until the last call's copies out of the inputs' staging are done (before it is written again). */
    void awaitCopiesOut() { copiedIn.synchronize(); }

    /** Marks the end of this call's copies out of the inputs' staging, on the stream. */
    void recordCopiesOut() { copiedIn.record(stream); }

    /** Host to device on the stream; waits for it (the caller may reuse its memory at once). */
    void write(long dst, MemorySegment src, long bytes) {
        if (bytes == 0) return;
        MemorySegment from = src.isNative() ? src.asSlice(0, bytes) : Arena.ofAuto().allocate(bytes, 16).copyFrom(src.asSlice(0, bytes));
        DeviceBuffer.wrap(device, dst, bytes).copyFromAsync(from, 0, stream);
        stream.synchronize();
    }

    /** A host array's memory as native memory (arrays over Java heap memory are copied out once). */
    static MemorySegment native_(NDArray n) {
        MemorySegment seg = n.segment();
        if (seg.isNative()) return seg;
        MemorySegment copy = Arena.ofAuto().allocate(seg.byteSize(), 16);
        copy.copyFrom(seg);
        return copy;
    }

    /** Frees everything, each release's failure kept in {@code failed} instead of stopping the others. */
    void close(List<RuntimeException> failed) {
        registrations.close(failed);
        CudaExecutable.quietly(failed, hostArena::close);
        synchronized (pinned) {
            for (PinnedHostBuffer b : pinned) CudaExecutable.quietly(failed, b::close);
        }
        for (PinnedHostBuffer b : hostIn) if (b != null) CudaExecutable.quietly(failed, b::close);
        if (hostOut != null) CudaExecutable.quietly(failed, hostOut::close);
        if (partRead != null) for (Event e : partRead) CudaExecutable.quietly(failed, e::close);
        CudaExecutable.quietly(failed, copiedIn::close);
    }
}
