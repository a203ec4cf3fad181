package dev.gatun.cuda;

import dev.gatun.cuda.ffi.driver.driver;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/** A loaded CUDA module ({@code cuModuleLoadData}); its kernels live until it is closed. */
public final class Module extends Resource {
    private final MemorySegment handle;
    private final Map<String, Kernel> kernels = new ConcurrentHashMap<>();
    volatile boolean fromCache;

    private Module(Device device, MemorySegment handle) {
        super(device, true);
        this.handle = handle;
    }

    static Module load(Device device, byte[] image) {
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment img = arena.allocate(image.length + 1L, 16);
            img.copyFrom(MemorySegment.ofArray(image));
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            Errors.driver(driver.cuModuleLoadData(p, img), "cuModuleLoadData");
            return new Module(device, p.get(ValueLayout.ADDRESS, 0));
        }
    }

    /** Whether the cubin came from the on-disk cache (only for modules loaded by {@link Program#load}). */
    public boolean fromCache() { return fromCache; }

    /** The {@code extern "C" __global__} function {@code name}. */
    public Kernel kernel(String name) {
        ensureOpen();
        return kernels.computeIfAbsent(name, n -> {
            device.enter();
            try (Arena arena = Arena.ofConfined()) {
                MemorySegment f = arena.allocate(ValueLayout.ADDRESS);
                Errors.driver(driver.cuModuleGetFunction(f, handle, arena.allocateFrom(n)), "cuModuleGetFunction(" + n + ")");
                return new Kernel(this, n, f.get(ValueLayout.ADDRESS, 0));
            }
        });
    }

    Device device() { return device; }

    @Override
    void release() {
        Errors.driver(driver.cuModuleUnload(handle), "cuModuleUnload");
    }
}
