package dev.gatun.runtime.distributed;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Ranks started by the launchers people already use: each one's variables, as those launchers set them. */
class LaunchEnvironmentTest {

    @Test
    void torchrun() {
        var job = LaunchEnvironment.of(Map.of("RANK", "5", "WORLD_SIZE", "8", "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "4",
                "MASTER_ADDR", "node07", "MASTER_PORT", "29500", "TORCHELASTIC_RUN_ID", "none"));
        assertThat(job).isEqualTo(new LaunchEnvironment("gatun", 5, 8, 1, 4, "node07:29501"));
    }

    @Test
    void slurm() {
        var job = LaunchEnvironment.of(Map.of("SLURM_PROCID", "6", "SLURM_NTASKS", "8", "SLURM_LOCALID", "2",
                "SLURM_NTASKS_PER_NODE", "4(x2)", "SLURM_JOB_ID", "1234", "GATUN_RENDEZVOUS", "head:4000"));
        assertThat(job).isEqualTo(new LaunchEnvironment("slurm", 6, 8, 2, 4, "head:4000"));
    }

    @Test
    void openMpi() {
        var job = LaunchEnvironment.of(Map.of("OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4",
                "OMPI_COMM_WORLD_LOCAL_RANK", "3", "OMPI_COMM_WORLD_LOCAL_SIZE", "4", "MASTER_ADDR", "10.0.0.1"));
        assertThat(job).isEqualTo(new LaunchEnvironment("openmpi", 3, 4, 3, 4, "10.0.0.1:29501"));
    }

    @Test
    void gatunRunsOwnVariablesWinAndNoLauncherMeansNoJob() {
        var both = new HashMap<>(Map.of("RANK", "1", "WORLD_SIZE", "2", "LOCAL_RANK", "1", "SLURM_PROCID", "0", "SLURM_NTASKS", "1",
                "GATUN_RENDEZVOUS", "127.0.0.1:7000", "MASTER_ADDR", "elsewhere"));
        assertThat(LaunchEnvironment.of(both)).isEqualTo(new LaunchEnvironment("gatun", 1, 2, 1, null, "127.0.0.1:7000"));
        assertThat(LaunchEnvironment.of(Map.of("HOME", "/root"))).isNull();
    }

    @Test
    void nonsenseIsNamed() {
        assertThatThrownBy(() -> LaunchEnvironment.of(Map.of("SLURM_PROCID", "4", "SLURM_NTASKS", "4")))
                .hasMessageContaining("SLURM_PROCID=4 must be below SLURM_NTASKS=4");
        assertThatThrownBy(() -> LaunchEnvironment.of(Map.of("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "4",
                "OMPI_COMM_WORLD_LOCAL_RANK", "2", "OMPI_COMM_WORLD_LOCAL_SIZE", "2")))
                .hasMessageContaining("OMPI_COMM_WORLD_LOCAL_RANK=2 must be below OMPI_COMM_WORLD_LOCAL_SIZE=2");
        assertThatThrownBy(() -> LaunchEnvironment.of(Map.of("RANK", "0", "WORLD_SIZE", "x")))
                .hasMessageContaining("WORLD_SIZE='x' is not an integer");
        assertThatThrownBy(() -> LaunchEnvironment.of(Map.of("WORLD_SIZE", "2")))
                .hasMessageContaining("RANK is not set").hasMessageContaining("srun");
        assertThatThrownBy(() -> LaunchEnvironment.of(Map.of("RANK", "0", "WORLD_SIZE", "1", "MASTER_ADDR", "h", "MASTER_PORT", "65535")))
                .hasMessageContaining("no port above it");
    }

    @Test
    @Timeout(60)
    void twoSlurmRanksMeetAtMasterPortPlusOne() throws Exception {
        int port;
        try (var s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        var env = Map.of("SLURM_PROCID", "0", "SLURM_NTASKS", "2", "SLURM_LOCALID", "0", "MASTER_ADDR", "127.0.0.1",
                "MASTER_PORT", Integer.toString(port - 1), "GATUN_SECRET", "job-secret");
        var rank1 = new HashMap<>(env);
        rank1.putAll(Map.of("SLURM_PROCID", "1", "SLURM_LOCALID", "1"));
        var f1 = CompletableFuture.supplyAsync(() -> {
            try (var r1 = Rendezvous.fromEnvironment(rank1)) {
                return new String(r1.allGather("who", "one".getBytes(StandardCharsets.UTF_8)).get(0), StandardCharsets.UTF_8) + "/" + r1.localRank();
            }
        });
        try (var r0 = Rendezvous.fromEnvironment(env)) {   // rank 0 hosts the store at MASTER_PORT + 1
            assertThat(r0.address().getPort()).isEqualTo(port);
            assertThat(r0.worldSize()).isEqualTo(2);
            r0.allGather("who", "zero".getBytes(StandardCharsets.UTF_8));
            assertThat(f1.get(30, TimeUnit.SECONDS)).isEqualTo("zero/1");
        }
    }
}
