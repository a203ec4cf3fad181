package dev.gatun.planner;

import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.function.Consumer;

import static org.assertj.core.api.Assertions.assertThat;

/** {@link RotaryProducts} and {@link RotaryKernel}: which products and the rotations of their heads become one launch. */
class RotaryProductsTest {
    /** Rotate-half RoPE of the last dimension (d) of {@code x} by tables [1, d], as the Llama decoder writes it. */
    static Tensor rope(Tensor x, Tensor cos, Tensor sin, int d) {
        Tensor x1 = x.slice(-1, 0, d / 2), x2 = x.slice(-1, d / 2, d);
        Tensor c1 = cos.slice(-1, 0, d / 2), c2 = cos.slice(-1, d / 2, d), s1 = sin.slice(-1, 0, d / 2), s2 = sin.slice(-1, d / 2, d);
        return x1.mul(c1).sub(x2.mul(s1)).cat(-1, x2.mul(c2).add(x1.mul(s2)));
    }

    /**
     * A decode step's q|k|v projection of {@code rows} sequences: hq query, hk key and as many value heads of {@code d}; the
     * query and key heads rotated by one kernel where there is one row (they lie side by side), by two otherwise.
     * Outputs "q", "k" (rotated) and "v".
     */
    static Consumer<GraphBuilder> qkv(int rows, int hq, int hk, int d, int k, DType t) {
        return g -> {
            Tensor cos = g.input("cos", t, 1, d), sin = g.input("sin", t, 1, d);
            Tensor y = g.input("x", t, rows, k).exp().matmul(g.input("w", t, (hq + 2 * hk) * d, k).transpose(0, 1)).reshape(rows, 1, hq + 2 * hk, d);
            if (rows == 1) {
                Tensor qk = rope(y.slice(2, 0, hq + hk).transpose(1, 2), cos, sin, d);
                g.output("q", qk.slice(1, 0, hq));
                g.output("k", qk.slice(1, hq, hq + hk));
            } else {
                g.output("q", rope(y.slice(2, 0, hq).transpose(1, 2), cos, sin, d));
                g.output("k", rope(y.slice(2, hq, hq + hk).transpose(1, 2), cos, sin, d));
            }
            g.output("v", y.slice(2, hq + hk, hq + 2 * hk).transpose(1, 2));
        };
    }

    /** A rotation of the halves x1, x2 of 4 heads of 16 by the tables' halves c[0], c[1] and s[0], s[1]. */
    interface Rotation { Tensor of(Tensor x1, Tensor x2, Tensor[] c, Tensor[] s); }

    /** A product of one row, its 4 heads of 16 rotated by {@code r}, into the output "q". */
    static Plan oneHead(Rotation r) {
        return PlanChecks.checkedPlan(PlanOptions.DEFAULT, g -> {
            Tensor cos = g.input("cos", DType.BF16, 1, 16), sin = g.input("sin", DType.BF16, 1, 16);
            Tensor x = g.input("x", DType.BF16, 1, 32).matmul(g.input("w", DType.BF16, 64, 32).transpose(0, 1)).reshape(1, 1, 4, 16).transpose(1, 2);
            g.output("q", r.of(x.slice(-1, 0, 8), x.slice(-1, 8, 16), new Tensor[]{cos.slice(-1, 0, 8), cos.slice(-1, 8, 16)},
                    new Tensor[]{sin.slice(-1, 0, 8), sin.slice(-1, 8, 16)}));
        });
    }

    static List<Step.RotaryProduct> rotary(Plan p) {
        return p.steps().stream().filter(s -> s instanceof Step.RotaryProduct).map(s -> (Step.RotaryProduct) s).toList();
    }

