package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Event;
import dev.gatun.cuda.Stream;

import java.lang.foreign.MemorySegment;
import java.util.stream.IntStream;

/**
 * Copies between ordinary host memory and the GPU through page-locked staging, in parts, so that the processors' copies
 * of some parts run while the copy engine moves others.
 *
 * <p>Why: the copy engine reads and writes only page-locked memory at full speed (about 48 GB/s one way on an H200
 * host: 4 MiB in 88 us), and an ordinary array must pass through staging. Done in one piece by one thread, the
 * processor's copy (16 GB/s there) comes on top of the engine's. So a copy is cut into up to {@link #PARTS} parts of
 * 4 KiB multiples, and several threads (the common fork-join pool) each take parts: on the way in a thread copies a
 * part into staging and queues that part's host-to-device copy at once; on the way out every part's device-to-host
 * copy is queued first, an event after each, and a thread copies a part on as soon as its event completes. A segment
 * confined to its thread is copied by that thread alone, part after part.
 *
 * <p>What it cannot do: the processors' copy and the engine share the host's memory, and measured there they hardly
 * overlap (eight threads copy 4 MiB in 126 us; staged in parallel, in takes 237 us, out 255 us, against 88 and 83 us
 * page-locked). Arrays from {@code Session.allocateHost} skip the staging and its copy altogether.
 *
 * <p>Nothing here decides what is copied or where: the caller owns the staging, the stream and the events, and has
 * ordered these copies after whatever else used the staging.
 */
final class StagedCopies {
    private StagedCopies() {}

    /** The most parts a copy is cut into: one event each on the way out. */
    static final int PARTS = 16;
    /**
     * The least bytes a part holds: a smaller copy is cut into fewer parts. Measured on an H200 host (HostStagingBench,
     * 4 MiB): parts of 1 MiB taken by several threads beat 256 and 512 KiB ones (in 237 against 282 us, out 255 against
     * 270), and one thread part after part is slower than one copy then one transfer (399 against 334 us).
     */
    static final long MIN_PART = 1L << 20;

    /** The part size for {@code bytes}: a multiple of 4 KiB, at least {@link #MIN_PART}, at most {@link #PARTS} parts. */
    static long part(long bytes) {
        long c = Math.max(MIN_PART, (bytes + PARTS - 1) / PARTS);
        return (c + 4095) & ~4095L;
    }

    private static int parts(long bytes, long part) { return (int) ((bytes + part - 1) / part); }

    /** Copies {@code src} into {@code staging} (page-locked) and queues its copy to {@code dst} on {@code stream}, part by part. */
    static void in(MemorySegment src, MemorySegment staging, DeviceBuffer dst, Stream stream) {
        in(src, staging, dst, stream, part(src.byteSize()), shared(src));
    }

    /** {@link #in} with parts of {@code p} bytes, taken by several threads where {@code parallel}. */
    static void in(MemorySegment src, MemorySegment staging, DeviceBuffer dst, Stream stream, long p, boolean parallel) {
        long bytes = src.byteSize();
        IntStream parts = IntStream.range(0, parts(bytes, p));
        (parallel ? parts.parallel() : parts).forEach(i -> {
            long off = i * p, n = Math.min(p, bytes - off);
            MemorySegment.copy(src, off, staging, off, n);
            dst.copyFromAsync(staging.asSlice(off, n), off, stream);
        });
    }

    /**
     * Reads {@code bytes} at device address {@code src} into {@code dst} through {@code staging} (page-locked), on
     * {@code stream}; {@code events} (at least {@link #PARTS}) mark each part's arrival. Returns when {@code dst} holds them.
     */
    static void out(Device device, long src, MemorySegment staging, MemorySegment dst, long bytes, Stream stream, Event[] events) {
        out(device, src, staging, dst, bytes, stream, events, part(bytes), shared(dst));
    }

    /** {@link #out} with parts of {@code p} bytes, taken by several threads where {@code parallel}. */
    static void out(Device device, long src, MemorySegment staging, MemorySegment dst, long bytes, Stream stream, Event[] events, long p, boolean parallel) {
        int n = parts(bytes, p);
        for (int i = 0; i < n; i++) {
            long off = i * p, len = Math.min(p, bytes - off);
            DeviceBuffer.wrap(device, src + off, len).copyToAsync(staging.asSlice(off, len), 0, stream);
            events[i].record(stream);
        }
        IntStream parts = IntStream.range(0, n);
        (parallel ? parts.parallel() : parts).forEach(i -> {
            long off = i * p;
            events[i].synchronize();
            MemorySegment.copy(staging, off, dst, off, Math.min(p, bytes - off));
        });
    }

    /** Events for {@link #out}: {@link #PARTS} of them, without timing. */
    static Event[] events(Device device) {
        var out = new Event[PARTS];
        try {
            for (int i = 0; i < PARTS; i++) out[i] = device.createEvent(Event.Flag.DISABLE_TIMING);
            return out;
        } catch (RuntimeException e) {
            for (Event ev : out) if (ev != null) ev.close();
            throw e;
        }
    }

    /** Whether threads other than the caller's may read or write the segment (not confined to one thread). */
    private static boolean shared(MemorySegment s) { return s.isAccessibleBy(ANOTHER); }

    /** A thread that never runs: a segment it may access is one any thread may. */
    private static final Thread ANOTHER = Thread.ofPlatform().unstarted(() -> {});
}
