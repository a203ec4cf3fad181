package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The GPU suite's float64 references agree with the same graphs run by the host backend on simulated ranks,
 * so a "correct" cell in the benchmark table means what it says (and a wrong reference cannot pass silently).
 */
class GpuSuiteReferenceTest {
    @Test
    void seedsReferenceMatchesTheHostBackend() {
        int world = 3;
        long side = 5;
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) inputs.add(Map.of("x", GpuSuite.seedsInput(r, side)));
        try (var s = Session.compile(GpuSuite.seedsGraph(side), CompileOptions.world(world).backend("host"))) {
            var out = s.runToHost(inputs);
            double[] ref = GpuSuite.seedsReference(world, side);
            for (int r = 0; r < world; r++) assertThat(GpuSuite.relativeError(out.get(r).get("d"), ref)).isLessThan(1e-6);
            ref[3] += 1;   // a reference that is off in one element fails the check
            assertThat(GpuSuite.relativeError(out.get(0).get("d"), ref)).isGreaterThan(1e-5);
        }
    }

    @Test
    void mlpReferenceMatchesTheHostBackendWithinBfloat16Rounding() {
        int world = 2, tokens = 6, hidden = 64;
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) inputs.add(new LinkedHashMap<>(GpuSuite.mlpInputs(r, world, tokens, hidden)));
        assertThat(inputs.get(0).get("w1").toDoubleArray()).isNotEqualTo(inputs.get(1).get("w1").toDoubleArray());
        try (var s = Session.compile(GpuSuite.mlpGraph(world, tokens, hidden), CompileOptions.world(world).backend("host"))) {
            var out = s.runToHost(inputs);
            double[] ref = GpuSuite.mlpReference(world, tokens, hidden, 4);
            assertThat(ref).hasSize(4 * hidden);
            assertThat(out.get(0).get("y").dtype()).isEqualTo(DType.BF16);
            double err = GpuSuite.relativeError(out.get(0).get("y"), ref);
            assertThat(err).isLessThan(2e-2).isGreaterThan(0);
            // one rank's shards alone are far from the sum over ranks
            double[] half = GpuSuite.mlpReference(1, tokens, hidden / 2, 4);
            assertThat(GpuSuite.relativeError(out.get(0).get("y"), java.util.Arrays.copyOf(half, ref.length))).isGreaterThan(0.1);
        }
    }

    @Test
    void rowsAreJsonWithNullsForMissingNumbers() {
        var m = new LinkedHashMap<String, Object>();
        m.put("system", "gatun");
        m.put("median_us", 12.345678);
        m.put("pipelined_us", Double.NaN);
        m.put("error", "say \"why\"\n");
        m.put("correct", true);
        assertThat(GpuSuite.json(m)).isEqualTo("{\"system\": \"gatun\", \"median_us\": 12.346, \"pipelined_us\": null, "
                + "\"error\": \"say \\\"why\\\"\\u000a\", \"correct\": true}");
        assertThat(List.of(GpuSuite.tolerance(DType.F32), GpuSuite.tolerance(DType.BF16))).containsExactly(1e-5, 1e-2);
    }
}
