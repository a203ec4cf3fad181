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
 * never a truncated result; a part of a joined step (two all_to_alls, one kernel) names its own step line. A trap leaves the process's CUDA context unusable, so each check runs in a JVM of its own.
 */
@RequiresGpu
class AllToAllTrapGpuTest {
    @ParameterizedTest
    @ValueSource(strings = {"over", "negative", "joined"})
    void refusedCountsStopTheCallOnEveryRankNamingTheStep(String which) throws Exception {
        var child = ChildJvm.run(AllToAllTrapCheck.class, which, 180);
        String log = child.log();
        assertThat(log).as("the check's output").contains(which + ": A2A TRAP CHECK PASSED");
        assertThat(child.exit()).as(log).isZero();
    }
}
