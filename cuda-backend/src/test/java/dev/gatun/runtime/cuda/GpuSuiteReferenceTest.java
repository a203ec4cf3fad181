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

    /** all-reduce + residual + RMSNorm: the host backend, one-shot and barrier-free, agrees with the float64 reference. */
    @Test
    void arNormReferenceMatchesTheHostBackendWithinBfloat16Rounding() {
        int world = 3, tokens = 4, hidden = 64;
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) inputs.add(GpuSuite.arNormInputs(r, tokens, hidden));
        double[] ref = GpuSuite.arNormReference(world, tokens, hidden);
        for (var a : new dev.gatun.ir.Algorithm[]{dev.gatun.ir.Algorithm.ONE_SHOT, dev.gatun.ir.Algorithm.BARRIER_FREE})
            try (var s = Session.compile(GpuSuite.arNormGraph(tokens, hidden), CompileOptions.world(world).backend("host").forceAllReduce(a))) {
                var out = s.runToHost(inputs);
                for (int r = 0; r < world; r++) assertThat(GpuSuite.relativeError(out.get(r).get("y"), ref)).as("%s rank %d", a, r).isLessThan(1e-2).isGreaterThan(0);
            }
        // one rank's x alone is far from the sum over ranks
        assertThat(GpuSuite.relativeError(NDArray.of(GpuSuite.arNormReference(1, tokens, hidden), tokens, hidden), ref)).isGreaterThan(0.1);
    }

    /**
     * The norms family: each graph, written from primitives, run by the host backend agrees with its float64
     * reference (f32 within 1e-5, bf16 within bf16's 1e-2 but not exactly), and a reference off in one element fails.
     */
    @Test
    void normReferencesMatchTheHostBackend() {
        for (NormWorkloads.Op op : NormWorkloads.Op.values())
            for (DType t : op == NormWorkloads.Op.LOOP_ORDER ? List.of(DType.F32) : List.of(DType.F32, DType.BF16)) {
                var c = new NormWorkloads.Case(op, t, 6, 40);
                var in = c.inputs();
                var ref = c.reference(in);
                try (var s = Session.compile(c.graph(), CompileOptions.world(1).backend("host"))) {
                    var out = s.runToHost(in);
                    assertThat(out.keySet()).as(c.toString()).containsExactlyInAnyOrderElementsOf(ref.keySet());
                    for (var e : ref.entrySet()) {
                        NDArray o = out.get(e.getKey());
                        assertThat(o.dtype()).as(c + " " + e.getKey()).isEqualTo(t);
                        assertThat(o.numel()).as(c + " " + e.getKey()).isEqualTo(e.getValue().length);
                        double err = GpuSuite.relativeError(o, e.getValue());
                        assertThat(err).as(c + " " + e.getKey()).isLessThan(t == DType.F32 ? 1e-6 : c.tolerance());
                        if (t == DType.BF16) assertThat(err).as(c + " " + e.getKey()).isGreaterThan(0);
                        double[] off = e.getValue().clone();
                        off[off.length / 2] += 0.5 * Math.max(1, Math.abs(off[off.length / 2])) + 1;
                        assertThat(GpuSuite.relativeError(o, off)).as(c + " " + e.getKey() + " off").isGreaterThan(c.tolerance());
                    }
                }
            }
    }

    @Test
    void normReferencesAreTheTextbookFormulas() {
        // one row [1, 2, 3, 4]: mean 2.5, variance 1.25, mean square 7.5
        double[] x = {1, 2, 3, 4}, w = {1, 1, 2, 1}, b = {0, 0, 0, 1};
        double inv = 1 / Math.sqrt(1.25 + 1e-5);
        assertThat(NormWorkloads.layerNormReference(x, w, b, 1, 4))
                .containsExactly(new double[]{-1.5 * inv, -0.5 * inv, 2 * 0.5 * inv, 1.5 * inv + 1}, org.assertj.core.data.Offset.offset(1e-12));
        double r = 1 / Math.sqrt(7.5 + 1e-6);
        assertThat(NormWorkloads.rmsNormReference(x, w, 1, 4)).containsExactly(new double[]{r, 2 * r, 6 * r, 4 * r}, org.assertj.core.data.Offset.offset(1e-12));
        double z = Math.exp(-3) + Math.exp(-2) + Math.exp(-1) + 1;
        assertThat(NormWorkloads.softmaxReference(x, 1, 4))
                .containsExactly(new double[]{Math.exp(-3) / z, Math.exp(-2) / z, Math.exp(-1) / z, 1 / z}, org.assertj.core.data.Offset.offset(1e-12));
    }

    /** z_t is z's values stored transposed, as PyTorch's z.t().contiguous().t(): a strided view of a transposed copy. */
    @Test
    void loopOrderOutputIsStoredTransposed() {
        var c = new NormWorkloads.Case(NormWorkloads.Op.LOOP_ORDER, DType.F32, 6, 4);
        try (var s = Session.compile(c.graph(), CompileOptions.world(1).backend("host"))) {
            var out = s.run(c.inputs());
            assertThat(out.get("z_t").shape()).containsExactly(6, 4);
            assertThat(out.get("z_t").strides()).containsExactly(1, 6);
            assertThat(out.get("y").shape()).isEmpty();
        }
    }

    @Test
    void normCellsAndTheirBytes() {
        var cases = NormWorkloads.cases();
        assertThat(cases).hasSize(13);
        assertThat(cases.stream().map(NormWorkloads.Case::toString)).contains("layernorm 4096x4096 f32", "rmsnorm 32768x1024 bf16",
                "softmax 4096x4096 bf16", "loop_order 4096x4096 f32");
        long x = 4096L * 4096;
        assertThat(new NormWorkloads.Case(NormWorkloads.Op.LAYERNORM, DType.F32, 4096, 4096).movedBytes()).isEqualTo(8 * x + 2 * 4096 * 4);
        assertThat(new NormWorkloads.Case(NormWorkloads.Op.RMSNORM, DType.BF16, 4096, 4096).movedBytes()).isEqualTo(4 * x + 4096 * 2);
        assertThat(new NormWorkloads.Case(NormWorkloads.Op.SOFTMAX, DType.BF16, 32768, 1024).movedBytes()).isEqualTo(4 * 32768L * 1024);
        assertThat(new NormWorkloads.Case(NormWorkloads.Op.LOOP_ORDER, DType.F32, 4096, 4096).movedBytes()).isEqualTo(8 * x + 4);
        assertThat(GpuSuite.gbps(2_000_000_000L, 1e6)).isEqualTo(2.0);
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
