package dev.gatun.runtime.distributed;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.IntSupplier;

/**
 * {@code gatun-run}: starts one JVM per rank on this host and supervises them.
 *
 * <pre>
 * gatun-run [options] -- &lt;java arguments: -cp ... MainClass args&gt;
 * gatun-run [options] --main CLASS [args]          (this JVM's java; the project's class path)
 * </pre>
 *
 * With {@code --main} and no {@code --cp}, the children's class path is the system property
 * {@value #CHILD_CLASS_PATH} where it is set (the {@code gatun-run} script sets it to the checkout's whole class path,
 * what {@code gatun-classpath} prints, so {@code gatun-run --main my.Main} runs any class of the built project), else
 * this JVM's own class path.
 *
 * Each child gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GATUN_RENDEZVOUS (the store this launcher hosts on
 * 127.0.0.1), GATUN_SECRET (random, new for every launch) and GATUN_RENDEZVOUS_SERVER=launcher on top of the
 * launcher's own environment, which passes through unchanged (NCCL_NVLS_ENABLE, CUDA_VISIBLE_DEVICES, ...). Output
 * is forwarded line by line with a {@code [rank r] } prefix (stdout to stdout, stderr to stderr). When a rank exits
 * with a non-zero code the launcher stops the others (destroy, then destroyForcibly after the grace period), says
 * which rank failed and exits with that rank's code.
 *
 * <p>Nothing a rank starts outlives the launch: each rank runs in a process group of its own, and a
 * {@link RankWatchdog} outside the launcher ends those groups when the launcher ends, even by {@code kill -9} (the
 * ranks themselves die with it at once, through the kernel's parent-death signal).
 */
public final class Launcher {
    static final String USAGE = """
            usage: gatun-run [options] -- <java arguments: -cp PATH MainClass args...>
                   gatun-run [options] --main CLASS [args...]
            options:
              --nproc N, --world N    ranks to start (default: the GPUs nvidia-smi lists, else 1)
              --ranks-per-gpu K       K ranks share each GPU (GATUN_RANKS_PER_GPU=K; rank r runs on GPU r / K); separate
                                      processes on one GPU need MPS for symmetric collectives (threads of one process do not)
              --allow-oversubscribe   start more ranks than GPUs (the CUDA backend refuses two ranks on one GPU unless --ranks-per-gpu says so)
              --timeout S             stop every rank and exit 124 after S seconds (default: no limit)
              --grace S               seconds between asking ranks to stop and killing them (default 5)
              --rendezvous-timeout S  default timeout of the ranks' rendezvous waits (GATUN_RENDEZVOUS_TIMEOUT)
              --cp PATH               class path of --main (default: the project's, as gatun-classpath prints it, under
                                      the gatun-run script; else the launcher's)
              --jvm-opt OPTION        a JVM option for --main children (repeatable)
            exit status: 0 when every rank exits 0; the first failing rank's code; 124 on --timeout; 2 on bad usage""";

    /** The system property that gives {@code --main} children their class path where {@code --cp} does not. */
    public static final String CHILD_CLASS_PATH = "gatun.run.classpath";

    private final PrintStream out;
    private final PrintStream err;
    private final IntSupplier gpuCount;
    private Map<String, String> baseEnvironment = System.getenv();

    /**
     * @param gpuCount the number of GPUs of this host, 0 when none or unknown (then any --nproc is allowed)
     */
    public Launcher(PrintStream out, PrintStream err, IntSupplier gpuCount) {
        this.out = Objects.requireNonNull(out);
        this.err = Objects.requireNonNull(err);
        this.gpuCount = Objects.requireNonNull(gpuCount);
    }

    /** The environment children start from (default: this process's); the rank variables are added to it. */
    public Launcher environment(Map<String, String> env) {
        this.baseEnvironment = Map.copyOf(env);
        return this;
    }

    public static void main(String[] args) {
        System.exit(run(args));
    }

