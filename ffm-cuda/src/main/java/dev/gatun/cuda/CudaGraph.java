package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.internal.Errors;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;

/** A CUDA graph (from stream capture): instantiate it to launch it; print it as DOT. */
public final class CudaGraph extends Resource {
    private final MemorySegment handle;

    CudaGraph(Device device, MemorySegment handle) {
        super(device, true);
        this.handle = handle;
    }

    MemorySegment handle() {
        ensureOpen();
        return handle;
    }

    /** Number of nodes. */
    public long nodeCount() {
        ensureOpen();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment n = arena.allocate(ValueLayout.JAVA_LONG);
            Errors.cudart(cudart.cudaGraphGetNodes(handle, MemorySegment.NULL, n), "cudaGraphGetNodes");
            return n.get(ValueLayout.JAVA_LONG, 0);
        }
    }

    /** Instantiates an executable graph. */
    public GraphExec instantiate() {
        ensureOpen();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            Errors.cudart(cudart.cudaGraphInstantiate(p, handle, 0L), "cudaGraphInstantiate");
            return new GraphExec(device, p.get(ValueLayout.ADDRESS, 0));
        }
    }

    /** The graph in Graphviz DOT ({@code cudaGraphDebugDotPrint}, verbose). */
    public String toDot() {
        ensureOpen();
        device.enter();
        Path tmp = null;
        try (Arena arena = Arena.ofConfined()) {
            tmp = Files.createTempFile("gatun-graph", ".dot");
            Errors.cudart(cudart.cudaGraphDebugDotPrint(handle, arena.allocateFrom(tmp.toString()),
                    cudart.cudaGraphDebugDotFlagsVerbose()), "cudaGraphDebugDotPrint");
            return Files.readString(tmp);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } finally {
            if (tmp != null) {
                try {
                    Files.deleteIfExists(tmp);
                } catch (IOException ignored) {
                    // best effort
                }
            }
        }
    }

    @Override
    void release() {
        Errors.cudart(cudart.cudaGraphDestroy(handle), "cudaGraphDestroy");
    }
}
