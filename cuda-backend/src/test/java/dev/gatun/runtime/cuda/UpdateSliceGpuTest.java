package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;
import dev.gatun.runtime.testing.UpdateSlices;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * update_slice and states on the GPU: caches laid out as the Llama decoder's (a key position is one element of each
 * row, a value position a whole row), replayed with a new position every call, against plain loops; a state bound from
 * another session's output; ranks sharing the GPU each keep their own state.
 */
@RequiresGpu
class UpdateSliceGpuTest {

    static Graph cache(DType t, long[] shape, int dim, long len, DType pos) {
        var g = Gatun.graph("cache");
        long[] upd = shape.clone();
        upd[dim] = len;
        var c = g.state("c", t, (Object[]) java.util.Arrays.stream(shape).boxed().toArray());
        var u = g.input("u", t, (Object[]) java.util.Arrays.stream(upd).boxed().toArray());
        var after = c.updateSlice(dim, u.mul(1), g.input("at", pos, 1));   // the update made by a kernel, as rope makes a key
        g.output("after", after);
        g.output("sum", after.sum(false, shape.length - 1));
        return g.build();
    }

    /**
     * Value heads taken out of a fused product at a batch of several ([b, heads, 1, d], batch rows 2 heads apart) are
     * written where they lie, replayed and eagerly, in bf16 (16-byte units) and f32 with an odd head size (4-byte units).
     */
    @Test
    void updatesAtTwoStridesAreReadWhereTheyLie() {
        var rnd = new SplittableRandom(8);
        for (DType t : List.of(DType.BF16, DType.F32))
            for (boolean replay : new boolean[]{true, false}) {
                int b = 3, heads = 5, d = t == DType.BF16 ? 64 : 7, positions = 9;
                var g = Gatun.graph("heads");
                var v = g.input("p", t, b, 1, 2 * heads, d).mul(1).slice(2, heads, 2 * heads).transpose(1, 2);   // a view of a kernel's output
                g.output("cache", g.state("cache", t, b, heads, positions, d).updateSlice(2, v, g.input("at", DType.I32)));
                try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda").cudaGraphs(replay))) {
                    assertThat(s.plan().kernels()).as("no copy before the write").noneSatisfy(k -> assertThat(k.ops()).containsOnly("copy"));
                    double[] cache = new double[b * heads * positions * d];
                    for (int call = 0; call < 10; call++) {
                        NDArray p = NDArray.random(t, rnd.nextLong(), b, 1, 2 * heads, d);
                        int at = rnd.nextInt(positions);
                        double[] head = UpdateSlices.secondHalfHeads(p.toDoubleArray(), b, heads, d);
                        cache = UpdateSlices.expected(cache, new long[]{b, heads, positions, d}, head, 2, 1, at);
                        var got = s.runToHost(Map.of("p", p, "at", NDArray.of(DType.I32, new double[]{at}))).get("cache").toDoubleArray();
                        assertThat(got).as("%s replay %s call %d at %d", t, replay, call, at).containsExactly(cache);
                    }
                }
            }
    }

    /**
     * A key and a value written at one position are one launch (update_slice×2): both caches right on every call,
     * replayed and eagerly, the key's position one element of each row and the value's a whole row.
     */
    @Test
    void aKeyAndAValueAtOnePositionAreOneLaunchAndBothRight() {
        var rnd = new SplittableRandom(12);
        for (boolean replay : new boolean[]{true, false}) {
            int heads = 4, d = 64, positions = 20;
            var g = Gatun.graph("kv");
            var at = g.input("at", DType.I32);
            var kv = g.input("kv", DType.BF16, 2, heads, d).mul(1);
            g.output("k", g.state("k", DType.BF16, heads, d, positions).updateSlice(2, kv.slice(0, 0, 1).reshape(heads, d, 1), at));
            g.output("v", g.state("v", DType.BF16, heads, positions, d).updateSlice(1, kv.slice(0, 1, 2).reshape(heads, 1, d), at));
            try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda").cudaGraphs(replay))) {
                assertThat(s.plan().steps()).as(s.plan().toString()).anyMatch(st -> st instanceof dev.gatun.planner.Step.UpdateSlices);
                double[] k = new double[heads * d * positions], v = new double[heads * positions * d];
                for (int call = 0; call < 10; call++) {
                    NDArray in = NDArray.random(DType.BF16, rnd.nextLong(), 2, heads, d);
                    int p = rnd.nextInt(positions);
                    double[] all = in.toDoubleArray();
                    k = UpdateSlices.expected(k, new long[]{heads, d, positions}, java.util.Arrays.copyOfRange(all, 0, heads * d), 2, 1, p);
                    v = UpdateSlices.expected(v, new long[]{heads, positions, d}, java.util.Arrays.copyOfRange(all, heads * d, 2 * heads * d), 1, 1, p);
                    var out = s.runToHost(Map.of("kv", in, "at", NDArray.of(DType.I32, new double[]{p})));
                    assertThat(out.get("k").toDoubleArray()).as("replay %s call %d: k", replay, call).containsExactly(k);
                    assertThat(out.get("v").toDoubleArray()).as("replay %s call %d: v", replay, call).containsExactly(v);
                }
            }
        }
    }

    @Test
    void cachesTakeEachCallsPositionInPlaceReplayedOrNot() {
        var rnd = new SplittableRandom(5);
        record Case(DType t, long[] shape, int dim, long len, DType pos) {}
        var cases = List.of(
                new Case(DType.BF16, new long[]{1, 8, 64, 40}, 3, 1, DType.I32),    // keys, transposed: 2-byte units
                new Case(DType.BF16, new long[]{2, 8, 40, 64}, 2, 1, DType.I32),    // values: 128-byte rows, 16-byte units
                new Case(DType.F32, new long[]{3, 7, 5}, 1, 2, DType.I64),          // odd sizes, 4-byte units
                new Case(DType.F16, new long[]{33}, 0, 3, DType.I64),
                new Case(DType.F32, new long[]{3, 7, 5}, 1, 0, DType.I32));   // an empty update: nothing written, the position still checked
        for (Case k : cases)
            for (boolean replay : new boolean[]{true, false}) {
                try (var s = Session.compile(cache(k.t(), k.shape(), k.dim(), k.len(), k.pos()), CompileOptions.world(1).backend("cuda").cudaGraphs(replay))) {
                    long[] upd = k.shape().clone();
                    upd[k.dim()] = k.len();
                    double[] want = new double[(int) java.util.Arrays.stream(k.shape()).reduce(1, Math::multiplyExact)];
                    for (int call = 0; call < 12; call++) {
                        long at = call == 0 ? k.shape()[k.dim()] - k.len() : rnd.nextLong(k.shape()[k.dim()] - k.len() + 1);
                        NDArray u = NDArray.random(k.t(), rnd.nextLong(), upd);
                        var out = s.runToHost(Map.of("u", u, "at", NDArray.of(k.pos(), new double[]{at}, 1)));
                        want = UpdateSlices.expected(want, k.shape(), u.toDoubleArray(), k.dim(), k.len(), at);
                        assertThat(out.get("after").toDoubleArray()).as("%s call %d at %d replay %s", k, call, at, replay).containsExactly(want);
                    }
                }
            }
    }

    @Test
    void aStateIsBoundFromAnotherSessionsOutputOnTheDevice() {
        var p = Gatun.graph("prefill");
        p.output("filled", p.input("x", DType.BF16, 4, 16).mul(2));
        var d = Gatun.graph("decode");
        var c = d.state("c", DType.BF16, 4, 16).updateSlice(1, d.input("u", DType.BF16, 4, 1), d.input("at", DType.I32, 1));
        d.output("c", c);
        NDArray x = NDArray.random(DType.BF16, 1, 4, 16), u = NDArray.random(DType.BF16, 2, 4, 1);
        try (var prefill = Session.compile(p.build(), CompileOptions.world(1).backend("cuda"));
             var decode = Session.compile(d.build(), CompileOptions.world(1).backend("cuda"))) {
            decode.bind("c", prefill.run(Map.of("x", x)).get("filled"));
            var got = decode.runToHost(Map.of("u", u, "at", NDArray.of(new int[]{9}, 1))).get("c").toDoubleArray();
            double[] doubled = x.toDoubleArray();
            for (int i = 0; i < doubled.length; i++) doubled[i] *= 2;
            assertThat(got).containsExactly(UpdateSlices.expected(doubled, new long[]{4, 16}, u.toDoubleArray(), 1, 1, 9));
            decode.bind("c", NDArray.zeros(DType.BF16, 4, 16));
            got = decode.runToHost(Map.of("u", u, "at", NDArray.of(new int[]{0}, 1))).get("c").toDoubleArray();
            assertThat(got).containsExactly(UpdateSlices.expected(new double[64], new long[]{4, 16}, u.toDoubleArray(), 1, 1, 0));
        }
    }

    @Test
    void ranksSharingTheGpuKeepTheirOwnStates() {
        int world = 2;
        LocalWorld.run(world, rv -> {
            int rank = rv.rank();
            var g = Gatun.graph("tp").world(world);
            var u = g.input("u", DType.F32, 2, 1).allReduce(ReduceOp.SUM).add(g.input("mine", DType.F32, 2, 1));   // differs by rank
            g.output("c", g.state("c", DType.F32, 2, 6).updateSlice(1, u, g.input("at", DType.I32, 1)));
            try (var s = Session.compile(g.build(), CompileOptions.world(world).rank(rv).ranksPerGpu(world).timeout(java.time.Duration.ofSeconds(20)))) {
                double[] want = new double[12];
                for (int call = 0; call < 6; call++) {
                    var out = s.runToHost(Map.of("u", NDArray.of(new float[]{call, 10 + call}, 2, 1), "mine", NDArray.of(new float[]{100 * rank, -rank}, 2, 1),
                            "at", NDArray.of(new int[]{(call * 5) % 6}, 1)));
                    want = UpdateSlices.expected(want, new long[]{2, 6}, new double[]{world * call + 100 * rank, world * (10 + call) - rank}, 1, 1, (call * 5) % 6);
                    assertThat(out.get("c").toDoubleArray()).as("rank %d call %d", rank, call).containsExactly(want);
                }
            }
        });
    }
}
