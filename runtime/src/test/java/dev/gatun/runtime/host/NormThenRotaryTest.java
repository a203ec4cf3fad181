package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Map;
import java.util.Random;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.DType.F64;
import static dev.gatun.runtime.host.RandomPointwiseGraphs.check;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.data.Offset.offset;

/**
 * A norm over each head followed by a rotation of the head's halves (RoPE) or of other column blocks is one row kernel
 * whose element loop walks one block of columns and computes the normalised head at every block it reads (fusion
 * class 4, {@code RowColumns}). Random shapes (square ones, transposed inputs and tables, norms by a sum, a mean and a
 * layer norm, the normalised head also stored, blocks of a half and a quarter) against the reference interpreter, and
 * RMSNorm + RoPE against plain loops.
 */
class NormThenRotaryTest {

    /** LlamaPrefill's rope: per half, {@code (x1 c1 - x2 s1, x2 c2 + x1 s2)}. */
    static Tensor rope(Tensor x, Tensor cos, Tensor sin, int d) {
        Tensor x1 = x.slice(-1, 0, d / 2), x2 = x.slice(-1, d / 2, d);
        Tensor c1 = cos.slice(-1, 0, d / 2), c2 = cos.slice(-1, d / 2, d), s1 = sin.slice(-1, 0, d / 2), s2 = sin.slice(-1, d / 2, d);
        return x1.mul(c1).sub(x2.mul(s1)).cat(-1, x2.mul(c2).add(x1.mul(s2)));
    }

    static Tensor rmsNorm(Tensor x, Tensor w, double eps) { return x.mul(x.mul(x).mean(true, -1).add(eps).rsqrt()).mul(w); }

    @Test
    void rmsNormThenRopeIsOneKernelMatchingPlainLoops() {
        int b = 2, s = 3, h = 4, d = 8;
        var g = Gatun.graph("rms_rope");
        var x = g.input("x", F32, b, s, h, d);
        g.output("y", rope(rmsNorm(x, g.input("w", F32, d), 1e-6), g.input("cos", F32, s, 1, d), g.input("sin", F32, s, 1, d), d));
        var rnd = new Random(5);
        float[] xs = floats(rnd, b * s * h * d), ws = floats(rnd, d), cs = floats(rnd, s * d), ss = floats(rnd, s * d);
        try (var session = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
            assertThat(session.plan().kernels()).hasSize(1);
            float[] y = session.runToHost(Map.of("x", NDArray.of(xs, b, s, h, d), "w", NDArray.of(ws, d), "cos", NDArray.of(cs, s, 1, d),
                    "sin", NDArray.of(ss, s, 1, d))).get("y").toFloatArray();
            for (int r = 0; r < b * s * h; r++) {
                int pos = r / h % s;
                double ms = 0;
                for (int c = 0; c < d; c++) ms += (double) xs[r * d + c] * xs[r * d + c];
                double scale = 1 / Math.sqrt(ms / d + 1e-6);
                for (int c = 0; c < d; c++) {
                    int o = (c + d / 2) % d;
                    double n = xs[r * d + c] * scale * ws[c], rot = (c < d / 2 ? -1 : 1) * xs[r * d + o] * scale * ws[o];
                    double want = n * cs[pos * d + c] + rot * ss[pos * d + c];
                    assertThat((double) y[r * d + c]).as("y[%d][%d]", r, c).isCloseTo(want, offset(1e-5));
                }
            }
        }
    }

    @Property(tries = 100)
    void randomNormsThenRotationsMatchTheReference(@ForAll @IntRange(min = 1, max = 3) int batch, @ForAll @IntRange(min = 1, max = 4) int heads,
                                                   @ForAll @IntRange(min = 1, max = 3) int halfBlock, @ForAll boolean quarters,
                                                   @ForAll @IntRange(min = 0, max = 2) int norm, @ForAll @IntRange(min = 0, max = 100_000) int seed) {
        var rnd = new Random(seed);
        int blocks = quarters ? 4 : 2, d = blocks * halfBlock;
        int seq = rnd.nextBoolean() ? heads : 1 + rnd.nextInt(3);   // square [seq, heads] too
        var g = Gatun.graph("norm_rotate");
        // the heads as a projection gives them ([b, s, h, d]: an input or a product's result), or transposed from [b, h, s, d]
        Tensor x = switch (rnd.nextInt(3)) {
            case 0 -> g.input("x", F64, batch, seq, heads, d);
            case 1 -> g.input("x", F64, batch, heads, seq, d).transpose(1, 2);
            default -> g.input("x", F64, batch, seq, 5).matmul(g.input("wqk", F64, 5, heads * d)).reshape(batch, seq, heads, d);
        };
        if (rnd.nextBoolean()) x = x.mul(1.5);
        Tensor n = switch (norm) {
            case 0 -> rmsNorm(x, g.input("w", F64, d), 1e-6);
            case 1 -> x.div(x.mul(x).sum(true, -1).add(1).sqrt());
            default -> {
                Tensor centred = x.sub(x.mean(true, -1));
                yield centred.mul(centred.mul(centred).mean(true, -1).add(1e-5).rsqrt()).mul(g.input("w", F64, d)).add(g.input("bias", F64, d));
            }
        };
        if (rnd.nextInt(3) == 0) g.output("normed", n);   // the normalised head stored too: at each block
        boolean cosTransposed = rnd.nextBoolean();
        Tensor cos = !cosTransposed ? g.input("cos", F64, seq, 1, d) : g.input("cosT", F64, d, seq).t().reshape(seq, 1, d);
        Tensor sin = g.input("sin", F64, seq, 1, d);
        boolean headsFirst = rnd.nextBoolean();   // rotated as [b, h, s, d], as the decoder reads Qwen3's normed heads
        if (headsFirst) {
            n = n.transpose(1, 2);
            cos = cos.transpose(0, 1);
            sin = sin.transpose(0, 1);
        }
        g.output("y", quarters ? rotateBlocks(n, cos, sin, d, blocks) : rope(n, cos, sin, d));
        var graph = g.build();
        try (var session = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            // a transposed table is copied first (its copy is made after the norm's kernel, which the rotation then cannot join)
            if (halfBlock > 1 && !cosTransposed) assertThat(session.plan().kernels()).as("%s", session.plan()).hasSize(1);
            if (halfBlock > 1 && !cosTransposed) assertThat(session.plan().toString()).contains("element loop narrowed");
        }
        check(graph, seed);
    }

