package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.spi.Backend;
import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The host half of "two backends given the same plan text launch the same steps": the host backend's launch list
 * ({@code Executable.launchList}) of a Llama decode step is the plan's steps that launch, in order, each with the
 * choices printed on its line. {@link LaunchListGpuTest} gives the same plan to the CUDA backend, which records what it
 * launched, and asserts the same list.
 */
class LaunchListTest {
    static final LlamaConfig TINY = new LlamaConfig(64, 2, 4, 2, 128, 256, 10000, 1e-5, false);

    static Plan decode(int batch, PlanOptions options) {
        return Planner.plan(Lowering.lower(LlamaDecoder.decode(TINY, batch, 64, 1, DType.BF16), LoweringOptions.world(1)), options);
    }

    /** Zeros for every input (token 0, position 0: valid), on the host. */
    static Map<String, NDArray> zeros(Plan plan) {
        var in = new HashMap<String, NDArray>();
        for (var b : plan.inputs()) in.put(b.input(), NDArray.zeros(b.dtype(), b.shape().sizes()));
        return in;
    }

    static List<String> hostList(Plan plan) {
        Backend host = java.util.ServiceLoader.load(Backend.class).stream().map(java.util.ServiceLoader.Provider::get)
                .filter(b -> b.name().equals("host")).findFirst().orElseThrow();
        try (var exe = host.load(plan, CompileOptions.world(1))) {
            return exe.launchList(List.of(zeros(plan)));
        }
    }

    @Test
    void theHostListsThePlansLaunchingStepsWithTheirChoices() {
        for (var options : List.of(PlanOptions.DEFAULT, PlanOptions.DEFAULT.withAttentionUpdates(false).withProductEpilogues(true))) {
            Plan plan = decode(1, options);
            List<String> list = hostList(plan);
            // the steps that launch, counted here from the plan's steps: everything but bookkeeping and copies
            var launching = plan.steps().stream().filter(s -> s.isDeviceWork() && !(s instanceof Step.CopyIn) && !(s instanceof Step.Barrier)).toList();
            assertThat(list).hasSize(launching.size());
            for (int i = 0; i < list.size(); i++)
                assertThat(list.get(i)).startsWith(launching.get(i).format().lines().findFirst().orElseThrow().strip());
            long products = launching.stream().filter(s -> s instanceof Step.Matmul || s instanceof Step.TiledProduct).count();
            assertThat(list.stream().filter(l -> l.contains("gemv["))).as(plan.toString()).hasSize((int) products);
            assertThat(list.stream().filter(l -> l.contains("attention[early, positions="))).as(plan.toString()).hasSize(TINY.layers());
            assertThat(list).as("a decode step of one rank at batch 1: every launch programmatic")
                    .allSatisfy(l -> assertThat(l).contains("[programmatic"));
        }
    }
}
