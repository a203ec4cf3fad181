// A collective on a tensor with a symbolic dimension "n" cannot use symmetric memory (the plan cannot give
// it a fixed offset in a pool), so Gatun lowers it to NCCL (on the host backend, its simulation). One
// compiled session serves every n: it runs here with n = 3 and n = 1000.
//
//   java --enable-preview --enable-native-access=ALL-UNNAMED -cp "$(./gatun-classpath)" examples/single-file/DynamicShapeNccl.java [world]
import dev.gatun.dsl.Gatun;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;

void main(String[] args) {
    int world = args.length > 0 ? Integer.parseInt(args[0]) : 2;

    var g = Gatun.graph("dynamic_nccl");
    var x = g.input("x", F32, "n", 8);
    g.output("y", x.mul(2).add(1).allReduce(SUM));

    try (var s = Session.compile(g.build(), CompileOptions.world(world))) {
        IO.println(s.graph());
        IO.println("");
        String explain = s.explain();
        IO.println(explain);
        IO.println("");
        IO.println(s.plan());
        IO.println("");

        boolean ok = explain.contains("all_reduce.nccl") && s.plan().toString().contains("all_reduce.nccl(");
        if (!ok) IO.println("expected the all-reduce to lower to NCCL");
        for (int n : new int[]{3, 1000}) {
            var inputs = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < world; r++) inputs.add(Map.of("x", NDArray.random(F32, 7L * n + r, n, 8)));
            var out = s.runToHost(inputs);
            for (int r = 0; r < world; r++) {
                var y = out.get(r).get("y");
                if (y.shape()[0] != n) { IO.println("n = " + n + " rank " + r + ": y has shape " + java.util.Arrays.toString(y.shape())); ok = false; }
                for (int i = 0; i < n * 8 && ok; i++) {
                    double want = 0;
                    for (int q = 0; q < world; q++) want += 2 * inputs.get(q).get("x").get(i) + 1;
                    if (Math.abs(y.get(i) - want) > 1e-5 * (1 + Math.abs(want))) {
                        IO.println("n = " + n + " rank " + r + " element " + i + ": " + y.get(i) + " (want " + want + ")");
                        ok = false;
                    }
                }
            }
            IO.println("n = " + n + ", rank 0: y = " + out.get(0).get("y"));
        }
        IO.println("backend " + s.backendName() + ", world " + world);
        if (!ok) {
            IO.println("WRONG: the dynamic-shape all-reduce did not match the plain computation");
            System.exit(1);
        }
        IO.println("verified: all_reduce over symbolic n fell back to NCCL; y = sum over " + world + " ranks of 2x+1 for n = 3 and n = 1000");
    }
}
