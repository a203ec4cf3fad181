package dev.gatun.planner;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import java.util.function.BiFunction;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;

/** {@link GatedProducts}: which products and the SwiGLU after them become one launch, and which stay two. */
class GatedProductsTest {

    static Plan plan(PlanOptions options, Consumer<GraphBuilder> body) { return PlanChecks.checkedPlan(options, body); }

    /** x [rows, k] by w [2h, k] lying transposed, then {@code glu} of the product's two halves, into the output "y". */
    static Consumer<GraphBuilder> mlp(int rows, int h, int k, DType t, BiFunction<Tensor, Tensor, Tensor> glu) {
        return g -> {
            Tensor y = g.input("x", t, rows, k).matmul(g.input("w", t, 2 * h, k).transpose(0, 1));
            g.output("y", glu.apply(y.slice(1, 0, h), y.slice(1, h, 2 * h)));
        };
    }

    static final BiFunction<Tensor, Tensor, Tensor> SWIGLU = (gate, up) -> gate.silu().mul(up);

    static long gated(Plan p) { return p.steps().stream().filter(s -> s instanceof Step.GatedProduct).count(); }

    @Test
    void aProductOfAFewRowsAndTheSwiGluAfterItAreOneLaunch() {
        for (int rows : new int[]{1, 3, 8})
            for (DType t : new DType[]{DType.BF16, DType.F32}) {
                Plan p = plan(PlanOptions.DEFAULT, mlp(rows, 24, 32, t, SWIGLU));
                assertThat(p.steps()).as(p.toString()).filteredOn(s -> s instanceof Step.GatedProduct).singleElement().satisfies(s -> {
                    var g = (Step.GatedProduct) s;
                    assertThat(g.output().shape().sizes()).containsExactly(rows, 24);
                    assertThat(g.product().output().shape().sizes()).containsExactly(rows, 48);
                    assertThat(g.roundsGate()).isFalse();   // the default holds silu's result in float32
                });
                assertThat(p.steps()).noneMatch(s -> s instanceof Step.Matmul || s instanceof Step.Launch);
                assertThat(p.toString()).contains("launch swiglu_0 {", "= matmul(x, buf0.mT)", "stores silu(gate) * up");
                // the option off: the product, then the kernel; the same pools
                Plan apart = plan(PlanOptions.DEFAULT.withGatedProducts(false), mlp(rows, 24, 32, t, SWIGLU));
                assertThat(gated(apart)).isZero();
                assertThat(apart.steps()).filteredOn(s -> s instanceof Step.Matmul).hasSize(1);
                assertThat(apart.pools()).isEqualTo(p.pools());
            }
        // a plan rounding every op rounds silu's result before the product, as its kernel would
        Plan rounding = plan(PlanOptions.DEFAULT.withRoundEachOp(true), mlp(2, 24, 32, DType.BF16, SWIGLU));
        assertThat(rounding.steps()).filteredOn(s -> s instanceof Step.GatedProduct).singleElement()
                .satisfies(s -> assertThat(((Step.GatedProduct) s).roundsGate()).isTrue());
    }

