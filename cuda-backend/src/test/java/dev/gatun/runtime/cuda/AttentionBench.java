package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.GraphBuilder;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * A decode step's attention as the decoder runs it, through the public API: a chain of {@code layers} attentions (each
 * layer's query the last one's result), each over its own cache (so the caches, 64 layers of them, do not all fit in
 * L2), at the Llama-3.2-1B decode shapes (8 key-value heads a sequence, 4 query heads each, head size 64, bf16, a cache
 * of 544 positions). Two graphs: the {@code attention} step, and the ops it replaces (the scores' product, scale and
 * mask, softmax, the values' product), replayed as CUDA graphs; µs a layer, medians of timed calls (not a test).
 * Arguments: [batch, default 1] [position, default 520] [calls, default 200] [head size, default 64] [key-value heads,
 * default 8] [cache length, default 544].
 *
 * <p>Run on a GPU machine with {@code bundle/run-gpu-tests.sh --main dev.gatun.runtime.cuda.AttentionBench 1}.
 */
public final class AttentionBench {
    private AttentionBench() {}

    static final int LAYERS = 64, ROWS = 4;
    static int KV = 8, D = 64, LEN = 544;

    static Graph chain(int batch, boolean fused) {
        GraphBuilder g = Gatun.graph(fused ? "attention_chain" : "composed_chain");
        int b = batch * KV;
        Tensor pos = g.input("position", DType.I32, 1);
        Tensor x = g.input("q", DType.BF16, b, ROWS, D);
        Tensor mask = fused ? null : g.arange(DType.I32, LEN).gt(pos).where(Double.NEGATIVE_INFINITY, 0).cast(DType.BF16).reshape(1, LEN);
        for (int l = 0; l < LAYERS; l++) {
            Tensor kT = g.input("kT" + l, DType.BF16, b, D, LEN), v = g.input("v" + l, DType.BF16, b, LEN, D);
            if (fused) {
                x = x.attention(kT, v, pos, 1 / Math.sqrt(D));
            } else {
                Tensor scores = x.matmul(kT).mul(1 / Math.sqrt(D)).add(mask);
                Tensor e = scores.sub(scores.max(true, -1)).exp();
                x = e.div(e.sum(true, -1)).matmul(v);
            }
        }
        g.output("y", x);
        return g.build();
    }

    public static void main(String[] args) {
        int batch = args.length > 0 ? Integer.parseInt(args[0]) : 1;
        int position = args.length > 1 ? Integer.parseInt(args[1]) : 520;
        int calls = args.length > 2 ? Integer.parseInt(args[2]) : 200;
        if (args.length > 3) D = Integer.parseInt(args[3]);
        if (args.length > 4) KV = Integer.parseInt(args[4]);
        if (args.length > 5) LEN = Integer.parseInt(args[5]);
        int b = batch * KV;
        var results = new ArrayList<String>();
        NDArray first = null;
        String device = "?";
        for (boolean fused : new boolean[]{false, true, false, true}) {
            try (var s = Session.compile(chain(batch, fused), CompileOptions.world(1).backend("cuda"))) {
                device = s.device();
                var owned = new ArrayList<DeviceArray>();
                for (int l = 0; l < LAYERS; l++) {
                    var kT = s.toDevice(NDArray.random(DType.BF16, 2L * l, b, D, LEN));
                    var v = s.toDevice(NDArray.random(DType.BF16, 2L * l + 1, b, LEN, D));
                    owned.add(kT);
                    owned.add(v);
                    s.bindInPlace("kT" + l, kT).bindInPlace("v" + l, v);
                }
                var in = Map.of("q", NDArray.random(DType.BF16, 99, b, ROWS, D), "position", NDArray.of(DType.I32, new double[]{position}, 1));
                NDArray y = s.runToHost(in).get("y");
                if (first == null) first = y;
                else if (first.mismatch(y, 5e-2, 5e-2) != null) System.out.println("the two graphs differ: " + first.mismatch(y, 5e-2, 5e-2));
                double[] t = new double[calls];
                for (int i = 0; i < 20; i++) s.run(in);
                s.synchronize();
                for (int i = 0; i < calls; i++) {
                    long t0 = System.nanoTime();
                    s.run(in);
                    s.synchronize();
                    t[i] = (System.nanoTime() - t0) / 1e3;
                }
                Arrays.sort(t);
                results.add(String.format(Locale.ROOT, "%s: %.2f µs a layer (median call %.1f µs over %d layers)",
                        fused ? "attention step" : "composed (2 products + softmax)", t[calls / 2] / LAYERS, t[calls / 2], LAYERS));
                for (DeviceArray a : owned) a.close();
            }
        }
        System.out.printf(Locale.ROOT, "batch %d (%d x %d query rows, d %d, cache %d, position %d), bf16, CUDA graphs, on %s%n",
                batch, b, ROWS, D, LEN, position, device);
        results.forEach(System.out::println);
    }
}
