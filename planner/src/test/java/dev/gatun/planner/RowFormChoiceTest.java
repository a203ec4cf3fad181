package dev.gatun.planner;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code LaunchChoices.rows}: a row kernel's form (a block a row, a warp a row, a warp a row loading ahead) is the
 * plan's, printed on its step's line, explained, and forcible. Expected forms are worked out by hand from the rule
 * (rows of at most 2 KB of their widest element and a whole number of 16-byte vectors, at least 8 rows for each
 * multiprocessor; never ahead unless forced), not by the code under test.
 */
class RowFormChoiceTest {

    static Plan plan(PlanOptions options, Consumer<GraphBuilder> body) { return PlanChecks.checkedPlan(options, body); }

    static Plan layerNorm(PlanOptions o, DType t, long rows, long cols) {
        return plan(o, g -> {
            var x = g.input("x", t, rows, cols);
            var d = x.sub(x.mean(true, -1));
            g.output("y", d.mul(d.mul(d).mean(true, -1).add(1e-5).rsqrt()).mul(g.input("w", t, cols)).add(g.input("b", t, cols)));
        });
    }

    static Plan softmax(PlanOptions o, DType t, long rows, long cols) {
        return plan(o, g -> {
            var x = g.input("x", t, rows, cols);
            var e = x.sub(x.max(true, -1)).exp();
            g.output("y", e.div(e.sum(true, -1)));
        });
    }

    static LaunchChoice.Rows rows(Plan p) {
        var launches = p.steps().stream().filter(s -> s instanceof Step.Launch l && l.kernel().isReduction()).toList();
        assertThat(launches).as("%s", p).hasSize(1);
        return p.choice(launches.getFirst()).rows();
    }

    @Test
    void theRuleTakesRowBytesAndRowsPerMultiprocessor() {
        PlanOptions o = PlanOptions.DEFAULT;
        // bf16 4096 columns: 8 KB, over 2 KB: a block a row
        assertThat(rows(layerNorm(o, DType.BF16, 4096, 4096)).warp()).isFalse();
        // bf16 1024 columns: 2 KB, 32768 rows: a warp a row, not ahead
        assertThat(rows(layerNorm(o, DType.BF16, 32768, 1024))).extracting(LaunchChoice.Rows::warp, LaunchChoice.Rows::ahead).containsExactly(true, false);
        assertThat(rows(softmax(o, DType.BF16, 32768, 1024))).extracting(LaunchChoice.Rows::warp, LaunchChoice.Rows::ahead).containsExactly(true, false);
        // f32 1024 columns: 4 KB: a block a row; f32 512: 2 KB, a warp
        assertThat(rows(layerNorm(o, DType.F32, 32768, 1024)).warp()).isFalse();
        assertThat(rows(softmax(o, DType.F32, 2048, 512)).warp()).isTrue();
        // 1000 rows < 1056: a block a row; 1056 rows: a warp
        assertThat(rows(softmax(o, DType.BF16, 1000, 1024)).warp()).isFalse();
        assertThat(rows(softmax(o, DType.BF16, 1056, 1024)).warp()).isTrue();
        // on a GPU of 100 multiprocessors 1000 rows are enough (8 x 100 = 800)
        assertThat(rows(softmax(o.withTarget(new PlanOptions.Target(100, true)), DType.BF16, 1000, 1024)).warp()).isTrue();
        // 1001 bf16 columns: not a whole number of 8-element vectors
        assertThat(rows(softmax(o, DType.BF16, 4096, 1001)).warp()).isFalse();
    }

    @Test
    void theFormIsPrintedExplainedAndInTheFingerprint() {
        Plan warp = layerNorm(PlanOptions.DEFAULT, DType.BF16, 32768, 1024);
        assertThat(warp.toString()).contains("# launch: rows[warp]").doesNotContain("rows[block]").doesNotContain("ahead");
        assertThat(warp.explain()).contains("a warp a row: 32768 rows of 1024 x 2 B, at most 2048 B, at least 8 rows for each of 132 multiprocessors");
        Plan block = layerNorm(PlanOptions.DEFAULT, DType.F32, 4096, 4096);
        assertThat(block.toString()).contains("rows[block]");
        assertThat(block.explain()).contains("a block a row: 4096 rows of 4096 x 4 B is over 2048 B");
        Plan forced = layerNorm(PlanOptions.DEFAULT.withRowForm(PlanOptions.RowForm.BLOCK), DType.BF16, 32768, 1024);
        assertThat(forced.toString()).contains("rows[block]");
        assertThat(forced.explain()).contains("a block a row, as the plan options ask");
        assertThat(forced.fingerprint()).isNotEqualTo(warp.fingerprint());
    }

    @Test
    void theOptionsForceAFormWhereTheKernelCanTakeIt() {
        for (var f : PlanOptions.RowForm.values()) {
            // 3 rows of 1024 f32 (4 KB: two fit a warp's registers): the rule gives a block (3 rows), the options any form
            var r = rows(softmax(PlanOptions.DEFAULT.withRowForm(f), DType.F32, 3, 1024));
            switch (f) {
                case AUTO, BLOCK -> assertThat(r.warp()).as("%s", f).isFalse();
                case WARP -> assertThat(r).extracting(LaunchChoice.Rows::warp, LaunchChoice.Rows::ahead).containsExactly(true, false);
                case WARP_AHEAD -> assertThat(r).extracting(LaunchChoice.Rows::warp, LaunchChoice.Rows::ahead).containsExactly(true, true);
            }
        }
        // forced ahead with rows of 16 KB: a warp a row, not ahead (two such rows do not fit), and the plan says so
        var big = rows(softmax(PlanOptions.DEFAULT.withRowForm(PlanOptions.RowForm.WARP_AHEAD), DType.F32, 3, 4096));
        assertThat(big).extracting(LaunchChoice.Rows::warp, LaunchChoice.Rows::ahead).containsExactly(true, false);
        assertThat(big.why()).contains("not ahead");
        // a row kernel folded into by the next (sum of the row sums) has no warp form, forced or not
        Plan folded = plan(PlanOptions.DEFAULT.withRowForm(PlanOptions.RowForm.WARP), g -> g.output("s", g.input("x", DType.F32, 4096, 1024).sum(-1).sum(0)));
        var launches = folded.steps().stream().filter(s -> s instanceof Step.Launch l && l.kernel().isReduction()).toList();
        for (Step s : launches)
            if (!((Step.Launch) s).kernel().folds().isEmpty()) {
                assertThat(folded.choice(s).rows().warp()).isFalse();
                assertThat(folded.choice(s).rows().why()).contains("folds its rows' values");
            }
        // a pointwise kernel has no row form
        Plan pointwise = plan(PlanOptions.DEFAULT, g -> g.output("y", g.input("x", DType.F32, 4096, 1024).exp()));
        for (Step s : pointwise.steps()) assertThat(pointwise.choice(s).rows()).isNull();
    }

    @Test
    void aheadOnlyWithAWarp() {
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> new LaunchChoice.Rows(false, true, ""))
                .isInstanceOf(dev.gatun.ir.CompilationException.class).hasMessageContaining("warp form");
    }
}
