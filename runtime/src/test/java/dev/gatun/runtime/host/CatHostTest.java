package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.planner.PlanOptions;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.TestInputs;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.function.Consumer;

import static dev.gatun.ir.DType.BF16;
import static dev.gatun.ir.DType.BOOL;
import static dev.gatun.ir.DType.F16;
import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.DType.I32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * Concatenations on the host backend, where producers write straight into their slices: every graph is run with the
 * default plan options and with neither reordering nor in-place reuse, twice each (the second call reuses every pool),
 * and compared with the reference interpreter; one case is also checked against plain loops.
 */
class CatHostTest {

    static Graph graph(String name, int world, Consumer<GraphBuilder> body) {
        var g = Gatun.graph(name);
        if (world > 1) g.world(world);
        body.accept(g);
        return g.build();
    }

    /** Runs {@code g} on the host (two plan option sets, two calls each) and compares every output with the reference. */
    static Map<String, NDArray> check(Graph g, int world) {
        var in = TestInputs.of(g, 7, world);
        var expected = ReferenceInterpreter.evaluate(g, in);
        for (PlanOptions po : List.of(PlanOptions.DEFAULT, PlanOptions.DEFAULT.withReorder(false).withInPlace(false))) {
            try (var s = Session.compile(g, CompileOptions.world(world).backend("host").planning(po))) {
                for (int call = 0; call < 2; call++) HostDifferentialTest.assertMatches(g, 7, expected, s.runToHost(in));
            }
        }
        return expected.getFirst();
    }

    @Test
    void producersOfEveryKindAlongEachDimension() {
        for (int dim = -3; dim < 3; dim++) {
            int d = dim;
            check(graph("producers_" + (d < 0 ? "m" + -d : d), 1, g -> {
                var x = g.input("x", F32, 2, 3, 4);
                var w = g.input("w", F32, 4, 4);
                var y = g.input("y", F32, 2, 3, 4);
                var parts = new Tensor[]{x.matmul(w), x.exp(), y, x.add(y).mul(0.5), x.sum(true, d < 0 ? d + 3 : d).expand(2, 3, 4), y.t().t()};
                var c = g.cat(d, parts);
                g.output("c", c);
                g.output("r", c.neg());                   // and something reads the concatenation
            }), 1);
        }
    }

    @Test
    void reductionsAndMatmulsIntoStridedSlices() {
        check(graph("strided", 1, g -> {
            var x = g.input("x", F32, 3, 5, 8);
            var c = g.cat(-1, x.max(true, -1), x.matmul(g.input("w", F32, 8, 3)), x.mean(true, 2), x.matmul(g.input("v", F32, 3, 8, 2)));
            g.output("c", c);
        }), 1);
        check(graph("rows_of_batches", 1, g -> {
            var x = g.input("x", F32, 3, 5, 8);
            g.output("c", g.cat(1, x.matmul(g.input("w", F32, 8, 8)), x.sin(), x.sum(true, 1)));
        }), 1);
    }

    @Test
    void inputsOnlySizeOneDimensionsAndEmptyParts() {
        check(graph("inputs", 1, g -> g.output("c", g.cat(0, g.input("a", F32, 2, 3), g.input("b", F32, 1, 3), g.input("e", F32, 0, 3)))), 1);
        // leading dimensions of size 1: the slices are contiguous even along a later dimension
        check(graph("ones", 1, g -> {
            var a = g.input("a", F32, 1, 1, 3, 4);
            var b = g.input("b", F32, 1, 1, 2, 4);
            g.output("c", g.cat(2, a.exp(), b.sin(), a.neg()));
            g.output("d", g.cat(-1, g.input("u", F32, 4, 1).exp(), g.input("v", F32, 4, 1).abs()));
        }), 1);
        check(graph("one_tensor", 1, g -> {
            var a = g.input("a", F32, 2, 3);
            g.output("c", g.cat(1, a));
            g.output("d", g.cat(0, a.exp()));
        }), 1);
    }

    @Test
    void partsThatAreOutputsOrReadByOthersToo() {
        check(graph("outputs", 1, g -> {
            var x = g.input("x", F32, 3, 4);
            var e = x.exp();
            var m = x.matmul(g.input("w", F32, 4, 4));
            var s = x.sin();
            g.output("e", e);                            // a part written at strides, and an output
            g.output("m", m);
            g.output("c", g.cat(1, e, m));
            g.output("r", g.cat(0, s, x.cos()));          // a contiguous part ...
            g.output("s", s.sum(1).add(s.t().sum(0)));    // ... read by others after the cat, directly and through a view
            var row = x.slice(0, 0, 1).sin();
            g.output("b", g.cat(0, row, x.slice(0, 1, 2).cos()).add(row));   // a part read beside its dying concatenation
            g.output("i", g.cat(1, e.neg(), m.neg()).mul(2));                  // a dying concatenation written over in place
        }), 1);
    }

