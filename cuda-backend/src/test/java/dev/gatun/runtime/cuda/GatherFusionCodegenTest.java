package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.lang.foreign.Arena;
import java.lang.foreign.ValueLayout;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.function.BiFunction;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The CUDA code of kernels that read an {@code index_select}'s table through its indices ({@code
 * PlanOptions.withGatherFusion}), without a GPU: every such kernel the planner makes (pointwise, transposed, row
 * kernels reducing along the row or across the picked rows; f32, bf16 and i64 tables; i32 and i64 indices) takes the
 * executable's fault record after its other parameters, checks each index against the table's rows before it reads the
 * table ({@code gt_row}, which fills the record and traps), reads the table with scalar loads only, and compiles with
 * {@code nvcc -ptx -arch=sm_90} (warnings are errors). A bad index's record is described as the host interpreter words
 * it, naming the step, the kernel and the fused op. The GPU runs them in {@link GatherFusionGpuTest}.
 */
class GatherFusionCodegenTest {

    /** A graph of one index_select and its readers: the table, the indices' type, what reads the picked rows. */
    record Case(String name, DType table, long[] tableShape, DType ids, long[] idsShape, BiFunction<Tensor, dev.gatun.dsl.GraphBuilder, Tensor> reader) {}

    static final List<Case> CASES = List.of(
            new Case("pointwise_f32_i64", DType.F32, new long[]{37, 5}, DType.I64, new long[]{3, 7}, (y, g) -> y.add(1)),
            new Case("pointwise_bf16_i32", DType.BF16, new long[]{50, 16}, DType.I32, new long[]{9}, (y, g) -> y.mul(g.input("b", DType.BF16, 9, 16)).add(1)),
            new Case("pointwise_i64_i32", DType.I64, new long[]{20, 3}, DType.I32, new long[]{6}, (y, g) -> y.mul(3).add(1)),
            new Case("transposed_f32_i32", DType.F32, new long[]{12, 8}, DType.I32, new long[]{5}, (y, g) -> y.transpose(0, 1).add(2)),
            new Case("row_softmax_bf16_i32", DType.BF16, new long[]{40, 64}, DType.I32, new long[]{12}, (y, g) -> y.softmax(1)),
            new Case("row_sum_f32_i64", DType.F32, new long[]{40, 300}, DType.I64, new long[]{2, 6}, (y, g) -> y.mul(y).sum(2)),
            new Case("sum_over_picks_f32_i32", DType.F32, new long[]{30, 8}, DType.I32, new long[]{25}, (y, g) -> y.add(1).sum(0)),
            new Case("row_sum_i64_i64", DType.I64, new long[]{9, 4, 3}, DType.I64, new long[]{7}, (y, g) -> y.sum(2)));