    /** Runs the launcher with the real streams and GPU count; returns the exit status. */
    public static int run(String... args) {
        return new Launcher(System.out, System.err, Launcher::detectGpus).launch(List.of(args));
    }

    /** GPUs this host offers: CUDA_VISIBLE_DEVICES entries if set, else the lines of {@code nvidia-smi -L}; 0 if none. */
    public static int detectGpus() {
        String visible = System.getenv("CUDA_VISIBLE_DEVICES");
        if (visible != null) {
            int n = 0;
            for (String s : visible.split(",")) {
                String t = s.trim();
                if (t.startsWith("-")) break; // CUDA stops at the first invalid (e.g. -1) entry
                if (!t.isEmpty()) n++;
            }
            return n;
        }
        try {
            Process p = new ProcessBuilder("nvidia-smi", "-L").redirectErrorStream(true).start();
            p.getOutputStream().close();
            byte[] text = p.getInputStream().readAllBytes();
            if (!p.waitFor(10, TimeUnit.SECONDS)) {
                p.destroyForcibly();
                return 0;
            }
            if (p.exitValue() != 0) return 0;
            return (int) new String(text, StandardCharsets.UTF_8).lines().filter(l -> l.startsWith("GPU ")).count();
        } catch (IOException e) {
            return 0; // no nvidia-smi
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return 0;
        }
    }

    private static final class Usage extends Exception {
        Usage(String m) { super(m); }
    }

    private record Options(int nproc, boolean allowOversubscribe, int ranksPerGpu, Duration timeout, Duration grace, String rendezvousTimeout,
                           List<String> command) {}

    /** Parses {@code args}, starts the ranks, supervises them; returns the exit status. */
    public int launch(List<String> args) {
        Options o;
        try {
            o = parse(args);
        } catch (Usage u) {
            err.println("gatun-run: " + u.getMessage());
            err.println(USAGE);
            return 2;
        }
        if (o == null) {
            out.println(USAGE);
            return 0;
        }
        int gpus = gpuCount.getAsInt();
        int n = o.nproc() > 0 ? o.nproc() : Math.max(1, gpus * o.ranksPerGpu());
        if (gpus > 0 && n > gpus * o.ranksPerGpu() && !o.allowOversubscribe()) {
            if (o.ranksPerGpu() > 1) {
                err.println("gatun-run: " + n + " ranks asked for, but this host has " + gpus + (gpus == 1 ? " GPU" : " GPUs")
                        + " and --ranks-per-gpu " + o.ranksPerGpu() + " puts at most " + gpus * o.ranksPerGpu() + " ranks on them");
                return 2;
            }
            err.println("gatun-run: " + n + " ranks asked for, but this host has " + gpus + (gpus == 1 ? " GPU" : " GPUs")
                    + " and each rank needs its own; pass --allow-oversubscribe to start them anyway"
                    + " (the CUDA backend will refuse two ranks on one GPU); --ranks-per-gpu K lets K ranks share each GPU");
            return 2;
        }
        return supervise(n, o);
    }

