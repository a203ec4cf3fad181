package dev.gatun.runtime.host;

import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.RankFailedException;
import dev.gatun.runtime.distributed.Rendezvous;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;

/**
 * Exchanges through memory-mapped files, every rank on one host: each rank writes only its own file (under /dev/shm,
 * else java.io.tmpdir) and maps every peer's read-only. A file holds a header (magic, state, pid, token, the reason of
 * a failure) and a section per process group; a section holds a counter of published rounds and two slots, used in
 * turn. A round: write this rank's chunk into slot {@code round % 2}, publish the round (a release store), wait until
 * every member published it (acquire loads), copy their chunks. No member can publish round {@code q + 2}, which
 * reuses the slot, before this rank published {@code q + 1}, which it does only after reading round {@code q}: two
 * slots need no trailing barrier. A contribution larger than a slot takes several rounds.
 *
 * <p>Set-up goes through the rendezvous: each rank creates its file (filled, so a full /dev/shm fails here, not
 * with a bus error later), publishes its path and a random token, maps and checks every peer's, and says whether all
 * went well; only if every rank could, the ranks use it (all decide alike, from the same answers), and each deletes
 * its file at once, which stays mapped: nothing is left behind even if a process is killed.
 *
 * <p>A wait gives up, naming the rank and the exchange, when the peer's state says its call failed or its session
 * closed before it published the round (a peer may publish its last round, take the chunks it needs and close while
 * this rank still waits: its round is read again after its state), when its process has ended (checked by pid every 100 ms), when this rank is aborted or interrupted, or
 * after the timeout. A wait looks at the peer's round before its state, and a rank publishes its round before it reads
 * any peer's: a peer that failed on this round's contents (different shapes, steps) published it first, so this rank
 * reads the same mismatch rather than only that the peer stopped.
 */
final class SharedMemoryTransport implements Transport {
    /** The largest slot: a larger contribution takes several rounds. */
    static final long MAX_SLOT = 256 << 10;
    private static final long MAGIC = 0x4741_5455_4E53_484DL; // "GATUNSHM"
    private static final long HEADER = 512, SECTION_HEADER = 64, SLOT_HEADER = 64;
    private static final long STATE = 8, PID = 16, TOKEN = 24, REASON = 64;
    private static final long RUNNING = 0, FAILED = 1, CLOSED = 2;
    private static final VarHandle LONG = ValueLayout.JAVA_LONG.varHandle();
    private static final long LIVENESS_CHECK_NANOS = 100_000_000L;

    /** Set-up found that not every rank can map every file: why, per rank. */
    static final class Unavailable extends GatunRuntimeException {
        Unavailable(String m) { super(m); }
    }

    private final int rank;
    private final Arena arena;
    private final Path path;
    private final String directory;
    /** files[rank]: this rank's file (read-write) and every peer's (read-only). */
    private final MemorySegment[] files;
    private final ProcessHandle[] processes;
    private final List<String> groups;
    private final long slot;
    /** rounds[section]: the rounds this rank published in each section. */
    private final long[] rounds;
    private volatile String broken;
    private boolean closed;

    private SharedMemoryTransport(int rank, Arena arena, Path path, MemorySegment[] files, ProcessHandle[] processes, List<String> groups, long slot) {
        this.rank = rank;
        this.arena = arena;
        this.path = path;
        this.directory = path.getParent().toString();
        this.files = files;
        this.processes = processes;
        this.groups = List.copyOf(groups);
        this.slot = slot;
        this.rounds = new long[groups.size()];
    }

