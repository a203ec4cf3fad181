package dev.gatun.examples;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.GraphJson;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.lowering.Lowering;
import dev.gatun.ir.viz.GraphDot;
import dev.gatun.ir.viz.GraphMermaid;
import dev.gatun.planner.Plan;
import dev.gatun.planner.Planner;
import dev.gatun.planner.viz.PlanSvg;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Supplier;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;

/**
 * Writes pictures of example graphs and their plans: {@code <name>.plan.svg} (buffers over time and offset, per
 * pool), {@code <name>.plan.html} (the SVG above the printed plan), {@code <name>.dot} (Graphviz) and
 * {@code <name>.mmd} (Mermaid).
 *
 * <pre>
 * Pictures [--world N] OUTPUT_DIR [EXAMPLE | GRAPH.json ...]
 * </pre>
 *
 * EXAMPLE is one of {@link #EXAMPLES}' names, or {@code all} (the default); a path ending in {@code .json} is a
 * graph in Gatun's JSON form (see {@code GraphJson}). Plans use the default lowering and planning options for a
 * world of N ranks (default: each example's own, 2 for the seeds).
 */
public final class Pictures {
    private Pictures() {}

    /** An example graph and the world size its pictures use. */
    public record Example(String name, String description, int world, Supplier<Graph> graph) {}

    public static final Map<String, Example> EXAMPLES = examples();

    private static Map<String, Example> examples() {
        var m = new LinkedHashMap<String, Example>();
        for (Example e : List.of(
                new Example("seeds", "the seeds' graph of docs/DESIGN.md: three all-reduces, then one of their sum", 2, () -> Seeds.graph(4)),
                new Example("mlp", "a tensor-parallel MLP block: column-parallel matmul, gelu, row-parallel matmul, all-reduce", 2, Pictures::mlp),
                new Example("path2", "a graph input all-reduced directly: a persistent symmetric buffer and a copy-in", 2, Pictures::path2),
                new Example("userop", "a user op that declares a symmetric-memory input", 2, Pictures::userOp),
                new Example("dynamic", "a collective over a symbolic shape: falls back to NCCL, buffers allocated per call", 2, Pictures::dynamic)))
            m.put(e.name(), e);
        return java.util.Collections.unmodifiableMap(m);
    }

    static Graph mlp() {
        var g = Gatun.graph("mlp");
        var x = g.input("x", F32, 8, 16);
        var w1 = g.input("w1", F32, 16, 32);
        var w2 = g.input("w2", F32, 32, 16);
        g.output("y", x.matmul(w1).gelu().matmul(w2).allReduce(SUM).add(x));
        return g.build();
    }

    static Graph path2() {
        var g = Gatun.graph("path2");
        var x = g.input("x", F32, 8, 8);
        g.output("y", x.allReduce(SUM).mul(2));
        return g.build();
    }

    static Graph userOp() {
        var op = UserOp.builder("peer_sum")
                .input(TensorSpec.of("x", F32, "n")).output(TensorSpec.of("y", F32, "n"))
                .symmetricInput(0)
                .host((in, out, rank, world) -> { for (long i = 0; i < in.get(0).numel(); i++) out.get(0).set(i, in.get(0).get(i) * world); })
                .build();
        var g = Gatun.graph("userop").register(op);
        var x = g.input("x", F32, 64);
        g.output("y", g.call1("peer_sum", x.mul(3)).add(1));
        return g.build();
    }

    static Graph dynamic() {
        var g = Gatun.graph("dynamic");
        var x = g.input("x", F32, "n", 4);
        g.output("y", x.add(1).allReduce(SUM).mul(2));
        return g.build();
    }

    /** The plan a session would run for {@code graph} on {@code world} ranks, with {@code CompileOptions}' defaults. */
    public static Plan plan(Graph graph, int world) { return plan(graph, dev.gatun.runtime.CompileOptions.world(world)); }

    /** The plan a session compiled with {@code options} would run for {@code graph}. */
    public static Plan plan(Graph graph, dev.gatun.runtime.CompileOptions options) {
        return Planner.plan(Lowering.lower(graph, options.lowering()), options.planning());
    }

    /** Writes the four pictures of {@code graph} into {@code dir}; returns the files written. */
    public static List<Path> write(Path dir, String name, Graph graph, int world) throws IOException {
        Files.createDirectories(dir);
        Plan plan = plan(graph, world);
        var files = new ArrayList<Path>();
        files.add(writeString(dir.resolve(name + ".plan.svg"), PlanSvg.render(plan)));
        files.add(writeString(dir.resolve(name + ".plan.html"), PlanSvg.html(plan)));
        files.add(writeString(dir.resolve(name + ".dot"), GraphDot.render(graph)));
        files.add(writeString(dir.resolve(name + ".mmd"), GraphMermaid.render(graph)));
        return files;
    }

    private static Path writeString(Path p, String s) throws IOException {
        Files.writeString(p, s, StandardCharsets.UTF_8);
        return p;
    }

    public static void main(String[] args) throws IOException {
        Integer world = null;
        var rest = new ArrayList<String>();
        for (int i = 0; i < args.length; i++) {
            if (args[i].equals("--world") && i + 1 < args.length) world = Integer.parseInt(args[++i]);
            else if (args[i].equals("-h") || args[i].equals("--help")) { usage(); return; }
            else rest.add(args[i]);
        }
        if (rest.isEmpty()) { usage(); System.exit(2); }
        Path dir = Path.of(rest.getFirst());
        var which = rest.size() > 1 ? rest.subList(1, rest.size()) : List.of("all");
        for (String w : which) {
            if (w.equals("all")) {
                for (Example e : EXAMPLES.values()) report(write(dir, e.name(), e.graph().get(), world != null ? world : e.world()));
            } else if (EXAMPLES.containsKey(w)) {
                Example e = EXAMPLES.get(w);
                report(write(dir, e.name(), e.graph().get(), world != null ? world : e.world()));
            } else if (w.endsWith(".json")) {
                Graph g = GraphJson.fromJson(Files.readString(Path.of(w)));
                int n = world != null ? world : g.worldSize() != null ? g.worldSize() : 1;
                report(write(dir, g.name(), g, n));
            } else {
                System.err.println("unknown example '" + w + "'");
                usage();
                System.exit(2);
            }
        }
    }

    private static void report(List<Path> files) {
        for (Path p : files) System.out.println("wrote " + p);
    }

    private static void usage() {
        System.err.println("usage: Pictures [--world N] OUTPUT_DIR [EXAMPLE | GRAPH.json ...]");
        System.err.println("writes NAME.plan.svg, NAME.plan.html, NAME.dot and NAME.mmd for each; examples (default: all):");
        EXAMPLES.values().forEach(e -> System.err.printf("  %-8s %s (world %d)%n", e.name(), e.description(), e.world()));
    }
}
