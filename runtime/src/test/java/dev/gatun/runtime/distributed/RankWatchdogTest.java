package dev.gatun.runtime.distributed;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

class RankWatchdogTest {

    @Test
    @Timeout(60)
    void aRankGroupThatIgnoresTheRequestToEndIsKilledAfterTheGracePeriod() throws Exception {
        assumeTrue(RankWatchdog.available(), "no setsid or sh on this machine");
        Process rank = null;
        long child = -1;
        var dog = RankWatchdog.start(Duration.ofSeconds(1));
        try {
            // a rank that ignores SIGTERM and starts a child that ignores it too (an ignored signal stays ignored across exec)
            rank = new ProcessBuilder(dog.rankCommand(List.of("sh", "-c", "trap '' TERM; sleep 300 & echo $!; wait"))).start();
            dog.watch(rank);
            rank.getOutputStream().close();
            var line = new BufferedReader(new InputStreamReader(rank.getInputStream(), StandardCharsets.UTF_8)).readLine();
            child = Long.parseLong(line.trim());
            assertThat(LauncherTest.alive(child)).isTrue();
            assertThat(rank.isAlive()).isTrue();
            dog.close(); // what the launcher's end does: SIGTERM to the group (ignored), SIGKILL a second later
            assertThat(LauncherTest.stillAliveAfter(List.of(rank.pid(), child), Duration.ofSeconds(20))).as("the rank and its child").isEmpty();
        } finally {
            dog.close();
            if (rank != null) rank.destroyForcibly();
            if (child > 0) ProcessHandle.of(child).ifPresent(ProcessHandle::destroyForcibly);
        }
    }
}
