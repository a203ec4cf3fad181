package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.LaunchChoice;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The GEMV form the planner chooses ({@code LaunchChoices}, printed on the step) is the launch {@link CudaGemv#launch}
 * makes for the same product on a GPU of the target's multiprocessors: the kernel's own rule (kept for its benchmarks)
 * and the plan's agree, so moving the choice into the plan changed no launch.
 */
class GemvFormTest {

    static Plan product(DType t, int rows, int n, int k, int sms) {
        var g = dev.gatun.dsl.Gatun.graph("gemv");
        g.output("y", g.input("x", t, rows, k).matmul(g.input("w", t, n, k).transpose(0, 1)));
        return Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)), PlanOptions.DEFAULT.withTarget(new PlanOptions.Target(sms, true)));
    }

    @Test
    void thePlansFormIsTheKernelsOwnLaunch() {
        int checked = 0;
        for (DType t : new DType[]{DType.BF16, DType.F16, DType.F32})
            for (int rows : new int[]{1, 2, 5, 8})
                for (int n : new int[]{24, 256, 2048, 128256})
                    for (int k : new int[]{64, 2048, 8192})
                        for (int sms : new int[]{1, 78, 132}) {
                            Plan p = product(t, rows, n, k, sms);
                            Step.Matmul m = (Step.Matmul) p.steps().stream().filter(s -> s instanceof Step.Matmul).findFirst().orElseThrow();
                            if (!m.gemv()) continue;
                            LaunchChoice.Gemv form = p.choice(m).gemv();
                            var want = CudaGemv.launch(t, CudaGemv.Path.auto(t, rows), rows, n, k, sms);
                            var got = CudaGemv.sliced(t, form.tensorCores() ? CudaGemv.Path.TENSOR_CORES : CudaGemv.Path.CUDA_CORES, rows, n, k,
                                    form.slices(), form.warps());
                            assertThat(got).as("%s, %d rows, %d x %d, %d SMs", t, rows, n, k, sms).isEqualTo(want);
                            assertThat(form.preload()).isTrue();   // w is a graph input
                            checked++;
                        }
        assertThat(checked).isGreaterThan(100);
    }
}
