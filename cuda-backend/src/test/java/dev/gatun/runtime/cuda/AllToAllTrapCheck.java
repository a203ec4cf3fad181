package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.distributed.LocalWorld;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * An uneven all_to_all given counts it refuses, on symmetric memory, two ranks as threads sharing one GPU, in a process
 * of its own (the kernel traps, which leaves the process's CUDA context unusable): after a good call, a call where rank
 * 1 would receive 9 rows with a capacity of 8 (both ranks send it 4 and 5 rows, {@code over}), or where rank 0 sends
 * -1 rows ({@code negative}); or ({@code joined}) two all_to_alls of graph inputs by the same counts run as one joined
 * step (one kernel, one barrier pair), the first with room for the 9 rows, the second with a capacity of 8: the fault
 * names the second part's step line. Every rank's call must fail with the library's exception naming the step and the rule's
 * words, read from its own {@link DeviceFault} record (each rank writes its record before the barrier that precedes
 * any trap). Prints {@code A2A TRAP CHECK PASSED} and exits 0 when that happened.
 *
 * <pre>.bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.AllToAllTrapCheck over|negative|joined</pre>
 *
 * {@link AllToAllTrapGpuTest} runs each from the GPU tests, each in a JVM of its own.
 */
public final class AllToAllTrapCheck {
    private AllToAllTrapCheck() {}

    public static void main(String[] args) {
        String which = args.length > 0 ? args[0] : "over";
        boolean joined = which.equals("joined");
        var g = Gatun.graph("trap_a2a").world(2);
        var counts = g.input("counts", DType.I64, 2);
        if (joined) {
            // graph inputs (path 2): the schedule places the two together and the planner joins them
            var a = g.input("x", DType.F32, 6, 4).allToAll("world", counts, 12).values();
            g.output("y", a.slice(0, 0, 8).add(g.input("w", DType.F32, 6, 4).allToAll("world", counts, 8).values()));   // one kernel reads both
        } else {
            var r = g.input("x", DType.F32, 6, 4).mul(2).allToAll("world", counts, 8);
            g.output("y", r.values().add(1));   // a receive buffer in symmetric memory: the senders push
        }
        var graph = g.build();
        String part = joined ? "all_to_all.symm_mem(w, counts, capacity=8" : "all_to_all.symm_mem(";
        long[][] good = {{3, 3}, {2, 4}}, bad = which.equals("negative") ? new long[][]{{-1, 3}, {2, 4}} : new long[][]{{1, 4}, {1, 5}};
        String want = which.equals("negative") ? "member 0 of group \"world\" sends -1 rows to member 0; a row count is never negative"
                : "member 1 of group \"world\" would receive 9 rows but the capacity is 8 rows";
        var messages = new ConcurrentHashMap<Integer, String>();
        LocalWorld.run(2, rv -> {
            int rank = rv.rank();
            var s = Session.compile(graph, CompileOptions.world(2).rank(rv).ranksPerGpu(2).backend("cuda").timeout(java.time.Duration.ofSeconds(20)));
            var x = NDArray.random(DType.F32, rank + 1, 6, 4);
            if (joined && !s.plan().toString().contains("launch all_to_all_0 {")) throw new AssertionError("not joined:\n" + s.plan());
            s.runToHost(joined ? Map.of("x", x, "w", x, "counts", NDArray.of(good[rank].clone(), 2)) : Map.of("x", x, "counts", NDArray.of(good[rank].clone(), 2)));
            System.out.println(which + ": rank " + rank + ": a good call ran");
            try {
                s.runToHost(joined ? Map.of("x", x, "w", x, "counts", NDArray.of(bad[rank].clone(), 2)) : Map.of("x", x, "counts", NDArray.of(bad[rank].clone(), 2)));
                messages.put(rank, "the bad call returned");
            } catch (GatunRuntimeException e) {
                messages.put(rank, e.getMessage());
            }
            // the context is lost after the trap: the session is left for the process's end
        });
        boolean passed = messages.size() == 2;
        for (var e : messages.entrySet()) {
            System.out.println(which + ": rank " + e.getKey() + ": " + e.getValue());
            passed &= e.getValue().contains(want) && e.getValue().contains("step ") && e.getValue().contains(part);
        }
        System.out.println(passed ? which + ": A2A TRAP CHECK PASSED" : which + ": A2A TRAP CHECK FAILED (want: " + want + ")");
        System.out.flush();
        Runtime.getRuntime().halt(passed ? 0 : 1);
    }
}
