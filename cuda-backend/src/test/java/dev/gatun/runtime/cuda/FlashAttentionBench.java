package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.Profile;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.host.FlashAttentionBackwardHostTest.Case;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.SplittableRandom;

/**
 * One layer's attention of a training step, forward and backward: the gradients of {@code sum(w * flash_attention(q,
 * k, v))} as the gradient rule builds them (one {@code flash_attention} step, one {@code flash_attention_backward}
 * step), profiled step by step on the device ({@link dev.gatun.runtime.Session#profile}); the medians of each op's
 * step over the timed calls, in ms, with the kernels' form, for each dtype. Not a test: the times are what to compare
 * (the backward should stay within a few times the forward in every dtype).
 * Arguments: [calls, default 5] [dtypes, default f32,bf16] [batch 1] [query heads 32] [key-value heads 8] [tokens 2048]
 * [head size 64] [causal 1]: by default the Llama-3.2-1B training step's attention.
 *
 * <p>Run on a GPU machine with {@code bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.FlashAttentionBench}.
 */
public final class FlashAttentionBench {
    private FlashAttentionBench() {}

    public static void main(String[] args) {
        int calls = args.length > 0 ? Integer.parseInt(args[0]) : 5;
        List<DType> types = Arrays.stream((args.length > 1 ? args[1] : "f32,bf16").split(",")).map(DType::parse).toList();
        int b = arg(args, 2, 1), hq = arg(args, 3, 32), hkv = arg(args, 4, 8), t = arg(args, 5, 2048), d = arg(args, 6, 64);
        boolean causal = arg(args, 7, 1) == 1;
        var c = new Case(b, hq, hkv, t, t, d, causal, 0, 0);
        var lines = new ArrayList<String>();
        String device = "?";
        for (DType type : types) {
            var in = FlashAttentionBackwardGpuTest.inputs(type, c, new SplittableRandom(1));
            try (var s = Session.compile(layer(c, type), CompileOptions.world(1).backend("cuda"))) {
                device = s.device();
                s.runToHost(in);   // compiles the kernels, warms up
                double[] forward = new double[calls], backward = new double[calls], total = new double[calls];
                for (int i = 0; i < calls; i++) {
                    Profile p = s.profile(in);
                    total[i] = p.totalMicros();
                    for (var e : p.entries()) {
                        if (e.text().contains("= flash_attention_backward(")) backward[i] += e.micros();
                        else if (e.text().contains("= flash_attention(")) forward[i] += e.micros();
                    }
                }
                lines.add(String.format(Locale.ROOT, "%-4s forward %8.3f ms (%s)   backward %8.3f ms (%s)   backward/forward %5.2f   whole call %8.3f ms",
                        type, median(forward) / 1e3, CudaFlashAttention.form(type, d), median(backward) / 1e3, CudaFlashAttentionBackward.form(type, d),
                        median(backward) / median(forward), median(total) / 1e3));
            }
        }
        System.out.printf(Locale.ROOT, "attention of B %d, %d query heads over %d, T = S = %d, head size %d, %s, on %s; medians of %d profiled calls%n",
                b, hq, hkv, t, d, causal ? "causal" : "not causal", device, calls);
        lines.forEach(System.out::println);
    }

    /** The gradients' graph of {@code c} in {@code type}: the forward and the fused backward, dq, dk and dv its outputs. */
    static Graph layer(Case c, DType type) {
        var g = Gatun.graph("attention_layer");
        var q = g.input("q", type, c.b(), c.hq(), c.t(), c.d());
        var k = g.input("k", type, c.b(), c.hkv(), c.s(), c.d());
        var v = g.input("v", type, c.b(), c.hkv(), c.s(), c.d());
        var w = g.input("w", type, c.b(), c.t(), c.hq(), c.d());
        var y = q.flashAttention(k, v, 1 / Math.sqrt(c.d()), c.causal(), c.window(), c.cap());
        var grads = g.grad(y.mul(w).sum(), q, k, v);
        g.output("dq", grads[0]);
        g.output("dk", grads[1]);
        g.output("dv", grads[2]);
        return g.build();
    }

    private static int arg(String[] args, int i, int otherwise) { return args.length > i ? Integer.parseInt(args[i]) : otherwise; }

    private static double median(double[] x) {
        double[] s = x.clone();
        Arrays.sort(s);
        return s[s.length / 2];
    }
}