    private Options parse(List<String> args) throws Usage {
        int nproc = 0, perGpu = 1;
        boolean over = false;
        Duration timeout = null, grace = Duration.ofSeconds(5);
        String rdvTimeout = null, cp = null, main = null;
        List<String> jvmOpts = new ArrayList<>(), rest = null;
        for (int i = 0; i < args.size(); i++) {
            String a = args.get(i);
            String name = a, value = null;
            int eq = a.indexOf('=');
            if (a.startsWith("--") && eq > 2) {
                name = a.substring(0, eq);
                value = a.substring(eq + 1);
            }
            switch (name) {
                case "--" -> {
                    rest = new ArrayList<>(args.subList(i + 1, args.size()));
                    i = args.size();
                }
                case "-h", "--help" -> { return null; }
                case "--allow-oversubscribe" -> over = true;
                case "--nproc", "--world", "--ranks-per-gpu", "--timeout", "--grace", "--rendezvous-timeout", "--cp", "--class-path", "--jvm-opt", "--main" -> {
                    if (value == null) {
                        if (i + 1 >= args.size()) throw new Usage(name + " needs a value");
                        value = args.get(++i);
                    }
                    switch (name) {
                        case "--nproc", "--world" -> {
                            nproc = positiveInt(name, value);
                        }
                        case "--ranks-per-gpu" -> perGpu = positiveInt(name, value);
                        case "--timeout" -> timeout = seconds(name, value);
                        case "--grace" -> grace = seconds(name, value);
                        case "--rendezvous-timeout" -> {
                            seconds(name, value);
                            rdvTimeout = value;
                        }
                        case "--cp", "--class-path" -> cp = value;
                        case "--jvm-opt" -> jvmOpts.add(value);
                        case "--main" -> {
                            main = value;
                            rest = new ArrayList<>(args.subList(i + 1, args.size()));
                            i = args.size();
                        }
                        default -> throw new IllegalStateException(name);
                    }
                }
                default -> throw new Usage("unknown option '" + a + "'");
            }
        }
        List<String> command = new ArrayList<>();
        command.add(javaExecutable());
        if (main != null) {
            command.add("--enable-native-access=ALL-UNNAMED");
            command.addAll(jvmOpts);
            command.add("-cp");
            command.add(cp != null ? cp : defaultChildClassPath());
            command.add(main);
            command.addAll(rest);
        } else {
            if (rest == null || rest.isEmpty()) throw new Usage("nothing to run: give '-- <java arguments>' or '--main CLASS'");
            if (cp != null || !jvmOpts.isEmpty()) throw new Usage("--cp and --jvm-opt go with --main; after '--' give the java arguments yourself");
            command.addAll(rest);
        }
        return new Options(nproc, over, perGpu, timeout, grace, rdvTimeout, command);
    }

    /** The class path of {@code --main} children without {@code --cp}: {@value #CHILD_CLASS_PATH}, else this JVM's. */
    static String defaultChildClassPath() {
        String project = System.getProperty(CHILD_CLASS_PATH);
        return project != null && !project.isBlank() ? project : System.getProperty("java.class.path");
    }

    private static int positiveInt(String name, String v) throws Usage {
        try {
            int i = Integer.parseInt(v.trim());
            if (i < 1) throw new Usage(name + " must be at least 1, not " + v);
            return i;
        } catch (NumberFormatException e) {
            throw new Usage(name + " needs a whole number, not '" + v + "'");
        }
    }

    private static Duration seconds(String name, String v) throws Usage {
        double s = Numbers.decimal(v);
        if (!(s > 0) || Double.isInfinite(s)) throw new Usage(name + " needs a positive number of seconds, not '" + v + "'");
        return Duration.ofMillis((long) Math.ceil(s * 1000));
    }

    /** The java launcher running this JVM. */
    static String javaExecutable() {
        var cmd = ProcessHandle.current().info().command();
        if (cmd.isPresent() && Path.of(cmd.get()).getFileName().toString().startsWith("java")) return cmd.get();
        Path p = Path.of(System.getProperty("java.home"), "bin", "java");
        return Files.isExecutable(p) ? p.toString() : "java";
    }

    // ---------------------------------------------------------------- supervision

