package dev.gatun.runtime.reference;

import dev.gatun.ir.graph.ScalarMath;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.runtime.NDArray;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.BF16;
import static dev.gatun.ir.DType.F16;
import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.DType.F64;
import static dev.gatun.ir.DType.I32;
import static dev.gatun.ir.graph.ReduceOp.AVG;
import static dev.gatun.ir.graph.ReduceOp.MAX;
import static dev.gatun.ir.graph.ReduceOp.MIN;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.assertj.core.api.Assertions.within;

class ReferenceInterpreterTest {

    private static NDArray f32(long[] shape, double... v) { return NDArray.of(F32, v, shape); }

    private static long[] s(long... dims) { return dims; }

    private static NDArray run1(Graph g, String out, Object... inputs) {
        var m = new java.util.LinkedHashMap<String, NDArray>();
        for (int i = 0; i < inputs.length; i += 2) m.put((String) inputs[i], (NDArray) inputs[i + 1]);
        return new ReferenceInterpreter(g).run(m).get(out);
    }

    @Test
    void seedsGraphGives42OnTwoRanks() {
        var g = Gatun.graph("seeds").world(2);
        var x = g.input("x", F32, 4, 4);
        var a = x.add(1).allReduce(SUM);
        var b = x.add(2).allReduce(SUM);
        var c = x.add(3).allReduce(SUM);
        g.output("d", a.add(b).add(c).allReduce(SUM));
        var inputs = List.of(Map.of("x", NDArray.full(F32, 1, 4, 4)), Map.of("x", NDArray.full(F32, 2, 4, 4)));
        var out = ReferenceInterpreter.evaluate(g.build(), inputs);
        for (var rank : out) assertThat(rank.get("d")).isEqualTo(NDArray.full(F32, 42, 4, 4));
    }

    @Test
    void pointwiseBroadcastsAndPromotes() {
        var g = Gatun.graph("p");
        var x = g.input("x", F32, 2, 3);
        var row = g.input("row", F64, 3);
        var i = g.input("i", I32, 2, 1);
        g.output("sum", x.add(row)).output("prod", x.mul(i)).output("idiv", i.div(g.input("j", I32, 1)));
        var outs = new ReferenceInterpreter(g.build()).run(Map.of(
                "x", f32(s(2, 3), 1, 2, 3, 4, 5, 6),
                "row", NDArray.of(new double[]{0.5, 0.25, 0.125}, 3),
                "i", NDArray.of(new int[]{7, -7}, 2, 1),
                "j", NDArray.of(new int[]{2}, 1)));
        assertThat(outs.get("sum")).isEqualTo(NDArray.of(new double[]{1.5, 2.25, 3.125, 4.5, 5.25, 6.125}, 2, 3)); // f32 + f64 -> f64
        assertThat(outs.get("prod")).isEqualTo(f32(s(2, 3), 7, 14, 21, -28, -35, -42));
        assertThat(outs.get("idiv")).isEqualTo(f32(s(2, 1), 3.5, -3.5)); // true division, float result
    }

