package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import dev.gatun.runtime.testing.UpdateSlices;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * update_slice (dynamic_update_slice) and states: a copy when the operand is an ordinary tensor, in place in the
 * state's persistent slot when it is a state, a position read at run time, checked against plain loops and the
 * reference interpreter; bad positions and bad graphs refused with the op named.
 */
class UpdateSliceHostTest {

    /** {@code x} [2, 5, 3] with {@code u} [2, len, 3] written from {@code at} along dimension 1, by plain loops. */
    static double[] expected(double[] x, double[] u, int len, int at) {
        return UpdateSlices.expected(x, new long[]{2, 5, 3}, u, 1, len, at);
    }

    static double[] values(NDArray a) { return a.toDoubleArray(); }

    @Test
    void anOrdinaryOperandIsCopiedAndNeverWritten() {
        for (DType posType : List.of(DType.I32, DType.I64)) {
            var g = Gatun.graph("upd");
            var x = g.input("x", DType.F32, 2, 5, 3);
            var u = g.input("u", DType.F32, 2, 2, 3);
            var at = g.input("at", posType, 1);
            g.output("y", x.updateSlice(1, u, at).mul(2));
            g.output("x2", x.add(0));   // x is read after the update too: it must be unchanged
            Graph graph = g.build();
            NDArray xv = NDArray.randn(DType.F32, 1, 2, 5, 3), uv = NDArray.randn(DType.F32, 2, 2, 2, 3);
            try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
                assertThat(s.plan().toString()).contains("= update_slice(").contains("# in place:");
                for (int p = 0; p <= 3; p++) {
                    var in = Map.of("x", xv, "u", uv, "at", NDArray.of(posType, new double[]{p}, 1));
                    var out = s.runToHost(in);
                    double[] want = expected(values(xv), values(uv), 2, p);
                    for (int i = 0; i < want.length; i++) assertThat(out.get("y").get(i)).isEqualTo(2 * want[i]);
                    assertThat(out.get("x2").mismatch(xv, 0, 0)).isNull();
                    assertThat(ReferenceInterpreter.evaluate(graph, List.of(in)).getFirst().get("y").mismatch(out.get("y"), 0, 0)).isNull();
                }
            }
        }
    }

    /** A KV-cache's pattern: a state [2, 5, 3] takes one new row a call at the call's position; outputs read the update. */
    static Graph cache(GraphBuilder g, DType dtype) {
        Tensor c = g.state("cache", dtype, 2, 5, 3);
        Tensor row = g.input("row", dtype, 2, 1, 3);
        Tensor at = g.input("at", DType.I32);
        Tensor updated = c.updateSlice(1, row, at);
        g.output("cache", updated);
        g.output("total", updated.sum(false, 1, 2));
        return g.build();
    }

    @Test
    void aStateKeepsItsUpdatesFromCallToCallInPlace() {
        Graph graph = cache(Gatun.graph("kv"), DType.BF16);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            String plan = s.plan().toString();
            assertThat(plan).contains("alloc_states(").contains("update_slice(cache").contains("in place");
            assertThat(s.plan().states()).hasSize(1);
            assertThat(s.plan().inputs()).extracting(b -> b.input()).containsExactly("row", "at");
            double[] want = new double[30];   // starts at zeros
            for (int call = 0; call < 5; call++) {
                int at = (call * 3) % 5;
                NDArray row = NDArray.randn(DType.BF16, 10 + call, 2, 1, 3);
                var out = s.runToHost(Map.of("row", row, "at", NDArray.of(DType.I32, new double[]{at})));
                want = expected(want, values(row), 1, at);
                assertThat(values(out.get("cache"))).containsExactly(want);
                for (int a = 0; a < 2; a++) {
                    double sum = 0;
                    for (int i = 0; i < 15; i++) sum += want[a * 15 + i];
                    assertThat(out.get("total").get(a)).isCloseTo(sum, org.assertj.core.api.Assertions.within(Math.abs(sum) * 1e-2 + 1e-2));
                }
            }
            // bind sets the state (from a host array or a device array), and the next call updates that
            NDArray start = NDArray.randn(DType.BF16, 99, 2, 5, 3);
            s.bind("cache", start);
            NDArray row = NDArray.randn(DType.BF16, 7, 2, 1, 3);
            var out = s.runToHost(Map.of("row", row, "at", NDArray.of(DType.I32, new double[]{4})));
            assertThat(values(out.get("cache"))).containsExactly(expected(values(start), values(row), 1, 4));
            s.bind("cache", s.toDevice(NDArray.zeros(DType.BF16, 2, 5, 3)));
            out = s.runToHost(Map.of("row", row, "at", NDArray.of(DType.I32, new double[]{0})));
            assertThat(values(out.get("cache"))).containsExactly(expected(new double[30], values(row), 1, 0));
        }
    }

    @Test
    void aStateIsNeitherPassedNorUnbound() {
        try (var s = Session.compile(cache(Gatun.graph("kv"), DType.F32), CompileOptions.world(1).backend("host"))) {
            var in = new HashMap<String, NDArray>(Map.of("row", NDArray.zeros(DType.F32, 2, 1, 3), "at", NDArray.of(DType.I32, new double[]{0})));
            in.put("cache", NDArray.zeros(DType.F32, 2, 5, 3));
            assertThatThrownBy(() -> s.runToHost(in)).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("'cache' is a state of graph 'kv'").hasMessageContaining("bind(\"cache\", value)");
            assertThatThrownBy(() -> s.unbind("cache")).hasMessageContaining("'cache' is a state");
            assertThatThrownBy(() -> s.bind("cache", NDArray.zeros(DType.F32, 2, 5, 4))).hasMessageContaining("shape");
        }
    }

    @Test
    void aPositionWhereTheUpdateDoesNotFitFailsTheCallNamingIt() {
        try (var s = Session.compile(cache(Gatun.graph("kv"), DType.F32), CompileOptions.world(1).backend("host"))) {
            NDArray row = NDArray.randn(DType.F32, 1, 2, 1, 3);
            s.runToHost(Map.of("row", row, "at", NDArray.of(DType.I32, new double[]{2})));
            for (int bad : new int[]{5, -1, 1 << 30})
                assertThatThrownBy(() -> s.runToHost(Map.of("row", row, "at", NDArray.of(DType.I32, new double[]{bad}))))
                        .isInstanceOf(GatunRuntimeException.class).hasMessageContaining("update_slice(cache")
                        .hasMessageContaining("position " + bad).hasMessageContaining("it must be 0 to 4");
            // nothing was written: the state is what the good call left
            var out = s.runToHost(Map.of("row", NDArray.zeros(DType.F32, 2, 1, 3), "at", NDArray.of(DType.I32, new double[]{0})));
            double[] want = expected(expected(new double[30], values(row), 1, 2), new double[6], 1, 0);
            assertThat(values(out.get("cache"))).containsExactly(want);
        }
        var e = Gatun.graph("empty");   // an empty update writes nothing, and its position is checked all the same
        e.output("y", e.input("x", DType.F32, 4).updateSlice(0, e.input("u", DType.F32, 0), e.input("at", DType.I32)));
        try (var s = Session.compile(e.build(), CompileOptions.world(1).backend("host"))) {
            NDArray x4 = NDArray.of(new float[]{1, 2, 3, 4}, 4), none = NDArray.zeros(DType.F32, 0);
            assertThat(values(s.runToHost(Map.of("x", x4, "u", none, "at", NDArray.of(DType.I32, new double[]{4}))).get("y"))).containsExactly(1, 2, 3, 4);
            assertThatThrownBy(() -> s.runToHost(Map.of("x", x4, "u", none, "at", NDArray.of(DType.I32, new double[]{5}))))
                    .hasMessageContaining("position 5").hasMessageContaining("it must be 0 to 4");
        }
        var g = Gatun.graph("r");
        var x = g.input("x", DType.F32, 4);
        g.output("y", x.updateSlice(0, g.input("u", DType.F32, 2), g.input("at", DType.I64)));
        assertThatThrownBy(() -> ReferenceInterpreter.evaluate(g.build(), List.of(Map.of("x", NDArray.zeros(DType.F32, 4),
                "u", NDArray.zeros(DType.F32, 2), "at", NDArray.of(DType.I64, new double[]{3})))))
                .hasMessageContaining("update_slice(").hasMessageContaining("position 3").hasMessageContaining("must be 0 to 2");
    }

    @Test
    void theGraphRefusesBadOperandsAndReadsOfAStatesOldContents() {
        var g = Gatun.graph("bad");
        var x = g.input("x", DType.F32, 4, 6);
        var at = g.input("at", DType.I32, 1);
        assertThatThrownBy(() -> x.updateSlice(1, g.input("h", DType.BF16, 4, 2), at)).isInstanceOf(GraphException.class)
                .hasMessageContaining("update_slice(").hasMessageContaining("is bf16 but the operand is f32");
        assertThatThrownBy(() -> x.updateSlice(1, g.input("r", DType.F32, 4, 2, 1), at)).hasMessageContaining("has 3 dimensions, the operand 2");
        assertThatThrownBy(() -> x.updateSlice(1, g.input("w", DType.F32, 3, 2), at)).hasMessageContaining("dimension 0 is 3, the operand's is 4");
        assertThatThrownBy(() -> x.updateSlice(1, g.input("l", DType.F32, 4, 7), at)).hasMessageContaining("longer than the operand's 6");
        assertThatThrownBy(() -> x.updateSlice(1, g.input("u", DType.F32, 4, 2), g.input("f", DType.F32, 1))).hasMessageContaining("must be i32 or i64");
        assertThatThrownBy(() -> x.updateSlice(1, g.input("v", DType.F32, 4, 2), g.input("two", DType.I32, 2))).hasMessageContaining("must hold one value");
        assertThatThrownBy(() -> x.updateSlice(2, g.input("z", DType.F32, 4, 2), at)).hasMessageContaining("dim 2 is outside");
        assertThatThrownBy(() -> g.state("sym", DType.F32, "n")).hasMessageContaining("must be static");

        var h = Gatun.graph("old");
        var c = h.state("c", DType.F32, 4, 6);
        var u = c.updateSlice(1, h.input("u", DType.F32, 4, 1), h.input("at", DType.I32));
        h.output("y", u.add(c));   // reads the state's contents from before the update
        assertThatThrownBy(h::build).isInstanceOf(GraphException.class).hasMessageContaining("state 'c' is read by")
                .hasMessageContaining("read the update's result");
        var k = Gatun.graph("old2");
        var c2 = k.state("c", DType.F32, 4, 6);
        c2.updateSlice(1, k.input("u", DType.F32, 4, 1), k.input("at", DType.I32));
        k.output("y", c2);
        assertThatThrownBy(k::build).hasMessageContaining("is an output as it was before");
    }

    @Test
    void updatesOfUpdatesShareTheStatesSlot() {
        var g = Gatun.graph("chain");
        var c = g.state("c", DType.F32, 6);
        var once = c.updateSlice(0, g.input("a", DType.F32, 1), g.input("at", DType.I64));
        g.output("after", once.updateSlice(0, g.input("b", DType.F32, 2), g.input("at2", DType.I32)));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().toString()).containsSubsequence("update_slice(c", "update_slice(").doesNotContain("alloc(");
            var out = s.runToHost(Map.of("at", NDArray.of(DType.I64, new double[]{1}), "a", NDArray.of(new float[]{7}, 1),
                    "at2", NDArray.of(DType.I32, new double[]{2}), "b", NDArray.of(new float[]{8, 9}, 2)));
            assertThat(values(out.get("after"))).containsExactly(0, 7, 8, 9, 0, 0);
            out = s.runToHost(Map.of("at", NDArray.of(DType.I64, new double[]{4}), "a", NDArray.of(new float[]{5}, 1),
                    "at2", NDArray.of(DType.I32, new double[]{0}), "b", NDArray.of(new float[]{1, 2}, 2)));
            assertThat(values(out.get("after"))).containsExactly(1, 2, 8, 9, 5, 0);
        }
    }

    @Test
    void itSurvivesJsonAndEachSimulatedRankKeepsItsOwnState() {
        Graph graph = cache(Gatun.graph("kv").world(2), DType.F32);
        Graph back = GraphJson.fromJson(GraphJson.toJson(graph));
        assertThat(back.toString()).isEqualTo(graph.toString()).contains("= state(\"cache\")");
        assertThat(back.states()).containsExactly("cache");
        try (var s = Session.compile(back, CompileOptions.world(2).backend("host").randomDelays(3))) {
            double[][] want = new double[2][30];
            for (int call = 0; call < 4; call++) {
                var in = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < 2; r++) {
                    NDArray row = NDArray.randn(DType.F32, 100 * r + call, 2, 1, 3);
                    int at = (call + 2 * r) % 5;
                    in.add(Map.of("row", row, "at", NDArray.of(DType.I32, new double[]{at})));
                    want[r] = expected(want[r], values(row), 1, at);
                }
                var out = s.runToHost(in);
                for (int r = 0; r < 2; r++) assertThat(values(out.get(r).get("cache"))).containsExactly(want[r]);
            }
        }
    }

    /**
     * Random shapes, dimensions, lengths, positions and dtypes; the operand a state, a graph input or a computed value;
     * the update an input or computed. Two calls each, on one rank and on two with random delays; every value against
     * the reference interpreter (a state's value passed to it as an input) and the state carried by plain loops.
     */
    /**
     * A value head taken out of a fused product at a batch of several, [b, heads, 1, d] with batch rows 2 heads apart,
     * is written into a state's cache where it lies: no copy kernel before the update, every call right against plain
     * loops (the head's values picked out of the product by index arithmetic).
     */
    @Test
    void anUpdateAtTwoStridesIsReadWhereItLies() {
        int b = 3, heads = 5, d = 4, positions = 6;
        var g = Gatun.graph("heads");
        Tensor v = g.input("p", DType.F32, b, 1, 2 * heads, d).slice(2, heads, 2 * heads).transpose(1, 2);   // [b, heads, 1, d]
        g.output("cache", g.state("cache", DType.F32, b, heads, positions, d).updateSlice(2, v, g.input("at", DType.I32)));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().kernels()).as(s.plan().toString()).isEmpty();
            double[] cache = new double[b * heads * positions * d];
            var rnd = new java.util.SplittableRandom(3);
            for (int call = 0; call < 8; call++) {
                NDArray p = NDArray.randn(DType.F32, 40 + call, b, 1, 2 * heads, d);
                int at = rnd.nextInt(positions);
                double[] head = UpdateSlices.secondHalfHeads(p.toDoubleArray(), b, heads, d);
                cache = UpdateSlices.expected(cache, new long[]{b, heads, positions, d}, head, 2, 1, at);
                var got = s.runToHost(Map.of("p", p, "at", NDArray.of(DType.I32, new double[]{at}))).get("cache").toDoubleArray();
                assertThat(got).as("call %d at %d", call, at).containsExactly(cache);
            }
        }
    }

    @Test
    void randomUpdatesMatchTheReference() {
        var rnd = new java.util.SplittableRandom(17);
        for (int c = 0; c < 120; c++) {
            int rank = 1 + rnd.nextInt(4), dim = rnd.nextInt(rank);
            long[] shape = new long[rank];
            for (int d = 0; d < rank; d++) shape[d] = 1 + rnd.nextInt(5);
            long len = 1 + rnd.nextLong(shape[dim]);
            long[] upd = shape.clone();
            upd[dim] = len;
            DType t = List.of(DType.F32, DType.BF16, DType.F16, DType.I32).get(rnd.nextInt(4));
            DType pos = rnd.nextBoolean() ? DType.I32 : DType.I64;
            int kind = rnd.nextInt(3);   // 0: a state, 1: an input, 2: a computed value
            boolean computedUpdate = rnd.nextBoolean();
            int world = rnd.nextInt(4) == 0 ? 2 : 1;
            var g = Gatun.graph("random" + c).world(world);
            Object[] dims = java.util.Arrays.stream(shape).boxed().toArray();
            Tensor x = switch (kind) {
                case 0 -> g.state("s", t, dims);
                case 1 -> g.input("x", t, dims);
                default -> g.input("x", t, dims).add(1);
            };
            Tensor u = g.input("u", t, java.util.Arrays.stream(upd).boxed().toArray());
            if (computedUpdate) u = u.mul(2);
            Tensor y = x.updateSlice(rnd.nextBoolean() ? dim : dim - rank, u, g.input("at", pos, 1));
            g.output("y", y);
            g.output("sum", y.cast(DType.F32).sum(false, 0));
            Graph graph = g.build();
            double[][] state = new double[world][(int) java.util.Arrays.stream(shape).reduce(1, Math::multiplyExact)];
            try (var s = Session.compile(graph, CompileOptions.world(world).backend("host").randomDelays(world > 1 ? 3 : 0))) {
                for (int call = 0; call < 2; call++) {
                    var in = new ArrayList<Map<String, NDArray>>();
                    var ref = new ArrayList<Map<String, NDArray>>();
                    for (int r = 0; r < world; r++) {
                        var m = new HashMap<String, NDArray>();
                        if (kind != 0) m.put("x", NDArray.random(t, rnd.nextLong(), shape));
                        m.put("u", NDArray.random(t, rnd.nextLong(), upd));
                        m.put("at", NDArray.of(pos, new double[]{rnd.nextLong(shape[dim] - len + 1)}, 1));
                        in.add(m);
                        var mr = new HashMap<>(m);
                        if (kind == 0) mr.put("s", NDArray.of(t, state[r], shape));
                        ref.add(mr);
                    }
                    var want = ReferenceInterpreter.evaluate(graph, ref);
                    var got = s.runToHost(in);
                    for (int r = 0; r < world; r++) {
                        String what = "case " + c + " " + graph.name() + " call " + call + " rank " + r + " " + t + java.util.Arrays.toString(shape) + " dim " + dim;
                        assertThat(want.get(r).get("y").mismatch(got.get(r).get("y"), 0, 0)).as(what).isNull();
                        assertThat(want.get(r).get("sum").mismatch(got.get(r).get("sum"), 1e-5, 1e-5)).as(what).isNull();
                        if (kind == 0) state[r] = got.get(r).get("y").toDoubleArray();
                    }
                }
            }
        }
    }
}
