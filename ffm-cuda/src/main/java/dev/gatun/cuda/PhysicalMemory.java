package dev.gatun.cuda;

import dev.gatun.cuda.ffi.driver.CUmemAllocationProp_st;
import dev.gatun.cuda.ffi.driver.CUmemLocation_st;
import dev.gatun.cuda.ffi.driver.driver;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SegmentAllocator;
import java.lang.foreign.ValueLayout;

/**
 * Physical device memory from the virtual memory management API ({@code cuMemCreate}), exportable as a POSIX file
 * descriptor, or imported from one. Map it into a {@link VirtualRange} to use it. Sizes must be multiples of
 * {@link #granularity(Device, boolean)}.
 */
public final class PhysicalMemory extends Resource {
    private final long handle; // CUmemGenericAllocationHandle
    private final long size;

    private PhysicalMemory(Device device, long handle, long size) {
        super(device, true);
        this.handle = handle;
        this.size = size;
    }

    static MemorySegment prop(SegmentAllocator a, int deviceOrdinal) {
        MemorySegment prop = CUmemAllocationProp_st.allocate(a);
        prop.fill((byte) 0);
        CUmemAllocationProp_st.type(prop, driver.CU_MEM_ALLOCATION_TYPE_PINNED());
        CUmemAllocationProp_st.requestedHandleTypes(prop, driver.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR());
        MemorySegment loc = CUmemAllocationProp_st.location(prop);
        CUmemLocation_st.type(loc, driver.CU_MEM_LOCATION_TYPE_DEVICE());
        CUmemLocation_st.id(loc, deviceOrdinal);
        return prop;
    }

    /** The allocation granularity (minimum, or recommended) for exportable device memory. */
    public static long granularity(Device device, boolean recommended) {
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment g = arena.allocate(ValueLayout.JAVA_LONG);
            Errors.driver(driver.cuMemGetAllocationGranularity(g, prop(arena, device.ordinal()),
                    recommended ? driver.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED() : driver.CU_MEM_ALLOC_GRANULARITY_MINIMUM()),
                    "cuMemGetAllocationGranularity");
            return g.get(ValueLayout.JAVA_LONG, 0);
        }
    }

    /** Rounds {@code bytes} up to a multiple of {@code granularity}. */
    public static long roundUp(long bytes, long granularity) {
        return (bytes + granularity - 1) / granularity * granularity;
    }

    /** Creates {@code bytes} (a multiple of the granularity) of physical memory on {@code device}. */
    public static PhysicalMemory create(Device device, long bytes) {
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment h = arena.allocate(ValueLayout.JAVA_LONG);
            Errors.driver(driver.cuMemCreate(h, bytes, prop(arena, device.ordinal()), 0), "cuMemCreate(" + bytes + ")");
            return new PhysicalMemory(device, h.get(ValueLayout.JAVA_LONG, 0), bytes);
        }
    }

    /**
     * Imports an allocation exported by {@link #exportFileDescriptor()} (possibly in another process, the
     * descriptor passed with {@link FileDescriptors}). The caller still owns {@code fd} and may close it afterwards.
     */
    public static PhysicalMemory importFileDescriptor(Device device, int fd, long bytes) {
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment h = arena.allocate(ValueLayout.JAVA_LONG);
            Errors.driver(driver.cuMemImportFromShareableHandle(h, MemorySegment.ofAddress(fd),
                    driver.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR()), "cuMemImportFromShareableHandle");
            return new PhysicalMemory(device, h.get(ValueLayout.JAVA_LONG, 0), bytes);
        }
    }

    /** Exports a new POSIX file descriptor for this allocation; the caller closes it. */
    public int exportFileDescriptor() {
        ensureOpen();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment fd = arena.allocate(ValueLayout.JAVA_INT);
            Errors.driver(driver.cuMemExportToShareableHandle(fd, handle, driver.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR(), 0),
                    "cuMemExportToShareableHandle");
            return fd.get(ValueLayout.JAVA_INT, 0);
        }
    }

    public long size() { return size; }

    public Device device() { return device; }

    /** The raw {@code CUmemGenericAllocationHandle}. */
    public long handle() {
        ensureOpen();
        return handle;
    }

    @Override
    void release() {
        Errors.driver(driver.cuMemRelease(handle), "cuMemRelease");
    }
}
