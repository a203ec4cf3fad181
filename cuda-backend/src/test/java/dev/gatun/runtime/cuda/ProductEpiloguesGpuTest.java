package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.offset;

/**
 * The kernels after a few-row product that the plan takes in as its epilogues ({@code Step.TiledProduct}, one launch
 * of {@link TiledProductCodegen}'s kernel) compute on the GPU what they compute as launches of their own: every
 * spelling the rule is for, each written as a model's code writes it, at one row and at several, in bfloat16 and
 * float32. Expected values come from the same graph planned with the rule off (the product and each kernel a launch),
 * whose pieces the other GPU tests check against float64 loops.
 */
@RequiresGpu
class ProductEpiloguesGpuTest {
    static final int K = 256, HEADS = 6, D = 64, N = HEADS * D;

    /** A spelling: the graph after the product {@code y [m, N]} of {@code x} by {@code w}, given the builder for extra inputs. */
    record Spelling(String name, After after) {}

    interface After { Tensor apply(GraphBuilder g, Tensor y, int m); }

    static Tensor rotateHalf(Tensor x) {
        return x.slice(-1, D / 2, D).neg().cat(-1, x.slice(-1, 0, D / 2));
    }

    static final List<Spelling> SPELLINGS = List.of(
            new Spelling("swiglu", (g, y, m) -> y.slice(1, 0, N / 2).silu().mul(y.slice(1, N / 2, N))),
            new Spelling("geglu-tanh", (g, y, m) -> {
                var a = y.slice(1, 0, N / 2);
                var inner = a.add(a.mul(a).mul(a).mul(0.044715)).mul(0.7978845608028654);
                return a.mul(0.5).mul(inner.tanh().add(1.0)).mul(y.slice(1, N / 2, N));
            }),
            new Spelling("geglu-erf", (g, y, m) -> y.slice(1, 0, N / 2).gelu().mul(y.slice(1, N / 2, N))),
            new Spelling("bias", (g, y, m) -> y.add(g.input("bias", y.dtype(), N))),
            new Spelling("residual-cast", (g, y, m) -> y.add(g.input("res", y.dtype(), m, N)).cast(DType.F32)),
            new Spelling("rotate-half", (g, y, m) -> {
                var h = y.reshape(m, HEADS, D);
                var cos = g.input("cos", y.dtype(), 1, D);
                var sin = g.input("sin", y.dtype(), 1, D);
                return h.mul(cos).add(rotateHalf(h).mul(sin));
            }),
            new Spelling("qk-norm", (g, y, m) -> {
                var h = y.reshape(m, HEADS, D);
                var w = g.input("norm", y.dtype(), D);
                return h.mul(h.mul(h).mean(true, -1).add(1e-6).rsqrt()).mul(w);
            }),
            new Spelling("qk-norm-rope", (g, y, m) -> {   // the norm's row kernel narrowed to half a head (fusion class 4)
                var h = y.reshape(m, HEADS, D);
                var n = h.mul(h.mul(h).mean(true, -1).add(1e-6).rsqrt()).mul(g.input("norm", y.dtype(), D));
                var cos = g.input("cos", y.dtype(), 1, D);
                var sin = g.input("sin", y.dtype(), 1, D);
                var x1 = n.slice(-1, 0, D / 2);
                var x2 = n.slice(-1, D / 2, D);
                return x1.mul(cos.slice(-1, 0, D / 2)).sub(x2.mul(sin.slice(-1, 0, D / 2)))
                        .cat(-1, x2.mul(cos.slice(-1, D / 2, D)).add(x1.mul(sin.slice(-1, D / 2, D))));
            }));

    @Test
    void everySpellingIsOneLaunchWithItsProductAndComputesWhatTheLaunchesApartCompute() {
        for (DType t : List.of(DType.BF16, DType.F32))
            for (int m : new int[]{1, 4}) {
                if (t == DType.F32 && m > 1) continue;   // the library's GEMM takes those products, which has no epilogues
                for (Spelling sp : SPELLINGS) {
                    String what = sp.name() + " " + t + " m " + m;
                    var inputs = new HashMap<String, NDArray>();
                    double[][] got = new double[2][];
                    for (int joined = 0; joined < 2; joined++) {
                        var g = Gatun.graph("epi");
                        var y = g.input("x", t, m, K).matmul(g.input("w", t, N, K).transpose(0, 1));
                        g.output("out", sp.after().apply(g, y, m));
                        var graph = g.build();
                        if (inputs.isEmpty()) {
                            var all = Map.of("x", new long[]{m, K}, "w", new long[]{N, K}, "bias", new long[]{N}, "res", new long[]{m, N},
                                    "cos", new long[]{1, D}, "sin", new long[]{1, D}, "norm", new long[]{D});
                            int seed = 31;
                            for (String name : graph.inputs().keySet()) inputs.put(name, NDArray.randn(t, seed++, all.get(name)));
                        }
                        try (var s = Session.compile(graph, CompileOptions.world(1).backend("cuda").productEpilogues(joined == 1))) {
                            long tiled = s.plan().steps().stream().filter(st -> st instanceof Step.TiledProduct).count();
                            assertThat(tiled).as(what + "\n" + s.plan()).isEqualTo(joined);
                            if (joined == 1)
                                assertThat(s.plan().steps()).as(what + ": nothing left apart\n" + s.plan()).noneMatch(st -> st instanceof Step.Launch);
                            got[joined] = s.runToHost(inputs).get("out").toDoubleArray();
                        }
                    }
                    double tol = t == DType.F32 ? 1e-5 : 2e-2;
                    for (int i = 0; i < got[0].length; i++)
                        assertThat(got[1][i]).as("%s element %d", what, i).isCloseTo(got[0][i], offset(tol * (1 + Math.abs(got[0][i]))));
                }
            }
    }
}
