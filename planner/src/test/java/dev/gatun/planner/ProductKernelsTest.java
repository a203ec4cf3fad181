package dev.gatun.planner;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;

/** {@link ProductKernels}: which products the plan gives the few-row GEMV, and when its kernels are programmatic launches. */
class ProductKernelsTest {

    static Plan plan(Consumer<GraphBuilder> body) { return PlanChecks.checkedPlan(PlanOptions.DEFAULT, body); }

    static List<Step.Matmul> products(Plan p) {
        return p.steps().stream().flatMap(s -> s.parts().stream()).filter(s -> s instanceof Step.Matmul).map(s -> (Step.Matmul) s).toList();
    }

    /** x [rows, k] of {@code t} by w [n, k] lying transposed. */
    static Plan product(DType t, int rows, int k) {
        return plan(g -> g.output("y", g.input("x", t, rows, k).matmul(g.input("w", t, 24, k).transpose(0, 1))));
    }

    @Test
    void aFewRowsByAWeightLyingTransposedAreTheGemvsAndTheRestTheLibrarys() {
        for (int rows = 1; rows <= 8; rows++) {
            assertThat(products(product(DType.BF16, rows, 32))).singleElement().matches(Step.Matmul::gemv, "bf16, " + rows + " rows");
            assertThat(products(product(DType.F16, rows, 32))).singleElement().matches(Step.Matmul::gemv, "f16, " + rows + " rows");
        }
        assertThat(products(product(DType.F32, 1, 32))).singleElement().matches(Step.Matmul::gemv);
        // float32 past one row, 16-bit types past eight, rows of a length that is no whole number of 16-byte vectors,
        // float64, and a weight that does not lie transposed: the library's
        assertThat(products(product(DType.F32, 2, 32))).singleElement().matches(m -> !m.gemv());
        assertThat(products(product(DType.BF16, 9, 32))).singleElement().matches(m -> !m.gemv());
        assertThat(products(product(DType.BF16, 2, 36))).singleElement().matches(m -> !m.gemv());
        assertThat(products(product(DType.F64, 1, 32))).singleElement().matches(m -> !m.gemv());
        assertThat(products(plan(g -> g.output("y", g.input("x", DType.BF16, 2, 32).matmul(g.input("w", DType.BF16, 32, 24))))))
                .singleElement().matches(m -> !m.gemv());
        // the plan says so on the step
        assertThat(product(DType.BF16, 2, 32).toString()).contains("matmul(x, buf0.mT)   # gemv");
        assertThat(product(DType.BF16, 9, 32).toString()).contains("matmul(x, buf0.mT)\n");
    }

    @Test
    void theKernelsAreProgrammaticLaunchesWhereEveryProductIsTheGemvByAWeightNoStepWrites() {
        Plan gemv = product(DType.BF16, 2, 32);
        assertThat(gemv.launches().programmatic()).isTrue();
        assertThat(gemv.toString()).contains("# launches: programmatic (every product the GEMV by a weight no step writes)");
        assertThat(product(DType.BF16, 9, 32).launches()).satisfies(l -> {
            assertThat(l.programmatic()).isFalse();
            assertThat(l.why()).contains("the library's");
        });
        Plan computedWeight = plan(g -> g.output("y", g.input("x", DType.BF16, 2, 32).matmul(g.input("w", DType.BF16, 24, 32).exp().transpose(0, 1))));
        assertThat(computedWeight.launches().programmatic()).isFalse();
        assertThat(computedWeight.launches().why()).contains("weight is computed in the call");
        assertThat(plan(g -> g.output("y", g.input("x", DType.F32, 4).exp())).launches().why()).isEqualTo("no product");
        // forced either way, whatever the plan holds
        var on = PlanChecks.checkedPlan(PlanOptions.DEFAULT.withProgrammaticLaunch(PlanOptions.ProgrammaticLaunch.ON),
                g -> g.output("y", g.input("x", DType.F32, 4).exp()));
        assertThat(on.launches().programmatic()).isTrue();
        var off = PlanChecks.checkedPlan(PlanOptions.DEFAULT.withProgrammaticLaunch(PlanOptions.ProgrammaticLaunch.OFF),
                g -> g.output("y", g.input("x", DType.BF16, 2, 32).matmul(g.input("w", DType.BF16, 24, 32).transpose(0, 1))));
        assertThat(off.launches().programmatic()).isFalse();
        assertThat(off.toString()).doesNotContain("launches: programmatic");
    }
}
