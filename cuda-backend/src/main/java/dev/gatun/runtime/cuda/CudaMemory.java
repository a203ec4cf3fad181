package dev.gatun.runtime.cuda;

import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.spi.DeviceMemory;

import java.lang.foreign.MemorySegment;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * GPU memory behind a {@link dev.gatun.runtime.DeviceArray}, always tied to the executable that made it: every read,
 * write and copy runs on that executable's stream, so it is ordered after the call that wrote the memory. Three kinds:
 * <ul>
 *   <li>owned: a buffer of its own (toDevice, copy), freed on close;</li>
 *   <li>call memory: a slice of the executable's pools, staging or per-call buffers (an output), never freed here;</li>
 *   <li>wrapped: memory another library allocated; close runs the caller's release action.</li>
 * </ul>
 */
final class CudaMemory implements DeviceMemory {
    final CudaExecutable owner;
    private final long address;
    private final long bytes;
    /** The owned buffer, or null. */
    private final DeviceBuffer buffer;
    /** True for memory the owner's calls write (its outputs): an input there is staged, never read in place. */
    final boolean callMemory;
    private final Runnable release;
    private final AtomicBoolean closed = new AtomicBoolean();

    private CudaMemory(CudaExecutable owner, long address, long bytes, DeviceBuffer buffer, boolean callMemory, Runnable release) {
        this.owner = owner;
        this.address = address;
        this.bytes = bytes;
        this.buffer = buffer;
        this.callMemory = callMemory;
        this.release = release;
    }

    static CudaMemory owned(CudaExecutable owner, DeviceBuffer buffer) {
        return new CudaMemory(owner, buffer.address(), buffer.size(), buffer, false, null);
    }

    static CudaMemory callMemory(CudaExecutable owner, long address, long bytes) {
        return new CudaMemory(owner, address, bytes, null, true, null);
    }

    static CudaMemory wrapped(CudaExecutable owner, long address, long bytes, Runnable release) {
        return new CudaMemory(owner, address, bytes, null, false, release);
    }

    @Override public String device() { return owner.deviceName(); }
    @Override public long address() { return address; }
    @Override public long byteSize() { return bytes; }

    private void check(String op, long offset, long n) {
        if (closed.get()) throw new GatunRuntimeException("device memory at 0x" + Long.toHexString(address) + ": " + op + " after close");
        if (offset < 0 || n < 0 || offset + n > bytes)
            throw new GatunRuntimeException("device memory at 0x" + Long.toHexString(address) + ": " + op + " of " + n + " bytes at offset "
                    + offset + " is outside its " + bytes + " bytes");
    }

    @Override public void read(long offset, MemorySegment dst, long n) {
        check("read", offset, n);
        owner.readToHost(address + offset, dst, n);
    }

    @Override public void read(long offset, dev.gatun.runtime.NDArray dst, long n) {
        check("read", offset, n);
        owner.readToHost(address + offset, dst, n);
    }

    @Override public void write(long offset, MemorySegment src, long n) {
        check("write", offset, n);
        owner.writeFromHost(address + offset, src, n);
    }

    @Override public DeviceMemory copy(long offset, long n) {
        check("copy", offset, Math.min(n, bytes - offset));
        return owner.copyOnDevice(address + offset, n, Math.min(n, bytes - offset));
    }

    @Override public String whyUnusable() {
        if (owner.isClosed()) return "belongs to a closed session (its memory was freed or let go of)";
        return closed.get() ? "was freed" : null;
    }

    @Override public long stream() { return owner.streamHandle(); }

    @Override public void await() { owner.awaitWork(); }

    @Override public void close() {
        if (!closed.compareAndSet(false, true)) return;
        if (buffer != null) owner.free(this, buffer);
        if (release != null) release.run();
    }

    boolean isClosed() { return closed.get(); }
}