    @Test
    void unaryFunctionsMatchTheirDefinitions() {
        double[] xs = {-3, -1, -0.5, 0, 0.5, 1, 3};
        var g = Gatun.graph("u");
        var x = g.input("x", F64, 7);
        g.output("gelu", x.gelu()).output("silu", x.silu()).output("sigmoid", x.sigmoid()).output("relu", x.relu())
                .output("rsqrt", x.abs().add(1).rsqrt()).output("tanh", x.tanh()).output("exp", x.exp()).output("log", x.abs().add(1).log())
                .output("sin", x.sin()).output("cos", x.cos()).output("neg", x.neg()).output("sqrt", x.abs().sqrt());
        var o = new ReferenceInterpreter(g.build()).run(Map.of("x", NDArray.of(xs, 7)));
        // gelu(x) = x * Phi(x) with Phi the standard normal CDF: Phi(0.5), Phi(1), Phi(3) from tables
        double p05 = 0.6914624612740131, p1 = 0.8413447460685429, p3 = 0.9986501019683699;
        double[] gelu = {-3 * (1 - p3), -(1 - p1), -0.5 * (1 - p05), 0, 0.5 * p05, p1, 3 * p3};
        for (int i = 0; i < xs.length; i++) {
            double v = xs[i];
            assertThat(o.get("gelu").get(i)).isCloseTo(gelu[i], within(1e-15));
            assertThat(o.get("sigmoid").get(i)).isCloseTo(1 / (1 + Math.exp(-v)), within(1e-15));
            assertThat(o.get("silu").get(i)).isCloseTo(v / (1 + Math.exp(-v)), within(1e-15));
            assertThat(o.get("relu").get(i)).isEqualTo(Math.max(v, 0));
            assertThat(o.get("rsqrt").get(i)).isCloseTo(1 / Math.sqrt(Math.abs(v) + 1), within(1e-15));
            assertThat(o.get("tanh").get(i)).isEqualTo(Math.tanh(v));
            assertThat(o.get("exp").get(i)).isEqualTo(Math.exp(v));
            assertThat(o.get("log").get(i)).isEqualTo(Math.log(Math.abs(v) + 1));
            assertThat(o.get("sin").get(i)).isEqualTo(Math.sin(v));
            assertThat(o.get("cos").get(i)).isEqualTo(Math.cos(v));
            assertThat(o.get("neg").get(i)).isEqualTo(-v);
            assertThat(o.get("sqrt").get(i)).isEqualTo(Math.sqrt(Math.abs(v)));
        }
    }

    @Test
    void erfIsAccurate() {
        // reference values: erf from mpmath at 30 digits
        assertThat(ScalarMath.erf(0.5)).isCloseTo(0.5204998778130465, within(4e-16));
        assertThat(ScalarMath.erf(1)).isCloseTo(0.8427007929497149, within(4e-16));
        assertThat(ScalarMath.erf(2)).isCloseTo(0.9953222650189527, within(4e-16));
        assertThat(ScalarMath.erf(3)).isCloseTo(0.9999779095030014, within(4e-16));
        assertThat(ScalarMath.erf(-1.5)).isCloseTo(-0.9661051464753108, within(4e-16));
        assertThat(ScalarMath.erf(1e-10)).isCloseTo(1.1283791670955126e-10, within(1e-25));
        assertThat(ScalarMath.erf(5.9)).isCloseTo(1.0, within(1e-15));
        assertThat(ScalarMath.erf(40)).isEqualTo(1.0);
        assertThat(ScalarMath.erf(Double.NEGATIVE_INFINITY)).isEqualTo(-1.0);
        assertThat(ScalarMath.erf(Double.NaN)).isNaN();
    }

    @Test
    void powMaximumMinimumComparisonsAndWhere() {
        var g = Gatun.graph("c");
        var a = g.input("a", F32, 4);
        var b = g.input("b", F32, 4);
        g.output("pow", a.pow(2)).output("powt", a.abs().pow(b)).output("max", a.maximum(b)).output("min", a.minimum(b))
                .output("lt", a.lt(b)).output("ge", a.ge(0)).output("eq", a.eq(b)).output("where", a.gt(b).where(a, b.mul(10)));
        var o = new ReferenceInterpreter(g.build()).run(Map.of("a", f32(s(4), -2, 1, 3, Double.NaN), "b", f32(s(4), 1, 1, 2, 0)));
        assertThat(o.get("pow").toDoubleArray()).containsExactly(4, 1, 9, Double.NaN);
        assertThat(o.get("powt").toDoubleArray()).containsExactly(2, 1, 9, 1); // NaN^0 = 1, as in C and PyTorch
        assertThat(o.get("max").toDoubleArray()).containsExactly(1, 1, 3, Double.NaN);
        assertThat(o.get("min").toDoubleArray()).containsExactly(-2, 1, 2, Double.NaN);
        assertThat(o.get("lt").toBooleanArray()).containsExactly(true, false, false, false);
        assertThat(o.get("ge").toBooleanArray()).containsExactly(false, true, true, false);
        assertThat(o.get("eq").toBooleanArray()).containsExactly(false, true, false, false);
        assertThat(o.get("where").toDoubleArray()).containsExactly(10, 10, 3, 0);
    }