    private int supervise(int n, Options o) {
        byte[] raw = new byte[32];
        new SecureRandom().nextBytes(raw);
        String secret = HexFormat.of().formatHex(raw);
        Process[] procs = new Process[n];
        List<Thread> pumps = new ArrayList<>();
        Thread hook = new Thread(() -> {
            for (Process p : procs) if (p != null) stop(p);
        }, "gatun-run-shutdown");
        try (var store = RendezvousStore.start(new java.net.InetSocketAddress(java.net.InetAddress.getLoopbackAddress(), 0), n,
                secret.getBytes(StandardCharsets.UTF_8), RendezvousLimits.fromEnvironment(baseEnvironment));
             var watchdog = RankWatchdog.start(o.grace())) {
            store.logDisconnects(false);
            Runtime.getRuntime().addShutdownHook(hook);
            var exited = new LinkedBlockingQueue<Integer>();
            for (int r = 0; r < n; r++) {
                var pb = new ProcessBuilder(watchdog.rankCommand(o.command()));
                var env = pb.environment();
                env.clear();
                env.putAll(baseEnvironment);
                env.put(Rendezvous.RANK, Integer.toString(r));
                env.put(Rendezvous.LOCAL_RANK, Integer.toString(r));
                env.put(Rendezvous.WORLD_SIZE, Integer.toString(n));
                env.put("LOCAL_WORLD_SIZE", Integer.toString(n));
                env.put(Rendezvous.GATUN_RENDEZVOUS, store.hostPort());
                env.put(Rendezvous.GATUN_SECRET, secret);
                env.put(Rendezvous.GATUN_RENDEZVOUS_SERVER, "launcher");
                if (o.rendezvousTimeout() != null) env.put(Rendezvous.GATUN_RENDEZVOUS_TIMEOUT, o.rendezvousTimeout());
                if (o.ranksPerGpu() > 1) env.put("GATUN_RANKS_PER_GPU", Integer.toString(o.ranksPerGpu()));
                try {
                    procs[r] = pb.start();
                    watchdog.watch(procs[r]);
                } catch (IOException e) {
                    err.println("gatun-run: cannot start rank " + r + " (" + o.command().getFirst() + "): " + e.getMessage());
                    stopAll(procs, o.grace());
                    return 1;
                }
                procs[r].getOutputStream().close();
                pumps.add(pump(procs[r].getInputStream(), out, r));
                pumps.add(pump(procs[r].getErrorStream(), err, r));
                final int rank = r;
                procs[r].onExit().thenRun(() -> exited.add(rank));
            }
            Thread familyWatch = watchFamily(procs);
            int status;
            try {
                status = watch(procs, exited, o);
            } finally {
                familyWatch.interrupt();
            }
            for (Thread t : pumps) t.join(5_000);
            out.flush();
            err.flush();
            return status;
        } catch (IOException e) {
            err.println("gatun-run: " + e.getMessage());
            stopAll(procs, o.grace());
            return 1;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            stopAll(procs, o.grace());
            return 130;
        } catch (RendezvousException e) {
            err.println("gatun-run: " + e.getMessage());
            stopAll(procs, o.grace());
            return 1;
        } finally {
            try {
                Runtime.getRuntime().removeShutdownHook(hook);
            } catch (IllegalStateException ignored) {
                // shutting down
            }
        }
    }

    private int watch(Process[] procs, LinkedBlockingQueue<Integer> exited, Options o) throws InterruptedException {
        int n = procs.length;
        int running = n;
        long jobDeadline = o.timeout() == null ? Long.MAX_VALUE : System.nanoTime() + o.timeout().toNanos();
        long killDeadline = Long.MAX_VALUE;
        int failedRank = -1, failedCode = 0;
        boolean timedOut = false;
        while (running > 0) {
            long now = System.nanoTime();
            long until = Math.min(jobDeadline, killDeadline);
            Integer r = until == Long.MAX_VALUE ? exited.take() : exited.poll(Math.max(0, until - now), TimeUnit.NANOSECONDS);
            if (r == null) {
                if (killDeadline != Long.MAX_VALUE && System.nanoTime() - killDeadline >= 0) {
                    err.println("gatun-run: ranks " + alive(procs) + " did not stop within " + Wire.human(o.grace()) + "; killing them");
                    for (Process p : procs) if (p.isAlive()) kill(p);
                    killDeadline = Long.MAX_VALUE;
                    jobDeadline = Long.MAX_VALUE;
                } else if (!timedOut) {
                    timedOut = true;
                    err.println("gatun-run: timed out after " + Wire.human(o.timeout()) + "; stopping ranks " + alive(procs));
                    for (Process p : procs) if (p.isAlive()) stop(p);
                    killDeadline = System.nanoTime() + o.grace().toNanos();
                    jobDeadline = Long.MAX_VALUE;
                }
                continue;
            }
            running--;
            int code = procs[r].exitValue();
            if (code != 0 && failedRank < 0 && !timedOut) {
                failedRank = r;
                failedCode = code;
                List<Integer> others = alive(procs);
                err.println("gatun-run: rank " + r + " exited with code " + code
                        + (others.isEmpty() ? "" : "; stopping ranks " + others));
                for (Process p : procs) if (p.isAlive()) stop(p);
                killDeadline = System.nanoTime() + o.grace().toNanos();
                jobDeadline = Long.MAX_VALUE;
            }
        }
        if (timedOut || failedRank >= 0) stopFamily(o.grace());
        if (timedOut) return 124;
        if (failedRank >= 0) {
            err.println("gatun-run: failed: rank " + failedRank + " exited with code " + failedCode);
            return failedCode > 0 && failedCode < 256 ? failedCode : 1;
        }
        return 0;
    }

