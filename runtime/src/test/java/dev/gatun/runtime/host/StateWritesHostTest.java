package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanOptions;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The planner's state writes ({@code StateWrites}) on small graphs of a state {@code s} [4, 4] read through a
 * {@code snapshot} and overwritten by an {@code update_slice} of its whole extent, run for several calls on the host
 * against plain float64 loops: written in place where the kernel computing the new value is the old value's last
 * reader (element for element), kept (with the plan's note saying why) where a later step reads the old value, where
 * the kernel reads it at other elements, or where the position is read at run time, and the values right in every case.
 */
class StateWritesHostTest {
    static final int N = 4, CALLS = 3;

    /** A graph of state s: {@code body} maps (the snapshot's in-place output, its copy) to the outputs, the new state "s" first. */
    static Graph graph(String name, Function<Tensor[], Map<String, Tensor>> body) {
        GraphBuilder g = Gatun.graph(name);
        Tensor s = g.state("s", DType.F64, N, N);
        List<Tensor> snap = g.apply("snapshot", Map.of(), s);
        body.apply(new Tensor[]{snap.get(0), snap.get(1)}).forEach(g::output);
        return g.build();
    }

    static Tensor zero(Tensor t) { return t.graph().constant(DType.I64, new long[]{1}, 0); }

    static double[] start() {
        double[] s = new double[N * N];
        for (int i = 0; i < s.length; i++) s[i] = 0.25 * i - 1.5;
        return s;
    }

    /** The session's plan and its outputs of each call, the state bound to {@link #start()} first. */
    record Run(Plan plan, List<Map<String, NDArray>> out) {}

    static Run run(Graph g, Map<String, NDArray> inputs) {
        var out = new java.util.ArrayList<Map<String, NDArray>>();
        try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
            s.bind("s", NDArray.of(start(), N, N));
            for (int c = 0; c < CALLS; c++) out.add(s.runToHost(inputs));
            return new Run(s.plan(), out);
        }
    }

    static long steps(Plan p, String op) {
        return p.steps().stream().flatMap(st -> st.parts().stream()).filter(st -> st instanceof Step.OpCall o && o.spec().name().equals(op)
                || st instanceof Step.UpdateSlices && op.equals("update_slice")).count();
    }

    static void assertValues(double[] got, double[] want, String what) {
        assertThat(got).as(what).hasSize(want.length);
        for (int i = 0; i < want.length; i++) assertThat(got[i]).as("%s [%d]", what, i).isEqualTo(want[i]);
    }

    @Test
    void aPointwiseUpdateIsWrittenIntoTheStatesSlot() {
        Graph g = graph("pointwise", t -> {
            Tensor next = t[1].mul(0.5).add(1.0);
            return Map.of("s", t[0].updateSlice(0, next, zero(next)));
        });
        Run r = run(g, Map.of());
        var out = r.out();
        double[] s = start();
        for (int c = 0; c < CALLS; c++) {
            for (int i = 0; i < s.length; i++) s[i] = s[i] * 0.5 + 1.0;
            assertValues(out.get(c).get("s").toDoubleArray(), s, "s after call " + c);
        }
        Plan p = r.plan();   // after the values: a wrong decision shows first as a wrong value
        assertThat(steps(p, "snapshot")).as("snapshots in\n%s", p).isZero();
        assertThat(steps(p, "update_slice")).as("update_slices in\n%s", p).isZero();
        assertThat(p.notes()).anySatisfy(n -> assertThat(n).startsWith("state writes: 1 of 1 snapshotted states"));
        assertThat(p.toString()).contains("straight into state s's slot");
        int launch = 0;
        while (!(p.steps().get(launch) instanceof Step.Launch)) launch++;
        String states = p.pools().stream().filter(pool -> pool.kind() == dev.gatun.planner.Pool.Kind.STATE).findFirst().orElseThrow().name();
        int writer = launch;
        assertThat(p.slots()).as("the slot the kernel writes").filteredOn(sl -> sl.first() == writer).singleElement().satisfies(sl -> {
            assertThat(sl.pool()).isEqualTo(states);
            assertThat(sl.offset()).isZero();
            assertThat(sl.reuses()).isEqualTo("s");
            assertThat(sl.inPlace()).isTrue();
            assertThat(sl.last()).as("held to the end").isEqualTo(p.steps().size() - 1);
        });
    }

    /** The old value read by a product of it and the new value: after the new value's kernel, so the pair stays. */
    @Test
    void aReaderOfTheOldValueAfterTheWriterKeepsTheSnapshot() {
        Graph g = graph("later", t -> {
            Tensor next = t[1].mul(2.0);
            return Map.of("s", t[0].updateSlice(0, next, zero(next)), "y", t[1].matmul(next));
        });
        Run r = run(g, Map.of());
        var out = r.out();
        double[] s = start();
        for (int c = 0; c < CALLS; c++) {
            double[] next = new double[s.length], y = new double[s.length];
            for (int i = 0; i < s.length; i++) next[i] = 2 * s[i];
            for (int i = 0; i < N; i++)
                for (int j = 0; j < N; j++)
                    for (int k = 0; k < N; k++) y[i * N + j] += s[i * N + k] * next[k * N + j];
            assertValues(out.get(c).get("y").toDoubleArray(), y, "y at call " + c);
            s = next;
            assertValues(out.get(c).get("s").toDoubleArray(), s, "s after call " + c);
        }
        Plan p = r.plan();   // after the values: a wrong decision shows first as a wrong value
        assertThat(steps(p, "snapshot")).as("snapshots in\n%s", p).isEqualTo(1);
        assertThat(p.notes()).anySatisfy(n -> assertThat(n).startsWith("state s keeps its snapshot").contains("is read by matmul").contains("after kernel"));
    }

    /** The new value's kernel reads the old value transposed: another element than the one it writes. */
    @Test
    void aWriterReadingOtherElementsOfTheOldValueKeepsTheSnapshot() {
        Graph g = graph("transposed", t -> {
            Tensor next = t[1].add(t[1].transpose(0, 1));
            return Map.of("s", t[0].updateSlice(0, next, zero(next)));
        });
        Run r = run(g, Map.of());
        var out = r.out();
        double[] s = start();
        for (int c = 0; c < CALLS; c++) {
            double[] next = new double[s.length];
            for (int i = 0; i < N; i++) for (int j = 0; j < N; j++) next[i * N + j] = s[i * N + j] + s[j * N + i];
            s = next;
            assertValues(out.get(c).get("s").toDoubleArray(), s, "s after call " + c);
        }
        Plan p = r.plan();   // after the values: a wrong decision shows first as a wrong value
        assertThat(steps(p, "snapshot")).as("snapshots in\n%s", p).isEqualTo(1);
        assertThat(p.notes()).anySatisfy(n -> assertThat(n).startsWith("state s keeps its snapshot").contains("other than at the element it writes"));
    }

    /** An update at a position read at run time keeps its check (a bad position stops the call): the pair stays. */
    @Test
    void anUpdateAtAPositionReadAtRunTimeKeepsTheSnapshot() {
        GraphBuilder g = Gatun.graph("runtime_position");
        Tensor s = g.state("s", DType.F64, N, N);
        Tensor at = g.input("at", DType.I64, 1);
        List<Tensor> snap = g.apply("snapshot", Map.of(), s);
        g.output("s", snap.get(0).updateSlice(0, snap.get(1).sub(1.0), at));
        Run r = run(g.build(), Map.of("at", NDArray.of(new long[]{0}, 1)));
        var out = r.out();
        double[] want = start();
        for (int c = 0; c < CALLS; c++) {
            for (int i = 0; i < want.length; i++) want[i] -= 1.0;
            assertValues(out.get(c).get("s").toDoubleArray(), want, "s after call " + c);
        }
        Plan p = r.plan();   // after the values: a wrong decision shows first as a wrong value
        assertThat(steps(p, "snapshot")).isEqualTo(1);
        assertThat(p.notes()).anySatisfy(n -> assertThat(n).contains("keeps its snapshot").contains("is not the constant 0"));
    }

    /** With in-place writes off every pair stays, and the plan says so. */
    @Test
    void offWithInPlaceOff() {
        Graph g = graph("off", t -> {
            Tensor next = t[1].mul(0.5);
            return Map.of("s", t[0].updateSlice(0, next, zero(next)));
        });
        try (var s = Session.compile(g, CompileOptions.world(1).backend("host").planning(PlanOptions.DEFAULT.withInPlace(false)))) {
        assertThat(steps(s.plan(), "snapshot")).isEqualTo(1);
        assertThat(s.plan().notes()).singleElement().asString().startsWith("state writes: off");
        }
    }
}