    @Test
    void castsTruncateTowardZeroAndHalfTypesRoundAfterEveryOp() {
        var g = Gatun.graph("cast");
        var x = g.input("x", F32, 4);
        g.output("i", x.cast(I32)).output("b", x.cast(DType.BOOL)).output("h", x.cast(F16).add(x.cast(F16)))
                .output("bf", x.cast(BF16).mul(3));
        var o = new ReferenceInterpreter(g.build()).run(Map.of("x", f32(s(4), 2.7, -2.7, 0, 1.00390625)));
        assertThat(o.get("i").toIntArray()).containsExactly(2, -2, 0, 1);
        assertThat(o.get("b").toBooleanArray()).containsExactly(true, true, false, true);
        assertThat(o.get("h").dtype()).isEqualTo(F16);
        // 2.7 in f16 is 2.69921875; doubled exactly: 5.3984375
        assertThat(o.get("h").get(0)).isEqualTo(5.3984375);
        // 1.00390625 = 1 + 2^-8 rounds to 1 in bf16 (tie to even), then 3 * 1 = 3
        assertThat(o.get("bf").get(3)).isEqualTo(3);
        // 2.7 in bf16 is 2.703125; times 3 = 8.109375 rounds to 8.125 in bf16 (8 bits of precision)
        assertThat(o.get("bf").get(0)).isEqualTo(8.125);
    }

    @Test
    void reductionsOverDimsWithKeepdim() {
        var g = Gatun.graph("r");
        var x = g.input("x", F32, 2, 3);
        var i = g.input("i", I32, 2, 3);
        g.output("sum0", x.sum(0)).output("sum1k", x.sum(true, -1)).output("all", x.sum()).output("mean", x.mean(1))
                .output("max", x.max(0)).output("min", x.min(true, 0, 1)).output("imean", i.mean(0));
        var o = new ReferenceInterpreter(g.build()).run(Map.of("x", f32(s(2, 3), 1, 5, 3, 4, 2, 6), "i", NDArray.of(new int[]{1, 2, 3, 4, 5, 7}, 2, 3)));
        assertThat(o.get("sum0")).isEqualTo(f32(s(3), 5, 7, 9));
        assertThat(o.get("sum1k")).isEqualTo(f32(s(2, 1), 9, 12));
        assertThat(o.get("all")).isEqualTo(f32(s(), 21));
        assertThat(o.get("mean")).isEqualTo(f32(s(2), 3, 4));
        assertThat(o.get("max")).isEqualTo(f32(s(3), 4, 5, 6));
        assertThat(o.get("min")).isEqualTo(f32(s(1, 1), 1));
        assertThat(o.get("imean")).isEqualTo(f32(s(3), 2.5, 3.5, 5)); // integer mean is float
    }

    @Test
    void matmul2dAndBatchedWithBroadcasting() {
        var g = Gatun.graph("mm");
        var a = g.input("a", F32, 2, 2, 3);
        var w = g.input("w", F32, 3, 2);
        var bw = g.input("bw", F32, 1, 3, 1);
        g.output("aw", a.matmul(w)).output("abw", a.matmul(bw)).output("m2", g.input("m", F32, 1, 3).matmul(w));
        var av = f32(s(2, 2, 3), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12);
        var o = new ReferenceInterpreter(g.build()).run(Map.of("a", av, "w", f32(s(3, 2), 1, 0, 0, 1, 1, 1),
                "bw", f32(s(1, 3, 1), 1, 1, 1), "m", f32(s(1, 3), 1, 2, 3)));
        assertThat(o.get("aw")).isEqualTo(f32(s(2, 2, 2), 4, 5, 10, 11, 16, 17, 22, 23));
        assertThat(o.get("abw")).isEqualTo(f32(s(2, 2, 1), 6, 15, 24, 33));
        assertThat(o.get("m2")).isEqualTo(f32(s(1, 2), 4, 5));
    }

