package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.runtime.CompileOptions;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The GPU half of "two backends given the same plan text launch the same steps": the CUDA backend, given the plan the
 * host lists in {@link LaunchListTest}, records each launch of a call with the choices it passed to its kernel
 * (programmatic, the GEMV's form, attention's early load), and the list is the host's. The plan is made for an H200
 * (the default target), whatever GPU runs the test: the backend launches what the plan says.
 */
@RequiresGpu
class LaunchListGpuTest {

    @Test
    void theCudaBackendLaunchesWhatThePlanSays() {
        for (int batch : new int[]{1, 8})
            for (var options : List.of(PlanOptions.DEFAULT, PlanOptions.DEFAULT.withAttentionUpdates(false).withProductEpilogues(true))) {
                Plan plan = LaunchListTest.decode(batch, options);
                List<String> host = LaunchListTest.hostList(plan);
                try (var exe = new CudaBackend().load(plan, CompileOptions.world(1))) {
                    assertThat(exe.launchList(List.of(LaunchListTest.zeros(plan)))).as(plan.toString()).isEqualTo(host);
                }
            }
    }
}
