package dev.gatun.cuda;

import dev.gatun.cuda.ffi.driver.CUlaunchAttribute_st;
import dev.gatun.cuda.ffi.driver.CUlaunchConfig_st;
import dev.gatun.cuda.ffi.driver.driver;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SegmentAllocator;
import java.lang.foreign.ValueLayout;

/**
 * A kernel of a loaded {@link Module}. {@link #launch} packs Java arguments: {@code Integer}, {@code Long},
 * {@code Float}, {@code Double}, {@code Short}, {@code Byte}, {@code Boolean} (one byte), {@code Character} (two
 * bytes) by value; {@link DeviceBuffer}, {@link PinnedHostBuffer} and {@link MemorySegment} as pointers. Kernel
 * parameters must match those C types exactly (for example {@code int} for Integer, {@code float*} for a buffer).
 */
public final class Kernel {
    private final Module module;
    private final String name;
    private final MemorySegment function;

    Kernel(Module module, String name, MemorySegment function) {
        this.module = module;
        this.name = name;
        this.function = function;
    }

    public String name() { return name; }

    /** The raw {@code CUfunction}. */
    public MemorySegment handle() {
        module.ensureOpen();
        return function;
    }

    /**
     * How many blocks of {@code blockSize} threads (and {@code dynamicSharedBytes} of dynamic shared memory) can be
     * resident on one multiprocessor at once, given this kernel's registers and shared memory
     * ({@code cuOccupancyMaxActiveBlocksPerMultiprocessor}): what a grid that loops over its work should be sized by.
     */
    public int residentBlocksPerMultiprocessor(int blockSize, long dynamicSharedBytes) {
        module.ensureOpen();
        Device device = module.device();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment n = arena.allocate(java.lang.foreign.ValueLayout.JAVA_INT);
            Errors.driver(driver.cuOccupancyMaxActiveBlocksPerMultiprocessor(n, function, blockSize, dynamicSharedBytes),
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor(" + name + ", " + blockSize + " threads)");
            return n.get(java.lang.foreign.ValueLayout.JAVA_INT, 0);
        }
    }

    /** Launches with {@code cuLaunchKernel}. */
    public void launch(LaunchConfig config, Object... args) { launch(config, false, args); }

    /**
     * Launches with {@code cuLaunchKernelEx} and programmatic stream serialization: the kernel may be scheduled before
     * the previous kernel on the stream has finished (Hopper and later). The kernel must wait for it itself
     * ({@code griddepcontrol.wait}) before it touches any memory; launching one that does not is a data race.
     */
    public void launchOverlapped(LaunchConfig config, Object... args) { launch(config, true, args); }

    private void launch(LaunchConfig config, boolean overlapped, Object[] args) {
        module.ensureOpen();
        Device device = module.device();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment params = pack(arena, args);
            Dim3 g = config.grid();
            Dim3 b = config.block();
            if (!overlapped) {
                Errors.driver(driver.cuLaunchKernel(function, g.x(), g.y(), g.z(), b.x(), b.y(), b.z(),
                        config.sharedMemBytes(), Stream.handleOf(config.stream()), params, MemorySegment.NULL),
                        "cuLaunchKernel(" + name + ")");
                return;
            }
            MemorySegment attr = CUlaunchAttribute_st.allocate(arena);
            attr.fill((byte) 0);
            CUlaunchAttribute_st.id(attr, driver.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION());
            CUlaunchAttribute_st.value(attr).set(ValueLayout.JAVA_INT, 0, 1); // programmaticStreamSerializationAllowed
            MemorySegment cfg = CUlaunchConfig_st.allocate(arena);
            cfg.fill((byte) 0);
            CUlaunchConfig_st.gridDimX(cfg, g.x());
            CUlaunchConfig_st.gridDimY(cfg, g.y());
            CUlaunchConfig_st.gridDimZ(cfg, g.z());
            CUlaunchConfig_st.blockDimX(cfg, b.x());
            CUlaunchConfig_st.blockDimY(cfg, b.y());
            CUlaunchConfig_st.blockDimZ(cfg, b.z());
            CUlaunchConfig_st.sharedMemBytes(cfg, config.sharedMemBytes());
            CUlaunchConfig_st.hStream(cfg, Stream.handleOf(config.stream()));
            CUlaunchConfig_st.attrs(cfg, attr);
            CUlaunchConfig_st.numAttrs(cfg, 1);
            Errors.driver(driver.cuLaunchKernelEx(cfg, function, params, MemorySegment.NULL), "cuLaunchKernelEx(" + name + ", programmatic)");
        }
    }

    /** Packs arguments into a {@code void*[]} whose entries point at each value, as cuLaunchKernel wants. */
    static MemorySegment pack(SegmentAllocator arena, Object... args) {
        MemorySegment params = arena.allocate(ValueLayout.ADDRESS, Math.max(1, args.length));
        for (int i = 0; i < args.length; i++) {
            params.setAtIndex(ValueLayout.ADDRESS, i, value(arena, args[i], i));
        }
        return params;
    }

    private static MemorySegment value(SegmentAllocator a, Object arg, int index) {
        return switch (arg) {
            case Integer v -> a.allocateFrom(ValueLayout.JAVA_INT, v);
            case Long v -> a.allocateFrom(ValueLayout.JAVA_LONG, v);
            case Float v -> a.allocateFrom(ValueLayout.JAVA_FLOAT, v);
            case Double v -> a.allocateFrom(ValueLayout.JAVA_DOUBLE, v);
            case Short v -> a.allocateFrom(ValueLayout.JAVA_SHORT, v);
            case Byte v -> a.allocateFrom(ValueLayout.JAVA_BYTE, v);
            case Boolean v -> a.allocateFrom(ValueLayout.JAVA_BYTE, (byte) (v ? 1 : 0));
            case Character v -> a.allocateFrom(ValueLayout.JAVA_CHAR, v);
            case DeviceBuffer b -> a.allocateFrom(ValueLayout.JAVA_LONG, b.address());
            case PinnedHostBuffer b -> a.allocateFrom(ValueLayout.JAVA_LONG, b.address());
            case MemorySegment s -> a.allocateFrom(ValueLayout.JAVA_LONG, s.address());
            case null -> throw new IllegalArgumentException("kernel argument " + index + " is null");
            default -> throw new IllegalArgumentException("kernel argument " + index + " has unsupported type "
                    + arg.getClass().getName());
        };
    }

    @Override
    public String toString() {
        return "Kernel[" + name + "]";
    }
}
