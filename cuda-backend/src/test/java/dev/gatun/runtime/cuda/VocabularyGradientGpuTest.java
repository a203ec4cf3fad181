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
 * squared norm over 20000 rows summed in chunks and folded (f32 and bf16; the host's values within 1e-4 of the largest
 * in f32, cuBLAS summing in its own order); and a cross-entropy of bf16 logits cast to f32, with its gradient.
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

    /**
     * The cross-entropy of bf16 logits cast to f32 (a mixed-precision head) and its gradient: the target picked from the
     * bf16 logits, the max detached, one f32 buffer of the logits' size (the exponentials) between the two kernels.
     */
    @Test
    void theCrossEntropyOfCastLogitsIsTheHostsOnTheGpu() {
        var g = Gatun.graph("ce_head");
        Tensor h = g.input("h", DType.BF16, TOKENS, HIDDEN), w = g.input("w", DType.BF16, VOCAB, HIDDEN);
        Tensor loss = h.matmul(w.t()).cast(DType.F32).crossEntropy(g.input("t", DType.I64, TOKENS));
        g.output("loss", loss);
        g.output("dh", g.grad(loss, h)[0].cast(DType.F32));
        Graph graph = g.build();
        var rnd = new SplittableRandom(8);
        var hs = NDArray.zeros(DType.BF16, TOKENS, HIDDEN);
        for (long i = 0; i < hs.numel(); i++) hs.set(i, rnd.nextGaussian());
        var ws = NDArray.zeros(DType.BF16, VOCAB, HIDDEN);
        for (long i = 0; i < ws.numel(); i++) ws.set(i, rnd.nextGaussian() * 0.3);
        long[] t = new long[(int) TOKENS];
        for (int i = 0; i < t.length; i++) t[i] = rnd.nextInt((int) VOCAB);
        Map<String, NDArray> in = Map.of("h", hs, "w", ws, "t", NDArray.of(t, TOKENS));
        Map<String, NDArray> host, gpu;
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) { host = s.runToHost(in); }
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("cuda"))) { gpu = s.runToHost(in); }
        double l = host.get("loss").get(0);
        assertThat(gpu.get("loss").get(0)).isCloseTo(l, offset(1e-2 * Math.abs(l)));
        double[] hd = host.get("dh").toDoubleArray(), gd = gpu.get("dh").toDoubleArray();
        double largest = 0;
        for (double v : hd) largest = Math.max(largest, Math.abs(v));
        for (int i = 0; i < hd.length; i++) assertThat(gd[i]).as("dh[%d]", i).isCloseTo(hd[i], offset(2e-2 * largest));
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
