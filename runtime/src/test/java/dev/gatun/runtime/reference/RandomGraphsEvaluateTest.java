package dev.gatun.runtime.reference;

import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.testing.RandomGraphs;
import dev.gatun.runtime.NDArray;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** Random graphs of every feature evaluate, deterministically, with finite results and equal collectives. */
class RandomGraphsEvaluateTest {

    static List<Map<String, NDArray>> inputs(Graph g, long seed, int world) { return dev.gatun.runtime.TestInputs.of(g, seed, world); }

    @Test
    void hundredsOfRandomGraphsEvaluate() {
        int nonFinite = 0, total = 0;
        for (long seed = 0; seed < 400; seed++) {
            int world = 1 + (int) (seed % 4);
            Graph g = RandomGraphs.generate(seed, RandomGraphs.Options.defaults().withWorldSize(world));
            var in = inputs(g, seed, world);
            var out = ReferenceInterpreter.evaluate(g, in);
            assertThat(out).hasSize(world);
            assertThat(ReferenceInterpreter.evaluate(g, in)).as("deterministic, seed %d", seed).isEqualTo(out);
            for (var rank : out) {
                assertThat(rank.keySet()).isEqualTo(g.outputs().keySet());
                for (var e : rank.entrySet()) {
                    total++;
                    for (double v : e.getValue().toDoubleArray()) if (!Double.isFinite(v)) { nonFinite++; break; }
                }
            }
        }
        // The generator keeps values tame: almost every output is finite.
        assertThat(nonFinite).as("outputs with a NaN or infinity, of %d", total).isLessThan(total / 50);
    }

    @Test
    void ranksAgreeOnWorldCollectivesWithoutSubgroups() {
        for (long seed = 0; seed < 100; seed++) {
            var opts = RandomGraphs.Options.defaults().withSubgroups(false).withWorldSize(3).withUserOps(false);
            Graph g = RandomGraphs.generate(seed, opts);
            var out = ReferenceInterpreter.evaluate(g, inputs(g, seed, 3));
            g.outputs().forEach((name, node) -> {
                // an output computed by a final all_reduce or broadcast over the world is identical on every rank
                if (node.op() instanceof dev.gatun.ir.graph.Op.Collective c
                        && (c.kind() == dev.gatun.ir.graph.CollectiveKind.ALL_REDUCE || c.kind() == dev.gatun.ir.graph.CollectiveKind.BROADCAST)) {
                    assertThat(out.get(1).get(name)).isEqualTo(out.get(0).get(name));
                    assertThat(out.get(2).get(name)).isEqualTo(out.get(0).get(name));
                }
            });
        }
    }
}
