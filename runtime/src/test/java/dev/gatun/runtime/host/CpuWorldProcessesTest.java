package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.ExecutionOptions.HostTransport;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.RankFailedException;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.Launcher;
import dev.gatun.runtime.distributed.Rendezvous;
import dev.gatun.runtime.distributed.RendezvousStore;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * A CPU world of separate processes: ranks started by gatun-run's launcher run random graphs with collectives, over
 * shared memory and over TCP (forced by GATUN_HOST_TRANSPORT, as a user would), and give the simulated world's
 * outputs bit for bit; a rank process that dies in the middle of a call makes its peer fail at once, naming it.
 */
@Timeout(120)
class CpuWorldProcessesTest {
    static final String CP = System.getProperty("java.class.path");
    static final List<String> FAST_JVM = List.of("-XX:TieredStopAtLevel=1", "-Xshare:auto");
    static final int GRAPHS = 6;

    /** gatun-run --nproc {@code world} --main CpuWorldRankMain graphs FIRST GRAPHS DIR, then every output compared. */
    void launchAndCompare(int world, HostTransport transport, String env, long first, Path dir) throws Exception {
        var args = new ArrayList<>(List.of("--nproc", Integer.toString(world)));
        for (String o : FAST_JVM) args.addAll(List.of("--jvm-opt", o));
        args.addAll(List.of("--main", CpuWorldRankMain.class.getName(), "graphs", Long.toString(first), Integer.toString(GRAPHS), dir.toString()));
        var out = new ByteArrayOutputStream();
        var launcher = new Launcher(new PrintStream(out, true, StandardCharsets.UTF_8), new PrintStream(out, true, StandardCharsets.UTF_8), () -> 0);
        var environment = new HashMap<>(System.getenv());
        environment.put("GATUN_HOST_TRANSPORT", env);
        launcher.environment(environment);
        int code = launcher.launch(args);
        String log = out.toString(StandardCharsets.UTF_8);
        assertThat(code).as(log).isZero();
        for (int r = 0; r < world; r++) assertThat(log).contains("[rank " + r + "] rank " + r + " ran " + GRAPHS + " graphs");
        for (long seed = first; seed < first + GRAPHS; seed++) {
            Graph g = CpuWorlds.randomGraph(seed, world);
            var expected = CpuWorlds.simulated(g, seed, world);
            var got = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < world; r++) {
                var m = new LinkedHashMap<String, NDArray>();
                for (String name : expected.get(r).keySet()) m.put(name, CpuWorlds.read(dir.resolve(seed + "-" + r + "-" + name + ".bin")));
                got.add(m);
            }
            CpuWorlds.assertSameBits(transport + " processes, seed " + seed, g, expected, got);
        }
    }

    @Test
    void fourProcessesOverSharedMemoryGiveTheSimulatedWorldsBits(@TempDir Path dir) throws Exception {
        launchAndCompare(4, HostTransport.SHARED_MEMORY, "shm", 500, dir);
    }

    @Test
    void threeProcessesOverTcpGiveTheSimulatedWorldsBits(@TempDir Path dir) throws Exception {
        launchAndCompare(3, HostTransport.TCP, "tcp", 600, dir);
    }

    /**
     * This test is rank 0 (a thread of the test JVM); rank 1 is a process of its own that ends (halt, as a crash)
     * between the graph's two all-reduces. Rank 0, waiting in the second with a timeout of a minute, fails at once,
     * naming rank 1 and the collective.
     */
    void aRankProcessThatDiesStopsItsPeer(HostTransport transport, String env, String why) throws Exception {
        String secret = HexFormat.of().formatHex(new SecureRandom().generateSeed(16));
        try (var store = RendezvousStore.start(2, secret.getBytes(StandardCharsets.UTF_8))) {
            var cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
            cmd.addAll(FAST_JVM);
            cmd.addAll(List.of("-cp", CP, CpuWorldRankMain.class.getName(), "dying"));
            var pb = new ProcessBuilder(cmd).redirectErrorStream(true);
            pb.environment().putAll(Map.of("RANK", "1", "LOCAL_RANK", "1", "WORLD_SIZE", "2", "GATUN_RENDEZVOUS", store.hostPort(),
                    "GATUN_SECRET", secret, "GATUN_RENDEZVOUS_SERVER", "external", "GATUN_HOST_TRANSPORT", env));
            Process rank1 = pb.start();
            try (var rv = Rendezvous.connect(store.address(), 0, 0, 2, secret.getBytes(StandardCharsets.UTF_8), Duration.ofSeconds(60));
                 var s = Session.compile(CpuWorlds.dyingOnRank1(), CompileOptions.world(2).rank(rv).backend("host").hostTransport(transport)
                         .timeout(Duration.ofSeconds(60)))) {
                long t0 = System.nanoTime();
                assertThatThrownBy(() -> s.runToHost(Map.of("x", NDArray.full(DType.F32, 1, 8))))
                        .isInstanceOf(RankFailedException.class)
                        .hasMessageContaining("rank 0 at ").hasMessageContaining(" = all_reduce.").hasMessageContaining(why)
                        .satisfies(e -> assertThat(((RankFailedException) e).rank()).isEqualTo(1));
                assertThat(System.nanoTime() - t0).as("at once, not after the 60 s timeout").isLessThan(TimeUnit.SECONDS.toNanos(30));
            } finally {
                boolean ended = rank1.waitFor(30, TimeUnit.SECONDS);
                if (!ended) rank1.destroyForcibly();
                String log = new String(rank1.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
                assertThat(ended).as(log).isTrue();
                assertThat(rank1.exitValue()).as(log).isEqualTo(7);
            }
        }
    }

    @Test
    void aRankProcessThatDiesStopsItsPeerOverSharedMemory() throws Exception {
        aRankProcessThatDiesStopsItsPeer(HostTransport.SHARED_MEMORY, "shm", "rank 1's process (pid ");
    }

    @Test
    void aRankProcessThatDiesStopsItsPeerOverTcp() throws Exception {
        aRankProcessThatDiesStopsItsPeer(HostTransport.TCP, "tcp", "rank 1 closed its connection");
    }
}
