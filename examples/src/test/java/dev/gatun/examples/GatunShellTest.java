package dev.gatun.examples;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Drives ./gatun-shell (jshell with examples/jshell/gatun.jsh) non-interactively: a short script on stdin
 * builds the seeds' graph with the start-up file's helpers, compiles it for 2 ranks, runs it, and prints
 * every kind of public object; jshell's own feedback shows how each prints.
 */
class GatunShellTest {

    static final String SCRIPT = """
            var x = input("x", F32, 4, 4)
            var a = x.add(1).allReduce(SUM)
            var b = x.add(2).allReduce(SUM)
            var c = x.add(3).allReduce(SUM)
            output("d", a.add(b).add(c).allReduce(SUM))
            var graph = build()
            var s = compile(graph, 2)
            var out = run(r -> Map.of("x", full(F32, r + 1, 4, 4)))
            out.get(0).get("d")
            System.out.println("rank 1: d = " + out.get(1).get("d").get(3, 3))
            print(lowered())
            print(plan())
            explain()
            print(graph)
            s.backendName()
            array(new float[]{1, 2, 3, 4}, 2, 2)
            random(F32, 4, 4).shape()
            random(F32, seed(7), 2).equals(NDArray.random(F32, 7, 2))
            graph("second")
            var y = input("y", BF16, "n")
            g
            /exit
            """;

    @Test
    void theStartUpFileMakesTheDslReadyAtTheFirstPrompt(@TempDir Path prefs) {
        assumeTrue(Files.isExecutable(Checkout.javaHome().resolve("bin/jshell")), "this JDK has no jshell");
        var r = Checkout.run(List.of(Checkout.root().resolve("gatun-shell").toString(), "-J-Djava.util.prefs.userRoot=" + prefs), SCRIPT, 120);
        String out = r.output();
        assertThat(r.exitCode()).as("jshell's exit code; output:%n%s", out).isZero();
        assertThat(out).as(out)
                .doesNotContain("Error:").doesNotContain("Exception")
                // Tensor, GraphBuilder (open), NDArray
                .contains("x ==> Tensor %0 = input(\"x\") : f32[4,4]  (graph 'jshell')")
                .contains("graph \"jshell\"  (open: being built)")
                .contains("==> NDArray f32[4,4]\n[[42.0, 42.0, 42.0, 42.0],\n [42.0, 42.0, 42.0, 42.0],")
                .contains("rank 1: d = 42.0")
                // LoweredGraph, Plan, explain, Graph, Session
                .contains("lowered \"jshell\"  world=2")
                .contains("plan \"jshell\"  world=2  fingerprint=")
                .contains("all_reduce.barrier_free(buf7, sum, \"world\")")   // the default below 512 KiB at two ranks
                .contains("input buf0: no path (no communication buffer: read in place and pushed into the peers' rotating slots)")
                .contains("  %12 = all_reduce(%11, sum, \"world\") : f32[4,4]\n  return d=%12")
                .contains("s ==> Session \"jshell\" world=2 backend=host")
                .contains("==> \"host\"")
                // explain() prints text, not an escaped string; the array helpers take Java arrays; numbers are a shape
                .doesNotContain("\\n")
                .contains("==> NDArray f32[2,2]\n[[1.0, 2.0],\n [3.0, 4.0]]")
                .contains("==> long[2] { 4, 4 }")
                .contains("==> true")
                // a second graph with a symbolic dim; g follows graph(...)
                .contains("y ==> Tensor %0 = input(\"y\") : bf16[n]  (graph 'second')")
                .contains("  %0 = input(\"y\") : bf16[n]\n  return (no outputs yet)");
    }
}
