package dev.gatun.examples.jshell;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.ir.lower.LoweredGraph;
import dev.gatun.planner.Plan;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.function.IntFunction;

/**
 * The top-level helpers of jshell's start-up file {@code examples/jshell/gatun.jsh}, which imports them
 * statically (compiled here once, so jshell starts quickly). They act on one graph under construction,
 * {@link #g}, and on the last compiled {@link #session}:
 *
 * <pre>{@code
 * var x = input("x", F32, 4, 4);
 * output("y", x.add(1).allReduce(SUM));
 * compile(2);
 * run(r -> Map.of("x", full(F32, r + 1, 4, 4)));
 * }</pre>
 */
public final class Repl {
    private Repl() {}

    /** The graph under construction; {@link #graph(String)} starts a new one. */
    public static GraphBuilder g = Gatun.graph("jshell");
    /** The session the last {@code compile} made; compiling again closes it. */
    public static Session session;

    /** Starts a new graph and makes it the one the helpers add to. */
    public static GraphBuilder graph(String name) {
        g = Gatun.graph(name);
        return g;
    }

    public static GraphBuilder graph() { return g; }

    /** A graph input of {@link #g}; dims are numbers or strings (symbols bound at call time). */
    public static Tensor input(String name, DType dtype, Object... dims) { return g.input(name, dtype, dims); }

    public static Tensor constant(DType dtype, long[] shape, double... values) { return g.constant(dtype, shape, values); }

    public static Tensor scalar(double value, DType dtype) { return g.scalar(value, dtype); }

    public static GraphBuilder output(String name, Tensor t) { return g.output(name, t); }

    public static GraphBuilder register(UserOp op) { return g.register(op); }

    public static Tensor call1(String op, Tensor... args) { return g.call1(op, args); }

    public static List<Tensor> call(String op, Tensor... args) { return g.call(op, args); }

    /** Freezes {@link #g} (further ops on it fail; start a new graph with {@link #graph(String)}). */
    public static Graph build() { return g.build(); }

    public static Session compile(Graph graph, CompileOptions options) {
        if (session != null) session.close();
        session = null;
        session = Session.compile(graph, options);
        return session;
    }

    public static Session compile(Graph graph, int world) { return compile(graph, CompileOptions.world(world)); }

    public static Session compile(CompileOptions options) { return compile(g.build(), options); }

    /** Builds {@link #g} and compiles it for a world of {@code world} ranks. */
    public static Session compile(int world) { return compile(g.build(), CompileOptions.world(world)); }

    public static Session compile() { return compile(1); }

    public static Session session() {
        if (session == null) throw new IllegalStateException("nothing compiled yet: call compile(world) first");
        return session;
    }

    public static Plan plan() { return session().plan(); }

    public static LoweredGraph lowered() { return session().lowered(); }

    public static String explain() { return session().explain(); }

    /** Runs the last session: one input map per rank; a single map is given to every rank. */
    @SafeVarargs
    public static List<Map<String, NDArray>> run(Map<String, NDArray>... inputsPerRank) {
        var s = session();
        var in = new ArrayList<>(List.of(inputsPerRank));
        if (in.size() == 1) while (in.size() < s.ranks().size()) in.add(in.getFirst());
        return s.run(in);
    }

    /** Runs the last session with rank r's inputs given by {@code perRank.apply(r)}. */
    public static List<Map<String, NDArray>> run(IntFunction<Map<String, NDArray>> perRank) {
        var s = session();
        var in = new ArrayList<Map<String, NDArray>>();
        for (int r : s.ranks()) in.add(perRank.apply(r));
        return s.run(in);
    }

    public static NDArray full(DType dtype, double value, long... shape) { return NDArray.full(dtype, value, shape); }

    public static NDArray zeros(DType dtype, long... shape) { return NDArray.zeros(dtype, shape); }

    public static NDArray array(DType dtype, double[] values, long... shape) { return NDArray.of(dtype, values, shape); }

    public static NDArray random(DType dtype, long seed, long... shape) { return NDArray.random(dtype, seed, shape); }

    public static void help() {
        System.out.println("""
            Gatun in jshell (dev.gatun.dsl.*, dev.gatun.runtime.*, DType, ReduceOp, UserOp, TensorSpec, Graph, Plan imported;
            F32, F16, BF16, F64, I32, ..., SUM, AVG, MAX, MIN in scope)
              g                                  the graph under construction (a GraphBuilder); graph("name") starts a new one
              var x = input("x", F32, 4, 4)      a graph input; dims are numbers, or strings for symbols: input("x", F32, "n")
              x.add(1).gelu().matmul(w).allReduce(SUM)    Tensor methods add ops to g
              output("y", t)                     names a result;  build() freezes g and returns its Graph
              compile(2)                         compiles g for a world of 2 ranks (and closes the previous session)
              compile(graph, CompileOptions.world(2).backend("host"))
              session, plan(), lowered(), explain()   the last session, its plan, lowered IR, why each collective took its path
              run(Map.of("x", full(F32, 1, 4, 4)))              the same inputs on every rank; one output map per rank
              run(r -> Map.of("x", full(F32, r + 1, 4, 4)))     rank r's inputs
              full, zeros, array, random         NDArray helpers
              print(x)                           prints a value whole (jshell shortens long values: 80 characters for
                                                 `var p = plan()`, 1000 for a bare expression like `plan()`)""");
    }

    /** Prints a value whole (jshell's feedback shortens long values). */
    public static void print(Object o) { System.out.println(o); }
}