    /**
     * Sets up the files of every rank through {@code r} (keys under {@code prefix}); a section for each of {@code groups}
     * (the same list on every rank), slots of {@code slot} bytes. Throws {@link Unavailable}, on every rank alike,
     * where some rank cannot create or map them.
     */
    static SharedMemoryTransport open(Rendezvous r, String prefix, List<String> groups, long slot, Duration timeout) {
        int rank = r.rank(), world = r.worldSize();
        long size = fileBytes(groups.size(), slot);
        var token = new byte[16];
        new SecureRandom().nextBytes(token);
        Arena arena = Arena.ofShared();
        var files = new MemorySegment[world];
        var processes = new ProcessHandle[world];
        Path path = null;
        String problem = null;
        try {
            Path dir = directory();
            path = dir.resolve("gatun-" + ProcessHandle.current().pid() + "-" + HexFormat.of().formatHex(token, 0, 6) + "-rank" + rank);
            files[rank] = create(path, size, arena);
            files[rank].set(ValueLayout.JAVA_LONG, PID, ProcessHandle.current().pid());
            MemorySegment.copy(MemorySegment.ofArray(token), 0, files[rank], TOKEN, token.length);
            LONG.setRelease(files[rank], 0L, MAGIC);
        } catch (IOException | RuntimeException e) {
            problem = "cannot create " + (path == null ? "a file for shared memory" : path) + ": " + e;
        }
        try {
            var all = r.allGather(prefix + "/shm", describe(problem, path, token), timeout);
            if (problem == null) problem = mapPeers(rank, all, size, arena, files, processes);
            var verdicts = r.allGather(prefix + "/shm-mapped", (problem == null ? "" : problem).getBytes(StandardCharsets.UTF_8), timeout);
            deleteQuietly(path); // every rank mapped it, or none will use it
            var why = new ArrayList<String>();
            for (int k = 0; k < world; k++) {
                String v = new String(verdicts.get(k), StandardCharsets.UTF_8);
                if (!v.isEmpty()) why.add("rank " + k + ": " + v);
            }
            if (!why.isEmpty()) throw new Unavailable("shared memory between the ranks is not available: " + String.join("; ", why));
            return new SharedMemoryTransport(rank, arena, path, files, processes, groups, slot);
        } catch (RuntimeException e) {
            deleteQuietly(path);
            arena.close();
            throw e;
        }
    }

    /** /dev/shm where this system has it (memory, not disk), else java.io.tmpdir. */
    private static Path directory() {
        Path shm = Path.of("/dev/shm");
        return Files.isDirectory(shm) && Files.isWritable(shm) ? shm : Path.of(System.getProperty("java.io.tmpdir"));
    }

    static long fileBytes(int sections, long slot) { return HEADER + sections * sectionBytes(slot); }

    private static long sectionBytes(long slot) { return SECTION_HEADER + 2 * (SLOT_HEADER + slot); }

    /** A new file of {@code size} bytes, readable by this user only, filled with zeros and mapped. */
    private static MemorySegment create(Path path, long size, Arena arena) throws IOException {
        var attrs = path.getFileSystem().supportedFileAttributeViews().contains("posix")
                ? new java.nio.file.attribute.FileAttribute<?>[] {java.nio.file.attribute.PosixFilePermissions.asFileAttribute(
                        java.nio.file.attribute.PosixFilePermissions.fromString("rw-------"))}
                : new java.nio.file.attribute.FileAttribute<?>[0];
        try (var ch = FileChannel.open(path, java.util.Set.of(StandardOpenOption.CREATE_NEW, StandardOpenOption.READ, StandardOpenOption.WRITE), attrs)) {
            var zeros = ByteBuffer.allocate(64 << 10);
            for (long at = 0; at < size; ) {
                zeros.clear().limit((int) Math.min(zeros.capacity(), size - at));
                at += ch.write(zeros, at);
            }
            return ch.map(FileChannel.MapMode.READ_WRITE, 0, size, arena);
        }
    }

    /** "" and path and token, or the problem: what each rank tells the others. */
    private static byte[] describe(String problem, Path path, byte[] token) {
        String s = problem != null ? "!" + problem : HexFormat.of().formatHex(token) + " " + path;
        return s.getBytes(StandardCharsets.UTF_8);
    }

