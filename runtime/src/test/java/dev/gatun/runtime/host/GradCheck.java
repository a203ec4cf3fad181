package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.Function;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A finite-difference check of {@code GraphBuilder.grad} on the host backend in float64: declare the inputs (f64 ones
 * are differentiated, with values drawn from a range kept away from kinks; integer ones are fixed), give the function,
 * and {@link #check} builds one graph that outputs the loss and its gradients, runs it once for the gradients and twice
 * per element of every f64 input, with that element moved by +-h, for the central difference
 * {@code (L(x + h) - L(x - h)) / 2h}. A function whose result is not a scalar is reduced to one with fixed random
 * weights, {@code sum(w * f(x))}, so every element of its result matters with its own weight. The expected values are
 * the forward pass's (tested on its own elsewhere), never the backward code's.
 */
final class GradCheck {
    /** One input: its name, dtype, shape and values. */
    record In(String name, DType dtype, long[] shape, double[] values) {}

    private final String name;
    private final List<In> inputs = new ArrayList<>();
    private final Random rnd;
    private double h = 1e-6, tolerance = 1e-6;
    /** Whether the finite differences come from the reference interpreter (float64 throughout) instead of the host backend. */
    private boolean reference;

    GradCheck(String name, long seed) {
        this.name = name;
        this.rnd = new Random(seed);
    }

    static GradCheck of(String name) { return new GradCheck(name, name.hashCode()); }

    /** An f64 input of {@code shape} with values uniform in [lo, hi], each with a random sign when {@code signed}. */
    GradCheck f64(String input, double lo, double hi, boolean signed, long... shape) {
        double[] v = new double[numel(shape)];
        for (int i = 0; i < v.length; i++) v[i] = (lo + (hi - lo) * rnd.nextDouble()) * (signed && rnd.nextBoolean() ? -1 : 1);
        inputs.add(new In(input, DType.F64, shape, v));
        return this;
    }

    /** An f64 input with values in [-2, 2]. */
    GradCheck f64(String input, long... shape) { return f64(input, 0, 2, true, shape); }

    /** An f64 input with the given values. */
    GradCheck f64(String input, double[] values, long... shape) {
        inputs.add(new In(input, DType.F64, shape, values.clone()));
        return this;
    }

    /** An integer (i64 or i32) input with the given values: indices, targets. */
    GradCheck ints(String input, DType t, long[] values, long... shape) {
        inputs.add(new In(input, t, shape, Arrays.stream(values).asDoubleStream().toArray()));
        return this;
    }

    GradCheck tolerance(double tol) { this.tolerance = tol; return this; }

    GradCheck step(double step) { this.h = step; return this; }

    /**
     * Finite differences of the reference interpreter's forward pass, for an op the host backend computes in float32
     * (the fused attention); the gradients still come from the host backend.
     */
    GradCheck referenceForward() { this.reference = true; return this; }

    private double loss(Session s, Graph graph, Map<String, NDArray> in) {
        if (reference) return dev.gatun.runtime.reference.ReferenceInterpreter.evaluate(graph, List.of(in)).getFirst().get("loss").get(0);
        return s.runToHost(in).get("loss").get(0);
    }

    static int numel(long[] shape) { return (int) Arrays.stream(shape).reduce(1, (a, b) -> a * b); }

    /** Builds, runs and compares; returns the gradients (by input name) for further checks. */
    Map<String, double[]> check(Function<Tensor[], Tensor> f) {
        return grow(more -> f.apply(more.declared()));
    }

    /** What a function that declares more f64 inputs as it goes sees: the graph, the inputs so far, a way to add one. */
    final class Inputs {
        private final GraphBuilder g;
        private final List<Tensor> all = new ArrayList<>();

        Inputs(GraphBuilder g) { this.g = g; }

        Tensor[] declared() { return all.toArray(Tensor[]::new); }

        GraphBuilder graph() { return g; }

        Random random() { return rnd; }

        /** A new f64 input of {@code shape}, values in [-2, 2]. */
        Tensor f64(long... shape) {
            GradCheck.this.f64("w" + inputs.size(), shape);
            return declare(inputs.getLast());
        }

        private Tensor declare(In in) {
            Tensor t = g.input(in.name(), in.dtype(), Arrays.stream(in.shape()).boxed().toArray());
            all.add(t);
            return t;
        }
    }

    /** Like {@link #check}, for a function that may declare more inputs ({@link Inputs#f64}) as it builds the loss. */
    Map<String, double[]> grow(Function<Inputs, Tensor> f) {
        var g = Gatun.graph(name);
        var more = new Inputs(g);
        for (In in : List.copyOf(inputs)) more.declare(in);
        Tensor out = f.apply(more);
        var wrt = new ArrayList<Tensor>();
        for (Tensor t : more.all) if (t.dtype() == DType.F64) wrt.add(t);
        Tensor loss = scalarLoss(g, out);
        g.output("loss", loss);
        Tensor[] grads = g.grad(loss, wrt.toArray(Tensor[]::new));
        for (int k = 0; k < grads.length; k++) {
            assertThat(grads[k].type()).as("gradient type of %s", wrt.get(k).describe()).isEqualTo(wrt.get(k).type());
            g.output("d_" + wrt.get(k).node().label().replace("'", ""), grads[k]);
        }
        return compare(g.build());
    }

    private Tensor scalarLoss(GraphBuilder g, Tensor y) {
        if (y.rank() == 0) return y;
        long[] s = y.shape().sizes();
        double[] w = new double[numel(s)];
        for (int i = 0; i < w.length; i++) w[i] = 0.5 + rnd.nextDouble();
        return y.mul(g.constant(y.dtype(), s, w)).sum();
    }

    private Map<String, double[]> compare(Graph graph) {
        var got = new LinkedHashMap<String, double[]>();
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            Map<String, NDArray> out = s.runToHost(values(-1, 0));
            for (In in : inputs) {
                if (in.dtype() != DType.F64) continue;
                double[] analytic = out.get("d_" + in.name()).toDoubleArray();
                got.put(in.name(), analytic);
                int k = inputs.indexOf(in);
                for (int j = 0; j < in.values().length; j++) {
                    double plus = loss(s, graph, values(k, j, +h));
                    double minus = loss(s, graph, values(k, j, -h));
                    double fd = (plus - minus) / (2 * h);
                    assertThat(analytic[j]).as("%s: d loss / d %s[%d] (finite difference %s; graph%n%s)", name, in.name(), j, fd, graph)
                            .isCloseTo(fd, org.assertj.core.data.Offset.offset(tolerance * (1 + Math.abs(fd))));
                }
            }
        }
        return got;
    }

    private Map<String, NDArray> values(int moved, int element, double... by) {
        var m = new LinkedHashMap<String, NDArray>();
        for (int k = 0; k < inputs.size(); k++) {
            In in = inputs.get(k);
            double[] v = in.values().clone();
            if (k == moved) v[element] += by[0];
            m.put(in.name(), switch (in.dtype()) {
                case INT64 -> NDArray.of(Arrays.stream(v).mapToLong(x -> (long) x).toArray(), in.shape());
                case INT32 -> NDArray.of(Arrays.stream(v).mapToInt(x -> (int) x).toArray(), in.shape());
                default -> NDArray.of(in.dtype(), v, in.shape());
            });
        }
        return m;
    }
}