    @Test
    void aProductOfAFewRowsAndTheRotationsOfItsHeadsAreOneLaunch() {
        for (int rows : new int[]{1, 2, 8})
            for (DType t : new DType[]{DType.BF16, DType.F32}) {
                int hq = 4, hk = 2, d = 16;
                Plan p = PlanChecks.checkedPlan(PlanOptions.DEFAULT, qkv(rows, hq, hk, d, 32, t));
                assertThat(rotary(p)).as(p.toString()).singleElement().satisfies(r -> {
                    var rs = r.rotations();
                    assertThat(rs).hasSize(rows == 1 ? 1 : 2);
                    assertThat(rs).allSatisfy(k -> {
                        assertThat(k.half()).isEqualTo(d / 2);
                        assertThat(k.roundsEachOp()).isFalse();
                        assertThat(k.cos().name()).isEqualTo("cos");
                        assertThat(k.sin().name()).isEqualTo("sin");
                    });
                    // the runs of heads: q then k side by side, or each its own (in the order the schedule put them)
                    var runs = rs.stream().map(k -> List.of(k.firstHead(), k.heads())).toList();
                    if (rows == 1) assertThat(runs).containsExactly(List.of(0, hq + hk));
                    else assertThat(runs).containsExactlyInAnyOrder(List.of(0, hq), List.of(hq, hk));
                    for (var k : rs) {
                        // each rotated head is its own d elements of a row of its run's output
                        assertThat(k.headStride()).isEqualTo(k.heads() == 1 ? 0 : d);
                        if (rows > 1) assertThat(k.rowStride()).isEqualTo((long) k.heads() * d);
                    }
                });
                // the launches left: the input's exp only
                assertThat(p.steps()).noneMatch(s -> s instanceof Step.Matmul);
                assertThat(p.steps()).filteredOn(s -> s instanceof Step.Launch).hasSize(1);
                assertThat(p.toString()).contains("launch rotary_0 {", "stores both and their rotation");
                // the option off: the product, then the kernels
                Plan apart = PlanChecks.checkedPlan(PlanOptions.DEFAULT.withRotaryProducts(false), qkv(rows, hq, hk, d, 32, t));
                assertThat(rotary(apart)).isEmpty();
                assertThat(apart.steps()).filteredOn(s -> s instanceof Step.Launch).hasSize(rows == 1 ? 2 : 3);
                assertThat(apart.steps()).filteredOn(s -> s instanceof Step.Matmul).hasSize(1);
            }
        // a plan rounding every op rounds each multiplication, as the rotation's kernel would
        Plan rounding = PlanChecks.checkedPlan(PlanOptions.DEFAULT.withRoundEachOp(true), qkv(1, 4, 2, 16, 32, DType.BF16));
        assertThat(rotary(rounding)).singleElement().satisfies(r -> assertThat(r.rotations().getFirst().roundsEachOp()).isTrue());
    }

    @Test
    void otherRotationsAndMoreRowsStayApart() {
        // the sign of the first half's sine term turned, and the halves crossed the other way (x2 rotated by the first
        // half's tables): not the rotation this launch computes
        assertThat(rotary(oneHead((x1, x2, c, sn) -> x1.mul(c[0]).add(x2.mul(sn[0])).cat(-1, x2.mul(c[1]).add(x1.mul(sn[1])))))).isEmpty();
        assertThat(rotary(oneHead((x1, x2, c, sn) -> x2.mul(c[0]).sub(x1.mul(sn[0])).cat(-1, x1.mul(c[1]).add(x2.mul(sn[1])))))).isEmpty();
        // and the decoder's form, written the same way, is one
        assertThat(rotary(oneHead((x1, x2, c, sn) -> x1.mul(c[0]).sub(x2.mul(sn[0])).cat(-1, x2.mul(c[1]).add(x1.mul(sn[1])))))).hasSize(1);
        // a head of 6 (half a head not a multiple of 4)
        assertThat(rotary(PlanChecks.checkedPlan(PlanOptions.DEFAULT, qkv(1, 4, 2, 6, 32, DType.BF16)))).isEmpty();
        // more rows than a decode step's batch: the product apart, and each rotation's launch says why
        Plan nine = PlanChecks.checkedPlan(PlanOptions.DEFAULT, qkv(9, 4, 2, 16, 32, DType.BF16));
        assertThat(rotary(nine)).isEmpty();
        assertThat(nine.toString()).contains("# not one launch with the product before it (a rotary product): the product has 9 rows, not 1 to 8");
    }

    /**
     * Joined before memory planning, no rotation is stored over the product's input, its weight or the product's own
     * output: the one launch reads the input while it stores both.
     */
    @Test
    void noRotationTakesTheSlotOfWhatTheLaunchReadsOrWrites() {
        for (int rows : new int[]{1, 3, 8})
            for (int d : new int[]{8, 16, 32}) {
                Plan p = PlanChecks.checkedPlan(PlanOptions.DEFAULT, qkv(rows, 4, 2, d, 16, DType.BF16));
                assertThat(rotary(p)).as(p.toString()).hasSize(1);
                assertThat(PlanChecks.joinedLaunches(p)).as(p.toString()).isEmpty();
            }
    }
}
