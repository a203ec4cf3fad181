package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.time.Duration;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;

/**
 * A rank that stops mid-call (run by gatun-run on 2 GPUs): rank 1 runs the graph once, then stops calling it;
 * rank 0 calls again, and its collective's device-side barrier must give up within the timeout with the
 * recognisable GATUN_BARRIER_TIMEOUT message instead of spinning forever. Exits 0 when that happened.
 */
public final class FaultCheck {
    private FaultCheck() {}

    public static void main(String[] args) throws Exception {
        var rv = dev.gatun.runtime.World.fromEnvironment(System.getenv()).rendezvous();
        int rank = rv.rank();
        var g = Gatun.graph("fault");
        var x = g.input("x", F32, 64);
        g.output("y", x.add(1).allReduce(SUM));
        var s = Session.compile(g.build(), CompileOptions.world(rv.worldSize()).timeout(Duration.ofSeconds(5)));
        var in = Map.of("x", NDArray.full(F32, rank, 64));
        System.out.println("rank " + rank + ": first call y[0] = " + s.runToHost(in).get("y").get(0));
        rv.barrier("first-call-done");
        if (rank == 1) {
            Thread.sleep(15_000);          // alive, but never joins the second call
            System.out.println("rank 1: stayed away from the second call");
            System.out.flush();
            Runtime.getRuntime().halt(0);
        }
        long t0 = System.nanoTime();
        try {
            s.runToHost(in);
            System.out.println("rank 0: FAILED: the second call returned although rank 1 never joined");
            System.out.flush();
            Runtime.getRuntime().halt(1);
        } catch (GatunRuntimeException e) {
            double secs = (System.nanoTime() - t0) / 1e9;
            // the device printed its GATUN_BARRIER_TIMEOUT line on stdout; the exception names the rank and the GPU error
            boolean named = e.getMessage().contains("(rank 0)") && e.getMessage().contains("failed on GPU");
            System.out.printf("rank 0: the second call stopped after %.1f s with: %s%n", secs, e.getMessage());
            System.out.println(named && secs < 30 ? "rank 0: FAULT CHECK PASSED" : "rank 0: FAULT CHECK FAILED");
            System.out.flush();
            Runtime.getRuntime().halt(named && secs < 30 ? 0 : 1);
        }
    }
}
