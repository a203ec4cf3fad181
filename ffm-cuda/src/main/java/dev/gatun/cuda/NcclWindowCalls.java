package dev.gatun.cuda;

import java.lang.foreign.MemorySegment;

/**
 * The NCCL calls behind symmetric windows ({@code ncclMemAlloc}, {@code ncclMemFree},
 * {@code ncclCommWindowRegister}, {@code ncclCommWindowDeregister}), behind an interface so that tests exercise
 * {@link NcclWindow}'s life cycle (ownership, idempotent close, the order of deregistration and free, what happens on
 * an error) with a fake and no GPU. The real ones are {@link RealNcclWindowCalls}, resolved lazily so that an older
 * libnccl gives a clear error instead of a linkage failure.
 */
interface NcclWindowCalls {
    /** {@code ncclMemAlloc}: the address of {@code bytes} bytes of device memory on the current device. */
    long memAlloc(long bytes);

    /** {@code ncclMemFree}. */
    void memFree(long address);

    /**
     * {@code ncclCommWindowRegister} (collective): the window, or {@link MemorySegment#NULL} where NCCL declined
     * (it returns success and no window where symmetric memory is unsupported or disabled).
     */
    MemorySegment register(MemorySegment comm, long address, long bytes, int flags);

    /** {@code ncclCommWindowDeregister} (collective). */
    void deregister(MemorySegment comm, MemorySegment window);
}