    @Test
    void viewsFollowTheirOps() {
        var g = Gatun.graph("v");
        var x = g.input("x", F32, 2, 3);
        g.output("perm", x.permute(1, 0)).output("t", x.t()).output("slice", x.slice(1, 0, 3, 2)).output("slice0", x.slice(-2, 1, 2))
                .output("reshape", x.reshape(3, 2)).output("expand", x.slice(0, 0, 1).expand(2, 2, 3)).output("copy", x.permute(1, 0).copy());
        var o = new ReferenceInterpreter(g.build()).run(Map.of("x", f32(s(2, 3), 0, 1, 2, 3, 4, 5)));
        assertThat(o.get("perm")).isEqualTo(f32(s(3, 2), 0, 3, 1, 4, 2, 5));
        assertThat(o.get("t")).isEqualTo(o.get("perm"));
        assertThat(o.get("slice")).isEqualTo(f32(s(2, 2), 0, 2, 3, 5));
        assertThat(o.get("slice0")).isEqualTo(f32(s(1, 3), 3, 4, 5));
        assertThat(o.get("reshape")).isEqualTo(f32(s(3, 2), 0, 1, 2, 3, 4, 5));
        assertThat(o.get("expand")).isEqualTo(f32(s(2, 2, 3), 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2));
        assertThat(o.get("copy")).isEqualTo(o.get("perm"));
    }

    @Test
    void catJoinsAlongEachDimensionAndSplitTakesItApart() {
        var g = Gatun.graph("cat");
        var x = g.input("x", F32, 2, 3);
        var y = g.input("y", F32, 1, 3);
        var z = g.input("z", F32, 2, 1);
        var rows = g.cat(0, x, y);
        g.output("rows", rows).output("cols", g.cat(-1, z, x, z)).output("one", g.cat(1, x))
                .output("deep", g.cat(2, x.reshape(2, 3, 1), x.neg().reshape(2, 3, 1)))
                .output("back", rows.split(0, 2, 1).get(1)).output("half", g.cat(1, x.chunk(3, 1).get(2), x.chunk(3, 1).get(0)));
        var o = new ReferenceInterpreter(g.build()).run(Map.of("x", f32(s(2, 3), 0, 1, 2, 3, 4, 5), "y", f32(s(1, 3), 6, 7, 8),
                "z", f32(s(2, 1), -1, -2)));
        assertThat(o.get("rows")).isEqualTo(f32(s(3, 3), 0, 1, 2, 3, 4, 5, 6, 7, 8));
        assertThat(o.get("cols")).isEqualTo(f32(s(2, 5), -1, 0, 1, 2, -1, -2, 3, 4, 5, -2));
        assertThat(o.get("one")).isEqualTo(f32(s(2, 3), 0, 1, 2, 3, 4, 5));
        assertThat(o.get("deep")).isEqualTo(f32(s(2, 3, 2), 0, -0.0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5));
        assertThat(o.get("back")).isEqualTo(f32(s(1, 3), 6, 7, 8));
        assertThat(o.get("half")).isEqualTo(f32(s(2, 2), 2, 0, 5, 3));
    }

