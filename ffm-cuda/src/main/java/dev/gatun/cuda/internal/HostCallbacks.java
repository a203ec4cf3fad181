package dev.gatun.cuda.internal;

import dev.gatun.cuda.ffi.cudart.cudaHostFn_t;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One upcall stub shared by every host callback; the {@code userData} pointer carries an id that selects the Java
 * callback. The stub lives as long as the class (global arena), so a callback may run after its stream is gone.
 */
public final class HostCallbacks {
    private static final Map<Long, Runnable> CALLBACKS = new ConcurrentHashMap<>();
    private static final AtomicLong NEXT = new AtomicLong(1);
    private static final System.Logger LOG = System.getLogger(HostCallbacks.class.getName());
    private static volatile MemorySegment stub;

    private HostCallbacks() {}

    public static long register(Runnable r) {
        long id = NEXT.getAndIncrement();
        CALLBACKS.put(id, r);
        return id;
    }

    public static void unregister(long id) {
        CALLBACKS.remove(id);
    }

    public static synchronized MemorySegment stub() {
        if (stub == null) {
            stub = cudaHostFn_t.allocate(HostCallbacks::dispatch, Arena.global());
        }
        return stub;
    }

    private static void dispatch(MemorySegment userData) {
        Runnable r = CALLBACKS.remove(userData.address());
        if (r == null) {
            return;
        }
        try {
            r.run();
        } catch (Throwable t) { // an exception must never unwind into the driver's thread
            LOG.log(System.Logger.Level.ERROR, "host callback threw", t);
        }
    }
}
