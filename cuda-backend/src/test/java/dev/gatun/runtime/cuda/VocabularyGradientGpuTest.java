package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.Map;
import java.util.SplittableRandom;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.data.Offset.offset;

/**
 * A tied embedding's gradient on the GPU against the host backend (issue 39's lowering rules): the head's gradient
 * computed transposed by cuBLAS, the lookup's rows scattered into it (scatter_add reading a view of the product), its
 * squared norm over 20000 rows summed in chunks and folded. f32 throughout; the host's values within 1e-4 of the
 * largest (cuBLAS sums in its own order).
 */
@RequiresGpu
class VocabularyGradientGpuTest {
    static final long VOCAB = 20000, HIDDEN = 64, TOKENS = 96;

    static Graph graph(DType t) {
        var g = Gatun.graph("tied_grad");
        Tensor table = g.input("table", t, VOCAB, HIDDEN), tokens = g.input("tokens", DType.I32, TOKENS), c = g.input("c", DType.F32, TOKENS, VOCAB);
        Tensor logits = table.indexSelect(0, tokens).tanh().matmul(table.t()).cast(DType.F32);
        Tensor d = g.grad(logits.mul(c).sum(), table)[0].cast(DType.F32);
        g.output("d", d);
        g.output("norm", d.mul(d).sum());
        return g.build();
    }

    @Test
    void theTiedGradientAndItsNormAreTheHostsOnTheGpu() {
        for (DType t : new DType[]{DType.F32, DType.BF16}) {
            var rnd = new SplittableRandom(7);
            var table = NDArray.zeros(t, VOCAB, HIDDEN);
            for (long i = 0; i < table.numel(); i++) table.set(i, rnd.nextGaussian() * 0.5);
            var c = NDArray.zeros(DType.F32, TOKENS, VOCAB);
            for (long i = 0; i < c.numel(); i++) c.set(i, rnd.nextGaussian() * 1e-2);
            int[] ids = new int[(int) TOKENS];
            for (int i = 0; i < ids.length; i++) ids[i] = i % 3 == 0 ? 17 : rnd.nextInt((int) VOCAB);   // a repeated token too
            Map<String, NDArray> in = Map.of("table", table, "tokens", NDArray.of(ids, TOKENS), "c", c);
            Graph g = graph(t);
            Map<String, NDArray> host, gpu;
            try (var s = Session.compile(g, CompileOptions.world(1).backend("host"))) { host = s.runToHost(in); }
            try (var s = Session.compile(g, CompileOptions.world(1).backend("cuda"))) {
                assertThat(s.plan().lowered().decisions()).anyMatch(x -> x.contains("computed transposed")).anyMatch(x -> x.contains("computed as scatter_add("))
                        .anyMatch(x -> x.contains(" chunks of "));
                gpu = s.runToHost(in);
            }
            double[] h = host.get("d").toDoubleArray(), d = gpu.get("d").toDoubleArray();
            double largest = 0;
            for (double v : h) largest = Math.max(largest, Math.abs(v));
            double tol = (t == DType.BF16 ? 2e-2 : 1e-4) * largest;
            for (int i = 0; i < h.length; i++) assertThat(d[i]).as("%s d[%d]", t, i).isCloseTo(h[i], offset(tol));
            double hn = host.get("norm").get(0);
            assertThat(gpu.get("norm").get(0)).as("%s norm", t).isCloseTo(hn, offset((t == DType.BF16 ? 2e-2 : 1e-4) * hn));
        }
    }
}