    /** Rank r holds [r*10 + 1, r*10 + 2, r*10 + 3, r*10 + 4] as a 4x1 column. */
    private static List<Map<String, NDArray>> ranked(int world) {
        var in = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) in.add(Map.of("x", f32(s(4, 1), r * 10 + 1, r * 10 + 2, r * 10 + 3, r * 10 + 4)));
        return in;
    }

    @Test
    void allReduceSumAvgMaxMin() {
        var g = Gatun.graph("ar").world(3);
        var x = g.input("x", F32, 4, 1);
        g.output("sum", x.allReduce(SUM)).output("avg", x.allReduce(AVG)).output("max", x.allReduce(MAX)).output("min", x.allReduce(MIN));
        var out = ReferenceInterpreter.evaluate(g.build(), ranked(3));
        for (var o : out) {
            assertThat(o.get("sum")).isEqualTo(f32(s(4, 1), 33, 36, 39, 42));
            assertThat(o.get("avg")).isEqualTo(f32(s(4, 1), 11, 12, 13, 14));
            assertThat(o.get("max")).isEqualTo(f32(s(4, 1), 21, 22, 23, 24));
            assertThat(o.get("min")).isEqualTo(f32(s(4, 1), 1, 2, 3, 4));
        }
    }

    @Test
    void reduceScatterAllGatherAndBroadcast() {
        var g = Gatun.graph("coll").world(2);
        var x = g.input("x", F32, 4, 1);
        g.output("rs", x.reduceScatter(SUM)).output("ag", x.allGather()).output("bc", x.broadcast(1));
        var out = ReferenceInterpreter.evaluate(g.build(), ranked(2));
        // the sum is [12, 14, 16, 18]: rank 0 gets rows 0-1, rank 1 rows 2-3
        assertThat(out.get(0).get("rs")).isEqualTo(f32(s(2, 1), 12, 14));
        assertThat(out.get(1).get("rs")).isEqualTo(f32(s(2, 1), 16, 18));
        for (var o : out) {
            assertThat(o.get("ag")).isEqualTo(f32(s(8, 1), 1, 2, 3, 4, 11, 12, 13, 14));
            assertThat(o.get("bc")).isEqualTo(f32(s(4, 1), 11, 12, 13, 14));
        }
    }

    @Test
    void subgroupsUseGroupRankOrderAndNonMembersPassThrough() {
        var g = Gatun.graph("sub").world(3).group("pair", 2, 0); // group rank 0 is rank 2
        var x = g.input("x", F32, 4, 1);
        g.output("sum", x.allReduce(SUM, "pair")).output("bc", x.broadcast(0, "pair"));
        // all_gather would give rank 1, outside the pair, no [8,1] result: refused when the graph is built
        assertThatThrownBy(() -> x.allGather("pair")).isInstanceOf(dev.gatun.ir.GraphException.class).hasMessageContaining("leaves out ranks [1]");
        var out = ReferenceInterpreter.evaluate(g.build(), ranked(3));
        var sum = f32(s(4, 1), 22, 24, 26, 28);
        assertThat(out.get(0).get("sum")).isEqualTo(sum);
        assertThat(out.get(2).get("sum")).isEqualTo(sum);
        assertThat(out.get(0).get("bc")).isEqualTo(f32(s(4, 1), 21, 22, 23, 24));
        // rank 1 is outside "pair": the shape-preserving collectives hand its input back
        for (String k : List.of("sum", "bc")) assertThat(out.get(1).get(k)).isEqualTo(ranked(3).get(1).get("x"));
    }

    @Test
    void userOpsRunTheirHostKernel() {
        UserOp axpy = UserOp.builder("axpy").input(TensorSpec.of("x", F32, "n")).input(TensorSpec.of("y", F32, "n"))
                .output(TensorSpec.of("z", F32, "n")).output(TensorSpec.of("r", F32, 1))
                .host((in, out, rank, world) -> {
                    for (long i = 0; i < in.get(0).numel(); i++) out.get(0).set(i, 2 * in.get(0).get(i) + in.get(1).get(i) + rank);
                    out.get(1).set(0, world);
                }).build();
        var g = Gatun.graph("u").world(2).register(axpy);
        var outs = g.call("axpy", g.input("x", F32, 3), g.input("y", F32, 3));
        g.output("z", outs.get(0)).output("w", outs.get(1));
        var in = Map.of("x", f32(s(3), 1, 2, 3), "y", f32(s(3), 10, 20, 30));
        var out = ReferenceInterpreter.evaluate(g.build(), List.of(in, in));
        assertThat(out.get(0).get("z")).isEqualTo(f32(s(3), 12, 24, 36));
        assertThat(out.get(1).get("z")).isEqualTo(f32(s(3), 13, 25, 37));
        assertThat(out.get(1).get("w")).isEqualTo(f32(s(1), 2));
    }

    @Test
    void aUserOpWithoutHostImplementationIsAnError() {
        UserOp gpuOnly = UserOp.builder("gpu_only").input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .cuda("k", "__global__ void k() {}").build();
        var g = Gatun.graph("u").register(gpuOnly);
        g.output("y", g.call1("gpu_only", g.input("x", F32, 2)));
        assertThatThrownBy(() -> run1(g.build(), "y", "x", f32(s(2), 1, 2))).isInstanceOf(GraphException.class)
                .hasMessageContaining("user op 'gpu_only' (%1) has no host implementation");
    }

    @Test
    void symbolsBindFromInputsAndMustAgree() {
        var g = Gatun.graph("sym");
        var x = g.input("x", F32, "n", 2);
        var y = g.input("y", F32, "n", 2);
        g.output("z", x.add(y).reshape("n", 1, 2).sum(2));
        Graph graph = g.build();
        var z = run1(graph, "z", "x", f32(s(3, 2), 1, 2, 3, 4, 5, 6), "y", f32(s(3, 2), 1, 1, 1, 1, 1, 1));
        assertThat(z).isEqualTo(f32(s(3, 1), 5, 9, 13));
        assertThatThrownBy(() -> run1(graph, "z", "x", f32(s(3, 2), 1, 2, 3, 4, 5, 6), "y", f32(s(2, 2), 1, 1, 1, 1)))
                .isInstanceOf(GraphException.class)
                .hasMessage("rank 0: input 'y' dimension 0 is 2 but symbol 'n' is already 3 (from input 'x' dimension 0)");
    }

    @Test
    void badInputsAreNamed() {
        var g = Gatun.graph("bad").world(2);
        g.output("y", g.input("x", F32, 2, 2).allReduce(SUM));
        Graph graph = g.build();
        var ok = Map.of("x", f32(s(2, 2), 1, 2, 3, 4));
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(graph, List.of(ok)))
                .hasMessage("graph 'bad' is built for a world of 2 ranks, but inputs were given for 1");
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(graph, List.of(ok, Map.of("x", NDArray.zeros(F64, 2, 2)))))
                .hasMessage("rank 1: input 'x' is f64[2, 2] but the graph declares f32[2,2]");
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(graph, List.of(ok, Map.of("x", NDArray.zeros(F32, 2, 3)))))
                .hasMessage("rank 1: input 'x' dimension 1 is 3 but the graph declares f32[2,2]");
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(graph, List.of(ok, Map.of())))
                .hasMessage("rank 1: input 'x' f32[2,2] is missing");
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(graph, List.of(ok, Map.of("x", ok.get("x"), "z", ok.get("x")))))
                .hasMessageContaining("rank 1: graph 'bad' has no input 'z'");
    }

    @Test
    void constantsRoundToTheirDtype() {
        var g = Gatun.graph("k");
        var c = g.constant(F16, new long[]{2}, 0.1, 70000);
        g.output("c", c.add(g.input("x", F16, 2)));
        var o = run1(g.build(), "c", "x", NDArray.zeros(F16, 2));
        assertThat(o.get(0)).isEqualTo((double) Float.float16ToFloat(Float.floatToFloat16(0.1f)));
        assertThat(o.get(1)).isEqualTo(Double.POSITIVE_INFINITY);
        assertThat(new ReferenceInterpreter(g.build()).graph().outputs()).containsKey("c");
        assertThat(TensorType.of(F16, 2)).isEqualTo(g.build().outputs().get("c").type());
    }
}