    /**
     * Half types: the fold of each element's two columns is held in float32 (as the row's accumulator is), so the
     * result is the reference's within bf16's and f16's rounding, with f32 intermediates and rounding each op alike.
     */
    @Test
    void halfTypesMatchTheReferenceWithinTheirRounding() {
        for (var t : java.util.List.of(dev.gatun.ir.DType.BF16, dev.gatun.ir.DType.F16))
            for (boolean roundEachOp : new boolean[]{false, true}) {
                var g = Gatun.graph("rms_rope_" + t.shortName());
                int d = 16;
                var x = g.input("x", t, 2, 3, 4, d);
                g.output("y", rope(rmsNorm(x, g.input("w", t, d), 1e-6), g.input("cos", t, 3, 1, d), g.input("sin", t, 3, 1, d), d));
                var graph = g.build();
                var rnd = new Random(11);
                var in = new java.util.HashMap<String, NDArray>();
                graph.inputs().forEach((name, node) -> {
                    long[] shape = node.type().shape().dims().stream().mapToLong(dim -> dim.size()).toArray();
                    double[] v = new double[(int) java.util.Arrays.stream(shape).reduce(1, (a, b) -> a * b)];
                    for (int i = 0; i < v.length; i++) v[i] = rnd.nextDouble() * 2 - 1;
                    in.put(name, NDArray.of(t, v, shape));
                });
                var want = dev.gatun.runtime.reference.ReferenceInterpreter.evaluate(graph, java.util.List.of(in)).getFirst().get("y");
                var options = CompileOptions.world(1).backend("host");
                try (var s = Session.compile(graph, roundEachOp ? options.roundEachOp() : options)) {
                    assertThat(s.plan().kernels()).hasSize(1);
                    assertThat(want.mismatch(s.runToHost(in).get("y"), 2e-2, 2e-2)).as("%s round each op %s", t, roundEachOp).isNull();
                }
            }
    }

    /**
     * Where the row's reductions cannot be folded a block at a time, the rotation is its own kernel, with a note: a
     * softmax's max, and a mean over three blocks (its division by three would round). A sum over three blocks is taken.
     */
    @Test
    void rowsThatCannotBeFoldedByBlocksAreLeftApartWithANote() {
        for (int variant = 0; variant < 3; variant++) {
            var g = Gatun.graph("refused_" + variant);
            var x = g.input("x", F64, 2, 3, 4, 6);
            var cos = g.input("cos", F64, 3, 1, 6);
            var sin = g.input("sin", F64, 3, 1, 6);
            Tensor y = switch (variant) {
                case 0 -> rope(x.softmax(-1), cos, sin, 6);
                case 1 -> rotateBlocks(rmsNorm(x, g.input("w", F64, 6), 1e-6), cos, sin, 6, 3);
                default -> rotateBlocks(x.div(x.mul(x).sum(true, -1).add(1).sqrt()), cos, sin, 6, 3);
            };
            g.output("y", y);
            var graph = g.build();
            try (var session = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
                if (variant < 2) {
                    assertThat(session.plan().kernels()).hasSize(2);
                    assertThat(session.plan().toString()).contains("kept out of the row kernel").contains(variant == 0 ? "its max" : "divide by 3 inexactly");
                } else assertThat(session.plan().kernels()).hasSize(1);
            }
            check(graph, variant);
        }
    }

    /** Block {@code k} of the result: {@code n_k cos_k + n_{k+1} sin_k} (blocks taken cyclically). */
    private static Tensor rotateBlocks(Tensor n, Tensor cos, Tensor sin, int d, int blocks) {
        int w = d / blocks;
        var parts = new ArrayList<Tensor>();
        for (int k = 0; k < blocks; k++) {
            int o = (k + 1) % blocks;
            parts.add(n.slice(-1, k * w, (k + 1) * w).mul(cos.slice(-1, k * w, (k + 1) * w)).add(n.slice(-1, o * w, (o + 1) * w).mul(sin.slice(-1, k * w, (k + 1) * w))));
        }
        return parts.getFirst().cat(-1, parts.subList(1, blocks).toArray(Tensor[]::new));
    }

    private static float[] floats(Random rnd, int n) {
        float[] v = new float[n];
        for (int i = 0; i < n; i++) v[i] = rnd.nextFloat() * 2 - 1;
        return v;
    }
}
