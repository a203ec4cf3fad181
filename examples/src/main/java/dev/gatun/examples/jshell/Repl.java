package dev.gatun.examples.jshell;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.lowering.LoweredGraph;
import dev.gatun.planner.Plan;
import dev.gatun.runtime.ArrayLike;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
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
 *
 * <p>They are written against the traps of a first session: numbers after a dtype are always a shape (a seed is
 * spelled {@code seed(7)}), {@code array} takes Java arrays of any element type, text prints as text, and a graph
 * frozen by {@code compile} says how to start the next one.
 */
public final class Repl {
    private Repl() {}

    /** The graph under construction; {@link #graph(String)} starts a new one. */
    public static GraphBuilder g = Gatun.graph("jshell");
    /** The session the last {@code compile} made; compiling again closes it. */
    public static Session session;
    /** How {@link #g} was frozen, or null while it is open: the helpers that would change it say so and how to go on. */
    private static String frozenBy;
    /** Seeds for {@code random}/{@code randn} without an explicit seed: the same sequence in every new jshell. */
    private static Random seeds = new Random(0);

    /** Starts a new graph and makes it the one the helpers add to. */
    public static GraphBuilder graph(String name) {
        g = Gatun.graph(name);
        frozenBy = null;
        return g;
    }

    public static GraphBuilder graph() { return g; }

    /** A graph input of {@link #g}; dims are numbers or strings (symbols bound at call time). */
    public static Tensor input(String name, DType dtype, Object... dims) { return open("input").input(name, dtype, dims); }

    public static Tensor constant(DType dtype, long[] shape, double... values) { return open("constant").constant(dtype, shape, values); }

    public static Tensor scalar(double value, DType dtype) { return open("scalar").scalar(value, dtype); }

    public static GraphBuilder output(String name, Tensor t) { return open("output").output(name, t); }

    /** The tensors joined along {@code dim} (as {@code torch.cat}); {@code x.split(dim, sizes...)} and {@code x.chunk(n, dim)} undo it. */
    public static Tensor cat(int dim, Tensor... tensors) { return open("cat").cat(dim, tensors); }

    public static GraphBuilder register(UserOp op) { return open("register").register(op); }

    public static Tensor call1(String op, Tensor... args) { return open("call1").call1(op, args); }

    public static List<Tensor> call(String op, Tensor... args) { return open("call").call(op, args); }

    /** Freezes {@link #g} (further ops on it fail; start a new graph with {@link #graph(String)}). */
    public static Graph build() { return freeze("build()"); }

    /** {@link #g}, or an error saying how it was frozen and how to start the next graph. */
    private static GraphBuilder open(String helper) {
        if (frozenBy != null)
            throw new IllegalStateException(helper + ": graph '" + g.name() + "' was frozen by " + frozenBy + " and cannot change;"
                    + " start a new graph with graph(\"name\") and declare its inputs again (tensors of the old graph cannot be reused)");
        return g;
    }

    private static Graph freeze(String by) {
        Graph built = g.build();                 // may refuse (no outputs): then g stays open
        if (frozenBy == null) frozenBy = by;
        return built;
    }

    public static Session compile(Graph graph, CompileOptions options) {
        if (session != null) session.close();
        session = null;
        session = Session.compile(graph, options);
        return session;
    }

    public static Session compile(Graph graph, int world) { return compile(graph, CompileOptions.world(world)); }

    public static Session compile(CompileOptions options) { return compile(freeze("compile(" + options.worldSize() + ")"), options); }

    /** Builds {@link #g} and compiles it for a world of {@code world} ranks. */
    public static Session compile(int world) { return compile(freeze("compile(" + world + ")"), CompileOptions.world(world)); }

    public static Session compile() { return compile(1); }

    public static Session session() {
        if (session == null) throw new IllegalStateException("nothing compiled yet: call compile(world) first");
        return session;
    }

    public static Plan plan() { return session().plan(); }

    public static LoweredGraph lowered() { return session().lowered(); }

    /** Prints why each collective took its path, as text (a returned String would show escaped, on one line). */
    public static void explain() { System.out.println(session().explain()); }

    /**
     * Runs the last session: one input map per rank (host or device arrays); a single map is given to every rank. The
     * outputs come back as host copies, to look at.
     */
    @SafeVarargs
    public static List<Map<String, NDArray>> run(Map<String, ? extends ArrayLike>... inputsPerRank) {
        return session().runToHost(perRank(inputsPerRank));
    }

