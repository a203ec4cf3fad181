package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

/**
 * A sum or mean of a few elements an output over dimensions other than the last (a mixture's weighted sum over its k
 * choices) is written out as a pointwise sum, one thread an output: no reduction kernel. Values against plain loops in float64; a sum over the last dimension, or of more than eight
 * elements an output, stays a reduction. A pointwise value that only such a sum reads is computed inside it (the
 * products of a weighted sum: one launch, no [rows, k, hidden] buffer); one that anything else also reads is made.
 */
class NarrowSumTest {
    /** Rows and hidden size: 65,536 outputs, the fewest the rule takes. */
    static final int R = 64, H = 1024;

    @Test
    void aWeightedSumOverTheChoicesIsOnePointwiseKernel() {
        for (DType t : new DType[]{DType.F32, DType.BF16, DType.F64}) {
            var g = Gatun.graph("combine");
            var y = g.input("y", t, R, 3, H);
            var w = g.input("w", t, R, 3);
            g.output("o", y.mul(w.reshape(R, 3, 1)).sum(false, 1));
            g.output("m", y.mean(true, 0, 1));   // 192 elements an output: stays a reduction
            g.output("k", y.mean(true, 1));      // 3 elements an output, the dimension kept: written out too
            try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
                var plan = s.plan();
                assertThat(plan.lowered().decisions()).as(plan.toString()).filteredOn(d -> d.contains("3 elements an output over dimension 1")
                        && d.contains("pointwise sum of 3 loads")).hasSize(2);
                assertThat(plan.kernels()).as(plan.toString()).filteredOn(k -> k.outputs().stream().anyMatch(b -> b.name().equals(s.plan().outputs().get("o").name())))
                        .singleElement().satisfies(k -> assertThat(k.reductionRanges()).isEmpty());
                NDArray yv = NDArray.randn(t, 11, R, 3, H), wv = NDArray.randn(t, 12, R, 3);
                var out = s.runToHost(Map.of("y", yv, "w", wv));
                double[] o = out.get("o").toDoubleArray(), m = out.get("m").toDoubleArray(), kept = out.get("k").toDoubleArray(),
                        ya = yv.toDoubleArray(), wa = wv.toDoubleArray();
                assertThat(out.get("k").shape()).containsExactly(R, 1, H);
                for (int i = 0; i < R; i++)
                    for (int h = 0; h < H; h++) {
                        double want = (ya[(i * 3) * H + h] + ya[(i * 3 + 1) * H + h] + ya[(i * 3 + 2) * H + h]) / 3;
                        assertThat(kept[i * H + h]).as(t + " k[" + i + ", 0, " + h + "]").isCloseTo(want, within((t == DType.BF16 ? 2e-2 : 1e-6) * (1 + Math.abs(want))));
                    }
                double tol = t == DType.BF16 ? 2e-2 : 1e-6;
                for (int i = 0; i < R; i++)
                    for (int h = 0; h < H; h++) {
                        double want = 0;
                        for (int j = 0; j < 3; j++) want += round(t, ya[(i * 3 + j) * H + h] * wa[i * 3 + j]);
                        assertThat(o[i * H + h]).as(t + " o[" + i + ", " + h + "]").isCloseTo(want, within(tol * (1 + Math.abs(want))));
                    }
                for (int h = 0; h < H; h++) {
                    double want = 0;
                    for (int i = 0; i < 3 * R; i++) want += ya[i * H + h];
                    assertThat(m[h]).as(t + " m[" + h + "]").isCloseTo(want / (3 * R), within(tol * (1 + Math.abs(want / (3 * R)))));
                }
            }
        }
    }

    static double round(DType t, double v) { return t == DType.F64 ? v : t == DType.F32 ? (float) v : v; }

    @Test
    void aSumOverTheLastDimensionOrOfFewOutputsStaysAReduction() {
        var g = Gatun.graph("last");
        g.output("o", g.input("y", DType.F32, R * H, 3).sum(false, 1));
        g.output("p", g.input("z", DType.F32, 5, 3, 7).sum(false, 1));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().lowered().decisions()).noneMatch(d -> d.contains("pointwise sum of"));
            assertThat(s.plan().kernels()).hasSize(2).allSatisfy(k -> assertThat(k.reductionRanges()).hasSize(1));
        }
    }

    @Test
    void theProductsOnlyTheSumReadsAreComputedInsideItOneLaunch() {
        for (DType t : new DType[]{DType.F32, DType.BF16, DType.F64})
            for (boolean keep : new boolean[]{false, true})
                for (boolean shared : new boolean[]{false, true}) {
                    var g = Gatun.graph("combine");
                    var y = g.input("y", t, R, 3, H);
                    var w = g.input("w", t, R, 3);
                    var products = y.mul(w.reshape(R, 3, 1)).add(1);   // two ops, both inside the sum
                    g.output("o", keep ? products.mean(true, 1) : products.sum(false, 1));
                    if (shared) g.output("p", products);   // an output: the products are made, and the sum reads them
                    try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
                        var plan = s.plan();
                        String what = t + (keep ? " mean keepdim" : " sum") + (shared ? ", products an output" : "") + ": " + plan;
                        assertThat(plan.kernels()).as(what).hasSize(shared ? 2 : 1);
                        assertThat(plan.lowered().decisions()).as(what).filteredOn(d -> d.contains("the narrow sum that alone reads it")).hasSize(shared ? 0 : 2);
                        NDArray yv = NDArray.randn(t, 21, R, 3, H), wv = NDArray.randn(t, 22, R, 3);
                        double[] o = s.runToHost(Map.of("y", yv, "w", wv)).get("o").toDoubleArray(), ya = yv.toDoubleArray(), wa = wv.toDoubleArray();
                        // bf16: the products and sums held in float32 inside the kernel, or rounded to bf16 where made
                        double tol = t == DType.BF16 ? 2e-2 : 1e-6;
                        for (int i = 0; i < R; i++)
                            for (int h = 0; h < H; h++) {
                                double want = 0;
                                for (int j = 0; j < 3; j++) want += ya[(i * 3 + j) * H + h] * wa[i * 3 + j] + 1;
                                if (keep) want /= 3;
                                assertThat(o[i * H + h]).as(what.substring(0, 40) + " o[" + i + ", " + h + "]").isCloseTo(want, within(tol * (1 + Math.abs(want))));
                            }
                    }
                }
    }
    /**
     * One token's weighted sum (a decode step at batch 1: too few outputs for the pointwise form, so a reduction over
     * the middle dimension of [1, k, hidden]): the products are computed inside the reduction's one launch, though
     * the reduction's loop steps their buffer's dimension of size 1 (its own rows' dimension of extent 1); values
     * against float64 loops, for every k and a residual added after.
     */
    @Test
    void oneTokensWeightedSumIsOneRowKernelWithTheProductsInside() {
        for (int k : new int[]{1, 2, 3, 8})
            for (DType t : new DType[]{DType.F32, DType.BF16}) {
                var g = Gatun.graph("combine1");
                var y = g.input("y", t, 1, k, H);
                var w = g.input("w", t, 1, k);
                var r = g.input("r", t, 1, H);
                g.output("o", y.mul(w.reshape(1, k, 1)).sum(false, 1).add(r));
                try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
                    assertThat(s.plan().kernels()).as(s.plan().toString()).hasSize(1);
                    NDArray yv = NDArray.randn(t, 21 + k, 1, k, H), wv = NDArray.randn(t, 31 + k, 1, k), rv = NDArray.randn(t, 41 + k, 1, H);
                    double[] o = s.runToHost(Map.of("y", yv, "w", wv, "r", rv)).get("o").toDoubleArray();
                    double[] ya = yv.toDoubleArray(), wa = wv.toDoubleArray(), ra = rv.toDoubleArray();
                    double tol = t == DType.BF16 ? 2e-2 : 1e-6;
                    for (int h = 0; h < H; h++) {
                        double want = ra[h];
                        for (int j = 0; j < k; j++) want += ya[j * H + h] * wa[j];
                        assertThat(o[h]).as(t + " k " + k + " o[" + h + "]").isCloseTo(want, within(tol * (1 + Math.abs(want))));
                    }
                }
            }
    }
}
