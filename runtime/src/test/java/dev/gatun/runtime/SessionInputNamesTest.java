package dev.gatun.runtime;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import org.junit.jupiter.api.Test;

import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Session.run names a misspelled input and suggests the declared one it most likely meant. */
class SessionInputNamesTest {

    static Graph twoInputs() {
        var g = Gatun.graph("names");
        var x = g.input("x", F32, 2);
        var w = g.input("weight", F32, 2);
        g.output("y", x.add(w));
        return g.build();
    }

    @Test
    void aMisspelledInputIsNamedWithTheClosestDeclaredOne() {
        try (var s = Session.compile(twoInputs(), CompileOptions.world(1).backend("host"))) {
            var one = NDArray.full(F32, 1, 2);
            assertThatThrownBy(() -> s.runToHost(Map.of("xx", one, "weight", one)))
                    .isInstanceOf(GatunRuntimeException.class)
                    .hasMessage("graph 'names': unknown input 'xx'; did you mean 'x'? inputs are [weight, x]; missing inputs [x]");
            assertThatThrownBy(() -> s.runToHost(Map.of("x", one, "Wieght", one)))
                    .hasMessageContaining("unknown input 'Wieght'; did you mean 'weight'?");
            // nothing close: no guess, but the declared names
            assertThatThrownBy(() -> s.runToHost(Map.of("x", one, "weight", one, "bias", one)))
                    .hasMessage("graph 'names': unknown input 'bias'; inputs are [weight, x]");
            assertThatThrownBy(() -> s.runToHost(Map.of("x", one)))
                    .hasMessage("graph 'names': missing inputs [weight]; inputs are [weight, x]");
            assertThat(s.runToHost(Map.of("x", one, "weight", one)).get("y").toFloatArray()).containsExactly(2, 2);
        }
    }

    @Test
    void editDistanceCountsInsertionsDeletionsAndSubstitutions() {
        assertThat(Spelling.distance("x", "xx")).isEqualTo(1);
        assertThat(Spelling.distance("kitten", "sitting")).isEqualTo(3);
        assertThat(Spelling.distance("", "abc")).isEqualTo(3);
        assertThat(Spelling.closest("wieght", java.util.List.of("x", "weight"))).isEqualTo("weight");
        assertThat(Spelling.closest("bias", java.util.List.of("x", "weight"))).isNull();
    }
}
