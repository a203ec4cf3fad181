package dev.gatun.runtime;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.Function;
import java.util.function.Supplier;

/**
 * The order of one session's calls and of the reads of their outputs: what keeps a call's outputs that call's when
 * several threads share the session.
 *
 * <p>A call, a bind and close hold the lock alone (they write, or free, the memory that outputs lie in: pool slots,
 * a state's slot, a bound input's copy); reading an output holds it shared. So an output's check (is it still its
 * call's?) and its copy are one step that no call can come between: a value read is always its own call's, and an
 * output that a later call overwrote is refused by name, never read half-written. A section that writes ends by
 * counting a new version; an output carries the version its call ended with and is valid while that is the current
 * one, which makes "valid until the session's next call or bind" one comparison.
 *
 * <p>A call or bind that reads other sessions' outputs holds their locks shared for its section ({@link #holdSources}),
 * so their next calls wait until it is done with them. A lock taken by a thread inside another session's section (a
 * call reading this session's output, a bind copying it) never waits: this session's holder could be waiting for that
 * one in turn. If another thread holds this session, its call, bind or close is about to rewrite the output, which is
 * refused as overwritten at once, as it would be a moment later. A section is marked as one that writes
 * ({@link #call}, {@link #writes}) once its checks pass, before it takes any other session's lock, and nothing before
 * the mark waits; so one that finds such a session held spins only while its holder checks, and then refuses.
 */
final class CallLock {
    /** A section that wrote call memory: the version it ended with, the calls made by then, what it was, on which thread. */
    private record Change(long version, long calls, String what, String thread) {}

    /** What an output carries: its session's lock and the version its call ended with. */
    record Stamp(CallLock lock, long version) {
        /** Null while the output is its call's, else why not. */
        String whyStale() { return lock.whyStale(this); }

        /** {@code read} with the lock held shared (see {@link CallLock#read}). */
        <T> T read(Supplier<T> read, Function<String, RuntimeException> refused) { return lock.read(this, read, refused); }
    }

    /** Sections of any session that the current thread is inside: a read made there never waits. */
    private static final ThreadLocal<int[]> INSIDE = ThreadLocal.withInitial(() -> new int[1]);

    private final String session;
    private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
    private volatile Change last = new Change(0, 0, null, null);
    /** What the section in progress writes, once it passed its checks; null otherwise (guarded by the write lock). */
    private volatile Change writing;

    CallLock(String session) { this.session = session; }

    /** Runs {@code body} holding the session alone; a section marked by {@link #call} or {@link #writes} ends its outputs' validity. */
    <T> T exclusive(Supplier<T> body) {
        enter();
        try {
            return body.get();
        } finally {
            exit();
        }
    }

    void enter() {
        lock.writeLock().lock();
        INSIDE.get()[0]++;
    }

    /** {@link #enter()} if no other thread holds the session; false otherwise. */
    boolean tryEnter() {
        if (!lock.writeLock().tryLock()) return false;
        INSIDE.get()[0]++;
        return true;
    }

    /** Whether a thread holds the session alone (a call, a bind, close), not only readers of outputs. */
    boolean isHeldAlone() { return lock.isWriteLocked(); }

    void exit() {
        Change w = writing;
        if (lock.getWriteHoldCount() == 1 && w != null) {
            last = w;   // before the lock goes: a read that waited for it sees the new version
            writing = null;
        }
        INSIDE.get()[0]--;
        lock.writeLock().unlock();
    }

    /** Inside a section, once its checks passed: it is a call, which writes the outputs' memory. Returns the call's number. */
    long call() {
        Change l = last, w = writing;
        long n = (w != null ? w.calls() : l.calls()) + 1;
        writing = new Change(l.version() + 1, n, "call " + n, Thread.currentThread().getName());
        return n;
    }

    /** Inside a section, once its checks passed: it writes or frees memory outputs may lie in ({@code what}: "bound input 'cache'"). */
    void writes(String what) {
        Change l = last, w = writing;
        writing = new Change(l.version() + 1, w != null ? w.calls() : l.calls(), what, Thread.currentThread().getName());
    }

    /** Inside a call's section: the stamp of its outputs. */
    Stamp stamp() { return new Stamp(this, last.version() + 1); }

