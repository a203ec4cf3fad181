package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.internal.Errors;
import dev.gatun.cuda.internal.HostCallbacks;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** A CUDA stream (non-blocking with respect to the legacy default stream). */
public final class Stream extends Resource {
    private final MemorySegment handle;

    private Stream(Device device, MemorySegment handle) {
        super(device, true);
        this.handle = handle;
    }

    /** Held while creating a stream, and across {@link Device#createStreams}: their streams are created back to back. */
    static final Object CREATING = new Object();

    static Stream create(Device device, int priority) {
        device.enter();
        synchronized (CREATING) {
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
                Errors.cudart(cudart.cudaStreamCreateWithPriority(p, cudart.cudaStreamNonBlocking(), priority),
                        "cudaStreamCreateWithPriority");
                return new Stream(device, p.get(ValueLayout.ADDRESS, 0));
            }
        }
    }

    /** The raw {@code cudaStream_t}, for passing to other native libraries. */
    public MemorySegment handle() {
        ensureOpen();
        return handle;
    }

    static MemorySegment handleOf(Stream s) {
        return s == null ? MemorySegment.NULL : s.handle();
    }

    public Device device() { return device; }

    /**
     * Stream-ordered device memory ({@code cudaMallocAsync}): usable by work queued on this stream after this call, and
     * freed on this stream when closed, so neither waits for other streams (as {@code cudaMalloc}/{@code cudaFree} may).
     */
    public DeviceBuffer allocate(long bytes) {
        ensureOpen();
        return DeviceBuffer.allocate(this, bytes);
    }

    /** Blocks until all queued work is done. */
    public void synchronize() {
        ensureOpen();
        device.enter();
        Errors.cudart(cudart.cudaStreamSynchronize(handle), "cudaStreamSynchronize");
    }

    /** Whether all queued work is done. */
    public boolean isDone() {
        ensureOpen();
        device.enter();
        int rc = cudart.cudaStreamQuery(handle);
        if (rc == cudart.cudaErrorNotReady()) {
            return false;
        }
        Errors.cudart(rc, "cudaStreamQuery");
        return true;
    }

    /** Makes later work on this stream wait until {@code event} completes (any device). */
    public void waitFor(Event event) {
        ensureOpen();
        device.enter();
        Errors.cudart(cudart.cudaStreamWaitEvent(handle, event.handle(), 0), "cudaStreamWaitEvent");
    }

    /** Makes later work on this stream wait for everything queued so far on {@code other}. */
    public void waitFor(Stream other) {
        try (Event e = other.device.createEvent(Event.Flag.DISABLE_TIMING)) {
            e.record(other);
            waitFor(e);
        }
    }

    /** Records {@code event} on this stream. */
    public void record(Event event) {
        event.record(this);
    }

    /**
     * Queues {@code callback} to run on a CUDA-owned host thread once preceding work is done. The callback must not
     * call CUDA; exceptions it throws are reported to the platform logger and otherwise ignored.
     */
    public void onHost(Runnable callback) {
        ensureOpen();
        device.enter();
        long id = HostCallbacks.register(callback);
        int rc = cudart.cudaLaunchHostFunc(handle, HostCallbacks.stub(), MemorySegment.ofAddress(id));
        if (rc != 0) {
            HostCallbacks.unregister(id);
            Errors.cudart(rc, "cudaLaunchHostFunc");
        }
    }

    /**
     * Begins capturing this stream's work into a graph (relaxed mode, so capture may end on another OS thread).
     * Use with try-with-resources: closing always ends the capture, then {@link StreamCapture#graph()} gives the graph.
     */
    public StreamCapture beginCapture() {
        return StreamCapture.begin(this);
    }

    /** Whether this stream is being captured. */
    public boolean isCapturing() {
        ensureOpen();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment status = arena.allocate(ValueLayout.JAVA_INT);
            Errors.cudart(cudart.cudaStreamIsCapturing(handle, status), "cudaStreamIsCapturing");
            return status.get(ValueLayout.JAVA_INT, 0) == cudart.cudaStreamCaptureStatusActive();
        }
    }

    @Override
    void release() {
        Errors.cudart(cudart.cudaStreamDestroy(handle), "cudaStreamDestroy");
    }
}
