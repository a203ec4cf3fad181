package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.Algorithm;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Several ranks sharing a GPU ({@code ranksPerGpu}): NCCL refuses two ranks on one device, so every collective
 * that would take NCCL is served by a symmetric algorithm, or refused at compile time with the reason. The host
 * backend runs the same plan the GPU runs, so its values are checked against the reference interpreter here.
 */
class SharedGpuPlanTest {

    static CompileOptions shared(int world) {
        return CompileOptions.world(world).backend("host").ranksPerGpu(world).randomDelays(7);
    }

    static List<Map<String, NDArray>> inputs(int world, DType t, long... shape) {
        var out = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) out.add(Map.of("x", NDArray.random(t, 40 + r, shape)));
        return out;
    }

    static List<Step.Collective> collectives(Session s) {
        return s.plan().steps().stream().filter(st -> st instanceof Step.Collective).map(st -> (Step.Collective) st).toList();
    }

    /**
     * An all-gather only moves bytes, so every dtype takes symmetric memory below the threshold (the vocabulary-parallel
     * argmax gathers i64 indices each decode step; NCCL cost a launch of its own there): i64, i32 and f64, each element
     * against the values every rank gave.
     */
    @ParameterizedTest
    @ValueSource(ints = {2, 3})
    void anAllGatherOfAnyDtypeTakesSymmetricMemory(int world) {
        for (DType t : List.of(DType.I64, DType.I32, DType.F64)) {
            var g = Gatun.graph("gather_" + t.shortName()).world(world);
            g.output("y", g.input("x", t, 3).allGather());
            Graph graph = g.build();
            try (var s = Session.compile(graph, CompileOptions.world(world).backend("host"))) {
                assertThat(collectives(s)).extracting(c -> c.call().algorithm()).as(t.toString()).containsExactly(Algorithm.SYMM_MEM);
                var in = new ArrayList<Map<String, NDArray>>();
                for (int r = 0; r < world; r++) in.add(Map.of("x", NDArray.of(t, new double[]{10 * r + 1, 10 * r + 2, -(10 * r + 3)}, 3)));
                var got = s.runToHost(in);
                for (int r = 0; r < world; r++) {
                    double[] y = got.get(r).get("y").toDoubleArray();
                    assertThat(y).as(t + " rank " + r).hasSize(3 * world);
                    for (int from = 0; from < world; from++)   // rank `from`'s three values, in rank order, on every rank
                        assertThat(new double[]{y[3 * from], y[3 * from + 1], y[3 * from + 2]}).containsExactly(10 * from + 1, 10 * from + 2, -(10 * from + 3));
                }
            }
        }
    }

    @ParameterizedTest
    @ValueSource(ints = {2, 3, 4})
    void whatWouldTakeNcclTakesSymmetricMemoryAndSaysWhy(int world) {
        var g = Gatun.graph("big").world(world);
        var x = g.input("x", F32, 64, 64 + 8 * world);    // above both symmetric thresholds set below
        g.output("sum", x.mul(2).allReduce(SUM));
        g.output("root", x.add(1).broadcast(world - 1));
        Graph graph = g.build();
        try (var s = Session.compile(graph, shared(world).thresholds(1024, 4096).barrierFreeMax(0))) {
            assertThat(collectives(s)).extracting(c -> c.call().algorithm()).containsExactly(Algorithm.TWO_SHOT, Algorithm.SYMM_MEM);
            assertThat(s.explain()).contains("NCCL cannot run here").contains("ranks share each GPU");
            var in = inputs(world, F32, 64, 64 + 8 * world);
            var want = ReferenceInterpreter.evaluate(graph, in);
            var got = s.runToHost(in);
            for (int r = 0; r < world; r++)
                for (String o : List.of("sum", "root"))
                    assertThat(want.get(r).get(o).mismatch(got.get(r).get(o), 1e-5, 1e-5)).as("rank %d output %s", r, o).isNull();
        }
        // without sharing the same graph takes NCCL
        try (var s = Session.compile(graph, CompileOptions.world(world).backend("host").thresholds(1024, 4096))) {
            assertThat(collectives(s)).extracting(c -> c.call().algorithm()).containsOnly(Algorithm.NCCL);
        }
    }

    @Test
    void collectivesThatOnlyMoveDataServeEveryDtype() {
        var g = Gatun.graph("moves").world(3);
        var x = g.input("x", DType.I32, 4);
        g.output("ag", x.allGather());
        g.output("bc", x.gt(x.mul(0)).broadcast(2));    // bool
        g.output("bc64", x.cast(DType.F64).broadcast(1));
        Graph graph = g.build();
        try (var s = Session.compile(graph, shared(3))) {
            assertThat(collectives(s)).extracting(c -> c.call().algorithm()).containsOnly(Algorithm.SYMM_MEM);
            var in = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < 3; r++) in.add(Map.of("x", NDArray.of(DType.I32, new double[]{r - 1, 10 * r, -3, r}, 4)));
            var want = ReferenceInterpreter.evaluate(graph, in);
            var got = s.runToHost(in);
            for (int r = 0; r < 3; r++)
                for (String o : List.of("ag", "bc", "bc64"))
                    assertThat(want.get(r).get(o).mismatch(got.get(r).get(o), 0, 0)).as("rank %d %s", r, o).isNull();
        }
    }

    @Test
    void collectivesNoSymmetricKernelCanServeAreRefusedAtCompileTime() {
        var dynamic = Gatun.graph("dynamic");
        dynamic.output("y", dynamic.input("x", F32, "n", 4).allReduce(SUM));
        assertThatThrownBy(() -> Session.compile(dynamic.build(), shared(2)))
                .isInstanceOf(dev.gatun.ir.CompilationException.class)
                .hasMessageContaining("all_reduce would run through NCCL (shape [n,4] is symbolic), but NCCL cannot run here")
                .hasMessageContaining("2 ranks share each GPU");

        var f64 = Gatun.graph("f64");
        f64.output("y", f64.input("x", DType.F64, 4, 4).allReduce(SUM));
        assertThatThrownBy(() -> Session.compile(f64.build(), shared(2))).hasMessageContaining("dtype f64 has no symmetric-memory kernel");

        var forced = Gatun.graph("forced");
        forced.output("y", forced.input("x", F32, 4, 4).allReduce(SUM));
        assertThatThrownBy(() -> Session.compile(forced.build(), shared(2).forceAllReduce(Algorithm.NCCL)))
                .hasMessageContaining("forced by options").hasMessageContaining("NCCL cannot run here");
    }

    @Test
    void ranksPerGpuMustBePositive() {
        assertThatThrownBy(() -> CompileOptions.world(2).ranksPerGpu(0)).hasMessageContaining("ranksPerGpu must be at least 1, not 0");
    }
}
