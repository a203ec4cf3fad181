package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.Map;

/**
 * A kernel that stops a call on purpose, on one GPU, in a process of its own (a trap leaves the process's CUDA
 * context unusable): {@code index_select} given an index outside its table, {@code update_slice} given a position
 * where the update does not fit, {@code attention} given a position past its cache, or {@code gather} and
 * {@code scatter_add} given an index outside x's dimension, or a kernel that reads {@code index_select}'s table through
 * its indices (gather fusion, {@code gather_fused}) given an index outside the table, after a good call. The call must fail with the library's exception naming the step
 * and the values the kernel recorded (the {@link DeviceFault} record); what closing the session after it does is
 * printed.
 * Prints {@code TRAP CHECK PASSED} and exits 0 when that happened.
 *
 * <pre>.bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.TrapCheck index_select|update_slice|attention|gather|scatter_add|gather_fused</pre>
 *
 * {@link IndexTrapGpuTest} runs the gather and scatter_add checks from the GPU tests, each in a JVM of its own;
 * {@link GatherFusionGpuTest} the gather_fused one.
 */
public final class TrapCheck {
    private TrapCheck() {}

    public static void main(String[] args) {
        String which = args.length > 0 ? args[0] : "index_select";
        var g = Gatun.graph("trap_" + which);
        Map<String, NDArray> good, bad;
        String want;
        if (which.equals("index_select")) {
            g.output("y", g.input("table", DType.F32, 10, 4).indexSelect(0, g.input("ids", DType.I32, 3)));
            var table = NDArray.random(DType.F32, 1, 10, 4);
            good = Map.of("table", table, "ids", NDArray.of(DType.I32, new double[]{0, 9, 4}, 3));
            bad = Map.of("table", table, "ids", NDArray.of(DType.I32, new double[]{2, 300, 4}, 3));
            want = "index 300 at position 1 of the indices is outside the 10 rows of the table";
        } else if (which.equals("update_slice")) {
            g.output("c", g.state("cache", DType.F32, 4, 8).updateSlice(1, g.input("u", DType.F32, 4, 3), g.input("at", DType.I32)));
            var u = NDArray.random(DType.F32, 2, 4, 3);
            good = Map.of("u", u, "at", NDArray.of(DType.I32, new double[]{5}));
            bad = Map.of("u", u, "at", NDArray.of(DType.I32, new double[]{6}));
            want = "position 6 puts the update's 3 elements outside the 8 of the target along its dimension (valid: 0 to 5)";
        } else if (which.equals("attention")) {
            var q = g.input("q", DType.BF16, 2, 4, 64);
            g.output("y", q.attention(g.input("kT", DType.BF16, 2, 64, 100), g.input("v", DType.BF16, 2, 100, 64), g.input("at", DType.I32, 1), 0.125));
            var in = Map.of("q", NDArray.random(DType.BF16, 3, 2, 4, 64), "kT", NDArray.random(DType.BF16, 4, 2, 64, 100),
                    "v", NDArray.random(DType.BF16, 5, 2, 100, 64));
            good = new java.util.HashMap<>(in);
            good.put("at", NDArray.of(DType.I32, new double[]{99}, 1));
            bad = new java.util.HashMap<>(in);
            bad.put("at", NDArray.of(DType.I32, new double[]{100}, 1));
            want = "position 100 is outside the 100 positions of the cache (valid: 0 to 99)";
        } else if (which.equals("gather")) {
            g.output("y", g.input("x", DType.F32, 4, 3).gather(1, g.input("ids", DType.I64, 2, 2)));
            var x = NDArray.random(DType.F32, 6, 4, 3);
            good = Map.of("x", x, "ids", NDArray.of(DType.I64, new double[]{0, 2, 1, 2}, 2, 2));
            bad = Map.of("x", x, "ids", NDArray.of(DType.I64, new double[]{0, 2, 1, 7}, 2, 2));
            want = "index 7 at position 3 [1, 1] of the index is outside the 3 elements of dimension 1 of x (valid: 0 to 2)";
        } else if (which.equals("scatter_add")) {
            g.output("y", g.input("x", DType.F32, 4, 3).scatterAdd(0, g.input("ids", DType.I32, 2, 3), g.input("src", DType.F32, 2, 3)));
            var x = NDArray.random(DType.F32, 7, 4, 3);
            var src = NDArray.random(DType.F32, 8, 2, 3);
            good = Map.of("x", x, "ids", NDArray.of(DType.I32, new double[]{0, 3, 3, 1, 1, 2}, 2, 3), "src", src);
            bad = Map.of("x", x, "ids", NDArray.of(DType.I32, new double[]{0, 3, 3, 1, -1, 2}, 2, 3), "src", src);
            want = "index -1 at position 4 [1, 1] of the index is outside the 4 elements of dimension 0 of x (valid: 0 to 3)";
        } else if (which.equals("gather_fused")) {
            // index_select read through its indices by the kernel that consumes it (gather fusion): the kernel checks
            g.output("y", g.input("table", DType.F32, 10, 4).indexSelect(0, g.input("ids", DType.I32, 3)).mul(2).add(1));
            var table = NDArray.random(DType.F32, 1, 10, 4);
            good = Map.of("table", table, "ids", NDArray.of(DType.I32, new double[]{0, 9, 4}, 3));
            bad = Map.of("table", table, "ids", NDArray.of(DType.I32, new double[]{2, 300, 4}, 3));
            want = "which reads index_select(table, ids) -> ";
        } else {
            throw new IllegalArgumentException("TrapCheck takes index_select, update_slice, attention, gather, scatter_add or gather_fused, got '" + which + "'");
        }
        boolean passed;
        var options = CompileOptions.world(1).backend("cuda").gatherFusion(which.equals("gather_fused"));
        var s = Session.compile(g.build(), options);
        try {
            s.runToHost(good);
            System.out.println(which + ": a good call ran");
            try {
                s.runToHost(bad);
                System.out.println(which + ": FAILED: the bad call returned");
                passed = false;
            } catch (GatunRuntimeException e) {
                System.out.println(which + ": the bad call failed with: " + e.getMessage());
                passed = e.getMessage().contains(want) && e.getMessage().contains("step ");
                // the fused kernel says what index_select's own kernel says, after naming itself and the op
                if (which.equals("gather_fused"))
                    passed &= e.getMessage().contains("through its indices: index 300 at position 1 of the indices is outside the 10 rows of the table (valid: 0 to 9)")
                            && s.plan().kernels().stream().anyMatch(k -> k.gathers() && e.getMessage().contains("kernel " + k.name() + ", which reads"));
                if (!passed) System.out.println(which + ": the message does not say: " + want);
            }
        } finally {
            // after a trap the context is lost: closing frees what it can; whether it throws is reported, not judged
            try {
                s.close();
                s.close(); // idempotent
                System.out.println(which + ": the session closed after the trap");
            } catch (RuntimeException e) {
                System.out.println(which + ": closing the session after the trap threw: " + e);
            }
        }
        System.out.println(passed ? which + ": TRAP CHECK PASSED" : which + ": TRAP CHECK FAILED");
        System.out.flush();
        Runtime.getRuntime().halt(passed ? 0 : 1);
    }
}
