package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The planner's state writes on the GPU: a kernel that reads two states' old values and writes both new values into
 * the states' own slots (as AdamW's update writes a moment and a weight), over several calls, with programmatic launches
 * and CUDA graphs on and off, against plain float64 loops (1e-5 relative: the GPU may contract a multiply and an add);
 * and a state whose old value is read after the new value's kernel (times the new value's mean), which keeps its
 * snapshot, right too.
 */
@RequiresGpu
class StateWritesGpuTest {
    static final int ROWS = 512, COLS = 768, CALLS = 4;

    static Tensor zero(GraphBuilder g) { return g.constant(DType.I64, new long[]{1}, 0); }

    /** m' = 0.9 m + 0.1 s, s' = s - 0.5 m' (one kernel, both written in place); y = s_old * mean(s'), which reads s's old value after that kernel. */
    static Graph graph(boolean laterReader) {
        GraphBuilder g = Gatun.graph("state_writes");
        List<Tensor> s = g.apply("snapshot", Map.of(), g.state("s", DType.F32, ROWS, COLS));
        List<Tensor> m = g.apply("snapshot", Map.of(), g.state("m", DType.F32, ROWS, COLS));
        Tensor m1 = m.get(1).mul(0.9).add(s.get(1).mul(0.1));
        Tensor s1 = s.get(1).sub(m1.mul(0.5));
        g.output("m", m.get(0).updateSlice(0, m1, zero(g)));
        g.output("s", s.get(0).updateSlice(0, s1, zero(g)));
        if (laterReader) g.output("y", s.get(1).mul(s1.mean()));
        return g.build();
    }

    @ParameterizedTest(name = "later reader {0}, programmatic {1}, graphs {2}")
    @CsvSource({"false, true, true", "false, false, false", "true, true, true", "true, false, false"})
    void statesWrittenInPlaceHoldTheirNewValues(boolean laterReader, boolean programmatic, boolean graphs) {
        double[] s = new double[ROWS * COLS], m = new double[ROWS * COLS];
        for (int i = 0; i < s.length; i++) {
            s[i] = Math.sin(0.001 * i);
            m[i] = Math.cos(0.002 * i) * 0.5;
        }
        var options = CompileOptions.world(1).backend("cuda").cudaGraphs(graphs)
                .programmaticLaunch(programmatic ? PlanOptions.ProgrammaticLaunch.ON : PlanOptions.ProgrammaticLaunch.OFF);
        try (var session = Session.compile(graph(laterReader), options)) {
            long snapshots = session.plan().steps().stream().flatMap(st -> st.parts().stream())
                    .filter(st -> st instanceof Step.OpCall o && o.spec().name().equals("snapshot")).count();
            assertThat(snapshots).as("%s", session.plan().notes()).isEqualTo(laterReader ? 1 : 0);
            session.bind("s", NDArray.of(DType.F32, s, ROWS, COLS)).bind("m", NDArray.of(DType.F32, m, ROWS, COLS));
            for (int call = 0; call < CALLS; call++) {
                var out = session.runToHost(Map.of());
                double[] old = s.clone();
                for (int i = 0; i < s.length; i++) {
                    m[i] = (float) (0.9 * m[i] + 0.1 * s[i]);
                    s[i] = (float) (s[i] - 0.5 * m[i]);
                }
                close(out.get("m").toDoubleArray(), m, "m after call " + call);
                close(out.get("s").toDoubleArray(), s, "s after call " + call);
                if (laterReader) {
                    double mean = 0;
                    for (double v : s) mean += v / s.length;
                    for (int i = 0; i < old.length; i++) old[i] *= mean;
                    close(out.get("y").toDoubleArray(), old, "y at call " + call);
                }
            }
        }
    }

    static void close(double[] got, double[] want, String what) {
        assertThat(got).as(what).hasSize(want.length);
        double scale = 0;
        for (double w : want) scale = Math.max(scale, Math.abs(w));
        for (int i = 0; i < want.length; i++)
            assertThat(Math.abs(got[i] - want[i])).as("%s [%d]: %s against %s", what, i, got[i], want[i]).isLessThanOrEqualTo(1e-5 * Math.max(1, scale));
    }
}
