package dev.gatun.examples;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.lower.LoweredGraph;
import dev.gatun.ir.lower.Lowering;
import dev.gatun.ir.lower.LoweringOptions;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;

/**
 * The seeds' example of DESIGN.md: three all-reduces of x+1, x+2, x+3, then an all-reduce of their sum.
 * Prints the graph, its lowered form and why each collective's input took its path.
 */
public final class Seeds {
    private Seeds() {}

    public static Graph graph(int n) {
        var g = Gatun.graph("seeds");
        var x = g.input("x", F32, n, n);
        var a = x.add(1).allReduce(SUM);
        var b = x.add(2).allReduce(SUM);
        var c = x.add(3).allReduce(SUM);
        g.output("d", a.add(b).add(c).allReduce(SUM));
        return g.build();
    }

    public static void main(String[] args) {
        int world = args.length > 0 ? Integer.parseInt(args[0]) : 2;
        Graph graph = graph(4);
        System.out.println(graph);
        System.out.println();
        LoweredGraph lowered = Lowering.lower(graph, LoweringOptions.world(world));
        System.out.println(lowered);
        System.out.println();
        System.out.println(lowered.explain());
        System.out.println();
        var plan = dev.gatun.planner.Planner.plan(lowered);
        System.out.println(plan);
        System.out.println();
        System.out.println(plan.kernelSources());
    }
}
