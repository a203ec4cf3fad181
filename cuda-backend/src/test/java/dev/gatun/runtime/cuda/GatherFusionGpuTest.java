package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.GatunException;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Gather fusion ({@code PlanOptions.withGatherFusion}) on a GPU session: until the backend generates kernels that read a
 * table through its indices, a session planned with the option is refused by name, before any launch; without it (the
 * default) the same graph runs as two launches and matches the reference interpreter.
 */
@RequiresGpu
class GatherFusionGpuTest {

    @Test
    void aSessionWithGatherFusionIsRefusedByNameAndWithoutItMatchesTheReference() {
        var g = Gatun.graph("gather_add");
        g.output("y", g.input("x", DType.F32, 37, 5).indexSelect(0, g.input("idx", DType.I32, 3, 7)).add(1));
        var graph = g.build();
        var cuda = CompileOptions.world(1).backend("cuda");
        assertThatThrownBy(() -> Session.compile(graph, cuda.gatherFusion(true)).close())
                .isInstanceOf(GatunException.class).hasMessageContaining("withGatherFusion(false)");
        double[] ids = new double[21];
        for (int k = 0; k < ids.length; k++) ids[k] = (k * 11) % 37;
        ids[0] = 36;
        var in = Map.of("x", NDArray.random(DType.F32, 5, 37, 5), "idx", NDArray.of(DType.I32, ids, 3, 7));
        var want = ReferenceInterpreter.evaluate(graph, List.of(in)).getFirst().get("y");
        try (var s = Session.compile(graph, cuda)) {
            assertThat(want.mismatch(s.runToHost(in).get("y"), 0, 0)).isNull();
        }
    }
}
