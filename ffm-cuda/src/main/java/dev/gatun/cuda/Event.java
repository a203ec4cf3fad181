package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cudart.cudart;
import dev.gatun.cuda.internal.Errors;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** A CUDA event: ordering between streams, timing, and (with {@link Flag#INTERPROCESS}) sharing with other processes. */
public final class Event extends Resource {
    /** Event creation flags. */
    public enum Flag {
        /** No timing data (cheaper); implied by {@link #INTERPROCESS}. */
        DISABLE_TIMING,
        /** The host blocks (instead of spinning) in {@link Event#synchronize()}. */
        BLOCKING_SYNC,
        /** The event can be exported with {@link Event#ipcHandle()}; implies {@link #DISABLE_TIMING}. */
        INTERPROCESS
    }

    private final MemorySegment handle;
    private final boolean timing;

    private Event(Device device, MemorySegment handle, boolean timing) {
        super(device, true);
        this.handle = handle;
        this.timing = timing;
    }

    static int flags(Flag... flags) {
        int f = cudart.cudaEventDefault();
        for (Flag flag : flags) {
            f |= switch (flag) {
                case DISABLE_TIMING -> cudart.cudaEventDisableTiming();
                case BLOCKING_SYNC -> cudart.cudaEventBlockingSync();
                case INTERPROCESS -> cudart.cudaEventInterprocess() | cudart.cudaEventDisableTiming();
            };
        }
        return f;
    }

    static Event create(Device device, Flag... flags) {
        int f = flags(flags);
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            Errors.cudart(cudart.cudaEventCreateWithFlags(p, f), "cudaEventCreateWithFlags");
            return new Event(device, p.get(ValueLayout.ADDRESS, 0), (f & cudart.cudaEventDisableTiming()) == 0);
        }
    }

    static Event openIpc(Device device, IpcEventHandle h) {
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            MemorySegment hs = arena.allocate(IpcEventHandle.SIZE);
            hs.copyFrom(MemorySegment.ofArray(h.bytes()));
            Errors.cudart(cudart.cudaIpcOpenEventHandle(p, hs), "cudaIpcOpenEventHandle");
            return new Event(device, p.get(ValueLayout.ADDRESS, 0), false);
        }
    }

    MemorySegment handle() {
        ensureOpen();
        return handle;
    }

    public boolean hasTiming() { return timing; }

    /** Records this event on {@code stream} ({@code null}: the legacy default stream). */
    public void record(Stream stream) {
        ensureOpen();
        device.enter();
        Errors.cudart(cudart.cudaEventRecord(handle, Stream.handleOf(stream)), "cudaEventRecord");
    }

    /**
     * Records this event on {@code stream} as a node of its own where the stream is being captured into a graph
     * ({@code cudaEventRecordExternal}): each replay of the graph records it when the work before it is done, so a
     * replayed graph can be timed between its nodes. Outside a capture it is {@link #record}.
     */
    public void recordExternal(Stream stream) {
        ensureOpen();
        device.enter();
        Errors.cudart(cudart.cudaEventRecordWithFlags(handle, Stream.handleOf(stream), cudart.cudaEventRecordExternal()), "cudaEventRecordWithFlags");
    }

    /** Blocks until the work before the last record is done. */
    public void synchronize() {
        ensureOpen();
        device.enter();
        Errors.cudart(cudart.cudaEventSynchronize(handle), "cudaEventSynchronize");
    }

    /** Whether the work before the last record is done. */
    public boolean isDone() {
        ensureOpen();
        device.enter();
        int rc = cudart.cudaEventQuery(handle);
        if (rc == cudart.cudaErrorNotReady()) {
            return false;
        }
        Errors.cudart(rc, "cudaEventQuery");
        return true;
    }

    /** Milliseconds between {@code start} and {@code end}, both recorded and completed timing events. */
    public static float elapsedMillis(Event start, Event end) {
        start.ensureOpen();
        end.ensureOpen();
        start.device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment ms = arena.allocate(ValueLayout.JAVA_FLOAT);
            Errors.cudart(cudart.cudaEventElapsedTime(ms, start.handle, end.handle), "cudaEventElapsedTime");
            return ms.get(ValueLayout.JAVA_FLOAT, 0);
        }
    }

    /** Exports this (interprocess) event for another process. */
    public IpcEventHandle ipcHandle() {
        ensureOpen();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment h = arena.allocate(IpcEventHandle.SIZE);
            Errors.cudart(cudart.cudaIpcGetEventHandle(h, handle), "cudaIpcGetEventHandle");
            return IpcEventHandle.of(h.toArray(ValueLayout.JAVA_BYTE));
        }
    }

    @Override
    void release() {
        Errors.cudart(cudart.cudaEventDestroy(handle), "cudaEventDestroy");
    }

    @Override
    public String toString() {
        return "Event[device " + device.ordinal() + (timing ? ", timing" : "") + "]";
    }
}
