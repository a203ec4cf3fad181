package dev.gatun.runtime.testing;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.NDArray;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.BiConsumer;

/**
 * Graphs that plan as row kernels (a reduction with the pointwise work around it, several reductions over one row),
 * written from primitives as a user writes them, with random inputs: shared by the host backend's and the GPU's
 * differential tests, which compare a session's results with the reference interpreter's.
 */
public final class RowPrograms {
    private RowPrograms() {}

    /** One program: its graph and the inputs of one call. */
    public record Case(String name, Graph graph, Map<String, NDArray> inputs) {
        @Override public String toString() { return name; }
    }

    private record Program(String name, BiConsumer<GraphBuilder, Tensor[]> body) {}

    static Tensor softmax(Tensor x, int dim) {
        var e = x.sub(x.max(true, dim)).exp();
        return e.div(e.sum(true, dim));
    }

    private static final List<Program> PROGRAMS = List.of(
            new Program("softmax", (g, t) -> g.output("y", softmax(t[0], -1))),
            new Program("layer_norm", (g, t) -> {
                var d = t[0].sub(t[0].mean(true, -1));
                var r = d.mul(d).mean(true, -1).add(1e-5).rsqrt();
                g.output("y", d.mul(r).mul(t[1]).add(t[2]));
            }),
            new Program("rms_norm", (g, t) -> g.output("y", t[0].mul(t[0].mul(t[0]).mean(true, -1).add(1e-6).rsqrt()).mul(t[1]))),
            new Program("siblings", (g, t) -> {
                g.output("s", t[0].sum(-1));
                g.output("m", t[0].max(-1));
                g.output("c", t[0].cos());
            }),
            new Program("row_tail_and_centre", (g, t) -> {
                var m = t[0].mean(true, -1);
                g.output("tail", m.add(1).mul(2));
                g.output("centred", t[0].sub(m));
                g.output("mean", m);
            }),
            new Program("min_then_scale", (g, t) -> {
                var lo = t[0].min(true, -1);
                g.output("y", t[0].sub(lo).div(t[0].max(true, -1).sub(lo).add(1)));
            }),
            new Program("columns", (g, t) -> g.output("y", t[0].sub(t[0].mean(true, 0)).mul(2))),
            new Program("cos_then_sum", (g, t) -> {
                g.output("c", t[0].cos());
                g.output("s", t[0].sum(true, -1));
            }),
            new Program("loop_order", (g, t) -> {
                g.output("y", t[0].sum(-1).sum(0));
                g.output("z_t", t[0].div(10).transpose(-2, -1).copy().transpose(-2, -1));
            }),
            new Program("transposed_copy", (g, t) -> g.output("y", t[0].add(1).transpose(0, -1).copy().mul(t[0].transpose(0, -1)))),
            new Program("softmax_then_sum", (g, t) -> {
                var s = softmax(t[0], -1);
                g.output("y", s.mul(t[1]).sum(-1));
            }));

    /**
     * {@code count} cases cycling through the programs, dtypes and shapes (rows and row lengths of 1, odd sizes, a
     * size-1 dimension between rows and elements), a few with NaN, infinities and negative zero in the input.
     */
    public static List<Case> cases(long seed, int count, List<DType> dtypes) {
        return cases(seed, count, dtypes, new long[][]{{4, 16}, {1, 7}, {5, 1}, {3, 33}, {6, 1, 12}, {2, 3, 10}, {7, 64}});
    }

    /** The same over the given shapes (the last dimension is the row). */
    public static List<Case> cases(long seed, int count, List<DType> dtypes, long[][] shapes) {
        var rnd = new Random(seed);
        var out = new ArrayList<Case>();
        for (int i = 0; i < count; i++)
            out.add(make(rnd, i, PROGRAMS.get(i % PROGRAMS.size()), dtypes.get(rnd.nextInt(dtypes.size())), shapes[rnd.nextInt(shapes.length)]));
        return out;
    }

    /** The named programs at every dtype and shape. */
    public static List<Case> cases(long seed, List<String> programs, List<DType> dtypes, long[][] shapes) {
        var rnd = new Random(seed);
        var out = new ArrayList<Case>();
        int i = 0;
        for (String name : programs) {
            Program p = PROGRAMS.stream().filter(x -> x.name().equals(name)).findFirst()
                    .orElseThrow(() -> new IllegalArgumentException("no row program " + name));
            for (DType t : dtypes) for (long[] shape : shapes) out.add(make(rnd, i++, p, t, shape));
        }
        return out;
    }

    private static Case make(Random rnd, int i, Program p, DType t, long[] shape) {
        long c = shape[shape.length - 1];
        var g = Gatun.graph(p.name() + "_" + i);
        var x = g.input("x", t, box(shape));
        var w = g.input("w", t, c);
        var b = g.input("b", t, c);
        p.body().accept(g, new Tensor[]{x, w, b});
        Graph graph = g.build();
        var in = new LinkedHashMap<String, NDArray>();
        in.put("x", NDArray.randn(t, rnd.nextLong(), shape));
        for (String n : List.of("w", "b")) if (graph.inputs().containsKey(n)) in.put(n, NDArray.randn(t, rnd.nextLong(), c));
        if (i % 5 == 4) {
            NDArray xs = in.get("x");
            long n = xs.numel();
            xs.set(rnd.nextLong(n), Double.NaN);
            xs.set(rnd.nextLong(n), -0.0);
            if (n > 2) xs.set(rnd.nextLong(n), Double.NEGATIVE_INFINITY);
        }
        return new Case(p.name() + "/" + t + java.util.Arrays.toString(shape), graph, in);
    }

    private static Object[] box(long[] shape) {
        var o = new Object[shape.length];
        for (int i = 0; i < shape.length; i++) o[i] = shape[i];
        return o;
    }
}
