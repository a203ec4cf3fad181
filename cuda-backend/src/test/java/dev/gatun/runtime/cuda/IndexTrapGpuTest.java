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
 * gather and scatter_add given an index outside x's dimension stop the call with the library's exception naming the
 * step, the value, its position and coordinates in the index and the bound ({@link TrapCheck}). A trap leaves the
 * process's CUDA context unusable, so each check runs in a JVM of its own, on this JVM's class path.
 */
@RequiresGpu
class IndexTrapGpuTest {
    @ParameterizedTest
    @ValueSource(strings = {"gather", "scatter_add"})
    void anIndexOutsideXStopsTheCallNamingTheStepAndTheValue(String op) throws Exception {
        var child = ChildJvm.run(TrapCheck.class, op, 120);
        String log = child.log();
        assertThat(log).as("the check's output").contains(op + ": TRAP CHECK PASSED").contains("stopped the call: index");
        assertThat(child.exit()).as(log).isZero();
    }
}
