package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Row kernels narrowed to a block of their columns (fusion class 4: an RMSNorm or a layer norm, then a rotation of the
 * same heads' halves or quarters, the normalised heads also stored) on one GPU against the reference: every dtype, rows
 * held in registers and a row looped over, eagerly and replayed. Skipped where there is no GPU.
 */
@RequiresGpu
class NormThenRotaryGpuTest {

    static Tensor rotate(Tensor n, Tensor cos, Tensor sin, int d, int blocks) {
        int w = d / blocks;
        var parts = new ArrayList<Tensor>();
        for (int k = 0; k < blocks; k++) {
            int o = (k + blocks / 2) % blocks;   // halves: RoPE's (x1 c1 - x2 s1, x2 c2 + x1 s2); quarters: block k + 2
            Tensor mine = n.slice(-1, k * w, (k + 1) * w), other = n.slice(-1, o * w, (o + 1) * w);
            Tensor c = cos.slice(-1, k * w, (k + 1) * w), s = sin.slice(-1, k * w, (k + 1) * w);
            parts.add(k < blocks / 2 ? mine.mul(c).sub(other.mul(s)) : mine.mul(c).add(other.mul(s)));
        }
        return parts.getFirst().cat(-1, parts.subList(1, blocks).toArray(Tensor[]::new));
    }

    static Graph graph(DType t, long b, long s, long h, int d, int blocks, boolean layerNorm, boolean stored) {
        var g = dev.gatun.dsl.Gatun.graph("norm_rotate_" + t.shortName() + "_" + d + "_" + blocks);
        var x = g.input("x", t, b, s, h, d);
        var w = g.input("w", t, d);
        Tensor n;
        if (layerNorm) {
            Tensor centred = x.sub(x.mean(true, -1));
            n = centred.mul(centred.mul(centred).mean(true, -1).add(1e-5).rsqrt()).mul(w);
        } else n = x.mul(x.mul(x).mean(true, -1).add(1e-6).rsqrt()).mul(w);
        if (stored) g.output("normed", n);
        g.output("y", rotate(n, g.input("cos", t, s, 1, d), g.input("sin", t, s, 1, d), d, blocks));
        return g.build();
    }

    @Test
    void normsThenRotationsAreOneKernelMatchingTheReference() {
        for (DType t : List.of(DType.F32, DType.BF16, DType.F16, DType.F64))
            for (boolean layerNorm : new boolean[]{false, true}) {
                check(graph(t, 2, 33, 4, 64, 2, layerNorm, false));
                check(graph(t, 1, 1, 16, 128, 2, layerNorm, true));
                check(graph(t, 3, 5, 8, 96, 4, layerNorm, t == DType.F32));
            }
        check(graph(DType.F32, 1, 128, 1, 131072, 2, false, true));   // a row too long for registers: looped over
    }

    private static void check(Graph g) {
        try (var s = Session.compile(g, CompileOptions.world(1).backend("cuda"))) {
            assertThat(s.plan().kernels()).as("%s", s.plan()).hasSize(1);
        }
        CatGpuTest.check(g);
    }
}
