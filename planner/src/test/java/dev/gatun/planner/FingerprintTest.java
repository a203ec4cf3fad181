package dev.gatun.planner;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

class FingerprintTest {

    @Test
    void fingerprintsAreIdenticalAcrossRepeatedPlanning() {
        var first = FingerprintMain.lines();
        assertThat(FingerprintMain.lines()).isEqualTo(first);
        assertThat(first).doesNotHaveDuplicates();
        assertThat(first).allSatisfy(l -> assertThat(l).matches(".* [0-9a-f]{64}"));
    }

    @Test
    void fingerprintsAreIdenticalInASecondJvm() throws IOException, InterruptedException {
        String java = ProcessHandle.current().info().command().orElse(System.getProperty("java.home") + "/bin/java");
        var cmd = new ArrayList<>(List.of(java, "-Xss4m", "-cp", System.getProperty("java.class.path"), FingerprintMain.class.getName()));
        var proc = new ProcessBuilder(cmd).redirectErrorStream(false).start();
        proc.getOutputStream().close();
        var err = new StringBuilder();
        var errReader = Thread.ofVirtual().start(() -> {
            try { err.append(new String(proc.getErrorStream().readAllBytes(), StandardCharsets.UTF_8)); } catch (IOException ignored) { }
        });
        String out = new String(proc.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(proc.waitFor(120, TimeUnit.SECONDS)).isTrue();
        errReader.join();
        assertThat(proc.exitValue()).as(err.toString()).isZero();
        var here = FingerprintMain.lines();
        assertThat(out.strip().lines().toList()).isEqualTo(here);
    }
}
