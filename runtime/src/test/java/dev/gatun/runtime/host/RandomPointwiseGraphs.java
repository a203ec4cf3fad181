package dev.gatun.runtime.host;

import dev.gatun.dsl.Tensor;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;

import java.util.HashMap;
import java.util.List;
import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

/** What the random graphs through concatenations and reshapes share: sizes as DSL dims, a random pointwise op, the check. */
final class RandomPointwiseGraphs {
    private RandomPointwiseGraphs() {}

    static Object[] dims(long[] shape) {
        var out = new Object[shape.length];
        for (int i = 0; i < shape.length; i++) out[i] = shape[i];
        return out;
    }

    /** {@code y} combined with {@code o} (a scalar or a tensor) by a random pointwise op. */
    static Tensor pointwise(Tensor y, Object o, Random rnd) {
        if (o instanceof Double s) return rnd.nextBoolean() ? y.mul(s) : y.add(s);
        Tensor t = (Tensor) o;
        return switch (rnd.nextInt(3)) {
            case 0 -> y.add(t);
            case 1 -> y.mul(t).sin();
            default -> t.sub(y).tanh();
        };
    }

    /** Random f64 inputs for {@code g}; its outputs on the host backend against the reference interpreter's. */
    static void check(Graph g, long seed) {
        var rnd = new Random(seed * 31 + 7);
        var in = new HashMap<String, NDArray>();
        g.inputs().forEach((name, node) -> {
            long[] shape = node.type().shape().dims().stream().mapToLong(d -> d.size()).toArray();
            long n = 1;
            for (long s : shape) n *= s;
            double[] v = new double[(int) n];
            for (int i = 0; i < v.length; i++) v[i] = rnd.nextDouble() * 2 - 1;
            in.put(name, NDArray.of(v, shape));
        });
        var want = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst();
        try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
            var got = s.runToHost(in);
            for (var e : want.entrySet())
                assertThat(e.getValue().mismatch(got.get(e.getKey()), 1e-12, 1e-12)).as("output %s of\n%s\n%s", e.getKey(), g, s.plan()).isNull();
        }
    }
}
