package dev.gatun.cuda;

import dev.gatun.cuda.ffi.driver.CUmemAccessDesc_st;
import dev.gatun.cuda.ffi.driver.CUmemLocation_st;
import dev.gatun.cuda.ffi.driver.driver;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.List;

/**
 * A reserved range of device virtual addresses ({@code cuMemAddressReserve}) into which {@link PhysicalMemory} is
 * mapped ({@code cuMemMap}) and made accessible ({@code cuMemSetAccess}). Closing unmaps and frees the range.
 */
public final class VirtualRange extends Resource {
    private final long address;
    private final long size;
    private final List<long[]> mappings = new ArrayList<>(); // {offset, size}

    private VirtualRange(Device device, long address, long size) {
        super(device, true);
        this.address = address;
        this.size = size;
    }

    /** Reserves {@code bytes} (a multiple of the granularity) of virtual address space. */
    public static VirtualRange reserve(Device device, long bytes) {
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.JAVA_LONG);
            Errors.driver(driver.cuMemAddressReserve(p, bytes, 0, 0, 0), "cuMemAddressReserve(" + bytes + ")");
            return new VirtualRange(device, p.get(ValueLayout.JAVA_LONG, 0), bytes);
        }
    }

    public long address() { return address; }

    public long size() { return size; }

    /** Maps all of {@code memory} at {@code offset} into this range. */
    public synchronized void map(long offset, PhysicalMemory memory) {
        ensureOpen();
        java.util.Objects.checkFromIndexSize(offset, memory.size(), size);
        device.enter();
        Errors.driver(driver.cuMemMap(address + offset, memory.size(), 0, memory.handle(), 0), "cuMemMap");
        mappings.add(new long[] {offset, memory.size()});
    }

    /** Grants read-write access to {@code [offset, offset+bytes)} for each device. */
    public void setAccess(long offset, long bytes, Device... devices) {
        ensureOpen();
        java.util.Objects.checkFromIndexSize(offset, bytes, size);
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment descs = CUmemAccessDesc_st.allocateArray(devices.length, arena);
            for (int i = 0; i < devices.length; i++) {
                MemorySegment d = CUmemAccessDesc_st.asSlice(descs, i);
                MemorySegment loc = CUmemAccessDesc_st.location(d);
                CUmemLocation_st.type(loc, driver.CU_MEM_LOCATION_TYPE_DEVICE());
                CUmemLocation_st.id(loc, devices[i].ordinal());
                CUmemAccessDesc_st.flags(d, driver.CU_MEM_ACCESS_FLAGS_PROT_READWRITE());
            }
            Errors.driver(driver.cuMemSetAccess(address + offset, bytes, descs, devices.length), "cuMemSetAccess");
        }
    }

    /** A non-owning buffer view of {@code [offset, offset+bytes)}, for copies and kernel arguments. */
    public DeviceBuffer buffer(long offset, long bytes) {
        java.util.Objects.checkFromIndexSize(offset, bytes, size);
        return DeviceBuffer.wrap(device, address + offset, bytes);
    }

    @Override
    synchronized void release() {
        CudaException first = null;
        for (long[] m : mappings) {
            int rc = driver.cuMemUnmap(address + m[0], m[1]);
            if (rc != 0 && first == null) {
                first = Errors.driverException(rc, "cuMemUnmap");
            }
        }
        mappings.clear();
        Errors.driver(driver.cuMemAddressFree(address, size), "cuMemAddressFree");
        if (first != null) {
            throw first;
        }
    }
}
