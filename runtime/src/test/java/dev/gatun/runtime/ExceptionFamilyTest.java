package dev.gatun.runtime;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.CompilationException;
import dev.gatun.ir.DType;
import dev.gatun.ir.GatunException;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.planner.PlanOptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.catchThrowable;

/**
 * Bad input through the public API always ends in one exception family: a {@link GatunException} of the kind
 * that says where it went wrong (building, compiling, running), with a message that names what was wrong.
 */
class ExceptionFamilyTest {

    static GatunException thrown(Executable call) {
        Throwable t = catchThrowable(call::execute);
        assertThat(t).as("a GatunException").isInstanceOf(GatunException.class);
        return (GatunException) t;
    }

    @Test
    void buildingAGraph() {
        var g = Gatun.graph("bad");
        var x = g.input("x", F32, 4, 4);
        var y = g.input("y", F32, 3, 5);
        assertThat(thrown(() -> x.add(y))).isInstanceOf(GraphException.class).hasMessageContaining("add");
        assertThat(thrown(() -> g.input("z", F32, -1))).isInstanceOf(GraphException.class).hasMessageContaining("'z'").hasMessageContaining("negative");
        assertThat(thrown(() -> g.input("w", F32, 2.5))).isInstanceOf(GraphException.class).hasMessageContaining("'w'");
        assertThat(thrown(() -> x.allReduce(SUM, "nope"))).isInstanceOf(GraphException.class).hasMessageContaining("nope");
        assertThat(thrown(() -> g.mesh("tp", 0))).isInstanceOf(GraphException.class).hasMessageContaining("tp");
        assertThat(thrown(() -> DType.parse("f33"))).isInstanceOf(GraphException.class).hasMessageContaining("f33");
    }

    @Test
    void readingAGraph() {
        assertThat(thrown(() -> GraphJson.fromJson("{\"name\": \"g\", \"nodes\": 3}"))).isInstanceOf(GraphException.class);
        assertThat(thrown(() -> GraphJson.fromJson("not json"))).isInstanceOf(GraphException.class);
    }

    @Test
    void compiling() {
        var g = Gatun.graph("twice");
        g.world(2);
        var x = g.input("x", F32, 4, 4);
        g.output("y", x.allReduce(SUM));
        var graph = g.build();
        // a graph built for two ranks, compiled for four
        assertThat(thrown(() -> Session.compile(graph, CompileOptions.world(4).backend("host"))))
                .isInstanceOf(CompilationException.class).hasMessageContaining("built for a world of 2");
        assertThat(thrown(() -> PlanOptions.DEFAULT.withBatchCollectives(9))).isInstanceOf(CompilationException.class).hasMessageContaining("batchCollectives");
        assertThat(thrown(() -> CompileOptions.world(0))).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("at least one rank");
        assertThat(thrown(() -> CompileOptions.world(2).timeout(java.time.Duration.ZERO))).hasMessageContaining("timeout");
    }

    @Test
    void running() {
        var g = Gatun.graph("run");
        var x = g.input("x", F32, 2, 2);
        g.output("y", x.mul(2));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(thrown(() -> s.runToHost(Map.of("q", NDArray.zeros(F32, 2, 2))))).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("q");
            assertThat(thrown(() -> s.runToHost(Map.of("x", NDArray.zeros(F32, 3, 2))))).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("x");
        }
        assertThat(thrown(() -> NDArray.of(F32, new double[3], 2, 2))).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("do not fill shape");
    }

    /** A profile built by hand with the wrong number of step times says which plan and how many it needs. */
    @Test
    void aProfileOfTheWrongLength() {
        var g = Gatun.graph("timed");
        var x = g.input("x", F32, 2, 2);
        g.output("y", x.mul(2));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            int steps = s.plan().steps().size();
            assertThat(thrown(() -> new Profile(s.plan(), "host", new double[steps + 1]))).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("Profile").hasMessageContaining("'timed'").hasMessageContaining("needs " + steps + " step times, not " + (steps + 1));
        }
    }

    /** A tensor past what one Java array holds is refused by the reference interpreter before it allocates anything. */
    @Test
    void theReferenceInterpretersLimit() {
        var g = Gatun.graph("wide");
        var x = g.input("x", F32, 1, 1);
        g.output("y", x.expand(65536, 65536));
        var graph = g.build();
        assertThat(thrown(() -> new dev.gatun.runtime.reference.ReferenceInterpreter(graph).run(Map.of("x", NDArray.zeros(F32, 1, 1)))))
                .isInstanceOf(GraphException.class).hasMessageContaining("reference interpreter").hasMessageContaining("4294967296")
                .hasMessageContaining("[65536, 65536]");
    }
}