    static Plan plan(Case c, boolean gatherFusion) {
        var g = Gatun.graph(c.name());
        Tensor y = g.input("x", c.table(), dims(c.tableShape())).indexSelect(0, g.input("idx", c.ids(), dims(c.idsShape())));
        g.output("y", c.reader().apply(y, g));
        return Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)), PlanOptions.DEFAULT.withGatherFusion(gatherFusion));
    }

    static Object[] dims(long[] shape) {
        var out = new Object[shape.length];
        for (int i = 0; i < shape.length; i++) out[i] = shape[i];
        return out;
    }

    /** The kernels of {@code p} that gather. */
    static List<Kernel> gathering(Plan p) { return p.kernels().stream().filter(Kernel::gathers).toList(); }

    @Test
    void everyCaseFusesItsGatherAndTheSourceChecksEachIndexBeforeReadingTheTable() {
        boolean rowKernel = false;
        for (Case c : CASES) {
            Plan p = plan(c, true);
            assertThat(gathering(p)).as("%s:\n%s", c.name(), p).isNotEmpty();
            assertThat(p.steps()).as("%s: the index_select is no launch of its own", c.name()).noneMatch(s -> s instanceof Step.OpCall);
            assertThat(DeviceFault.needed(p)).as("a gathering kernel can stop the call").isTrue();
            for (Kernel k : gathering(p)) {
                rowKernel |= k.isReduction();
                String src = CudaCodegen.generate(k).source();
                assertThat(src).as(src).contains("int* gt_claim", "gatun_fault* gt_fault", "int gt_step)", "gt_row(", "gatun_fail(claim, fault, 1, step, v, at, rows, which)")
                        .contains("index_select(x, idx)");
                for (KExpr.Gather gather : KernelScope.gathersOf(k)) {
                    String table = "in" + gather.input();
                    // the table is read one element at a time, at a row the check returned
                    assertThat(Pattern.compile("gt_vec<[^>]*>\\*>\\(\\(?" + table + "\\b").matcher(src).find()).as("a vector load of the table in\n%s", src).isFalse();
                    assertThat(src).as(src).containsPattern(Pattern.quote(table + "[") + "[^\\]\\n]*gt_row\\(\\(long long\\) in" + gather.index().input() + "\\[");
                    assertThat(src).doesNotContain("gt_c0[j] = *(" + table + " +");
                }
            }
            // the same graph without the option has no such kernel, nor parameters for a record it has no use for
            Plan off = plan(c, false);
            assertThat(gathering(off)).isEmpty();
            for (Kernel k : off.kernels()) assertThat(CudaCodegen.generate(k).source()).doesNotContain("gt_claim");
        }
        assertThat(rowKernel).as("some case makes a row kernel that gathers").isTrue();
    }

    @Test
    void aGatheringKernelHasNoTileForm() {
        Kernel k = gathering(plan(CASES.getFirst(), true)).getFirst();
        assertThatThrownBy(() -> CudaCodegen.tile(k)).isInstanceOf(IllegalStateException.class).hasMessageContaining(k.name()).hasMessageContaining("index_select(");
    }

    @Test
    void everyGatheringKernelCompiles(@TempDir Path dir) throws Exception {
        Path nvcc = CudaCodegenFixtures.nvcc().orElse(null);
        assumeTrue(nvcc != null, "nvcc is not on the PATH: skipping the compile check");
        var sources = new ArrayList<KernelSource>();
        for (Case c : CASES) for (Kernel k : gathering(plan(c, true))) sources.add(CudaCodegen.generate(k));
        var unit = CudaCodegenFixtures.batch(sources);   // one translation unit: each source in a namespace of its own
        var r = CudaCodegenFixtures.compile(nvcc, dir, "gathers", unit.getKey());
        if (!r.ok())   // name the culprit: each source on its own
            for (KernelSource s : sources) {
                var one = CudaCodegenFixtures.compile(nvcc, dir, s.name(), s.source());
                assertThat(one.ok()).as("%s\n%s", one.log(), s.source()).isTrue();
            }
        assertThat(r.ok()).as(r.log()).isTrue();
        for (String name : unit.getValue()) assertThat(r.ptx()).contains(".entry " + name);
        assertThat(r.ptx()).contains("trap;");
        // a source as generated compiles on its own too (its own includes and fault record)
        KernelSource first = sources.getFirst();
        var alone = CudaCodegenFixtures.compile(nvcc, dir, "alone", first.source());
        assertThat(alone.ok()).as(alone.log()).isTrue();
    }

    @Test
    void aBadIndexIsDescribedNamingTheStepTheKernelAndTheFusedOp() {
        Plan p = plan(CASES.getFirst(), true);
        int step = -1;
        for (int i = 0; i < p.steps().size(); i++) if (p.steps().get(i) instanceof Step.Launch l && l.kernel().gathers()) step = i;
        assertThat(step).isNotNegative();
        Kernel k = ((Step.Launch) p.steps().get(step)).kernel();
        try (var arena = Arena.ofConfined()) {
            var rec = arena.allocate(DeviceFault.RECORD_BYTES);
            rec.set(ValueLayout.JAVA_INT, 0, DeviceFault.INDEX_SELECT);
            rec.set(ValueLayout.JAVA_INT, 4, step);
            rec.set(ValueLayout.JAVA_LONG, 8, 40);
            rec.set(ValueLayout.JAVA_LONG, 16, 11);
            rec.set(ValueLayout.JAVA_LONG, 24, 37);
            rec.set(ValueLayout.JAVA_LONG, 32, 0);
            assertThat(DeviceFault.describe(rec, p)).startsWith("step " + step + " (kernel " + k.name() + "(x, idx) -> ").doesNotContain("\n", "#")
                    .contains("stopped the call: kernel " + k.name() + ", which reads index_select(x, idx) -> ")
                    .endsWith(" through its indices: index 40 at position 11 of the indices is outside the 37 rows of the table (valid: 0 to 36)");
        }
    }
}