    @Test
    void otherGatesMoreRowsAndOtherReadersStayTwoSteps() {
        // the halves the other way round, another activation, the gate's own silu only
        assertThat(gated(plan(PlanOptions.DEFAULT, mlp(1, 24, 32, DType.BF16, (gate, up) -> up.silu().mul(gate))))).isZero();
        assertThat(gated(plan(PlanOptions.DEFAULT, mlp(1, 24, 32, DType.BF16, (gate, up) -> gate.gelu().mul(up))))).isZero();
        assertThat(gated(plan(PlanOptions.DEFAULT, mlp(1, 24, 32, DType.BF16, (gate, up) -> gate.silu().add(up))))).isZero();
        // more rows than a decode step's batch: a product of its own, and the SwiGLU's launch says why
        Plan nine = plan(PlanOptions.DEFAULT, mlp(9, 24, 32, DType.BF16, SWIGLU));
        assertThat(gated(nine)).isZero();
        assertThat(nine.toString()).contains("# not one launch with the product before it (a gated product): the product has 9 rows, not 1 to 8");
        // the product is also a graph output, or read by another op
        assertThat(gated(plan(PlanOptions.DEFAULT, g -> {
            Tensor y = g.input("x", DType.BF16, 2, 32).matmul(g.input("w", DType.BF16, 48, 32).transpose(0, 1));
            g.output("y", y.slice(1, 0, 24).silu().mul(y.slice(1, 24, 48)));
            g.output("raw", y);
        }))).isZero();
        Plan read = plan(PlanOptions.DEFAULT, g -> {
            Tensor y = g.input("x", DType.BF16, 2, 32).matmul(g.input("w", DType.BF16, 48, 32).transpose(0, 1));
            g.output("y", y.slice(1, 0, 24).silu().mul(y.slice(1, 24, 48)));
            g.output("s", y.sum(1));
        });
        assertThat(gated(read)).as(read.toString()).isZero();
        assertThat(read.toString()).contains("(a gated product): another step reads the product");
        // the product written straight into its slice of a concatenation, or the SwiGLU into its slice of one: the
        // concatenation is what others read
        Plan intoCat = plan(PlanOptions.DEFAULT, g -> {
            Tensor x = g.input("x", DType.BF16, 2, 32);
            Tensor y = x.matmul(g.input("w", DType.BF16, 48, 32).transpose(0, 1));
            Tensor both = y.cat(1, x);
            g.output("y", both.slice(1, 0, 24).silu().mul(both.slice(1, 24, 48)));
        });
        assertThat(gated(intoCat)).as(intoCat.toString()).isZero();
        Plan outCat = plan(PlanOptions.DEFAULT, g -> {
            Tensor x = g.input("x", DType.BF16, 2, 32);
            Tensor y = x.matmul(g.input("w", DType.BF16, 48, 32).transpose(0, 1));
            g.output("y", y.slice(1, 0, 24).silu().mul(y.slice(1, 24, 48)).cat(1, x));
        });
        assertThat(gated(outCat)).as(outCat.toString()).isZero();
        // a weight that does not lie transposed ([k, 2h])
        assertThat(gated(plan(PlanOptions.DEFAULT, g -> {
            Tensor y = g.input("x", DType.BF16, 2, 32).matmul(g.input("w", DType.BF16, 32, 48));
            g.output("y", y.slice(1, 0, 24).silu().mul(y.slice(1, 24, 48)));
        }))).isZero();
    }

    /**
     * Joined before memory planning, the SwiGLU's output is written while the product still reads its input, so it never
     * takes that slot (apart, the SwiGLU may write where the product's input was: the decode layer's plan does).
     */
    @Test
    void theSwiGlusOutputNeverTakesTheSlotOfTheProductsInput() {
        for (int rows : new int[]{1, 8})
            for (int[] hk : new int[][]{{8, 64}, {24, 32}, {64, 16}}) {
                int h = hk[0], k = hk[1];
                Plan p = plan(PlanOptions.DEFAULT, g -> {
                    Tensor x = g.input("x0", DType.BF16, rows, k).exp();   // the product's input in the pool, dead after it
                    Tensor y = x.matmul(g.input("w", DType.BF16, 2 * h, k).transpose(0, 1));
                    g.output("y", y.slice(1, 0, h).silu().mul(y.slice(1, h, 2 * h)));
                });
                var joined = (Step.GatedProduct) p.steps().stream().filter(s -> s instanceof Step.GatedProduct).findFirst().orElseThrow(() -> new AssertionError(p));
                var x = joined.product().a().storage().placement();
                for (var written : java.util.List.of(joined.output().placement(), joined.product().output().placement()))
                    assertThat(x.pool().equals(written.pool()) && x.offset() < written.offset() + written.bytes() && written.offset() < x.offset() + x.bytes())
                            .as("rows %d h %d k %d: %s against the input's %s\n%s", rows, h, k, written, x, p).isFalse();
            }
    }
}
