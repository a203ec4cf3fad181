package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * The CUDA backend does not generate a kernel that reads an index_select's table through its indices
 * ({@code PlanOptions.withGatherFusion}, off by default): it refuses such a plan by name, before any device work, and its
 * code generator refuses such a kernel, rather than run a kernel that reads rows without checking the indices.
 */
class GatherFusionRefusedTest {

    private static Plan plan(boolean gatherFusion) {
        var g = Gatun.graph("gather_add");
        g.output("y", g.input("x", DType.F32, 10, 10).indexSelect(0, g.input("idx", DType.I64, 10)).add(1));
        return Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)), PlanOptions.DEFAULT.withGatherFusion(gatherFusion));
    }

    @Test
    void aPlanWithAGatheringKernelIsRefusedByName() {
        Plan on = plan(true);
        String kernel = on.kernels().getFirst().name();
        assertThatThrownBy(() -> CudaExecutable.refuseGathers(on)).isInstanceOf(CompilationException.class)
                .hasMessageContaining("gather_add").hasMessageContaining(kernel).hasMessageContaining("withGatherFusion(false)");
        assertThatThrownBy(() -> CudaCodegen.generate(on.kernels().getFirst())).isInstanceOf(CompilationException.class)
                .hasMessageContaining(kernel).hasMessageContaining("index_select(");
        assertThatCode(() -> CudaExecutable.refuseGathers(plan(false))).doesNotThrowAnyException();
        assertThat(plan(false).kernels()).noneMatch(k -> k.gathers());
    }
}
