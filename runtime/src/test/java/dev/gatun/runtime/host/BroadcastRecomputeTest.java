package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.Map;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.within;

/**
 * Lowering's broadcast rule: a small cast or pointwise value (at most three ops) of a graph input or an op's result that
 * only pointwise loops at least 16 times its size read (broadcast) is computed by them, so it is no launch of its own
 * (a router's weights cast to the tokens' type and multiplied into [tokens, k, hidden]). Random shapes and dtypes on
 * the host backend against float64 loops and the reference interpreter; a value a same-size loop reads, a state's, a
 * loop's result (a norm's rsqrt joins its row kernel) or one of more ops is still made.
 */
class BroadcastRecomputeTest {
    @Test
    void aCastOfAnInputReadBroadcastIsNoLaunchAndGivesTheSameValues() {
        var rnd = new Random(38);
        for (int c = 0; c < 12; c++) {
            int rows = 1 + rnd.nextInt(9), k = 1 + rnd.nextInt(3), h = 16 + rnd.nextInt(40);
            DType t = switch (c % 3) { case 0 -> DType.BF16; case 1 -> DType.F32; default -> DType.F64; };
            var g = Gatun.graph("scale");
            var x = g.input("x", t, rows, k, h);
            var w = g.input("w", DType.F32, rows, k, 1);
            g.output("y", x.mul(w.cast(t)));   // the cast of the input: computed by the product
            var e = g.input("e", DType.I64, rows, k, 1);
            g.output("z", x.mul(e.add(1).cast(t)));   // a chain of two ops (i64 add, then the cast): computed by its product too
            Graph graph = g.build();
            try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
                var plan = s.plan();
                assertThat(plan.kernels()).as(plan.toString()).hasSize(1);   // y's and z's products (one kernel: both read x), nothing else
                assertThat(plan.lowered().decisions()).as(plan.toString()).anyMatch(d -> d.contains("its readers, pointwise loops at least 16 times its size"));
                NDArray xv = NDArray.randn(t, 7 + c, rows, k, h), wv = NDArray.randn(DType.F32, 8 + c, rows, k, 1);
                long[] ev = new long[rows * k];
                for (int i = 0; i < ev.length; i++) ev[i] = rnd.nextInt(7) - 3;
                var in = Map.of("x", xv, "w", wv, "e", NDArray.of(ev, rows, k, 1));
                var out = s.runToHost(in);
                var refOut = ReferenceInterpreter.evaluate(graph, java.util.List.of(in)).getFirst();
                double[] y = out.get("y").toDoubleArray(), ref = refOut.get("y").toDoubleArray(), z = out.get("z").toDoubleArray();
                double[] xa = xv.toDoubleArray(), wa = wv.toDoubleArray();
                double tol = t == DType.BF16 ? 2e-2 : t == DType.F32 ? 1e-6 : 1e-12;
                for (int i = 0; i < y.length; i++) {
                    double wi = round(t, wa[i / h]);
                    double want = xa[i] * wi;
                    assertThat(y[i]).as("case %d %s y[%d]", c, t, i).isCloseTo(want, within(tol * (1 + Math.abs(want))));
                    assertThat(ref[i]).as("reference case %d %s y[%d]", c, t, i).isCloseTo(want, within(tol * (1 + Math.abs(want))));
                    double wantZ = xa[i] * (ev[i / h] + 1);   // small integers: exact in every dtype
                    assertThat(z[i]).as("case %d %s z[%d]", c, t, i).isCloseTo(wantZ, within(tol * (1 + Math.abs(wantZ))));
                }
            }
        }
    }

    /** {@code v} rounded to dtype {@code t} as the cast does (bf16: round to nearest even of the top 16 bits). */
    static double round(DType t, double v) {
        if (t == DType.F64) return v;
        float f = (float) v;
        if (t == DType.F32) return f;
        int bits = Float.floatToRawIntBits(f);
        bits += 0x7FFF + ((bits >>> 16) & 1);
        return Float.intBitsToFloat(bits & 0xFFFF0000);
    }

    @Test
    void valuesNotReadOnlyBroadcastOrNotOfInputsAreStillMade() {
        var g = Gatun.graph("kept");
        var x = g.input("x", DType.F32, 4, 64);
        var s = g.input("s", DType.F32, 4, 1);
        var small = s.neg();
        g.output("a", x.mul(small));
        g.output("b", small.add(g.input("t", DType.F32, 4, 1)));   // a reader of its own size: made once, read by both
        var r = x.mul(x).mean(true, 1).add(1e-5).rsqrt();          // a loop's result: joins the norm's row kernel
        g.output("n", x.mul(r));
        var st = g.state("st", DType.F32, 4, 1);
        g.output("c", x.mul(st.neg()));                            // a state's value: made where it is read
        g.output("d", x.add(s.mul(2).add(1).mul(3).neg()));         // four ops: made
        try (var session = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            var decisions = session.plan().lowered().decisions();
            assertThat(decisions).as(session.plan().toString()).noneMatch(d -> d.contains("its readers, pointwise loops at least 16 times its size"));
        }
    }

    /**
     * A value the rule leaves to its readers, read by a pointwise op through a concatenation or a reshape that is not
     * made (each computed part by part, or over the source's shape): made there and read where it lies, the values
     * those of plain loops (lowering once failed on it).
     */
    @Test
    void throughAConcatenationOrAReshapeItIsMadeAndRead() {
        var g = Gatun.graph("through");
        var a = g.input("a", DType.F32, 4, 16).exp();
        var b = g.input("b", DType.F32, 4, 16).exp();
        var s = g.input("s", DType.F32, 4, 1);
        g.output("c", a.cat(1, b).mul(s.neg()));                          // 4 x 32 reads the 4 x 1 neg through the cat
        g.output("r", a.reshape(4, 4, 4).add(s.reshape(4, 1, 1).abs()));   // 64 elements read the abs of 4 through a reshape
        NDArray av = NDArray.randn(DType.F32, 1, 4, 16), bv = NDArray.randn(DType.F32, 2, 4, 16), sv = NDArray.randn(DType.F32, 3, 4, 1);
        try (var session = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            var out = session.runToHost(Map.of("a", av, "b", bv, "s", sv));
            double[] c = out.get("c").toDoubleArray(), r = out.get("r").toDoubleArray(), aa = av.toDoubleArray(), ba = bv.toDoubleArray(), sa = sv.toDoubleArray();
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 32; j++) {
                    double want = (j < 16 ? Math.exp(aa[i * 16 + j]) : Math.exp(ba[i * 16 + j - 16])) * -sa[i];
                    assertThat(c[i * 32 + j]).as("c[%d, %d]", i, j).isCloseTo(want, within(1e-5 * (1 + Math.abs(want))));
                }
            for (int i = 0; i < 64; i++) {
                double want = Math.exp(aa[i]) + Math.abs(sa[i / 16]);
                assertThat(r[i]).as("r[%d]", i).isCloseTo(want, within(1e-5 * (1 + Math.abs(want))));
            }
        }
    }
}
