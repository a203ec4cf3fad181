package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.planner.Step;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/** A matmul operand that is the transposed view of packed memory is read as it lies: no copy, the right product. */
public class TransposedMatmulTest {

    /** a @ b by plain loops over logical [batch, m, k] and [batch, k, n] arrays given as functions of their indices. */
    static double[] product(int batch, int m, int k, int n, Elem a, Elem b) {
        double[] out = new double[batch * m * n];
        for (int z = 0; z < batch; z++)
            for (int i = 0; i < m; i++)
                for (int j = 0; j < n; j++) {
                    double acc = 0;
                    for (int p = 0; p < k; p++) acc += a.at(z, i, p) * b.at(z, p, j);
                    out[(z * m + i) * n + j] = acc;
                }
        return out;
    }

    interface Elem { double at(int batch, int row, int col); }

    /** The graphs: {@code x @ w.T} (a linear layer on a checkpoint's [out, in] weight), batched {@code q @ k^T}, both transposed. */
    public static List<Graph> graphs(DType t) {
        var g1 = Gatun.graph("linear");
        g1.output("y", g1.input("x", t, 5, 7).matmul(g1.input("w", t, 3, 7).transpose(0, 1)));
        var g2 = Gatun.graph("scores");
        g2.output("s", g2.input("q", t, 4, 6, 8).matmul(g2.input("k", t, 4, 9, 8).transpose(1, 2)));
        var g3 = Gatun.graph("both");
        g3.output("c", g3.input("a", t, 2, 7, 5).transpose(1, 2).matmul(g3.input("b", t, 2, 3, 7).transpose(-2, -1)));
        return List.of(g1.build(), g2.build(), g3.build());
    }

    /** Each graph's inputs and its expected output, by plain loops. */
    public static Map<String, NDArray> inputs(Graph g, DType t) {
        return switch (g.name()) {
            case "linear" -> Map.of("x", NDArray.randn(t, 1, 5, 7), "w", NDArray.randn(t, 2, 3, 7));
            case "scores" -> Map.of("q", NDArray.randn(t, 3, 4, 6, 8), "k", NDArray.randn(t, 4, 4, 9, 8));
            default -> Map.of("a", NDArray.randn(t, 5, 2, 7, 5), "b", NDArray.randn(t, 6, 2, 3, 7));
        };
    }

    public static double[] expected(Graph g, Map<String, NDArray> in) {
        return switch (g.name()) {
            case "linear" -> {
                NDArray x = in.get("x"), w = in.get("w");
                yield product(1, 5, 7, 3, (z, i, p) -> x.get(i * 7L + p), (z, p, j) -> w.get(j * 7L + p));
            }
            case "scores" -> {
                NDArray q = in.get("q"), k = in.get("k");
                yield product(4, 6, 8, 9, (z, i, p) -> q.get((z * 6L + i) * 8 + p), (z, p, j) -> k.get((z * 9L + j) * 8 + p));
            }
            default -> {
                NDArray a = in.get("a"), b = in.get("b");
                yield product(2, 5, 7, 3, (z, i, p) -> a.get((z * 7L + p) * 5 + i), (z, p, j) -> b.get((z * 3L + j) * 7 + p));
            }
        };
    }

    @Test
    void transposedOperandsAreReadInPlaceAndTheProductIsRight() {
        for (DType t : List.of(DType.F64, DType.F32, DType.BF16))
            for (Graph g : graphs(t))
                try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) {
                    // the plan copies nothing: one product, its transposed operands marked .mT
                    assertThat(s.plan().kernels()).as("%s %s", g.name(), t).isEmpty();
                    var mm = s.plan().steps().stream().filter(st -> st instanceof Step.Matmul).map(st -> (Step.Matmul) st).toList();
                    assertThat(mm).hasSize(1);
                    assertThat(mm.getFirst().transB()).isTrue();
                    assertThat(mm.getFirst().transA()).isEqualTo(g.name().equals("both"));
                    assertThat(s.plan().toString()).contains(".mT)");
                    assertRight(s, g, t, t == DType.F32 ? 1e-5 : 1e-12);
                }
    }

    /** Runs {@code g}'s session on its inputs and checks the product against plain loops ({@code tol}: f32/f64; bf16 3e-2). */
    public static void assertRight(Session s, Graph g, DType t, double tol) {
        var in = inputs(g, t);
        double[] want = expected(g, in), got = s.runToHost(in).values().iterator().next().toDoubleArray();
        double rel = t == DType.BF16 ? 3e-2 : tol;
        for (int i = 0; i < want.length; i++)
            assertThat(got[i]).as("%s %s element %d", g.name(), t, i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(rel * (1 + Math.abs(want[i]))));
    }

    @Test
    void aTransposeOfAStridedViewIsStillCopiedAndTheDecisionSaysWhy() {
        var g = Gatun.graph("strided");
        // every other row of w, transposed: not the transpose of packed memory
        g.output("y", g.input("x", DType.F32, 2, 4).matmul(g.input("w", DType.F32, 6, 4).slice(0, 0, 6, 2).transpose(0, 1)));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(s.plan().kernels()).hasSize(1);
            assertThat(s.lowered().decisions()).anyMatch(d -> d.contains("because matmul reads packed row-major memory"));
            var x = NDArray.randn(DType.F32, 1, 2, 4);
            var w = NDArray.randn(DType.F32, 2, 6, 4);
            double[] want = product(1, 2, 4, 3, (z, i, p) -> x.get(i * 4L + p), (z, p, j) -> w.get(2L * j * 4 + p));
            double[] got = s.runToHost(Map.of("x", x, "w", w)).get("y").toDoubleArray();
            for (int i = 0; i < want.length; i++) assertThat(got[i]).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-5));
        }
    }
}
