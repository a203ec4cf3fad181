package dev.gatun.runtime.bench;

import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/** The scale benchmark's ladder, small: it computes what plain float64 loops compute, and plans as described. */
class HostScaleBenchSmokeTest {
    @Test
    void theLadderMatchesPlainLoops() {
        int layers = 40;
        var in = HostScaleBench.inputs();
        double[][][] want = HostScaleBench.reference(layers, in);
        try (var s = Session.compile(HostScaleBench.ladder(layers), CompileOptions.world(HostScaleBench.WORLD).backend("host"))) {
            var out = s.runToHost(in);
            for (int r = 0; r < HostScaleBench.WORLD; r++)
                for (int k = 0; k < 2; k++)
                    for (int i = 0; i < 64; i++)
                        assertThat(out.get(r).get("y" + k).get(i)).as("rank %d y%d[%d]", r, k, i)
                                .isCloseTo(want[r][k][i], org.assertj.core.data.Offset.offset(1e-4 * Math.max(1, Math.abs(want[r][k][i]))));
            // one kernel and one all-reduce per layer (each pair of pointwise ops fuses)
            assertThat(s.plan().kernels()).hasSize(layers);
        }
    }
}
