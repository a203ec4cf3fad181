package dev.gatun.models.llama;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@link ExpertParallel#swiGluExperts}: each received row through its own local expert, routed (rows at most the local
 * experts) or dense (more rows: every expert on every row, masked by the row's id), against plain float64 loops.
 */
class SwiGluExpertsTest {
    static final int LOCAL = 3, WIDTH = 5, HIDDEN = 4;

    static double silu(double v) { return v / (1 + Math.exp(-v)); }

    @Test
    void everyRowGoesThroughItsOwnExpertRoutedOrDense() {
        var rnd = new SplittableRandom(7);
        for (int cap : new int[]{2, 3, 7, 12}) {   // 2 and 3 routed (at most 3 local experts), 7 and 12 dense
            var g = Gatun.graph("experts");
            var rows = g.input("rows", DType.F64, cap, HIDDEN);
            var ids = g.input("ids", DType.I64, cap);
            var gateUp = g.input("gate_up", DType.F64, LOCAL, 2 * WIDTH, HIDDEN);
            var down = g.input("down", DType.F64, LOCAL, HIDDEN, WIDTH);
            g.output("y", ExpertParallel.swiGluExperts(g, gateUp, down).apply(rows, ids));
            double[] x = rnd.doubles((long) cap * HIDDEN, -1, 1).toArray(), gu = rnd.doubles((long) LOCAL * 2 * WIDTH * HIDDEN, -1, 1).toArray(),
                    dn = rnd.doubles((long) LOCAL * HIDDEN * WIDTH, -1, 1).toArray();
            long[] id = new long[cap];
            for (int r = 0; r < cap; r++) id[r] = rnd.nextInt(LOCAL);
            try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
                double[] y = s.runToHost(Map.of("rows", NDArray.of(x, cap, HIDDEN), "ids", NDArray.of(id, cap),
                        "gate_up", NDArray.of(gu, LOCAL, 2 * WIDTH, HIDDEN), "down", NDArray.of(dn, LOCAL, HIDDEN, WIDTH))).get("y").toDoubleArray();
                assertThat(y).hasSize(cap * HIDDEN);
                for (int r = 0; r < cap; r++) {
                    int e = (int) id[r];
                    double[] act = new double[WIDTH];
                    for (int j = 0; j < WIDTH; j++) {
                        double gate = 0, up = 0;
                        for (int i = 0; i < HIDDEN; i++) {
                            gate += gu[(e * 2 * WIDTH + j) * HIDDEN + i] * x[r * HIDDEN + i];
                            up += gu[(e * 2 * WIDTH + WIDTH + j) * HIDDEN + i] * x[r * HIDDEN + i];
                        }
                        act[j] = silu(gate) * up;
                    }
                    for (int o = 0; o < HIDDEN; o++) {
                        double want = 0;
                        for (int j = 0; j < WIDTH; j++) want += dn[(e * HIDDEN + o) * WIDTH + j] * act[j];
                        assertThat(y[r * HIDDEN + o]).as("rows " + cap + ", row " + r + " (expert " + e + "), element " + o).isCloseTo(want, org.assertj.core.data.Offset.offset(1e-12));
                    }
                }
            }
        }
    }
}
