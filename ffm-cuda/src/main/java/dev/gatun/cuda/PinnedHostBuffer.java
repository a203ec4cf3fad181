package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** Page-locked host memory ({@code cudaHostAlloc}, portable and mapped): the source or target of async copies. */
public final class PinnedHostBuffer extends Resource {
    private final MemorySegment segment;

    private PinnedHostBuffer(Device device, MemorySegment segment) {
        super(device, true);
        this.segment = segment;
    }

    static PinnedHostBuffer allocate(Device device, long bytes) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("size must be positive: " + bytes);
        }
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            Errors.cudart(cudart.cudaHostAlloc(p, bytes, cudart.cudaHostAllocPortable() | cudart.cudaHostAllocMapped()),
                    "cudaHostAlloc(" + bytes + ")");
            return new PinnedHostBuffer(device, p.get(ValueLayout.ADDRESS, 0).reinterpret(bytes));
        }
    }

    /** The host memory as a segment of {@link #size()} bytes; invalid once this buffer is closed. */
    public MemorySegment segment() {
        ensureOpen();
        return segment;
    }

    public long address() { return segment.address(); }

    public long size() { return segment.byteSize(); }

    public Device device() { return device; }

    public void copyFrom(float[] src) { segment().copyFrom(MemorySegment.ofArray(src)); }
    public void copyFrom(int[] src) { segment().copyFrom(MemorySegment.ofArray(src)); }
    public void copyFrom(byte[] src) { segment().copyFrom(MemorySegment.ofArray(src)); }

    public void copyTo(float[] dst) { MemorySegment.ofArray(dst).copyFrom(segment().asSlice(0, dst.length * 4L)); }
    public void copyTo(int[] dst) { MemorySegment.ofArray(dst).copyFrom(segment().asSlice(0, dst.length * 4L)); }
    public void copyTo(byte[] dst) { MemorySegment.ofArray(dst).copyFrom(segment().asSlice(0, dst.length)); }

    @Override
    void release() {
        Errors.cudart(cudart.cudaFreeHost(segment), "cudaFreeHost");
    }
}
