package dev.gatun.runtime.distributed;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * Ends everything the ranks of one launch started, when the launcher ends, however it ends: a {@code kill -9} runs no
 * shutdown hook, and the kernel's parent-death signal reaches only the ranks, not their children.
 *
 * <p>How: each rank runs in a session and process group of its own ({@code setsid}, so the group's id is the rank's
 * pid and the kernel keeps that id from being reused while any member lives), with {@code setpriv --pdeathsig KILL}
 * so it dies with the launcher at once. Beside the ranks runs this watchdog, a small {@code sh} in a session of its
 * own, that reads the ranks' group ids from a pipe whose only writer is the launcher. When the launcher ends (exits,
 * or is killed), the pipe ends; the watchdog then sends SIGTERM to every rank's group, and SIGKILL to those still
 * alive after the grace period. What a rank starts stays in its group unless it leaves it on purpose ({@code setsid},
 * daemons), and ends with the group.
 *
 * <p>Where util-linux's {@code setsid} (or {@code /bin/sh}) is missing, there are no groups to end: the ranks still
 * die with the launcher where {@code setpriv} exists, but what they started may outlive it.
 */
final class RankWatchdog implements AutoCloseable {
    private static final String SETSID = firstExecutable("/usr/bin/setsid", "/bin/setsid");
    private static final String SETPRIV = firstExecutable("/usr/bin/setpriv", "/bin/setpriv");
    private static final String SH = firstExecutable("/bin/sh", "/usr/bin/sh");

    /**
     * Reads group ids, one a line, until the pipe ends; then TERM to each group, up to $1 seconds for them to end,
     * KILL to the rest. POSIX sh ({@code kill -15 -PGID}: dash takes no {@code --} before a negative id).
     */
    static final String SCRIPT = """
            groups=
            while read -r g; do groups="$groups $g"; done
            [ -z "$groups" ] && exit 0
            for g in $groups; do kill -15 "-$g" 2>/dev/null; done
            n=0
            while :; do
              alive=
              for g in $groups; do kill -0 "-$g" 2>/dev/null && alive="$alive $g"; done
              [ -z "$alive" ] && exit 0
              [ "$n" -ge "$1" ] && break
              groups=$alive
              sleep 1
              n=$((n + 1))
            done
            for g in $alive; do kill -9 "-$g" 2>/dev/null; done
            """;

    private final Process process;
    private final OutputStream pipe;
    private final Duration grace;

    private RankWatchdog(Process process, Duration grace) {
        this.process = process;
        this.pipe = process == null ? null : process.getOutputStream();
        this.grace = grace;
    }

    /** Whether ranks can have groups of their own here (setsid and sh exist). */
    static boolean available() { return SETSID != null && SH != null; }

    /**
     * Starts the watchdog; its stdout and stderr go nowhere, so it holds none of the launcher's streams open. Where
     * it cannot run (see {@link #available()}) or fails to start, returns one that does nothing.
     */
    static RankWatchdog start(Duration grace) {
        if (!available()) return new RankWatchdog(null, grace);
        long seconds = Math.max(1, (grace.toMillis() + 999) / 1000);
        var pb = new ProcessBuilder(SETSID, SH, "-c", SCRIPT, "gatun-run-watchdog", Long.toString(seconds))
                .redirectOutput(ProcessBuilder.Redirect.DISCARD).redirectError(ProcessBuilder.Redirect.DISCARD);
        try {
            return new RankWatchdog(pb.start(), grace);
        } catch (IOException e) {
            return new RankWatchdog(null, grace);
        }
    }

    /**
     * The command that runs {@code command} as a rank: in a session of its own when the watchdog runs (so the rank's
     * pid is its group's id), and killed by the kernel when the launcher dies where {@code setpriv} exists. Both
     * exec in place, so the rank is still the launcher's child, with the pid {@link Process#pid()} says.
     */
    List<String> rankCommand(List<String> command) {
        var out = new ArrayList<String>();
        if (process != null) out.add(SETSID);
        if (SETPRIV != null) out.addAll(List.of(SETPRIV, "--pdeathsig", "KILL", "--"));
        out.addAll(command);
        return out;
    }

    /** Has the group of {@code rank} (started with {@link #rankCommand}) ended with the launcher. */
    void watch(Process rank) {
        if (pipe == null) return;
        try {
            pipe.write((rank.pid() + "\n").getBytes(StandardCharsets.US_ASCII));
            pipe.flush();
        } catch (IOException e) {
            // the watchdog is gone; the ranks still die with the launcher through their parent-death signal
        }
    }

    /**
     * Ends the pipe, so the watchdog ends what is left of the ranks' groups (asking, then killing after the grace
     * period), and waits for it to finish.
     */
    @Override
    public void close() {
        if (process == null) return;
        try {
            pipe.close();
        } catch (IOException ignored) {
            // it reads end of stream either way
        }
        try {
            if (!process.waitFor(grace.toMillis() + 3_000, TimeUnit.MILLISECONDS)) process.destroyForcibly();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static String firstExecutable(String... paths) {
        for (String p : paths) if (Files.isExecutable(Path.of(p))) return p;
        return null;
    }
}
