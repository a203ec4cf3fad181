package dev.gatun.runtime;

import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The CUDA settings the environment gives: the measuring switches are off unless set, and a bad value is refused by name. */
class ExecutionOptionsTest {
    @Test
    void programmaticLaunchIsThePlansUnlessAskedAndABadValueIsRefused() {
        var auto = ExecutionOptions.ProgrammaticLaunch.AUTO;
        assertThat(ExecutionOptions.DEFAULT.cuda().programmaticLaunch()).isEqualTo(auto);
        assertThat(ExecutionOptions.fromEnvironment(Map.of()).cuda().programmaticLaunch()).isEqualTo(auto);
        assertThat(ExecutionOptions.fromEnvironment(Map.of("GATUN_PROGRAMMATIC_LAUNCH", "1")).cuda().programmaticLaunch()).isEqualTo(ExecutionOptions.ProgrammaticLaunch.ON);
        assertThat(ExecutionOptions.fromEnvironment(Map.of("GATUN_PROGRAMMATIC_LAUNCH", "0")).cuda().programmaticLaunch()).isEqualTo(ExecutionOptions.ProgrammaticLaunch.OFF);
        assertThat(ExecutionOptions.DEFAULT.cuda().withProgrammaticLaunch(false).programmaticLaunch()).isEqualTo(ExecutionOptions.ProgrammaticLaunch.OFF);
        assertThatThrownBy(() -> ExecutionOptions.fromEnvironment(Map.of("GATUN_PROGRAMMATIC_LAUNCH", "yes")))
                .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("GATUN_PROGRAMMATIC_LAUNCH='yes'");
    }

    @Test
    void theBarrierFreeBackoffIsReadAndChecked() {
        assertThat(ExecutionOptions.fromEnvironment(Map.of()).cuda().barrierFreeBackoffNs()).isZero();
        assertThat(ExecutionOptions.fromEnvironment(Map.of("GATUN_BARRIER_FREE_BACKOFF_NS", " 250 ")).cuda().barrierFreeBackoffNs()).isEqualTo(250);
        assertThatThrownBy(() -> ExecutionOptions.fromEnvironment(Map.of("GATUN_BARRIER_FREE_BACKOFF_NS", "fast")))
                .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("GATUN_BARRIER_FREE_BACKOFF_NS='fast'");
        assertThatThrownBy(() -> ExecutionOptions.fromEnvironment(Map.of("GATUN_BARRIER_FREE_BACKOFF_NS", "-5")))
                .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("0 to 1000000 ns, not -5");
    }
}