    /** Maps every peer's file read-only and checks its size, magic and token; the first problem, or null. */
    private static String mapPeers(int rank, List<byte[]> all, long size, Arena arena, MemorySegment[] files, ProcessHandle[] processes) {
        for (int k = 0; k < all.size(); k++) {
            if (k == rank) continue;
            String s = new String(all.get(k), StandardCharsets.UTF_8);
            if (s.startsWith("!")) return "rank " + k + " could not create its file";
            byte[] token = HexFormat.of().parseHex(s.substring(0, 32));
            Path p = Path.of(s.substring(33));
            try (var ch = FileChannel.open(p, StandardOpenOption.READ)) {
                if (ch.size() != size) return "rank " + k + "'s file " + p + " has " + ch.size() + " bytes, not " + size;
                MemorySegment f = ch.map(FileChannel.MapMode.READ_ONLY, 0, size, arena);
                if ((long) LONG.getAcquire(f, 0L) != MAGIC || !Arrays.equals(f.asSlice(TOKEN, 16).toArray(ValueLayout.JAVA_BYTE), token))
                    return "rank " + k + "'s file " + p + " is not the one it wrote (another host's, or another user's?)";
                files[k] = f;
                processes[k] = ProcessHandle.of(f.get(ValueLayout.JAVA_LONG, PID)).orElse(null);
            } catch (IOException | RuntimeException e) {
                return "cannot map rank " + k + "'s file " + p + " (" + e + "): it runs on another host, or cannot share files here";
            }
        }
        return null;
    }

    @Override public String describe() { return "shared memory (" + directory + ")"; }

    @Override public MemorySegment[] allGather(Exchange x, MemorySegment mine) {
        String b = broken;
        if (b != null) throw new RankFailedException(rank, x.where() + ": the world's shared memory is unusable after an earlier failure: " + b, null);
        int section = groups.indexOf(x.group());
        if (section < 0) throw new IllegalStateException("no section for group " + x.group());
        long total = mine.byteSize();
        var out = new MemorySegment[x.members().size()];
        for (int k = 0; k < out.length; k++) out[k] = Arena.ofAuto().allocate(Math.max(1, total), 16).asSlice(0, total);
        MemorySegment.copy(mine, 0, out[x.members().indexOf(rank)], 0, total);   // first: the output may be the input
        long deadline = System.nanoTime() + x.timeoutNanos();
        try {
            long chunks = Math.max(1, Math.ceilDiv(total, slot));
            for (long j = 0; j < chunks; j++) round(x, section, out, j * slot, Math.min(slot, total - j * slot), total, deadline);
            return out;
        } catch (RuntimeException e) {
            abort(e.getMessage());
            throw e;
        }
    }

    /** One round: this rank's bytes {@code [from, from + len)} published, every member's copied into {@code out}. */
    private void round(Exchange x, int section, MemorySegment[] out, long from, long len, long total, long deadline) {
        long q = ++rounds[section];
        MemorySegment mine = slot(files[rank], section, q);
        mine.set(ValueLayout.JAVA_LONG, 0, total);
        mine.set(ValueLayout.JAVA_LONG, 8, x.step());
        int me = x.members().indexOf(rank);
        MemorySegment.copy(out[me], from, mine, SLOT_HEADER, len);
        LONG.setRelease(files[rank], published(section), q);
        for (int k = 0; k < out.length; k++) {
            int peer = x.members().get(k);
            if (peer == rank) continue;
            await(x, peer, section, q, deadline);
            MemorySegment theirs = slot(files[peer], section, q);
            long bytes = theirs.get(ValueLayout.JAVA_LONG, 0), step = theirs.get(ValueLayout.JAVA_LONG, 8);
            if (step != x.step())
                throw new RankFailedException(peer, x.where() + ": rank " + peer + " is at step " + step + " of its plan instead;"
                        + " the ranks run different plans, or one skipped a call", null);
            if (bytes != total)
                throw new RankFailedException(peer, x.where() + ": rank " + peer + " contributes " + bytes + " bytes and this rank " + total
                        + "; every rank must call with the same shapes", null);
            MemorySegment.copy(theirs, SLOT_HEADER, out[k], from, len);
        }
    }

    private long published(int section) { return HEADER + section * sectionBytes(slot); }

    private MemorySegment slot(MemorySegment file, int section, long round) {
        return file.asSlice(published(section) + SECTION_HEADER + (round % 2) * (SLOT_HEADER + slot), SLOT_HEADER + slot);
    }

