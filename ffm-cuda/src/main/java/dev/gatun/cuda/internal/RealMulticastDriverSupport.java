package dev.gatun.cuda.internal;

import dev.gatun.cuda.ffi.driver.CUmulticastObjectProp_st;
import dev.gatun.cuda.ffi.driver.driver;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * The real {@code cuMulticast*} calls. Reached only through {@code Multicast}'s guard; each call that creates
 * or binds also re-checks the environment's kill switches itself, so no path on the class path can reach the
 * driver on a machine that forbids multicast.
 */
public final class RealMulticastDriverSupport {
    private RealMulticastDriverSupport() {}

    private static void guard(String call) {
        var refusal = dev.gatun.cuda.Multicast.refusal(dev.gatun.cuda.Multicast.OptIn.I_ACCEPT_NVLINK_MULTICAST_RISKS, System.getenv());
        if (refusal.isPresent()) throw new dev.gatun.cuda.CudaException(call + " not called: " + refusal.get());
    }

    private static MemorySegment prop(Arena arena, long size, int numDevices) {
        MemorySegment p = CUmulticastObjectProp_st.allocate(arena);
        p.fill((byte) 0);
        CUmulticastObjectProp_st.numDevices(p, numDevices);
        CUmulticastObjectProp_st.size(p, size);
        CUmulticastObjectProp_st.handleTypes(p, driver.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR());
        return p;
    }

    public static long granularity(long size, int numDevices, boolean recommended) {
        guard("cuMulticastGetGranularity");
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment g = arena.allocate(ValueLayout.JAVA_LONG);
            Errors.driver(driver.cuMulticastGetGranularity(g, prop(arena, size, numDevices),
                    recommended ? driver.CU_MULTICAST_GRANULARITY_RECOMMENDED() : driver.CU_MULTICAST_GRANULARITY_MINIMUM()),
                    "cuMulticastGetGranularity");
            return g.get(ValueLayout.JAVA_LONG, 0);
        }
    }

    public static long create(long size, int numDevices) {
        guard("cuMulticastCreate");
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment h = arena.allocate(ValueLayout.JAVA_LONG);
            Errors.driver(driver.cuMulticastCreate(h, prop(arena, size, numDevices)), "cuMulticastCreate");
            return h.get(ValueLayout.JAVA_LONG, 0);
        }
    }

    public static void addDevice(long mc, int dev) {
        guard("cuMulticastAddDevice");
        Errors.driver(driver.cuMulticastAddDevice(mc, dev), "cuMulticastAddDevice");
    }

    public static void bindMemory(long mc, long mcOffset, long mem, long memOffset, long size) {
        guard("cuMulticastBindMem");
        Errors.driver(driver.cuMulticastBindMem(mc, mcOffset, mem, memOffset, size, 0), "cuMulticastBindMem");
    }

    public static void unbind(long mc, int dev, long mcOffset, long size) {
        Errors.driver(driver.cuMulticastUnbind(mc, dev, mcOffset, size), "cuMulticastUnbind");
    }

    public static void release(long mc) {
        Errors.driver(driver.cuMemRelease(mc), "cuMemRelease(multicast)");
    }
}
