package dev.gatun.runtime.host;

import dev.gatun.runtime.spi.DeviceMemory;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Set;

/**
 * Host-backend memory behind a {@link dev.gatun.runtime.DeviceArray}: a segment, owned through its own arena (arrays
 * made by toDevice, copy and bind) or borrowed (a session's pool slot, a wrapped pointer). Work on the host backend
 * is done when a call returns, so reads need no waiting.
 */
final class HostMemory implements DeviceMemory {
    final MemorySegment segment;
    /** Null for borrowed memory. */
    private final Arena arena;
    /** The executable whose pools hold this memory, or null: its calls write that memory. */
    final HostExecutable pool;
    /** Where owned memory is registered so that closing the executable frees it (copies of borrowed memory go there too). */
    private final Set<HostMemory> registry;
    private final Runnable release;

    private HostMemory(MemorySegment segment, Arena arena, HostExecutable pool, Set<HostMemory> registry, Runnable release) {
        this.segment = segment;
        this.arena = arena;
        this.pool = pool;
        this.registry = registry;
        this.release = release;
        if (arena != null) registry.add(this);
    }

    /** New zeroed memory of {@code bytes} bytes, freed by {@link #close()} or when the registry's owner closes. */
    static HostMemory allocate(long bytes, Set<HostMemory> registry) {
        Arena a = Arena.ofShared();
        return new HostMemory(a.allocate(Math.max(1, bytes), 128), a, null, registry, null);
    }

    /** Memory of {@code pool}'s pools or a call's storage, valid while the pool's call is. */
    static HostMemory borrowed(MemorySegment segment, HostExecutable pool) { return new HostMemory(segment, null, pool, pool.owned, null); }

    /** Memory the caller allocated; {@code release} runs on close. */
    static HostMemory wrapped(MemorySegment segment, Set<HostMemory> registry, Runnable release) { return new HostMemory(segment, null, null, registry, release); }

    @Override public String device() { return "host"; }
    @Override public long address() { return segment.address(); }
    @Override public long byteSize() { return segment.byteSize(); }

    @Override public String whyUnusable() {
        if (pool != null && pool.isClosed()) return "belongs to a closed session";
        if (arena != null && !arena.scope().isAlive()) return "was freed (closed, or it belongs to a closed session)";
        return null;
    }

    @Override public void read(long offset, MemorySegment dst, long bytes) { MemorySegment.copy(segment, offset, dst, 0, bytes); }

    @Override public void write(long offset, MemorySegment src, long bytes) { MemorySegment.copy(src, 0, segment, offset, bytes); }

    @Override public DeviceMemory copy(long offset, long bytes) {
        HostMemory m = allocate(bytes, registry);
        MemorySegment.copy(segment, offset, m.segment, 0, Math.min(bytes, segment.byteSize() - offset));
        return m;
    }

    @Override public synchronized void close() {
        registry.remove(this);
        if (arena != null && arena.scope().isAlive()) arena.close();
        if (release != null) release.run();
    }
}