    /**
     * Runs {@code read} (which checks the output, then copies it) with the lock held shared: no call, bind or close
     * comes between the check and the copy. Inside another session's section it does not wait (see the class comment):
     * if another thread holds this session, the output is refused through {@code refused} as overwritten.
     */
    <T> T read(Stamp stamp, Supplier<T> read, Function<String, RuntimeException> refused) {
        var shared = lock.readLock();
        if (INSIDE.get()[0] == 0 || lock.isWriteLockedByCurrentThread() || lock.getReadHoldCount() > 0) shared.lock();
        else withoutWaiting(stamp, refused);
        try {
            return read.get();
        } finally {
            shared.unlock();
        }
    }

    /** Takes the lock shared, or throws through {@code refused} where another thread holds it to rewrite the output. */
    private void withoutWaiting(Stamp stamp, Function<String, RuntimeException> refused) {
        while (!lock.readLock().tryLock()) {
            String why = whyStale(stamp);   // the holder's section is marked once its checks passed, which never wait
            if (why != null) throw refused.apply(why);
            Thread.onSpinWait();
        }
    }

    /** The other sessions' locks a section holds shared while it reads their outputs; closing lets them go. */
    record Sources(List<ReentrantReadWriteLock.ReadLock> held) implements AutoCloseable {
        @Override public void close() { held.forEach(ReentrantReadWriteLock.ReadLock::unlock); }
    }

    /**
     * Inside a section of this session: holds shared, until the result is closed, the lock of every other session
     * whose output is among {@code arrays} (by what names each: "input 'y'"), so that no call of theirs overwrites it
     * while this section reads it (in place, on the host's ranks or on the GPU's stream, where it also registers to be
     * waited for by their next call). Never waits: an output whose session another thread holds is refused through
     * {@code refused}, given its name and why; so is one already overwritten.
     */
    Sources holdSources(Map<String, DeviceArray> arrays, java.util.function.BiFunction<String, String, RuntimeException> refused) {
        var held = new ArrayList<ReentrantReadWriteLock.ReadLock>();
        var locks = new java.util.HashSet<CallLock>();
        try {
            for (var e : arrays.entrySet()) {
                Stamp stamp = e.getValue().stamp();
                if (stamp == null || stamp.lock() == this) continue;
                if (locks.add(stamp.lock())) {
                    stamp.lock().withoutWaiting(stamp, why -> refused.apply(e.getKey(), why));
                    held.add(stamp.lock().lock.readLock());
                }
                String why = stamp.whyStale();
                if (why != null) throw refused.apply(e.getKey(), why);
            }
        } catch (RuntimeException failed) {
            held.forEach(ReentrantReadWriteLock.ReadLock::unlock);
            throw failed;
        }
        return new Sources(held);
    }

    /**
     * Why an output is no longer its call's, or null: a section that ended since, or one that another thread holds and
     * that writes (its call's backend may be overwriting the output right now). The holder itself still reads the
     * outputs of the call before (an input of its call may be one).
     */
    private String whyStale(Stamp stamp) {
        Change w = writing, now = last;   // in this order: exit() sets last before it clears writing
        if (now.version() != stamp.version()) return stale(now, false);
        return w != null && !lock.isWriteLockedByCurrentThread() ? stale(w, true) : null;
    }

    /** Why an output is no longer its call's: the change that ends it (the latest one), and the fixes. */
    private String stale(Change c, boolean inProgress) {
        if (c.what().equals("close")) return "belongs to session '" + session + "', which was closed";
        String on = " on thread '" + c.thread() + "'";
        String by;
        if (c.what().startsWith("call ")) by = "was overwritten by a later call: session '" + session + "' " + (inProgress ? "is running " + c.what() + on : "has run " + c.what() + " since," + on);
        else by = "is no longer valid: session '" + session + "' " + (inProgress ? "is changing (" + c.what() + ")" + on : "has " + c.what() + " since," + on);
        return by + ". An output is valid until the session's next call or bind: copy() it before then to keep it; where several threads"
                + " call one session, use runToHost or runCopied (they copy the outputs inside the call) or a session per thread";
    }
}
