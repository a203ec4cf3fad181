package dev.gatun.ir.graph;

import dev.gatun.ir.testing.RandomGraphs;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;

import static org.assertj.core.api.Assertions.assertThat;

/** Property tests (jqwik): JSON round trips of random graphs. Kept apart from the JUnit tests so reports do not collide. */
class GraphJsonRoundTripTest {

    @Property(tries = 300)
    void randomGraphsRoundTrip(@ForAll long seed) {
        Graph g = RandomGraphs.generate(seed);
        String json = GraphJson.toJson(g);
        Graph back = GraphJson.fromJson(json, RandomGraphs.userOps());
        assertThat(GraphJson.toJson(back)).isEqualTo(json);
        assertThat(back.toString()).isEqualTo(g.toString());
        assertThat(back.userOps()).isEqualTo(g.userOps()); // registry ops are used as registered
    }

    @Property(tries = 150)
    void randomGraphsRoundTripWithoutTheRegistry(@ForAll long seed) {
        var opts = RandomGraphs.Options.defaults().withWorldSize(1 + (int) Math.floorMod(seed, 4L)).withMaxNodes(40).withOutputs(3);
        Graph g = RandomGraphs.generate(seed, opts);
        String json = GraphJson.toJson(g);
        Graph back = GraphJson.fromJson(json);
        assertThat(GraphJson.toJson(back)).isEqualTo(json);
        assertThat(back.toString()).isEqualTo(g.toString());
        assertThat(back.userOps().values()).noneMatch(UserOp::hasHostImplementation);
    }
}
