package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.fail;

/**
 * The host backend (lowered, fused, planned with pool reuse, run on simulated ranks) against the reference
 * interpreter (the graph evaluated directly), on hundreds of random graphs and world sizes 1 to 4.
 */
class HostDifferentialTest {

    static List<Map<String, NDArray>> inputs(Graph g, long seed, int world) { return dev.gatun.runtime.TestInputs.of(g, seed, world); }

    /** Float32 within 1e-5 relative (fusion changes no rounding here, but sums may), half types within their ulp. */
    static void assertMatches(Graph g, long seed, List<Map<String, NDArray>> expected, List<Map<String, NDArray>> actual) {
        for (int r = 0; r < expected.size(); r++) {
            for (var e : expected.get(r).entrySet()) {
                NDArray want = e.getValue(), got = actual.get(r).get(e.getKey());
                double tol = want.dtype().isHalf() ? 1e-2 : want.dtype() == DType.FLOAT32 ? 1e-5 : 1e-9;
                String why = want.mismatch(got, tol, tol);
                if (why != null) fail("seed " + seed + " rank " + r + " output '" + e.getKey() + "': " + why + "\n" + g);
            }
        }
    }

    static void check(long seed, RandomGraphs.Options opts, CompileOptions co) {
        Graph g = RandomGraphs.generate(seed, opts);
        var in = inputs(g, seed, opts.worldSize());
        var expected = ReferenceInterpreter.evaluate(g, in);
        // the reference rounds every op: so does the plan here (the default holds half intermediates in float)
        try (var s = Session.compile(g, co.roundEachOp())) {
            assertMatches(g, seed, expected, s.runToHost(in));
            // a second call reuses every pool: still right
            assertMatches(g, seed, expected, s.runToHost(in));
        }
    }

    @Test
    void randomGraphsMatchTheReference() {
        for (long seed = 0; seed < 300; seed++) {
            int world = 1 + (int) (seed % 4);
            var opts = RandomGraphs.Options.defaults().withWorldSize(world);
            check(seed, opts, CompileOptions.world(world).backend("host"));
        }
    }

    @Test
    void randomGraphsMatchWithRandomRankDelays() {
        for (long seed = 1000; seed < 1060; seed++) {
            int world = 2 + (int) (seed % 3);
            var opts = RandomGraphs.Options.defaults().withWorldSize(world).staticOnly();
            check(seed, opts, CompileOptions.world(world).backend("host").randomDelays(seed));
        }
    }

    @Test
    void everyAllReduceAlgorithmMatches() {
        for (var alg : dev.gatun.ir.Algorithm.values()) {
            if (alg == dev.gatun.ir.Algorithm.SYMM_MEM) continue;
            for (long seed = 2000; seed < 2040; seed++) {
                int world = 2 + (int) (seed % 3);
                var opts = RandomGraphs.Options.defaults().withWorldSize(world).staticOnly().withSubgroups(false);
                check(seed, opts, CompileOptions.world(world).backend("host").forceAllReduce(alg).randomDelays(seed));
            }
        }
    }

    @Test
    void withoutInPlaceOrReorderingStillMatches() {
        for (long seed = 3000; seed < 3050; seed++) {
            int world = 1 + (int) (seed % 4);
            var opts = RandomGraphs.Options.defaults().withWorldSize(world);
            var plan = dev.gatun.planner.PlanOptions.DEFAULT.withInPlace(false).withReorder(false);
            check(seed, opts, CompileOptions.world(world).backend("host").planning(plan));
        }
    }
}