    /** {@link #run(Map[])} with the outputs left on the device: DeviceArrays, valid until the session's next call. */
    @SafeVarargs
    public static List<Map<String, DeviceArray>> runOnDevice(Map<String, ? extends ArrayLike>... inputsPerRank) {
        return session().run(perRank(inputsPerRank));
    }

    @SafeVarargs
    private static List<Map<String, ? extends ArrayLike>> perRank(Map<String, ? extends ArrayLike>... inputsPerRank) {
        var in = new ArrayList<Map<String, ? extends ArrayLike>>(List.of(inputsPerRank));
        if (in.size() == 1) while (in.size() < session().ranks().size()) in.add(in.getFirst());
        return in;
    }

    /** A copy of {@code a} on the last session's device (rank {@code rank}'s, where it drives several). */
    public static DeviceArray toDevice(NDArray a) { return session().toDevice(a); }

    public static DeviceArray toDevice(int rank, NDArray a) { return session().toDevice(rank, a); }

    /** Binds an input of the last session once (weights): later runs no longer pass it. */
    public static Session bind(String input, ArrayLike value) { return session().bind(input, value); }

    /** Runs the last session with rank r's inputs given by {@code perRank.apply(r)}. */
    public static List<Map<String, NDArray>> run(IntFunction<Map<String, NDArray>> perRank) {
        var s = session();
        var in = new ArrayList<Map<String, NDArray>>();
        for (int r : s.ranks()) in.add(perRank.apply(r));
        return s.runToHost(in);
    }

    public static NDArray full(DType dtype, double value, long... shape) { return NDArray.full(dtype, value, shape); }

    public static NDArray zeros(DType dtype, long... shape) { return NDArray.zeros(dtype, shape); }

    public static NDArray array(DType dtype, double[] values, long... shape) { return NDArray.of(dtype, values, oneDimIfNone(values.length, shape)); }

    /** {@code array(new float[]{1, 2, 3, 4}, 2, 2)}: f32; without a shape, one dimension. */
    public static NDArray array(float[] values, long... shape) { return NDArray.of(values, oneDimIfNone(values.length, shape)); }

    public static NDArray array(double[] values, long... shape) { return NDArray.of(values, oneDimIfNone(values.length, shape)); }

    public static NDArray array(int[] values, long... shape) { return NDArray.of(values, oneDimIfNone(values.length, shape)); }

    public static NDArray array(long[] values, long... shape) { return NDArray.of(values, oneDimIfNone(values.length, shape)); }

    /** int8 values. */
    public static NDArray array(byte[] values, long... shape) { return NDArray.of(values, oneDimIfNone(values.length, shape)); }

    public static NDArray array(boolean[] values, long... shape) { return NDArray.of(values, oneDimIfNone(values.length, shape)); }

    private static long[] oneDimIfNone(int count, long[] shape) { return shape.length == 0 ? new long[]{count} : shape; }

    /** An explicit seed for {@code random}/{@code randn}: {@code random(F32, seed(7), 4, 4)}. */
    public record Seed(long value) {}

    public static Seed seed(long value) { return new Seed(value); }

    /** Restarts the seeds that {@code random}/{@code randn} without a seed use (like torch.manual_seed). */
    public static void manualSeed(long value) { seeds = new Random(value); }

    /**
     * Uniform values in [-1, 1) (integers in [-10, 10]) of the given shape: every number after the dtype is a
     * dimension, so {@code random(F32, 4, 4)} is a 4x4 matrix. The seed comes from this jshell's own sequence
     * (reset by {@link #manualSeed}); {@code random(F32, seed(7), 4, 4)} fixes it.
     */
    public static NDArray random(DType dtype, long... shape) { return NDArray.random(dtype, seeds.nextLong(), shape); }

    public static NDArray random(DType dtype, Seed seed, long... shape) { return NDArray.random(dtype, seed.value(), shape); }

    /** Standard normal values of the given shape (floating dtypes); the seed as for {@link #random(DType, long...)}. */
    public static NDArray randn(DType dtype, long... shape) { return NDArray.randn(dtype, seeds.nextLong(), shape); }

    public static NDArray randn(DType dtype, Seed seed, long... shape) { return NDArray.randn(dtype, seed.value(), shape); }

    /** The helpers with their arguments; {@code GatunShellTest} checks that every public helper is listed. */
    public static void help() { System.out.println(HELP); }

