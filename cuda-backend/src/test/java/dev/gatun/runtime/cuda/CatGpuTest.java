package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.function.Consumer;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * Concatenations on one GPU: matrix products written straight into their slices (rows, and columns a leading
 * dimension apart through cuBLAS's ldc), kernels storing into contiguous slices, copies of inputs; against the
 * reference, eagerly and replayed. Skipped where there is no GPU.
 */
@RequiresGpu
class CatGpuTest {

    static Graph graph(String name, Consumer<GraphBuilder> body) {
        var g = Gatun.graph(name);
        body.accept(g);
        return g.build();
    }

    static void check(Graph g) {
        var in = CudaBackendGpuTest.inputs(g, 3);
        var want = ReferenceInterpreter.evaluate(g, List.of(in)).getFirst();
        for (boolean cudaGraphs : new boolean[]{false, true}) {
            try (var s = Session.compile(g, CompileOptions.world(1).backend("cuda").cudaGraphs(cudaGraphs).roundEachOp())) {
                for (int call = 0; call < 3; call++) CudaBackendGpuTest.assertMatches(g.name() + " graphs " + cudaGraphs + " call " + call, g, want, s.runToHost(in));
            }
        }
    }

    @Test
    void matmulsWriteIntoRowAndColumnSlices() {
        for (DType t : List.of(DType.F32, DType.F16, DType.BF16, DType.F64)) {
            Graph rows = graph("rows_" + t.shortName(), g -> {
                var w = g.input("w", t, 8, 16);
                g.output("y", g.cat(0, g.input("a", t, 4, 8).matmul(w), g.input("b", t, 3, 8).matmul(w), g.input("c", t, 2, 16)));
            });
            try (var s = Session.compile(rows, CompileOptions.world(1).backend("cuda"))) {
                assertThat(s.plan().steps()).filteredOn(st -> st instanceof Step.Matmul).allSatisfy(st -> assertThat(((Step.Matmul) st).output().part()).isNotNull());
            }
            check(rows);
            check(graph("cols_" + t.shortName(), g -> {
                var x = g.input("x", t, 5, 8);
                g.output("qkv", g.cat(-1, x.matmul(g.input("wq", t, 8, 6)), x.matmul(g.input("wk", t, 8, 6)), x.matmul(g.input("wv", t, 8, 4))));
            }));
            check(graph("batched_" + t.shortName(), g -> {
                var x = g.input("x", t, 3, 4, 8);
                g.output("y", g.cat(1, x.matmul(g.input("w", t, 8, 5)), x.matmul(g.input("v", t, 3, 8, 5))));
            }));
        }
    }

    @Test
    void kernelsStoreIntoContiguousSlices() {
        check(graph("contiguous", g -> {
            var x = g.input("x", F32, 64, 33);
            var c = g.cat(0, x.exp(), x.sin().mul(2), x.sum(true, 0), g.input("y", F32, 7, 33));
            g.output("c", c);
            g.output("s", c.sum(1));
            var a = g.input("a", F32, 1, 5, 16);
            g.output("ones", g.cat(1, a.tanh(), a.neg(), a));
        }));
    }

    @Test
    void kernelsStoreIntoStridedSlices() {
        // along the last dimension: each part's kernel stores through the concatenation's strides
        check(graph("strided", b -> {
            var x = b.input("x", F32, 4, 8);
            b.output("c", b.cat(1, x.exp(), x.sin()));
        }));
        check(graph("strided_rows", b -> {
            var x = b.input("x", F32, 6, 32);
            var e = x.sub(x.max(true, -1)).exp();
            b.output("c", b.cat(-1, e.div(e.sum(true, -1)), x.sum(true, -1), x.mul(2)));
        }));
    }
}
