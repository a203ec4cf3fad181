package dev.gatun.cuda;

import dev.gatun.cuda.internal.RealMulticastDriverSupport;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * An NVLink multicast object ({@code cuMulticastCreate}, add device, bind memory, granularity).
 *
 * <p><b>Off unless the user opts in</b>: every entry point takes an explicit {@link OptIn} and is refused, before any
 * driver call, where the environment sets {@code NCCL_NVLS_ENABLE=0}, {@code TORCH_SYMM_MEM_DISABLE_MULTICAST=1} or
 * {@code NVSHMEM_DISABLE_NVLS=1}: on shared hosts a multicast program can take every GPU out of service.
 */
public final class Multicast implements AutoCloseable {

    /** The explicit opt-in. There is deliberately no default: callers name it. */
    public enum OptIn {
        /** I have checked that this machine's owner allows NVLink multicast. */
        I_ACCEPT_NVLINK_MULTICAST_RISKS
    }

    /** The environment variables that forbid multicast, with the value that forbids it. */
    public static final Map<String, String> KILL_SWITCHES = Map.of(
            "NCCL_NVLS_ENABLE", "0",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST", "1",
            "NVSHMEM_DISABLE_NVLS", "1");

    private final MulticastDriver driver;
    private final long handle;
    private final long size;
    private final List<long[]> bindings = new ArrayList<>(); // {device, mcOffset, size}
    private final AtomicBoolean closed = new AtomicBoolean();

    private Multicast(MulticastDriver driver, long handle, long size) {
        this.driver = driver;
        this.handle = handle;
        this.size = size;
    }

    /**
     * Why multicast is refused for this opt-in and environment, or empty where it is allowed. Pure: calls nothing.
     */
    public static Optional<String> refusal(OptIn optIn, Map<String, String> env) {
        if (optIn == null) {
            return Optional.of("multicast is off: pass Multicast.OptIn.I_ACCEPT_NVLINK_MULTICAST_RISKS to enable it");
        }
        for (var e : KILL_SWITCHES.entrySet()) {
            String v = env.get(e.getKey());
            if (v != null && forbids(e.getKey(), v.trim())) {
                return Optional.of("multicast is refused: the environment sets " + e.getKey() + "=" + v
                        + " (NVLink multicast is disabled on this machine)");
            }
        }
        return Optional.empty();
    }

    private static boolean forbids(String name, String v) {
        if (name.equals("NCCL_NVLS_ENABLE")) {
            return v.equals("0") || v.equalsIgnoreCase("false") || v.equalsIgnoreCase("no") || v.equalsIgnoreCase("off");
        }
        return v.equals("1") || v.equalsIgnoreCase("true") || v.equalsIgnoreCase("yes") || v.equalsIgnoreCase("on");
    }

    private static void check(OptIn optIn, Map<String, String> env) {
        Optional<String> r = refusal(optIn, env);
        if (r.isPresent()) {
            throw new CudaException(r.get());
        }
    }

    private static final MulticastDriver REAL = new MulticastDriver() {
        @Override public long granularity(long s, int n, boolean rec) { return RealMulticastDriverSupport.granularity(s, n, rec); }
        @Override public long create(long s, int n) { return RealMulticastDriverSupport.create(s, n); }
        @Override public void addDevice(long mc, int dev) { RealMulticastDriverSupport.addDevice(mc, dev); }
        @Override public void bindMemory(long mc, long o, long mem, long mo, long s) { RealMulticastDriverSupport.bindMemory(mc, o, mem, mo, s); }
        @Override public void unbind(long mc, int dev, long o, long s) { RealMulticastDriverSupport.unbind(mc, dev, o, s); }
        @Override public void release(long mc) { RealMulticastDriverSupport.release(mc); }
    };

    /** The multicast granularity; refused like {@link #create}. */
    public static long granularity(OptIn optIn, long size, int numDevices, boolean recommended) {
        check(optIn, System.getenv()); // refuse before anything else, CUDA's probe included
        return granularity(optIn, size, numDevices, recommended, System.getenv(), realDriver());
    }

    static long granularity(OptIn optIn, long size, int numDevices, boolean recommended, Map<String, String> env,
                            MulticastDriver driver) {
        check(optIn, env);
        return driver.granularity(size, numDevices, recommended);
    }

    /** Creates a multicast object of {@code size} bytes for {@code numDevices} devices. */
    public static Multicast create(OptIn optIn, long size, int numDevices) {
        check(optIn, System.getenv()); // refuse before anything else, CUDA's probe included
        return create(optIn, size, numDevices, System.getenv(), realDriver());
    }

    static Multicast create(OptIn optIn, long size, int numDevices, Map<String, String> env, MulticastDriver driver) {
        check(optIn, env);
        if (size <= 0 || numDevices <= 0) {
            throw new IllegalArgumentException("size and device count must be positive");
        }
        return new Multicast(driver, driver.create(size, numDevices), size);
    }

    private static MulticastDriver realDriver() {
        Cuda.requireAvailable();
        return REAL;
    }

    public long size() { return size; }

    /** The raw multicast handle, for {@code cuMemMap}. */
    public long handle() {
        ensureOpen();
        return handle;
    }

    /** Adds a device (all devices must be added before memory is bound). */
    public void addDevice(Device device) {
        ensureOpen();
        device.enter();
        driver.addDevice(handle, device.ordinal());
    }

    /** Binds {@code size} bytes of {@code memory} at {@code memOffset} to {@code mcOffset} of this object. */
    public synchronized void bind(long mcOffset, PhysicalMemory memory, long memOffset, long bytes) {
        ensureOpen();
        memory.device().enter();
        driver.bindMemory(handle, mcOffset, memory.handle(), memOffset, bytes);
        bindings.add(new long[] {memory.device().ordinal(), mcOffset, bytes});
    }

    private void ensureOpen() {
        if (closed.get()) {
            throw new IllegalStateException("multicast object is closed");
        }
    }

    /** Unbinds all bound memory and releases the object; idempotent. */
    @Override
    public synchronized void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        for (long[] b : bindings) {
            driver.unbind(handle, (int) b[0], b[1], b[2]);
        }
        bindings.clear();
        driver.release(handle);
    }
}
