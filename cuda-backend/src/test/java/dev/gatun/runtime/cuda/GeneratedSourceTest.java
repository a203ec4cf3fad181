package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Planner;
import org.junit.jupiter.api.Test;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/** The CUDA C a plan runs is printable from the plan, without a GPU. */
class GeneratedSourceTest {
    @Test
    void seedsPlanPrintsItsFusedKernelsAsCuda() {
        var g = Gatun.graph("seeds");
        var x = g.input("x", F32, 4, 4);
        g.output("d", x.add(1).allReduce(SUM).add(x.add(2).allReduce(SUM)).add(x.add(3).allReduce(SUM)).allReduce(SUM));
        var plan = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(2)));
        String cuda = new CudaBackend().generatedSource(plan);
        assertThat(cuda).contains("extern \"C\" __global__");
        for (var k : plan.kernels()) assertThat(cuda).contains(" " + k.name() + "(");
        assertThat(cuda.split("__global__", -1)).hasSize(plan.kernels().size() + 1);
    }
}
