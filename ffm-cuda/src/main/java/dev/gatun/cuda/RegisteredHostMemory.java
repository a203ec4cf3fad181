package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.MemorySegment;

/**
 * Ordinary host memory page-locked in place ({@code cudaHostRegister}) so the copy engine reads and writes it at full
 * speed, until {@link #close()} ({@code cudaHostUnregister}). The memory itself stays its owner's: whoever registers
 * it must keep it allocated until this is closed, because the driver would go on copying from the pages it locked
 * even after the addresses were freed and reused.
 */
public final class RegisteredHostMemory extends Resource {
    private final MemorySegment segment;

    private RegisteredHostMemory(Device device, MemorySegment segment) {
        super(device, true);
        this.segment = segment;
    }

    static RegisteredHostMemory register(Device device, MemorySegment segment) {
        if (!segment.isNative() || segment.byteSize() == 0)
            throw new IllegalArgumentException("cudaHostRegister: only native memory of at least one byte can be page-locked");
        device.enter();
        int rc = cudart.cudaHostRegister(segment, segment.byteSize(), cudart.cudaHostRegisterPortable());
        if (rc != 0) cudart.cudaGetLastError(); // a refusal (memory locked already, a limit) leaves no error behind
        Errors.cudart(rc, "cudaHostRegister(" + segment.byteSize() + " bytes)");
        return new RegisteredHostMemory(device, segment);
    }

    /** The first byte's address. */
    public long address() { return segment.address(); }

    /** How many bytes are page-locked. */
    public long size() { return segment.byteSize(); }

    @Override
    void release() {
        Errors.cudart(cudart.cudaHostUnregister(segment), "cudaHostUnregister");
    }
}
