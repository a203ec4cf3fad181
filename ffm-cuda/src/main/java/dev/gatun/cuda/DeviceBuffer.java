package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;

/**
 * Device memory: an address, a size in bytes and the device it lives on. Copies to and from Java arrays and native
 * segments, synchronous or on a stream; memset. A buffer is owned by its device unless it is a {@link #slice view}.
 */
public final class DeviceBuffer extends Resource {
    enum Kind { CUDA_MALLOC, STREAM_ORDERED, IPC, NCCL, VIEW }

    private final long address;
    private final long size;
    private final Kind kind;
    /** The stream a stream-ordered buffer is freed on. */
    private final Stream stream;
    private final MemorySegment streamHandle;

    DeviceBuffer(Device device, long address, long size, Kind kind) { this(device, address, size, kind, null); }

    private DeviceBuffer(Device device, long address, long size, Kind kind, Stream stream) {
        super(device, kind != Kind.VIEW);
        this.address = address;
        this.size = size;
        this.kind = kind;
        this.stream = stream;
        this.streamHandle = stream == null ? MemorySegment.NULL : stream.handle();
    }

    static DeviceBuffer allocate(Device device, long bytes) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("size must be positive: " + bytes);
        }
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            Errors.cudart(cudart.cudaMalloc(p, bytes), "cudaMalloc(" + bytes + ")");
            return new DeviceBuffer(device, p.get(ValueLayout.ADDRESS, 0).address(), bytes, Kind.CUDA_MALLOC);
        }
    }

    /** Stream-ordered memory ({@code cudaMallocAsync}): usable by work queued on {@code stream} after this; freed on it. */
    static DeviceBuffer allocate(Stream stream, long bytes) {
        if (bytes <= 0) {
            throw new IllegalArgumentException("size must be positive: " + bytes);
        }
        stream.device().enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            Errors.cudart(cudart.cudaMallocAsync(p, bytes, stream.handle()), "cudaMallocAsync(" + bytes + ")");
            return new DeviceBuffer(stream.device(), p.get(ValueLayout.ADDRESS, 0).address(), bytes, Kind.STREAM_ORDERED, stream);
        }
    }

    static DeviceBuffer openIpc(Device device, IpcMemHandle handle, long bytes) {
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            MemorySegment h = arena.allocate(IpcMemHandle.SIZE);
            h.copyFrom(MemorySegment.ofArray(handle.bytes()));
            Errors.cudart(cudart.cudaIpcOpenMemHandle(p, h, cudart.cudaIpcMemLazyEnablePeerAccess()), "cudaIpcOpenMemHandle");
            return new DeviceBuffer(device, p.get(ValueLayout.ADDRESS, 0).address(), bytes, Kind.IPC);
        }
    }

    /** Wraps device memory owned elsewhere (not freed by this object). */
    public static DeviceBuffer wrap(Device device, long address, long bytes) {
        return new DeviceBuffer(device, address, bytes, Kind.VIEW);
    }

    public long address() { return address; }

    /** How the memory was allocated (and how it is freed). */
    Kind kind() { return kind; }

    public long size() { return size; }

    public Device device() { return device; }

    /** The address as a zero-length segment, for passing to native code. */
    public MemorySegment pointer() { return MemorySegment.ofAddress(address); }

    /** A non-owning view of {@code bytes} bytes at {@code offset}; it is not freed on close. */
    public DeviceBuffer slice(long offset, long bytes) {
        Objects.checkFromIndexSize(offset, bytes, size);
        return new DeviceBuffer(device, address + offset, bytes, Kind.VIEW);
    }

    // ---- host <-> device, synchronous ------------------------------------------------------------------------

    /** Copies {@code src} (native or heap) to the start of this buffer and waits. */
    public void copyFrom(MemorySegment src) {
        copyFrom(src, 0);
    }

    /** Copies {@code src} (native or heap) to {@code offset} bytes into this buffer and waits. */
    public void copyFrom(MemorySegment src, long offset) {
        ensureOpen();
        Objects.checkFromIndexSize(offset, src.byteSize(), size);
        device.enter();
        if (src.isNative()) {
            Errors.cudart(cudart.cudaMemcpy(MemorySegment.ofAddress(address + offset), src, src.byteSize(),
                    cudart.cudaMemcpyDefault()), "cudaMemcpy(HtoD)");
            return;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment tmp = arena.allocate(src.byteSize(), 16);
            tmp.copyFrom(src);
            Errors.cudart(cudart.cudaMemcpy(MemorySegment.ofAddress(address + offset), tmp, src.byteSize(),
                    cudart.cudaMemcpyDefault()), "cudaMemcpy(HtoD)");
        }
    }

    /** Copies the start of this buffer into {@code dst} (native or heap), filling it, and waits. */
    public void copyTo(MemorySegment dst) {
        copyTo(dst, 0);
    }

    /** Copies {@code dst.byteSize()} bytes from {@code offset} into {@code dst} and waits. */
    public void copyTo(MemorySegment dst, long offset) {
        ensureOpen();
        Objects.checkFromIndexSize(offset, dst.byteSize(), size);
        device.enter();
        if (dst.isNative()) {
            Errors.cudart(cudart.cudaMemcpy(dst, MemorySegment.ofAddress(address + offset), dst.byteSize(),
                    cudart.cudaMemcpyDefault()), "cudaMemcpy(DtoH)");
            return;
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment tmp = arena.allocate(dst.byteSize(), 16);
            Errors.cudart(cudart.cudaMemcpy(tmp, MemorySegment.ofAddress(address + offset), dst.byteSize(),
                    cudart.cudaMemcpyDefault()), "cudaMemcpy(DtoH)");
            dst.copyFrom(tmp);
        }
    }

    public void copyFrom(float[] src) { copyFrom(MemorySegment.ofArray(src)); }
    public void copyFrom(double[] src) { copyFrom(MemorySegment.ofArray(src)); }
    public void copyFrom(int[] src) { copyFrom(MemorySegment.ofArray(src)); }
    public void copyFrom(long[] src) { copyFrom(MemorySegment.ofArray(src)); }
    public void copyFrom(short[] src) { copyFrom(MemorySegment.ofArray(src)); }
    public void copyFrom(byte[] src) { copyFrom(MemorySegment.ofArray(src)); }

    public void copyTo(float[] dst) { copyTo(MemorySegment.ofArray(dst)); }
    public void copyTo(double[] dst) { copyTo(MemorySegment.ofArray(dst)); }
    public void copyTo(int[] dst) { copyTo(MemorySegment.ofArray(dst)); }
    public void copyTo(long[] dst) { copyTo(MemorySegment.ofArray(dst)); }
    public void copyTo(short[] dst) { copyTo(MemorySegment.ofArray(dst)); }
    public void copyTo(byte[] dst) { copyTo(MemorySegment.ofArray(dst)); }

    /** Reads the whole buffer as floats. */
    public float[] toFloatArray() {
        float[] out = new float[Math.toIntExact(size / Float.BYTES)];
        copyTo(out);
        return out;
    }

    /** Reads the whole buffer as bytes. */
    public byte[] toByteArray() {
        byte[] out = new byte[Math.toIntExact(size)];
        copyTo(out);
        return out;
    }

    // ---- asynchronous ------------------------------------------------------------------------------------------

    /** Queues a copy from native memory {@code src} (pinned for true asynchrony) to {@code offset} on {@code stream}. */
    public void copyFromAsync(MemorySegment src, long offset, Stream stream) {
        ensureOpen();
        requireNative(src);
        Objects.checkFromIndexSize(offset, src.byteSize(), size);
        device.enter();
        Errors.cudart(cudart.cudaMemcpyAsync(MemorySegment.ofAddress(address + offset), src, src.byteSize(),
                cudart.cudaMemcpyDefault(), Stream.handleOf(stream)), "cudaMemcpyAsync(HtoD)");
    }

    /** Queues a copy of {@code dst.byteSize()} bytes from {@code offset} into native memory {@code dst}. */
    public void copyToAsync(MemorySegment dst, long offset, Stream stream) {
        ensureOpen();
        requireNative(dst);
        Objects.checkFromIndexSize(offset, dst.byteSize(), size);
        device.enter();
        Errors.cudart(cudart.cudaMemcpyAsync(dst, MemorySegment.ofAddress(address + offset), dst.byteSize(),
                cudart.cudaMemcpyDefault(), Stream.handleOf(stream)), "cudaMemcpyAsync(DtoH)");
    }

    public void copyFromAsync(PinnedHostBuffer src, Stream stream) { copyFromAsync(src.segment(), 0, stream); }

    public void copyToAsync(PinnedHostBuffer dst, Stream stream) { copyToAsync(dst.segment(), 0, stream); }

    /** Copies all of {@code src} (any device: unified addressing) to the start of this buffer and waits. */
    public void copyFrom(DeviceBuffer src) {
        ensureOpen();
        if (src.size > size) {
            throw new IndexOutOfBoundsException("source " + src.size + " B > destination " + size + " B");
        }
        device.enter();
        Errors.cudart(cudart.cudaMemcpy(pointer(), src.pointer(), src.size, cudart.cudaMemcpyDefault()), "cudaMemcpy(DtoD)");
    }

    /** Queues a device-to-device copy of all of {@code src} to the start of this buffer. */
    public void copyFromAsync(DeviceBuffer src, Stream stream) {
        ensureOpen();
        if (src.size > size) {
            throw new IndexOutOfBoundsException("source " + src.size + " B > destination " + size + " B");
        }
        device.enter();
        Errors.cudart(cudart.cudaMemcpyAsync(pointer(), src.pointer(), src.size, cudart.cudaMemcpyDefault(),
                Stream.handleOf(stream)), "cudaMemcpyAsync(DtoD)");
    }

    /** Sets every byte to {@code value} and waits. */
    public void memset(int value) {
        ensureOpen();
        device.enter();
        Errors.cudart(cudart.cudaMemset(pointer(), value, size), "cudaMemset");
    }

    /** Queues setting every byte to {@code value} on {@code stream}. */
    public void memsetAsync(int value, Stream stream) {
        ensureOpen();
        device.enter();
        Errors.cudart(cudart.cudaMemsetAsync(pointer(), value, size, Stream.handleOf(stream)), "cudaMemsetAsync");
    }

    // ---- IPC -------------------------------------------------------------------------------------------------

    /** Exports this allocation for another process ({@code cudaIpcGetMemHandle}); needs a cudaMalloc'd buffer. */
    public IpcMemHandle ipcHandle() {
        ensureOpen();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment h = arena.allocate(IpcMemHandle.SIZE);
            Errors.cudart(cudart.cudaIpcGetMemHandle(h, pointer()), "cudaIpcGetMemHandle");
            return IpcMemHandle.of(h.toArray(ValueLayout.JAVA_BYTE));
        }
    }

    private static void requireNative(MemorySegment s) {
        if (!s.isNative()) {
            throw new IllegalArgumentException("asynchronous copies need native (ideally pinned) memory, not a heap segment");
        }
    }

    @Override
    void release() {
        switch (kind) {
            case CUDA_MALLOC -> Errors.cudart(cudart.cudaFree(pointer()), "cudaFree");
            // on its stream while that lives; a device closing frees its children in no set order
            case STREAM_ORDERED -> {
                if (stream.isClosed()) Errors.cudart(cudart.cudaFree(pointer()), "cudaFree");
                else Errors.cudart(cudart.cudaFreeAsync(pointer(), streamHandle), "cudaFreeAsync");
            }
            case IPC -> Errors.cudart(cudart.cudaIpcCloseMemHandle(pointer()), "cudaIpcCloseMemHandle");
            case NCCL -> RealNcclWindowCalls.SYSTEM.memFree(address);
            case VIEW -> { }
        }
    }

    @Override
    public String toString() {
        return "DeviceBuffer[0x" + Long.toHexString(address) + ", " + size + " B, device " + (device == null ? "none" : String.valueOf(device.ordinal())) + ", " + kind + "]";
    }
}
