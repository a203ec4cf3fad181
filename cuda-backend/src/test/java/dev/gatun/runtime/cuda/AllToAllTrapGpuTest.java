package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * An uneven all_to_all on symmetric memory given counts past the capacity, or a negative count, stops the call on every
 * rank (two sharing one GPU) with the library's exception naming the step and the counts' rule ({@link AllToAllTrapCheck}),
 * never a truncated result. A trap leaves the process's CUDA context unusable, so each check runs in a JVM of its own.
 */
@RequiresGpu
class AllToAllTrapGpuTest {
    @ParameterizedTest
    @ValueSource(strings = {"over", "negative"})
    void refusedCountsStopTheCallOnEveryRankNamingTheStep(String which) throws Exception {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        var command = List.of(java, "--enable-native-access=ALL-UNNAMED", "-cp", System.getProperty("java.class.path"), AllToAllTrapCheck.class.getName(), which);
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        byte[] out = p.getInputStream().readAllBytes();   // until the child exits (it halts itself)
        assertThat(p.waitFor(180, TimeUnit.SECONDS)).as("the check finished").isTrue();
        String log = new String(out, StandardCharsets.UTF_8);
        assertThat(log).as("the check's output").contains(which + ": A2A TRAP CHECK PASSED");
        assertThat(p.exitValue()).as(log).isZero();
    }
}
