package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/** An instantiated (executable) CUDA graph. */
public final class GraphExec extends Resource {
    /** {@code sizeof(cudaGraphExecUpdateResultInfo)}: result enum, two node handles. */
    private static final long UPDATE_RESULT_INFO_SIZE = 24;
    private final MemorySegment handle;

    GraphExec(Device device, MemorySegment handle) {
        super(device, true);
        this.handle = handle;
    }

    /** Queues one replay of the graph on {@code stream}. */
    public void launch(Stream stream) {
        ensureOpen();
        device.enter();
        Errors.cudart(cudart.cudaGraphLaunch(handle, Stream.handleOf(stream)), "cudaGraphLaunch");
    }

    /** Uploads the graph to the device ahead of its first launch. */
    public void upload(Stream stream) {
        ensureOpen();
        device.enter();
        Errors.cudart(cudart.cudaGraphUpload(handle, Stream.handleOf(stream)), "cudaGraphUpload");
    }

    /**
     * Updates this executable graph in place to match {@code graph} (same topology, new parameters such as kernel
     * arguments) with {@code cudaGraphExecUpdate}; throws where the update is not possible.
     */
    public void update(CudaGraph graph) {
        ensureOpen();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment info = arena.allocate(UPDATE_RESULT_INFO_SIZE, 8);
            int rc = cudart.cudaGraphExecUpdate(handle, graph.handle(), info);
            if (rc != 0) {
                int result = info.get(java.lang.foreign.ValueLayout.JAVA_INT, 0);
                cudart.cudaGetLastError();
                CudaException e = new CudaException("cudaGraphExecUpdate", rc, "cudaGraphExecUpdateResult " + result,
                        "the graph cannot be updated in place (topology or node types differ)");
                throw e;
            }
        }
    }

    @Override
    void release() {
        Errors.cudart(cudart.cudaGraphExecDestroy(handle), "cudaGraphExecDestroy");
    }
}
