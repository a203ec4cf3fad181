package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.ir.Shape;
import dev.gatun.ir.TensorType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.HostTensor;
import dev.gatun.ir.graph.Node;
import dev.gatun.ir.graph.Op;
import dev.gatun.ir.graph.OpAttrs;
import dev.gatun.ir.graph.OpSpec;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * {@link OpSpec#inPlace} and {@link OpSpec#readsStrided} are general: an op no layer knows by name ({@link AddColumn},
 * declared here and not even registered) that adds a vector into one column of its input 0 in place, reading the
 * vector where it lies at any strides, is lowered, planned and run like update_slice: on a state it writes the state's
 * slot from call to call, on anything else a copy made for it (the operand unchanged); its strided vector is passed as a
 * view, not copied; its step reads the vector only. Values against plain loops; the reference interpreter agrees.
 */
class InPlaceOpSpecTest {

    /** {@code x[:, col] += v}: x [R, C] f32 (in place), v [R] f32 (read strided). */
    static final class AddColumn implements OpSpec {
        static final AddColumn SPEC = new AddColumn();

        @Override public String name() { return "add_column"; }
        @Override public List<Attribute> attributes() { return List.of(new Attribute("col", Attribute.Kind.INT)); }
        @Override public boolean inPlace() { return true; }
        @Override public boolean readsStrided(int input, long[] shape, long[] strides, OpAttrs attrs) { return input == 1; }

        @Override public List<TensorType> infer(List<Operand> inputs, OpAttrs attrs) {
            if (inputs.size() != 2 || inputs.get(0).type().rank() != 2 || inputs.get(1).type().rank() != 1)
                throw new GraphException("add_column takes x [R, C] and v [R]");
            return List.of(inputs.get(0).type());
        }

        @Override public void reference(List<HostTensor> inputs, List<HostTensor> outputs, OpAttrs attrs) {
            HostTensor v = inputs.get(1), out = outputs.getFirst();
            long cols = out.shape()[1], col = attrs.integer("col");
            for (long r = 0; r < v.numel(); r++) out.set(r * cols + col, out.get(r * cols + col) + v.get(r));
        }
    }

    private static Node addColumn(Graph.Builder g, Node x, Node v, int col) {
        return g.add(new Op.Registered(AddColumn.SPEC, OpAttrs.of(AddColumn.SPEC, Map.of("col", col))), List.of(x, v));
    }

    /** Column 2 of m [4, 5], a view of strides [5]: the vector the op reads where it lies. */
    private static Node column(Graph.Builder g, Node m) {
        return g.add(new Op.Reshape(Shape.of(4)), List.of(g.add(new Op.Slice(1, 2, 3, 1), List.of(m))));
    }

    /** {@code x[:, col] += m[:, 2]}, {@code times} times, each sum rounded to float32 as the f32 output stores it. */
    private static double[] plus(double[] x, double[] m, int col, int times) {
        double[] out = x.clone();
        for (int t = 0; t < times; t++)
            for (int r = 0; r < 4; r++) out[r * 3 + col] = (float) (out[r * 3 + col] + m[r * 5 + 2]);
        return out;
    }

    @Test
    void onAStateTheOpWritesItsSlotFromCallToCallReadingTheViewWhereItLies() {
        var g = Graph.builder("acc");
        Node acc = g.state("acc", new TensorType(DType.F32, Shape.of(4, 3)));
        Node m = g.input("m", new TensorType(DType.F32, Shape.of(4, 5)));
        g.output("acc", addColumn(g, acc, column(g, m), 1));
        Graph graph = g.build();
        NDArray mv = NDArray.randn(DType.F32, 7, 4, 5);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            String plan = s.plan().toString();
            assertThat(plan).as(plan).contains("= add_column(").contains("alloc_states");
            assertThat(s.plan().lowered().decisions()).noneMatch(d -> d.contains("add_column reads packed"));   // the view is not copied
            var call = s.plan().steps().stream().filter(st -> st instanceof Step.OpCall).map(st -> (Step.OpCall) st).findFirst().orElseThrow();
            assertThat(call.input(1).isView()).isTrue();
            assertThat(call.reads()).containsExactly(call.input(1));   // input 0 is written in place, not read
            var placed = s.plan().steps().stream().filter(st -> st instanceof Step.Place pl && pl.buffer() == call.output()).map(st -> (Step.Place) st)
                    .findFirst().orElseThrow();
            assertThat(placed.inPlace()).isTrue();
            assertThat(placed.reuses()).isEqualTo("acc");   // the state's slot: written over in place
            for (int times = 1; times <= 3; times++) {
                var out = s.runToHost(Map.of("m", mv));
                assertThat(out.get("acc").toDoubleArray()).containsExactly(plus(new double[12], mv.toDoubleArray(), 1, times));
            }
        }
    }

    @Test
    void onAnOrdinaryOperandTheOpWritesACopyAndTheReferenceAgrees() {
        var g = Graph.builder("copy");
        Node x = g.input("x", new TensorType(DType.F32, Shape.of(4, 3)));
        Node m = g.input("m", new TensorType(DType.F32, Shape.of(4, 5)));
        g.output("y", addColumn(g, x, column(g, m), 2));
        g.output("x_again", g.add(new Op.Reshape(Shape.of(12)), List.of(x)));
        Graph graph = g.build();
        NDArray xv = NDArray.randn(DType.F32, 1, 4, 3), mv = NDArray.randn(DType.F32, 2, 4, 5);
        var in = Map.of("x", xv, "m", mv);
        double[] want = plus(xv.toDoubleArray(), mv.toDoubleArray(), 2, 1);
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().lowered().decisions()).anyMatch(d -> d.contains("copy of the operand of %") && d.contains("add_column, which writes into it"));
            var out = s.runToHost(in);
            assertThat(out.get("y").toDoubleArray()).containsExactly(want);
            assertThat(out.get("x_again").toDoubleArray()).containsExactly(xv.toDoubleArray());
        }
        var ref = ReferenceInterpreter.evaluate(graph, List.of(in)).getFirst();
        assertThat(ref.get("y").toDoubleArray()).containsExactly(want);
        assertThat(ref.get("x_again").toDoubleArray()).containsExactly(xv.toDoubleArray());
    }

    @Test
    void aStatesVersionTheOpOverwritesIsReadByNothingElse() {
        var g = Graph.builder("bad");
        Node acc = g.state("acc", new TensorType(DType.F32, Shape.of(4, 3)));
        Node m = g.input("m", new TensorType(DType.F32, Shape.of(4, 5)));
        g.output("new", addColumn(g, acc, column(g, m), 0));
        g.output("old", g.add(new Op.Reshape(Shape.of(12)), List.of(acc)));
        assertThatThrownBy(g::build).isInstanceOf(GraphException.class).hasMessageContaining("state 'acc' is read by")
                .hasMessageContaining("updated in place by");
    }
}
