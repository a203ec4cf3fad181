package dev.gatun.planner.bench;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.graph.Graph;

import java.util.ArrayList;
import java.util.SplittableRandom;

import static dev.gatun.ir.DType.F32;

/**
 * Fast synthetic graphs of a given node count for planning-time benchmarks: long chains of elementwise ops
 * broken by matmuls (extern calls, so fusion keeps many works), with layers that fan out and join back,
 * and reductions. Linear time in the node count (RandomGraphs is too slow at a million nodes).
 */
public final class SyntheticGraphs {
    private SyntheticGraphs() {}

    /**
     * The host-scale ladder of the runtime's {@code HostScaleBench} (the same graph, built the same way): two 8x8 f32
     * streams, each layer {@code a = t0 * 0.5 + t1; b = t1 * 0.5 + a; t0 = allReduce(a, avg); t1 = b}, five ops a layer of
     * which one is an all-reduce. {@code ladder(12000)} is the 60,000-op graph with 12,000 all-reduces.
     */
    public static Graph ladder(int layers) {
        var g = Gatun.graph("ladder_" + layers);
        Tensor t0 = g.input("x0", F32, 8, 8), t1 = g.input("x1", F32, 8, 8);
        for (int l = 0; l < layers; l++) {
            Tensor a = t0.mul(0.5).add(t1);
            Tensor b = t1.mul(0.5).add(a);
            t0 = a.allReduce(dev.gatun.ir.graph.ReduceOp.AVG);
            t1 = b;
        }
        g.output("y0", t0);
        g.output("y1", t1);
        return g.build();
    }

    /**
     * A graph of about {@code nodes} nodes (node ids, so the scalar constants count) for whole-compile benchmarks at a
     * world of two (declared: the all-gather needs it): chains of elementwise ops, matmuls with one weight, joins back to a recent tensor,
     * reductions broadcast back, and an all-reduce (sum or average) or an all-gather sliced back to the rank's rows
     * about one op in twelve.
     */
    public static Graph mixed(int nodes, long seed) {
        var rnd = new SplittableRandom(seed);
        var g = Gatun.graph("mixed-" + nodes).world(2);
        var x = g.input("x", F32, 16, 16);
        var w = g.input("w", F32, 16, 16);
        var recent = new ArrayList<Tensor>();
        Tensor cur = x;
        int outputs = 0;
        while (cur.node().id() < nodes) {
            int kind = rnd.nextInt(12);
            if (kind < 4) cur = kind < 2 ? cur.tanh() : cur.mul(0.5);                  // elementwise chain
            else if (kind < 6) cur = cur.matmul(w);                                    // extern call
            else if (kind < 8) cur = cur.add(recent.get(rnd.nextInt(recent.size())));  // join back
            else if (kind < 9) cur = cur.sub(cur.mean(true, 1));                       // reduction, broadcast back
            else if (kind < 10) cur = cur.relu().add(x);
            else if (kind < 11) cur = cur.allReduce(rnd.nextBoolean() ? dev.gatun.ir.graph.ReduceOp.SUM : dev.gatun.ir.graph.ReduceOp.AVG);
            else cur = rnd.nextBoolean() ? cur.allReduce(dev.gatun.ir.graph.ReduceOp.AVG) : cur.allGather().slice(0, 0, 16);
            recent.add(cur);
            if (recent.size() > 8) recent.remove(0);
            if (rnd.nextInt(Math.max(1, nodes / 4)) == 0 && outputs < 8) g.output("o" + outputs++, cur);
        }
        g.output("y", cur);
        return g.build();
    }

    public static Graph chainsAndLayers(int nodes, long seed) {
        var rnd = new SplittableRandom(seed);
        var g = Gatun.graph("synthetic-" + nodes);
        var x = g.input("x", F32, 16, 16);
        var w = g.input("w", F32, 16, 16);
        var recent = new ArrayList<Tensor>();
        recent.add(x);
        Tensor cur = x;
        int made = 0, outputs = 0;
        while (made < nodes) {
            int kind = rnd.nextInt(10);
            if (kind < 4) cur = cur.tanh();                                  // chain
            else if (kind < 6) cur = cur.matmul(w);                          // extern call: a fusion barrier
            else if (kind < 8) cur = cur.add(recent.get(rnd.nextInt(recent.size())));   // join back a layer
            else if (kind < 9) {                                             // a layer: fan out
                var layer = new ArrayList<Tensor>();
                int width = 2 + rnd.nextInt(4);
                for (int i = 0; i < width && made < nodes; i++, made++) layer.add(cur.matmul(w).mul(0.5));
                made += layer.size();
                for (Tensor t : layer) cur = cur.add(t);
            } else cur = cur.add(cur.sum(true, 1));                          // a reduction, broadcast back
            made++;
            recent.add(cur);
            if (recent.size() > 8) recent.remove(0);
            if (rnd.nextInt(Math.max(1, nodes / 4)) == 0 && outputs < 8) g.output("o" + outputs++, cur);
        }
        g.output("y", cur);
        return g.build();
    }
}
