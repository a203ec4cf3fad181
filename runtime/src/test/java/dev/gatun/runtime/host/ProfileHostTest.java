package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Profile;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.stream.IntStream;

import static org.assertj.core.api.Assertions.assertThat;

/** Session.profile on the host backend: one time per working step of the plan, the slow step on top. */
class ProfileHostTest {

    @Test
    void everyWorkingStepIsTimedAndTheLargeMatmulLeads() {
        var g = Gatun.graph("profiled");
        var a = g.input("a", DType.F64, 192, 192);
        var small = g.input("s", DType.F64, 4);
        g.output("big", a.matmul(a).matmul(a));
        g.output("small", small.add(1).mul(2));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            var in = Map.of("a", NDArray.full(DType.F64, 0.5, 192, 192), "s", NDArray.full(DType.F64, 1, 4));
            Profile p = s.profile(in);
            var steps = s.plan().steps();
            List<Integer> working = IntStream.range(0, steps.size())
                    .filter(i -> !(steps.get(i) instanceof Step.AllocPool || steps.get(i) instanceof Step.Place || steps.get(i) instanceof Step.Release))
                    .boxed().toList();
            assertThat(p.entries()).extracting(Profile.Entry::step).containsExactlyElementsOf(working);
            assertThat(p.entries()).allSatisfy(e -> assertThat(e.micros()).isNotNegative());
            var slowest = p.entries().stream().max(java.util.Comparator.comparingDouble(Profile.Entry::micros)).orElseThrow();
            assertThat(steps.get(slowest.step())).isInstanceOf(Step.Matmul.class);
            assertThat(p.byKind()).containsKey("matmul");
            assertThat(p.byKind().keySet().iterator().next()).isEqualTo("matmul");
            assertThat(p.top(1)).contains("profile of plan 'profiled' on host").contains("#" + slowest.step());
            // the session runs on normally after a profiled call
            assertThat(s.runToHost(in).get("small").toDoubleArray()).containsOnly(4.0);
        }
    }

    /** Each step's bytes are its operands' and results' sizes, each buffer once (counted by hand here), and its GB/s. */
    @Test
    void eachStepCountsTheBytesOfWhatItReadsAndWritesOnce() {
        var g = Gatun.graph("bytes");
        var a = g.input("a", DType.F32, 64, 32);
        var w = g.input("w", DType.F32, 32, 16);
        g.output("y", a.matmul(w));
        g.output("z", a.mul(a));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            Profile p = s.profile(Map.of("a", NDArray.full(DType.F32, 1, 64, 32), "w", NDArray.full(DType.F32, 1, 32, 16)));
            var steps = s.plan().steps();
            var product = p.entries().stream().filter(e -> steps.get(e.step()) instanceof Step.Matmul).findFirst().orElseThrow();
            assertThat(product.bytes()).isEqualTo(4.0 * (64 * 32 + 32 * 16 + 64 * 16));
            var square = p.entries().stream().filter(e -> steps.get(e.step()) instanceof Step.Launch l && l.kernel().ops().contains("mul")).findFirst().orElseThrow();
            assertThat(square.bytes()).as("a read once, the square written").isEqualTo(4.0 * (64 * 32 + 64 * 32));
            assertThat(product.gigabytesPerSecond()).isCloseTo(product.bytes() / (product.micros() * 1e3), org.assertj.core.data.Offset.offset(1e-9));
            assertThat(p.top(5, 4800)).contains("GB/s").contains("%  ");
            int place = IntStream.range(0, steps.size()).filter(i -> steps.get(i) instanceof Step.Place).findFirst().orElseThrow();
            assertThat(p.bytes(place)).isNaN();
        }
    }

    @Test
    void simulatedRanksProfileTheFirst() {
        var g = Gatun.graph("ranks");
        g.output("y", g.input("x", DType.F32, 8).add(1).allReduce(dev.gatun.ir.graph.ReduceOp.SUM));
        try (var s = Session.compile(g.build(), CompileOptions.world(2).backend("host"))) {
            var x = NDArray.full(DType.F32, 1, 8);
            Profile p = s.profile(List.of(Map.of("x", x), Map.of("x", x)));
            assertThat(p.byKind()).containsKeys("collective"); // x + 1 and the all-reduce: one fused launch
            assertThat(p.totalMicros()).isPositive();
        }
    }
}
