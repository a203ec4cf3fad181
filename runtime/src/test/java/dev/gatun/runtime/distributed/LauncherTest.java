package dev.gatun.runtime.distributed;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

@Timeout(60)
class LauncherTest {
    static final String CP = System.getProperty("java.class.path");
    static final List<String> FAST_JVM = List.of("-XX:TieredStopAtLevel=1", "-Xshare:auto");

    record Result(int code, String out, String err, Duration took) {}

    static Result launch(int gpus, Map<String, String> env, String... args) {
        var out = new ByteArrayOutputStream();
        var err = new ByteArrayOutputStream();
        var launcher = new Launcher(new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(err, true, StandardCharsets.UTF_8), () -> gpus);
        if (env != null) launcher.environment(env);
        long t0 = System.nanoTime();
        int code = launcher.launch(List.of(args));
        return new Result(code, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8), Duration.ofNanos(System.nanoTime() - t0));
    }

    static Map<String, String> envWithMulticastOff() {
        var env = new HashMap<>(System.getenv());
        env.put("NCCL_NVLS_ENABLE", "0");
        env.put("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1");
        env.put("NVSHMEM_DISABLE_NVLS", "1");
        return env;
    }

    @Test
    void twoRanksRendezvousAndTheirOutputIsPrefixed() {
        var args = new ArrayList<>(List.of("--nproc", "2"));
        for (String o : FAST_JVM) args.addAll(List.of("--jvm-opt", o));
        args.addAll(List.of("--main", RankMain.class.getName()));
        var r = launch(0, envWithMulticastOff(), args.toArray(String[]::new));
        assertThat(r.code()).as(r.err()).isZero();
        for (int rank = 0; rank < 2; rank++) {
            assertThat(r.out()).contains("[rank " + rank + "] hello from rank " + rank + " of 2 (local rank " + rank + ")")
                    .contains("[rank " + rank + "] gathered [rank-0, rank-1]")
                    .contains("[rank " + rank + "] env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 server=launcher")
                    .contains("[rank " + rank + "] done (counter ");
            assertThat(r.err()).contains("[rank " + rank + "] stderr line from rank " + rank);
        }
        assertThat(r.out().lines()).allMatch(l -> l.startsWith("[rank 0] ") || l.startsWith("[rank 1] "));
    }

    @Test
    void aFailingRankStopsTheOthersAndIsNamed() {
        var args = new ArrayList<>(List.of("--nproc", "3", "--grace", "2", "--"));
        args.addAll(FAST_JVM);
        args.addAll(List.of("-cp", CP, RankMain.class.getName(), "--fail-rank", "1", "--code", "3"));
        var r = launch(0, null, args.toArray(String[]::new));
        assertThat(r.code()).as(r.out() + r.err()).isEqualTo(3);
        assertThat(r.err()).contains("gatun-run: rank 1 exited with code 3; stopping ranks [0, 2]")
                .contains("gatun-run: failed: rank 1 exited with code 3");
        assertThat(r.out()).contains("[rank 1] rank 1 exits with code 3").doesNotContain("not stopped");
        assertThat(r.took()).isLessThan(Duration.ofSeconds(20)); // the others sleep 60 s unless stopped
    }

    @Test
    void badUsageAndOversubscription() {
        var none = launch(2, null);
        assertThat(none.code()).isEqualTo(2);
        assertThat(none.err()).contains("nothing to run").contains("usage: gatun-run");
        assertThat(launch(2, null, "--nproc", "zero", "--", "-version").err()).contains("--nproc needs a whole number, not 'zero'");
        assertThat(launch(2, null, "--bogus").err()).contains("unknown option '--bogus'");
        assertThat(launch(2, null, "--help").out()).contains("--allow-oversubscribe");

        var over = launch(2, null, "--world", "4", "--", "-version");
        assertThat(over.code()).isEqualTo(2);
        assertThat(over.err()).contains("4 ranks asked for, but this host has 2 GPUs").contains("--allow-oversubscribe");

        // allowed: three quick JVMs printing their version on stderr
        var ok = launch(2, null, "--world=3", "--allow-oversubscribe", "--", "-Xshare:auto", "-version");
        assertThat(ok.code()).as(ok.err()).isZero();
        for (int rank = 0; rank < 3; rank++) assertThat(ok.err()).containsPattern("\\[rank " + rank + "\\] .*version \"25");
        // default rank count: one per GPU
        var perGpu = launch(2, null, "--", "-Xshare:auto", "-version");
        assertThat(perGpu.err()).contains("[rank 1] ").doesNotContain("[rank 2] ");
        assertThat(launch(0, null, "--", "-version").err()).contains("[rank 0] ").doesNotContain("[rank 1] ");
    }

    @Test
    void ranksPerGpuLetsRanksShareGpusAndTellsTheChildren() {
        var tooMany = launch(1, null, "--world", "3", "--ranks-per-gpu", "2", "--", "-version");
        assertThat(tooMany.code()).isEqualTo(2);
        assertThat(tooMany.err()).contains("3 ranks asked for, but this host has 1 GPU and --ranks-per-gpu 2 puts at most 2 ranks on them");
        assertThat(launch(1, null, "--ranks-per-gpu", "0", "--", "-version").err()).contains("--ranks-per-gpu must be at least 1");

        var args = new ArrayList<>(List.of("--ranks-per-gpu", "2"));  // default world: 1 GPU x 2 ranks
        for (String o : FAST_JVM) args.addAll(List.of("--jvm-opt", o));
        args.addAll(List.of("--main", RankMain.class.getName()));
        var r = launch(1, envWithMulticastOff(), args.toArray(String[]::new));
        assertThat(r.code()).as(r.err()).isZero();
        assertThat(r.out()).contains("[rank 0] ranks per GPU 2", "[rank 1] ranks per GPU 2", "[rank 1] hello from rank 1 of 2");
    }

    static boolean alive(long pid) { return ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false); }

    /** Waits until none of {@code pids} is alive, at most {@code within}; returns those still alive then. */
    static List<Long> stillAliveAfter(List<Long> pids, Duration within) throws InterruptedException {
        long deadline = System.nanoTime() + within.toNanos();
        while (pids.stream().anyMatch(LauncherTest::alive) && System.nanoTime() - deadline < 0) Thread.sleep(50);
        return pids.stream().filter(LauncherTest::alive).toList();
    }

    @Test
    void ranksAndEverythingTheyStartedDieWithAKilledLauncher(@TempDir Path dir) throws Exception {
        var cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp", CP,
                Launcher.class.getName(), "--nproc", "2", "--"));
        cmd.addAll(FAST_JVM);
        // no rank fails: both sleep 60 s, each beside a `sleep 300` it started (its pid in dir/child-RANK.pid)
        cmd.addAll(List.of("-cp", CP, RankMain.class.getName(), "--fail-rank", "7", "--child-pid-file", dir.toString()));
        var pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().putAll(Map.of("NCCL_NVLS_ENABLE", "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", "NVSHMEM_DISABLE_NVLS", "1"));
        Process launcher = pb.start();
        launcher.getOutputStream().close();
        var ranks = new ArrayList<Long>();
        var children = new ArrayList<Long>();
        try (var lines = new java.io.BufferedReader(new java.io.InputStreamReader(launcher.getInputStream(), StandardCharsets.UTF_8))) {
            for (String line; ranks.size() < 2 && (line = lines.readLine()) != null; ) {
                int at = line.indexOf("] pid ");
                if (at > 0) ranks.add(Long.parseLong(line.substring(at + 6).trim()));
            }
            assertThat(ranks).hasSize(2);
            for (int r = 0; r < 2; r++) children.add(Long.parseLong(Files.readString(dir.resolve("child-" + r + ".pid")).trim()));
            for (long pid : ranks) assertThat(alive(pid)).as("rank pid %d alive", pid).isTrue();
            for (long pid : children) assertThat(alive(pid)).as("child pid %d of a rank alive", pid).isTrue();
            launcher.destroyForcibly();                       // SIGKILL: no shutdown hook runs
            assertThat(launcher.waitFor(10, TimeUnit.SECONDS)).isTrue();
            assertThat(stillAliveAfter(ranks, Duration.ofSeconds(20))).as("ranks alive after the launcher died").isEmpty();
            assertThat(stillAliveAfter(children, Duration.ofSeconds(20))).as("processes the ranks started, alive after the launcher died").isEmpty();
        } finally {
            launcher.destroyForcibly();
            for (long pid : ranks) ProcessHandle.of(pid).ifPresent(ProcessHandle::destroyForcibly);
            for (long pid : children) ProcessHandle.of(pid).ifPresent(ProcessHandle::destroyForcibly);
        }
    }

    @Test
    void theChildrenOfAFailedRankAreStoppedToo() throws Exception {
        var args = new ArrayList<>(List.of("--nproc", "2", "--grace", "1", "--"));
        args.addAll(FAST_JVM);
        args.addAll(List.of("-cp", CP, RankMain.class.getName(), "--spawn-child", "--fail-rank", "1", "--code", "5"));
        var r = launch(0, null, args.toArray(String[]::new));
        assertThat(r.code()).as(r.err()).isEqualTo(5);
        var children = r.out().lines().filter(l -> l.contains("] child pid ")).map(l -> Long.parseLong(l.substring(l.indexOf("child pid ") + 10).trim())).toList();
        assertThat(children).hasSize(2);
        try {
            long deadline = System.nanoTime() + Duration.ofSeconds(5).toNanos();
            for (long pid : children) {
                while (ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false) && System.nanoTime() < deadline) Thread.sleep(50);
                assertThat(ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)).as("child %d of a rank", pid).isFalse();
            }
        } finally {
            for (long pid : children) ProcessHandle.of(pid).ifPresent(ProcessHandle::destroyForcibly);
        }
    }

    @Test
    void jobTimeoutStopsEveryRank() {
        var r = launch(0, null, "--nproc", "1", "--timeout", "1.5", "--grace", "1", "--", "-Xshare:auto", "-cp", CP,
                RankMain.class.getName(), "--fail-rank", "5");
        assertThat(r.code()).isEqualTo(124);
        assertThat(r.err()).contains("gatun-run: timed out after 1.5 s; stopping ranks [0]");
        assertThat(r.took()).isLessThan(Duration.ofSeconds(15));
    }

    /** --main without --cp: the children's class path is gatun.run.classpath (what the gatun-run script sets) where it is set. */
    @Test
    void mainChildrenTakeTheClassPathTheScriptGivesUnlessCpSaysOtherwise() {
        String before = System.getProperty(Launcher.CHILD_CLASS_PATH);
        try {
            System.setProperty(Launcher.CHILD_CLASS_PATH, "/no/such/dir");
            var wrong = launch(0, null, "--nproc", "1", "--jvm-opt", "-Xshare:auto", "--main", RankMain.class.getName());
            assertThat(wrong.code()).as(wrong.out() + wrong.err()).isNotZero();
            assertThat(wrong.err()).contains("ClassNotFoundException: " + RankMain.class.getName());

            var given = launch(0, envWithMulticastOff(), "--nproc", "2", "--cp", CP, "--main", RankMain.class.getName());
            assertThat(given.code()).as(given.err()).isZero();
            assertThat(given.out()).contains("[rank 1] gathered [rank-0, rank-1]");

            System.setProperty(Launcher.CHILD_CLASS_PATH, CP);
            var project = launch(0, envWithMulticastOff(), "--nproc", "2", "--main", RankMain.class.getName());
            assertThat(project.code()).as(project.err()).isZero();
            assertThat(project.out()).contains("[rank 0] gathered [rank-0, rank-1]");
        } finally {
            if (before == null) System.clearProperty(Launcher.CHILD_CLASS_PATH);
            else System.setProperty(Launcher.CHILD_CLASS_PATH, before);
        }
    }

    @Test
    void theScriptRunsTheLauncherAndPassesTheEnvironmentThrough() throws Exception {
        Path script = Path.of("..", "gatun-run").toAbsolutePath().normalize();
        assumeTrue(Files.isExecutable(script), "gatun-run not found at " + script);
        var cmd = new ArrayList<>(List.of(script.toString(), "--nproc", "2", "--"));
        cmd.addAll(FAST_JVM);
        cmd.addAll(List.of("-cp", CP, RankMain.class.getName()));
        var pb = new ProcessBuilder(cmd).redirectErrorStream(true);
        pb.environment().putAll(Map.of("NCCL_NVLS_ENABLE", "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", "NVSHMEM_DISABLE_NVLS", "1",
                "JAVA_HOME", System.getProperty("java.home"), "GATUN_SECRET", "not-the-launchers"));
        pb.environment().remove("CUDA_VISIBLE_DEVICES");
        Process p = pb.start();
        p.getOutputStream().close();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(30, TimeUnit.SECONDS)).isTrue();
        assertThat(p.exitValue()).as(out).isZero();
        assertThat(out).contains("[rank 0] gathered [rank-0, rank-1]", "[rank 1] gathered [rank-0, rank-1]",
                "[rank 1] env NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 server=launcher");
    }
}