    static final String HELP = """
            Gatun in jshell: dev.gatun.dsl.*, dev.gatun.runtime.*, DType, Shape, ReduceOp, UserOp, TensorSpec, Graph, Plan
            imported; F32, F16, BF16, F64, I8, I32, I64, BOOL, SUM, AVG, MAX, MIN in scope.

            Building the graph g (a GraphBuilder; Tensor methods such as x.add(1).gelu().matmul(w).allReduce(SUM) add ops to it)
              graph(String name) -> GraphBuilder                  starts a new graph g (the one after compile, too)
              graph() -> GraphBuilder                             the graph under construction, g
              input(String name, DType dtype, Object... dims)     a graph input; dims are numbers, or strings for
                    -> Tensor                                     symbols: input("x", F32, 4, 4), input("x", F32, "n", 4)
              constant(DType dtype, long[] shape, double... values) -> Tensor
              scalar(double value, DType dtype) -> Tensor
              output(String name, Tensor t) -> GraphBuilder       names a result
              cat(int dim, Tensor... tensors) -> Tensor           joins along dim: cat(0, a, b); x.split(0, 2, 3) and
                                                                  x.chunk(2, 0) take a tensor apart (views)
              register(UserOp op) -> GraphBuilder                 a user op, then call(String op, Tensor... args)
              call(String op, Tensor... args) -> List<Tensor>     and call1(String op, Tensor... args) -> Tensor
              build() -> Graph                                    freezes g; graph("name") starts the next one

            Compiling and running (the last session is in `session`)
              compile(int world) -> Session                       builds g and compiles it for `world` ranks
              compile() -> Session                                the same for one rank
              compile(CompileOptions options) -> Session          e.g. compile(CompileOptions.world(2).backend("host"))
              compile(Graph graph, int world) -> Session          and compile(Graph graph, CompileOptions options)
              session() -> Session                                the last session
              plan() -> Plan,  lowered() -> LoweredGraph          its plan and lowered IR (print(plan()) shows all of it)
              explain()                                           prints why each collective took its path
              run(Map<String, ? extends ArrayLike>... inputsPerRank)  one map per rank, host or device arrays; a single
                                                                  map goes to every rank:
                    -> List<Map<String, NDArray>>                 run(Map.of("x", full(F32, 1, 4, 4)))
              run(IntFunction<Map<String, NDArray>> perRank)      rank r's inputs: run(r -> Map.of("x", full(F32, r + 1, 4, 4)))
                    -> List<Map<String, NDArray>>

            Keeping data on the device (GPU memory; host memory on the host backend)
              toDevice(NDArray a) -> DeviceArray                  a copy on the last session's device; toDevice(int rank, NDArray a)
              runOnDevice(Map<String, ? extends ArrayLike>... inputsPerRank)   as run, outputs left on the device
                    -> List<Map<String, DeviceArray>>             (valid until the next call; .toHost() reads one)
              bind(String input, ArrayLike value) -> Session      copied once and kept: later runs leave the input out

            Arrays (NDArray; also NDArray.loadNpy(Path), a.saveNpy(Path), a.slice/shard/chunk, NDArray.concat)
              full(DType dtype, double value, long... shape)      every element `value`
              zeros(DType dtype, long... shape)
              array(float[] values, long... shape)                f32 (without a shape: one dimension);
                                                                  array(new float[]{1, 2, 3, 4}, 2, 2) is 2x2
              array(double[] values, long... shape)               f64;   array(int[] values, long... shape): i32
              array(long[] values, long... shape)                 i64;   array(byte[] values, long... shape): i8
              array(boolean[] values, long... shape)              bool
              array(DType dtype, double[] values, long... shape)  values rounded to dtype
              random(DType dtype, long... shape)                  uniform in [-1, 1): random(F32, 4, 4) is 4x4
              random(DType dtype, Seed seed, long... shape)       a fixed seed: random(F32, seed(7), 4, 4)
              randn(DType dtype, long... shape)                   standard normal; randn(DType dtype, Seed seed, long... shape)
              seed(long value) -> Seed                            an explicit seed for random/randn
              manualSeed(long value)                              restarts the seeds random/randn use without seed(...)

            Printing
              print(Object o)                                     prints a value whole (jshell shortens long values: 80
                                                                  characters for `var p = plan()`, 1000 for a bare `plan()`)
              help()                                              this list""";

    /** Prints a value whole (jshell's feedback shortens long values). */
    public static void print(Object o) { System.out.println(o); }
}
