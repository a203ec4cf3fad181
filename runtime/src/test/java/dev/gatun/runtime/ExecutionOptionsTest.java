package dev.gatun.runtime;

import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The CUDA settings the environment gives: the measuring switches are off unless set, and a bad value is refused by name. */
class ExecutionOptionsTest {
    @Test
    void programmaticLaunchIsThePlansUnlessAskedAndABadValueIsRefused() {
        var auto = dev.gatun.planner.PlanOptions.ProgrammaticLaunch.AUTO;
        assertThat(dev.gatun.planner.PlanOptions.DEFAULT.programmaticLaunch()).isEqualTo(auto);
        assertThat(CompileOptions.programmaticLaunch(Map.of())).isEqualTo(auto);
        assertThat(CompileOptions.programmaticLaunch(Map.of("GATUN_PROGRAMMATIC_LAUNCH", "1"))).isEqualTo(dev.gatun.planner.PlanOptions.ProgrammaticLaunch.ON);
        assertThat(CompileOptions.programmaticLaunch(Map.of("GATUN_PROGRAMMATIC_LAUNCH", "0"))).isEqualTo(dev.gatun.planner.PlanOptions.ProgrammaticLaunch.OFF);
        assertThatThrownBy(() -> CompileOptions.programmaticLaunch(Map.of("GATUN_PROGRAMMATIC_LAUNCH", "yes")))
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

    @Test
    void theHostTransportIsReadAndABadValueIsRefused() {
        assertThat(ExecutionOptions.fromEnvironment(Map.of()).hostTransport()).isEqualTo(ExecutionOptions.HostTransport.AUTO);
        assertThat(ExecutionOptions.fromEnvironment(Map.of("GATUN_HOST_TRANSPORT", " SHM ")).hostTransport()).isEqualTo(ExecutionOptions.HostTransport.SHARED_MEMORY);
        assertThat(ExecutionOptions.fromEnvironment(Map.of("GATUN_HOST_TRANSPORT", "tcp")).hostTransport()).isEqualTo(ExecutionOptions.HostTransport.TCP);
        assertThat(CompileOptions.world(1).hostTransport(ExecutionOptions.HostTransport.TCP).execution().hostTransport()).isEqualTo(ExecutionOptions.HostTransport.TCP);
        assertThatThrownBy(() -> ExecutionOptions.fromEnvironment(Map.of("GATUN_HOST_TRANSPORT", "rdma")))
                .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("GATUN_HOST_TRANSPORT='rdma'").hasMessageContaining("auto (the default), shm or tcp");
    }
}
