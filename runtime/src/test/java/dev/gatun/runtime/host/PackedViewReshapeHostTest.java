package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;

/**
 * A view whose only odd strides are those of size-1 dimensions is row-major: a reshape reads it as it lies, with
 * static or symbolic sizes alike (a transposed [1, n] is [n, 1] with strides (1, n)), and the values are those of
 * plain loops.
 */
class PackedViewReshapeHostTest {
    @Test
    void aReshapeOfARowMajorViewIgnoringOnesIsNotCopiedAndReadsRight() {
        for (Object n : new Object[]{7, "n"}) {
            var g = Gatun.graph("packed");
            g.output("y", g.input("x", F32, 1, n).transpose(0, 1).reshape(n).mul(3).add(1));
            var graph = g.build();
            assertThat(Lowering.lower(graph, LoweringOptions.world(1)).decisions()).as("n = %s", n).noneMatch(d -> d.contains("is copied first"));
            try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
                NDArray x = NDArray.random(F32, 3, 1, 7);
                NDArray y = s.runToHost(Map.of("x", x)).get("y");
                for (int i = 0; i < 7; i++) assertThat(y.get(i)).isEqualTo((double) (float) (3 * (float) x.get(0, i) + 1f));
            }
        }
    }
}