    /** Waits until {@code peer} published round {@code q} of the section: spins, then yields, then parks. */
    private void await(Exchange x, int peer, int section, long q, long deadline) {
        MemorySegment f = files[peer];
        long at = published(section), nextCheck = System.nanoTime();
        for (long spins = 0; (long) LONG.getAcquire(f, at) < q; spins++) {
            if ((spins & 63) == 0) {
                long now = System.nanoTime();
                if (now - nextCheck >= 0) {
                    check(x, peer, deadline, now, at, q);
                    nextCheck = now + LIVENESS_CHECK_NANOS / 10;
                }
            }
            if (spins < 256) Thread.onSpinWait();
            else if (spins < 2048) Thread.yield();
            else LockSupport.parkNanos(50_000);
        }
    }

    /** When the peers' processes were last checked (they are asked every {@value #LIVENESS_CHECK_NANOS} ns at most). */
    private long lastProcessCheck = System.nanoTime() - LIVENESS_CHECK_NANOS;

    /**
     * Throws, naming the peer, when it cannot come any more, or when this rank stops waiting; returns where the peer
     * published round {@code q} (at {@code at} of its file) after all, which the caller's next look finds.
     */
    private void check(Exchange x, int peer, long deadline, long now, long at, long q) {
        String b = broken;
        if (b != null) throw new RankFailedException(rank, x.where() + " stopped waiting for rank " + peer + ": " + b, null);
        if (Thread.currentThread().isInterrupted())
            throw new RankFailedException(rank, x.where() + " was interrupted while waiting for rank " + peer, null);
        MemorySegment f = files[peer];
        long state = (long) LONG.getAcquire(f, STATE);
        if (state == FAILED) throw new RankFailedException(peer, x.where() + ": rank " + peer + " stopped: " + reason(f), null);
        if (state == CLOSED) {
            // a peer publishes its last round, then closes (release stores, in that order): the round the caller read
            // before this state may be older than the close. Read after it, the round says whether the peer came (it
            // took every chunk it needed, then left) or closed without coming.
            if ((long) LONG.getAcquire(f, at) >= q) return;
            throw new RankFailedException(peer, x.where() + ": rank " + peer + " closed its session without coming", null);
        }
        if (now - lastProcessCheck >= LIVENESS_CHECK_NANOS) {
            lastProcessCheck = now;
            ProcessHandle p = processes[peer];
            if (p != null && !p.isAlive())
                throw new RankFailedException(peer, x.where() + ": rank " + peer + "'s process (pid " + p.pid() + ") has ended", null);
        }
        if (now - deadline >= 0)
            throw new RankFailedException(peer, x.where() + " timed out after " + TimeUnit.NANOSECONDS.toMillis(x.timeoutNanos())
                    + " ms waiting for rank " + peer, null);
    }

    private static String reason(MemorySegment f) {
        int n = (int) Math.min(Math.max(0, f.get(ValueLayout.JAVA_INT, REASON)), HEADER - REASON - 4);
        return new String(f.asSlice(REASON + 4, n).toArray(ValueLayout.JAVA_BYTE), StandardCharsets.UTF_8);
    }

    /** Marks this rank failed in its file, with the reason, so peers waiting for it stop at once. */
    @Override public synchronized void abort(String why) {
        if (broken != null || closed) return;
        broken = why == null ? "aborted" : why;
        byte[] text = broken.getBytes(StandardCharsets.UTF_8);
        int n = (int) Math.min(text.length, HEADER - REASON - 4);
        MemorySegment mine = files[rank];
        MemorySegment.copy(MemorySegment.ofArray(text), 0, mine, REASON + 4, n);
        mine.set(ValueLayout.JAVA_INT, REASON, n);
        LONG.setRelease(mine, STATE, FAILED);
    }

    /** Marks this rank's session closed (unless it failed), unmaps every file, deletes this rank's if still there. */
    @Override public synchronized void close() {
        if (closed) return;
        if (broken == null) {
            broken = "its session was closed";
            LONG.setRelease(files[rank], STATE, CLOSED);
        }
        closed = true;
        arena.close();
        deleteQuietly(path);
    }

    private static void deleteQuietly(Path p) {
        try {
            if (p != null) Files.deleteIfExists(p);
        } catch (IOException ignored) {
            // a file under /dev/shm or tmp that could not be deleted is harmless
        }
    }
}