    @Test
    void otherDtypes() {
        for (DType t : List.of(F16, BF16, I32, BOOL))
            check(graph("dtype_" + t.shortName(), 1, g -> {
                var x = g.input("x", t, 3, 4);
                var y = t == BOOL ? x.eq(x) : x.abs();
                g.output("c", g.cat(1, x, y, x.cast(t)));
            }), 1);
    }

    @Test
    void aConcatenationFeedingAReductionAndChainedConcatenations() {
        check(graph("feeds_sum", 1, g -> {
            var x = g.input("x", F32, 4, 6);
            var c = g.cat(0, x.exp(), x.tanh());
            g.output("s", c.sum(0));
            g.output("m", c.max(true, 1).add(1));
        }), 1);
        check(graph("chained", 1, g -> {
            var x = g.input("x", F32, 2, 3);
            var inner = g.cat(0, x.exp(), x.sin());                   // inside the outer one, same dim
            var outer = g.cat(0, x.cos(), inner, x);
            var across = g.cat(1, outer, outer.neg());                 // the outer one, copied into a strided slice
            g.output("y", g.cat(-1, across, g.cat(-1, outer.abs(), outer.exp())));
            g.output("inner", inner.mul(2));
        }), 1);
    }

    @Test
    void splitAndCatRoundTrip() {
        var out = check(graph("round_trip", 1, g -> {
            var x = g.input("x", F32, 6, 4);
            var rows = x.split(0, 1, 3, 2);
            var cols = x.chunk(2, 1);
            g.output("rows", g.cat(0, rows));
            g.output("cols", g.cat(1, cols));
            g.output("swapped", g.cat(1, cols.get(1), cols.get(0)));
            var back = g.cat(0, rows.get(0).exp(), rows.get(1).exp(), rows.get(2).exp());
            g.output("parts", back.split(0, 4, 2).get(0).add(back.chunk(3, 0).get(2).sum(0)));
        }), 1);
        var x = TestInputs.of(graph("round_trip_inputs", 1, g -> g.output("x", g.input("x", F32, 6, 4).neg())), 7, 1).getFirst().get("x");
        assertThat(out.get("rows").mismatch(x, 0, 0)).isNull();
        assertThat(out.get("cols").mismatch(x, 0, 0)).isNull();
    }

    @Test
    void symbolicSizesOutsideTheJoinedDimension() {
        check(graph("symbolic", 1, g -> {
            var x = g.input("x", F32, "n", 3);
            var y = g.input("y", F32, "n", 2);
            var c = g.cat(1, x.exp(), y, x.matmul(g.input("w", F32, 3, 4)));
            g.output("c", c);
            g.output("rows", g.cat(1, c, c.neg()).sum(1));
        }), 1);
    }

    @Test
    void withCollectivesOnTwoAndThreeRanks() {
        for (int world : new int[]{2, 3}) {
            check(graph("collectives_" + world, world, g -> {
                var x = g.input("x", F32, 3, 4);
                var e = x.exp();
                var r = e.allReduce(SUM);
                var c = g.cat(0, e, r, x.sin());
                g.output("c", c.allReduce(SUM));
                g.output("g", g.cat(1, x.allGather().reshape(3 * world, 4), x.tanh().allGather().reshape(3 * world, 4)));
            }), world);
        }
    }

    @Test
    void matchesPlainLoops() {
        Graph graph = graph("loops", 1, g -> {
            var x = g.input("x", F32, 3, 4);
            var w = g.input("w", F32, 4, 2);
            g.output("c", g.cat(1, x.matmul(w), x.exp(), x));
        });
        var in = TestInputs.of(graph, 11, 1);
        NDArray x = in.getFirst().get("x"), w = in.getFirst().get("w");
        double[] want = new double[3 * 10];
        for (int i = 0; i < 3; i++) {
            for (int j = 0; j < 2; j++) {
                double acc = 0;
                for (int k = 0; k < 4; k++) acc += x.get(i * 4 + k) * w.get(k * 2 + j);
                want[i * 10 + j] = (float) acc;
            }
            for (int k = 0; k < 4; k++) {
                want[i * 10 + 2 + k] = (float) Math.exp(x.get(i * 4 + k));
                want[i * 10 + 6 + k] = x.get(i * 4 + k);
            }
        }
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            NDArray got = s.runToHost(in).getFirst().get("c");
            assertThat(got.shape()).containsExactly(3, 10);
            assertThat(got.mismatch(NDArray.of(F32, want, 3, 10), 1e-6, 1e-6)).isNull();
        }
    }
}
