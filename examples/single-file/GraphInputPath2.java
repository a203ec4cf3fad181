// A graph input that feeds an all-reduce directly takes path 2: the plan gives it one persistent buffer
// in symmetric memory (alloc_symmetric_persistent), and every call copies the caller's tensor into it before
// the collective reads it. Here the collective makes the copy itself, before its first barrier (the fused
// copy-in, printed as 'copies input "x" in'); PlanOptions.withFusedCopyIns(false) gives a copy_in step instead
// (an async DMA copy on a GPU, captured once into the CUDA graph).
//
//   java --enable-preview --enable-native-access=ALL-UNNAMED -cp "$(./gatun-classpath)" examples/single-file/GraphInputPath2.java [world]
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

    var g = Gatun.graph("graph_input_path2");
    var x = g.input("x", F32, 4, 4);
    g.output("y", x.allReduce(SUM));

    // one-shot: a barrier-free all-reduce (the default at this size) reads its input in place and needs no path at all
    try (var s = Session.compile(g.build(), CompileOptions.world(world).barrierFreeMax(0))) {
        IO.println(s.graph());
        IO.println("");
        String explain = s.explain();
        IO.println(explain);
        IO.println("");
        String plan = s.plan().toString();
        IO.println(plan);
        IO.println("");
        var copyIn = plan.lines().filter(l -> l.contains("copy_in(") || l.contains("copies input \"x\" in")).toList();
        IO.println("the plan's copy of x: " + copyIn);

        boolean ok = explain.contains("input x: path 2") && copyIn.size() == 1;
        if (!ok) IO.println("expected x to take path 2 and exactly one copy of it per call");

        // three calls with different values: each copies the new x in
        for (int call = 0; call < 3; call++) {
            var inputs = new ArrayList<Map<String, NDArray>>();
            for (int r = 0; r < world; r++) inputs.add(Map.of("x", NDArray.random(F32, 100L * call + r, 4, 4)));
            var out = s.runToHost(inputs);
            for (int r = 0; r < world; r++) {
                var y = out.get(r).get("y");
                for (int i = 0; i < 16; i++) {
                    double want = 0;
                    for (int q = 0; q < world; q++) want += inputs.get(q).get("x").get(i);
                    if (Math.abs(y.get(i) - want) > 1e-5) {
                        IO.println("call " + call + " rank " + r + " element " + i + ": " + y.get(i) + " (want " + want + ")");
                        ok = false;
                        break;
                    }
                }
            }
            if (call == 2) IO.println("rank 0: y = " + out.get(0).get("y"));
        }
        IO.println("backend " + s.backendName() + ", world " + world);
        if (!ok) {
            IO.println("WRONG: graph input path 2 did not give the sum of the ranks' x");
            System.exit(1);
        }
        IO.println("verified: x took path 2 (copied into symmetric memory) and y = sum of x over " + world + " ranks on 3 calls");
    }
}
