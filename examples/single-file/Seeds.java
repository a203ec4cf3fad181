// The seeds' graph of docs/DESIGN.md: three all-reduces of x+1, x+2, x+3, then an all-reduce of their sum.
// Runs it on 2 ranks with x = rank + 1 and checks d = 42 on every rank.
//
//   java --enable-preview --enable-native-access=ALL-UNNAMED -cp "$(./gatun-classpath)" examples/single-file/Seeds.java [world]
import dev.gatun.dsl.Gatun;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;

void main(String[] args) {
    int world = args.length > 0 ? Integer.parseInt(args[0]) : 2;

    var g = Gatun.graph("seeds");
    var x = g.input("x", F32, 4, 4);
    var a = x.add(1).allReduce(SUM);
    var b = x.add(2).allReduce(SUM);
    var c = x.add(3).allReduce(SUM);
    g.output("d", a.add(b).add(c).allReduce(SUM));
    var graph = g.build();

    try (var s = Session.compile(graph, CompileOptions.world(world))) {
        IO.println(graph);
        IO.println("");
        IO.println(s.explain());
        IO.println("");
        IO.println(s.plan());
        IO.println("");

        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) inputs.add(Map.of("x", NDArray.full(F32, r + 1, 4, 4)));
        List<Map<String, NDArray>> out = s.runToHost(inputs);

        // the plain computation: every all-reduce sums over ranks
        double sumX = 0;
        for (int r = 0; r < world; r++) sumX += r + 1;
        double want = world * ((sumX + world) + (sumX + 2 * world) + (sumX + 3 * world));

        boolean ok = true;
        for (int r = 0; r < world; r++) {
            NDArray d = out.get(r).get("d");
            IO.println("rank " + r + ": d = " + d);
            for (float v : d.toFloatArray()) ok &= v == want;
        }
        IO.println("backend " + s.backendName() + ", world " + world);
        if (!ok) {
            IO.println("WRONG: expected d = " + want + " on every rank");
            System.exit(1);
        }
        IO.println("verified: d = " + (long) want + " on every rank");
    }
}
