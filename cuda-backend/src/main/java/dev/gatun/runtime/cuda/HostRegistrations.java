package dev.gatun.runtime.cuda;

import dev.gatun.cuda.CudaException;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.RegisteredHostMemory;
import dev.gatun.runtime.NDArray;

import java.lang.ref.WeakReference;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Ordinary host arrays that a session reads or fills again and again, page-locked in place so the copy engine moves
 * them at full speed instead of through staging ({@link HostStaging}, about three times slower for a round trip).
 *
 * <p>The rule: an array whose memory is its own ({@link NDArray#ownsMemory}: freed only by the garbage collector) of at
 * least {@link #MIN_BYTES} is page-locked the second time a copy uses it (a fresh output of {@code toHost} or
 * {@code runToHost} is used once, and locking it would cost more than staging it). While it is locked this class holds
 * the array, so its memory cannot be freed and its addresses reused while the driver copies to its pages; the least
 * recently used arrays are unlocked, then let go of, once more than {@link #capacity} bytes are locked, and all of
 * them when the session closes. Memory the caller wraps ({@link NDArray#wrap}) is never locked: its owner may free it
 * at any time. Where locking fails (a limit on locked memory, pages locked already) the array is staged, and not tried
 * again.
 */
final class HostRegistrations {
    /** The least bytes worth locking: below this a staged copy costs a few microseconds. */
    static final long MIN_BYTES = 1L << 20;
    /** How many arrays seen once are remembered ({@link #candidates}). */
    private static final int SEEN = 64;

    private final Device device;
    private final long capacity;
    /** Locked arrays by address, least recently used first; an array whose lock failed is held weakly, without a lock. */
    private final LinkedHashMap<Long, Entry> locked = new LinkedHashMap<>(16, 0.75f, true);
    /** Arrays a copy used once, not held (weakly referenced): the second use locks them. */
    private final WeakReference<?>[] candidates = new WeakReference<?>[SEEN];
    private int next;
    private long bytes;

    /** A locked array (held, with its lock), or one whose lock failed (weakly held, no lock). */
    private record Entry(NDArray array, WeakReference<NDArray> failed, RegisteredHostMemory lock) {
        boolean of(NDArray a) { return lock != null ? array == a : failed.get() == a; }
    }

    /** Locks at most {@code capacity} bytes on {@code device}. */
    HostRegistrations(Device device, long capacity) {
        this.device = device;
        this.capacity = capacity;
    }

    /**
     * Runs {@code copy} (which queues a copy between {@code a}'s memory and the GPU and waits for it) if the copy engine
     * may reach {@code a}'s memory directly: it is locked, or is locked now because this is its second use. Returns
     * whether it ran. The copy runs under this object's monitor, so no other thread unlocks the memory meanwhile.
     */
    synchronized boolean copyDirect(NDArray a, Runnable copy) {
        if (!lockedForCopy(a)) return false;
        copy.run();
        return true;
    }

    private boolean lockedForCopy(NDArray a) {
        if (!a.ownsMemory() || a.byteSize() < MIN_BYTES || a.byteSize() > capacity) return false;
        long address = a.segment().address();
        Entry e = locked.get(address);
        if (e != null && e.of(a)) return e.lock != null;
        if (e != null) forget(address, e); // another array now lies there: the earlier one was collected
        if (!seenBefore(a)) return false;
        RegisteredHostMemory lock;
        try {
            lock = device.register(a.segment());
        } catch (CudaException | IllegalArgumentException failed) {
            lock = null; // staged from now on
        }
        locked.put(address, lock != null ? new Entry(a, null, lock) : new Entry(null, new WeakReference<>(a), null));
        if (lock != null) bytes += a.byteSize();
        evictBeyond(address);
        return lock != null;
    }

    /** Remembers {@code a} and answers whether it was remembered already. */
    private boolean seenBefore(NDArray a) {
        for (WeakReference<?> r : candidates) if (r != null && r.get() == a) return true;
        candidates[next] = new WeakReference<>(a);
        next = (next + 1) % SEEN;
        return false;
    }

    /**
     * Unlocks the least recently used arrays (never {@code keep}) until at most {@link #capacity} bytes are locked, and
     * forgets the oldest failures beyond {@link #SEEN} entries.
     */
    private void evictBeyond(long keep) {
        for (Iterator<Map.Entry<Long, Entry>> it = locked.entrySet().iterator(); it.hasNext(); ) {
            if (bytes <= capacity && locked.size() <= SEEN) return;
            var e = it.next();
            if (e.getKey() == keep || e.getValue().lock != null && bytes <= capacity) continue;
            it.remove();
            unlock(e.getValue());
        }
    }

    private void forget(long address, Entry e) {
        locked.remove(address);
        unlock(e);
    }

    private void unlock(Entry e) {
        if (e.lock == null) return;
        e.lock.close(); // before the array is let go of: its memory outlives the lock
        bytes -= e.array.byteSize();
    }

    /** How many bytes are locked now. */
    synchronized long lockedBytes() { return bytes; }

    /** Unlocks everything, each failure kept in {@code failed}. */
    synchronized void close(List<RuntimeException> failed) {
        for (Entry e : locked.values()) if (e.lock != null) CudaExecutable.quietly(failed, e.lock::close);
        locked.clear();
        bytes = 0;
    }
}
