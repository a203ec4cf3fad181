package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * An active stream capture. {@link #close()} always ends the capture (also when the body threw); afterwards
 * {@link #graph()} hands over the captured {@link CudaGraph}.
 *
 * <pre>{@code
 * CudaGraph graph;
 * try (StreamCapture capture = stream.beginCapture()) {
 *     kernel.launch(config.withStream(stream), args);
 *     graph = capture.end();
 * }
 * }</pre>
 */
public final class StreamCapture implements AutoCloseable {
    private final Stream stream;
    private final AtomicBoolean ended = new AtomicBoolean();
    private volatile CudaGraph graph;
    private volatile CudaException failure;

    private StreamCapture(Stream stream) {
        this.stream = stream;
    }

    static StreamCapture begin(Stream stream) {
        stream.device.enter();
        Errors.cudart(cudart.cudaStreamBeginCapture(stream.handle(), cudart.cudaStreamCaptureModeRelaxed()),
                "cudaStreamBeginCapture");
        return new StreamCapture(stream);
    }

    /** Ends the capture (if not ended yet) and returns the graph; the caller owns it (and the device does too). */
    public CudaGraph end() {
        close();
        if (failure != null) {
            throw failure;
        }
        return graph;
    }

    /** The captured graph, once the capture ended. */
    public CudaGraph graph() {
        if (!ended.get()) {
            throw new IllegalStateException("capture still active");
        }
        return end();
    }

    /** Ends the capture; idempotent. Throws where the capture was invalidated (a suppressed exception in a try). */
    @Override
    public void close() {
        if (!ended.compareAndSet(false, true)) {
            return;
        }
        stream.device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment g = arena.allocate(ValueLayout.ADDRESS);
            int rc = cudart.cudaStreamEndCapture(stream.handle(), g);
            MemorySegment handle = g.get(ValueLayout.ADDRESS, 0);
            if (rc != 0) {
                if (!handle.equals(MemorySegment.NULL)) {
                    cudart.cudaGraphDestroy(handle);
                }
                cudart.cudaGetLastError(); // clear the sticky-less error state of the capture
                try {
                    Errors.cudart(rc, "cudaStreamEndCapture");
                } catch (CudaException e) {
                    failure = e;
                    throw e;
                }
            }
            graph = new CudaGraph(stream.device, handle);
        }
    }
}
