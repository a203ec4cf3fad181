package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.ffi.driver.driver;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * One CUDA device with its primary context retained for as long as this object is open. Every operation first makes
 * the context current on the calling OS thread ({@code cuCtxSetCurrent}), so the object may be used from any thread,
 * virtual threads included. Streams, events, buffers, modules, graphs and communicators created from it are its
 * children: closing the device closes them (newest first) and then releases the primary context.
 */
public final class Device extends Resource {
    private final int ordinal;
    private final int handle; // CUdevice
    private final MemorySegment context; // CUcontext
    private final Set<Resource> children = Collections.synchronizedSet(new LinkedHashSet<>());
    private volatile String name;
    private volatile ComputeCapability cc;

    private Device(int ordinal, int handle, MemorySegment context) {
        super(null, false);
        this.ordinal = ordinal;
        this.handle = handle;
        this.context = context;
    }

    /** Number of CUDA devices; 0 where CUDA is unavailable (never throws for that). */
    public static int count() {
        return Cuda.probe().deviceCount();
    }

    /** Opens device {@code ordinal}: retains its primary context. Close it to release. */
    public static Device open(int ordinal) {
        Cuda.requireAvailable();
        if (ordinal < 0 || ordinal >= count()) {
            throw new IllegalArgumentException("no CUDA device " + ordinal + " (count " + count() + ")");
        }
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment dev = arena.allocate(ValueLayout.JAVA_INT);
            Errors.driver(driver.cuDeviceGet(dev, ordinal), "cuDeviceGet");
            int h = dev.get(ValueLayout.JAVA_INT, 0);
            MemorySegment pctx = arena.allocate(ValueLayout.ADDRESS);
            Errors.driver(driver.cuDevicePrimaryCtxRetain(pctx, h), "cuDevicePrimaryCtxRetain");
            Device d = new Device(ordinal, h, pctx.get(ValueLayout.ADDRESS, 0));
            d.makeCurrent();
            return d;
        }
    }

    /** Makes this device's primary context current on the calling OS thread. */
    public void makeCurrent() {
        if (isClosed()) {
            throw new IllegalStateException("device " + ordinal + " is closed");
        }
        Errors.driver(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
    }

    /** {@link #makeCurrent()} after checking that this device is open; used before every operation. */
    void enter() {
        makeCurrent();
    }

    /**
     * What CUDA knows of the allocation holding {@code address}: {start, size, device ordinal}, or null where the
     * address is not device memory CUDA allocated (a host pointer, a freed or made-up address).
     */
    public long[] allocationOf(long address) {
        enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment type = arena.allocate(ValueLayout.JAVA_INT);
            if (driver.cuPointerGetAttribute(type, driver.CU_POINTER_ATTRIBUTE_MEMORY_TYPE(), address) != 0) return null;
            if (type.get(ValueLayout.JAVA_INT, 0) != 2) return null; // CU_MEMORYTYPE_DEVICE
            MemorySegment start = arena.allocate(ValueLayout.JAVA_LONG), size = arena.allocate(ValueLayout.JAVA_LONG);
            MemorySegment ord = arena.allocate(ValueLayout.JAVA_INT);
            if (driver.cuPointerGetAttribute(start, driver.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR(), address) != 0
                    || driver.cuPointerGetAttribute(size, driver.CU_POINTER_ATTRIBUTE_RANGE_SIZE(), address) != 0
                    || driver.cuPointerGetAttribute(ord, driver.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL(), address) != 0) return null;
            return new long[]{start.get(ValueLayout.JAVA_LONG, 0), size.get(ValueLayout.JAVA_LONG, 0), ord.get(ValueLayout.JAVA_INT, 0)};
        }
    }

    public int ordinal() { return ordinal; }

    /** The raw {@code CUcontext}, for interoperation with other native code. */
    public MemorySegment context() { return context; }

    public String name() {
        String n = name;
        if (n == null) {
            enter();
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment buf = arena.allocate(256);
                Errors.driver(driver.cuDeviceGetName(buf, 256, handle), "cuDeviceGetName");
                n = buf.getString(0);
                name = n;
            }
        }
        return n;
    }

    /**
     * The GPU's UUID as the driver reports it ({@code cuDeviceGetUuid_v2}), in the usual 8-4-4-4-12 hex form: the
     * same physical GPU has the same UUID in every process, whatever ordinal {@code CUDA_VISIBLE_DEVICES} gives it.
     */
    public String uuid() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment buf = arena.allocate(16);
            Errors.driver(driver.cuDeviceGetUuid_v2(buf, handle), "cuDeviceGetUuid_v2");
            var sb = new StringBuilder("GPU-");
            for (int i = 0; i < 16; i++) {
                if (i == 4 || i == 6 || i == 8 || i == 10) sb.append('-');
                sb.append(String.format("%02x", buf.get(ValueLayout.JAVA_BYTE, i) & 0xff));
            }
            return sb.toString();
        }
    }

    /** A raw {@code CUdevice_attribute} value, for example {@link DeviceAttribute#MULTIPROCESSOR_COUNT}. */
    public int attribute(DeviceAttribute attribute) {
        return attribute(attribute.code());
    }

    /** A raw driver attribute by its {@code CU_DEVICE_ATTRIBUTE_*} code. */
    public int attribute(int cuDeviceAttribute) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ValueLayout.JAVA_INT);
            Errors.driver(driver.cuDeviceGetAttribute(out, cuDeviceAttribute, handle), "cuDeviceGetAttribute");
            return out.get(ValueLayout.JAVA_INT, 0);
        }
    }

    public ComputeCapability computeCapability() {
        ComputeCapability c = cc;
        if (c == null) {
            c = new ComputeCapability(attribute(DeviceAttribute.COMPUTE_CAPABILITY_MAJOR),
                    attribute(DeviceAttribute.COMPUTE_CAPABILITY_MINOR));
            cc = c;
        }
        return c;
    }

    /** The NVRTC architecture for this device, for example {@code sm_90}. */
    public String arch() {
        return computeCapability().arch();
    }

    /** Free and total device memory in bytes ({@code cudaMemGetInfo}). */
    public long[] memoryInfo() {
        enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment free = arena.allocate(ValueLayout.JAVA_LONG);
            MemorySegment total = arena.allocate(ValueLayout.JAVA_LONG);
            Errors.cudart(cudart.cudaMemGetInfo(free, total), "cudaMemGetInfo");
            return new long[] {free.get(ValueLayout.JAVA_LONG, 0), total.get(ValueLayout.JAVA_LONG, 0)};
        }
    }

    /** Whether this device can access {@code peer}'s memory directly. */
    public boolean canAccessPeer(Device peer) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment out = arena.allocate(ValueLayout.JAVA_INT);
            Errors.driver(driver.cuDeviceCanAccessPeer(out, handle, peer.handle), "cuDeviceCanAccessPeer");
            return out.get(ValueLayout.JAVA_INT, 0) != 0;
        }
    }

    /** Whether GPU {@code ordinal} can access GPU {@code peer}'s memory, asked of the devices alone (no context made). */
    public static boolean canAccessPeer(int ordinal, int peer) {
        Cuda.requireAvailable();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment dev = arena.allocate(ValueLayout.JAVA_INT, 2);
            Errors.driver(driver.cuDeviceGet(dev, ordinal), "cuDeviceGet");
            Errors.driver(driver.cuDeviceGet(dev.asSlice(4), peer), "cuDeviceGet");
            MemorySegment out = arena.allocate(ValueLayout.JAVA_INT);
            Errors.driver(driver.cuDeviceCanAccessPeer(out, dev.get(ValueLayout.JAVA_INT, 0), dev.get(ValueLayout.JAVA_INT, 4)),
                    "cuDeviceCanAccessPeer");
            return out.get(ValueLayout.JAVA_INT, 0) != 0;
        }
    }

    /** Lets this device's context access {@code peer}'s memory; a no-op where already enabled. */
    public void enablePeerAccess(Device peer) {
        enter();
        int rc = driver.cuCtxEnablePeerAccess(peer.context, 0);
        if (rc != 0 && rc != driver.CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED()) {
            Errors.driver(rc, "cuCtxEnablePeerAccess");
        }
    }

    /** Waits for all work on this device ({@code cuCtxSynchronize}). */
    public void synchronize() {
        enter();
        Errors.driver(driver.cuCtxSynchronize(), "cuCtxSynchronize");
    }

    // ---- factories -------------------------------------------------------------------------------------------

    /** Allocates {@code bytes} of device memory ({@code cudaMalloc}). */
    public DeviceBuffer allocate(long bytes) {
        return DeviceBuffer.allocate(this, bytes);
    }

    /** Allocates {@code bytes} of page-locked host memory, portable and mapped ({@code cudaHostAlloc}). */
    public PinnedHostBuffer allocatePinned(long bytes) {
        return PinnedHostBuffer.allocate(this, bytes);
    }

    /**
     * Page-locks {@code memory} in place until the result is closed ({@link RegisteredHostMemory}): the caller keeps the
     * memory allocated until then.
     */
    public RegisteredHostMemory register(java.lang.foreign.MemorySegment memory) {
        return RegisteredHostMemory.register(this, memory);
    }

    /** A new non-blocking stream. */
    public Stream createStream() {
        return Stream.create(this, 0);
    }

    /** A new non-blocking stream with a priority (lower numbers run first). */
    public Stream createStream(int priority) {
        return Stream.create(this, priority);
    }

    /**
     * {@code n} new non-blocking streams created back to back: no stream this library creates comes between them, so
     * they take consecutive hardware queues (streams are given the queues round-robin as they are created), each its
     * own while {@code n} is at most CUDA_DEVICE_MAX_CONNECTIONS.
     */
    public java.util.List<Stream> createStreams(int n) {
        synchronized (Stream.CREATING) {
            var out = new java.util.ArrayList<Stream>(n);
            try {
                for (int i = 0; i < n; i++) out.add(Stream.create(this, 0));
            } catch (RuntimeException e) {
                out.forEach(Stream::close);
                throw e;
            }
            return java.util.List.copyOf(out);
        }
    }

    /** A timing event. */
    public Event createEvent() {
        return Event.create(this);
    }

    /** An event with the given flags. */
    public Event createEvent(Event.Flag... flags) {
        return Event.create(this, flags);
    }

    /** Loads a compiled module (cubin, fatbin or NUL-terminated PTX). */
    public Module loadModule(byte[] image) {
        return Module.load(this, image);
    }

    /** Opens a device buffer exported by another process ({@code cudaIpcOpenMemHandle}). */
    public DeviceBuffer openIpcBuffer(IpcMemHandle handle, long bytes) {
        return DeviceBuffer.openIpc(this, handle, bytes);
    }

    /** Opens an event exported by another process ({@code cudaIpcOpenEventHandle}). */
    public Event openIpcEvent(IpcEventHandle handle) {
        return Event.openIpc(this, handle);
    }

    // ---- children --------------------------------------------------------------------------------------------

    void adopt(Resource child) {
        if (isClosed()) {
            throw new IllegalStateException("device " + ordinal + " is closed");
        }
        children.add(child);
    }

    void disown(Resource child) {
        children.remove(child);
    }

    /** Number of open children (streams, buffers, ...), for diagnostics and tests. */
    public int openChildren() {
        return children.size();
    }

    @Override
    void release() {
        List<Resource> snapshot;
        synchronized (children) {
            snapshot = new ArrayList<>(children);
        }
        Collections.reverse(snapshot);
        RuntimeException first = null;
        for (Resource r : snapshot) {
            try {
                Errors.driver(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
                r.close();
            } catch (RuntimeException e) {
                if (first == null) {
                    first = e;
                } else {
                    first.addSuppressed(e);
                }
            }
        }
        children.clear();
        int rc = driver.cuDevicePrimaryCtxRelease_v2(handle);
        if (first != null) {
            throw first;
        }
        Errors.driver(rc, "cuDevicePrimaryCtxRelease");
    }

    @Override
    public String toString() {
        return "Device[" + ordinal + (isClosed() ? ", closed" : "") + "]";
    }

    /** Sets the context current without checking whether this object is open (used while closing). */
    void setCurrentRaw() {
        Errors.driver(driver.cuCtxSetCurrent(context), "cuCtxSetCurrent");
    }
}
