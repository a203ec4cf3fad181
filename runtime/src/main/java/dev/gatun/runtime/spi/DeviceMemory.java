package dev.gatun.runtime.spi;

import java.lang.foreign.MemorySegment;

/**
 * A backend's memory behind a {@link dev.gatun.runtime.DeviceArray}: a range of bytes on one device, owned (freed on
 * {@link #close()}) or borrowed (a session's output slot, a wrapped pointer). Backends implement it; users see it only
 * through the array.
 */
public interface DeviceMemory {
    /** "cuda:0", "host", ...: arrays on different devices never mix in one session. */
    String device();

    /** The address of the first byte (a device pointer on a GPU). */
    long address();

    long byteSize();

    /** Copies {@code bytes} bytes from {@code offset} into {@code dst} once the work that writes this memory is done. */
    void read(long offset, MemorySegment dst, long bytes);

    /**
     * {@link #read} into a host array's memory: a backend may use what it knows of the array ({@link
     * dev.gatun.runtime.NDArray#ownsMemory}) to copy faster.
     */
    default void read(long offset, dev.gatun.runtime.NDArray dst, long bytes) { read(offset, dst.segment(), bytes); }

    /** Copies {@code bytes} bytes of host memory into this memory at {@code offset}, in order with the work on it. */
    void write(long offset, MemorySegment src, long bytes);

    /** Owned memory of the same device holding a copy of {@code bytes} bytes from {@code offset}. */
    DeviceMemory copy(long offset, long bytes);

    /** The stream whose work writes this memory (a {@code cudaStream_t}), or 0 where there is none. */
    default long stream() { return 0; }

    /** Null while the memory may be used, else why not ("was freed when its session closed"). */
    default String whyUnusable() { return null; }

    /** Blocks until the work that writes this memory is done. */
    default void await() {}

    /** Frees owned memory once work reading it is done; borrowed memory is only let go of. Idempotent. */
    void close();
}