    private static List<Integer> alive(Process[] procs) {
        List<Integer> l = new ArrayList<>();
        for (int i = 0; i < procs.length; i++) if (procs[i] != null && procs[i].isAlive()) l.add(i);
        return l;
    }

    private static void stop(Process p) {
        p.descendants().forEach(ProcessHandle::destroy);
        p.destroy();
    }

    private static void kill(Process p) {
        p.descendants().forEach(ProcessHandle::destroyForcibly);
        p.destroyForcibly();
    }

    /**
     * Every process a rank started, recorded while the ranks run: a rank that dies leaves its children to init, where
     * {@link Process#descendants()} no longer finds them, so stopping the job also stops what was recorded here.
     */
    private final java.util.Set<ProcessHandle> family = java.util.concurrent.ConcurrentHashMap.newKeySet();

    private Thread watchFamily(Process[] procs) {
        return Thread.ofPlatform().daemon().name("gatun-run-family").start(() -> {
            while (!Thread.currentThread().isInterrupted()) {
                for (Process p : procs) if (p != null && p.isAlive()) p.descendants().forEach(family::add);
                try {
                    Thread.sleep(50);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
    }

    /** Stops what the ranks started and left behind (asked first, killed after the grace period). */
    private void stopFamily(Duration grace) {
        var left = family.stream().filter(ProcessHandle::isAlive).toList();
        left.forEach(ProcessHandle::destroy);
        long deadline = System.nanoTime() + grace.toNanos();
        for (ProcessHandle h : left) {
            while (h.isAlive() && System.nanoTime() - deadline < 0) java.util.concurrent.locks.LockSupport.parkNanos(20_000_000);
            if (h.isAlive()) h.destroyForcibly();
        }
    }

    private void stopAll(Process[] procs, Duration grace) {
        for (Process p : procs) if (p != null && p.isAlive()) p.descendants().forEach(family::add);
        for (ProcessHandle h : family) if (h.isAlive()) h.destroy();
        for (Process p : procs) if (p != null && p.isAlive()) stop(p);
        long deadline = System.nanoTime() + grace.toNanos();
        for (Process p : procs) {
            if (p == null) continue;
            try {
                long left = deadline - System.nanoTime();
                if (left <= 0 || !p.waitFor(left, TimeUnit.NANOSECONDS)) kill(p);
            } catch (InterruptedException e) {
                kill(p);
                Thread.currentThread().interrupt();
            }
        }
        for (ProcessHandle h : family) if (h.isAlive()) h.destroyForcibly();
    }

    private static Thread pump(InputStream in, PrintStream to, int rank) {
        String prefix = "[rank " + rank + "] ";
        return Thread.ofPlatform().daemon().name("gatun-run-pump-" + rank).start(() -> {
            try (var reader = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = reader.readLine()) != null) {
                    synchronized (to) {
                        to.println(prefix + line);
                    }
                }
            } catch (IOException ignored) {
                // the child is gone
            }
        });
    }
}
