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
 *
 * <p>{@code AttentionBench cuts [calls, default 200]}: the attention step alone at each cut the kernels have (32, 16 and 8
 * positions a warp, {@code PlanOptions.attentionPositions}) and at the planner's own (printed with the cut it chose), at
 * batch 1 and 8, heads of 64 and 128, caches of 160, 544 (the decoders' benches'), 1024 and 4096 (the position the
 * cache's last): one line a shape. The chain is as long as keeps its caches to about {@value #SWEEP_BYTES} bytes (4 to
 * 64 layers), the same random caches for every cut.
 */
public final class AttentionBench {
    private AttentionBench() {}

    static final int ROWS = 4;
    static final long SWEEP_BYTES = 256L << 20;
    static int LAYERS = 64, KV = 8, D = 64, LEN = 544;

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
        if (args.length > 0 && args[0].equals("cuts")) {
            cuts(args.length > 1 ? Integer.parseInt(args[1]) : 200);
            return;
        }
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
                double median = medianCall(s, in, calls);
                results.add(String.format(Locale.ROOT, "%s: %.2f µs a layer (median call %.1f µs over %d layers)",
                        fused ? "attention step" : "composed (2 products + softmax)", median / LAYERS, median, LAYERS));
                for (DeviceArray a : owned) a.close();
            }
        }
        System.out.printf(Locale.ROOT, "batch %d (%d x %d query rows, d %d, cache %d, position %d), bf16, CUDA graphs, on %s%n",
                batch, b, ROWS, D, LEN, position, device);
        results.forEach(System.out::println);
    }

    /** The median of {@code calls} synchronised calls of {@code s} after 20 more, µs. */
    private static double medianCall(Session s, Map<String, NDArray> in, int calls) {
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
        return t[calls / 2];
    }

    /** Each cut and the planner's, at each shape of the sweep: µs a layer, medians of {@code calls} timed calls. */
    static void cuts(int calls) {
        System.out.println("attention step, bf16, 8 key-value heads of 4 query rows a sequence, CUDA graphs: µs a layer (median call / layers)");
        System.out.println("batch    d  cache layers |     rule (cut) |     32 |     16 |      8");
        for (int batch : new int[]{1, 8})
            for (int d : new int[]{64, 128})
                for (int len : new int[]{160, 544, 1024, 4096}) {
                    D = d;
                    LEN = len;
                    int b = batch * KV;
                    long layerBytes = 2L * b * D * LEN * 2;
                    LAYERS = (int) Math.max(4, Math.min(64, SWEEP_BYTES / layerBytes));
                    var kT = new ArrayList<NDArray>();
                    var v = new ArrayList<NDArray>();
                    for (int l = 0; l < LAYERS; l++) {
                        kT.add(NDArray.random(DType.BF16, 2L * l, b, D, LEN));
                        v.add(NDArray.random(DType.BF16, 2L * l + 1, b, LEN, D));
                    }
                    var in = Map.of("q", NDArray.random(DType.BF16, 99, b, ROWS, D), "position", NDArray.of(DType.I32, new double[]{len - 1}, 1));
                    var line = new StringBuilder(String.format(Locale.ROOT, "%5d %4d %6d %6d |", batch, d, len, LAYERS));
                    NDArray first = null;
                    for (int positions : new int[]{0, 32, 16, 8}) {
                        var options = CompileOptions.world(1).backend("cuda");
                        options = options.planning(options.planning().withAttentionPositions(positions));
                        try (var s = Session.compile(chain(batch, true), options)) {
                            var owned = new ArrayList<DeviceArray>();
                            for (int l = 0; l < LAYERS; l++) {
                                owned.add(s.toDevice(kT.get(l)));
                                owned.add(s.toDevice(v.get(l)));
                                s.bindInPlace("kT" + l, owned.get(2 * l)).bindInPlace("v" + l, owned.get(2 * l + 1));
                            }
                            NDArray y = s.runToHost(in).get("y");
                            if (first == null) first = y;
                            else if (first.mismatch(y, 5e-2, 5e-2) != null) line.append(" (differs from the rule's: ").append(first.mismatch(y, 5e-2, 5e-2)).append(")");
                            double us = medianCall(s, in, calls) / LAYERS;
                            if (positions == 0) {
                                var plan = s.plan();
                                int chosen = plan.steps().stream().map(plan::choice).filter(c -> c.attention() != null).findFirst().orElseThrow().attention().positions();
                                line.append(String.format(Locale.ROOT, " %9.2f (%2d) |", us, chosen));
                            } else {
                                line.append(String.format(Locale.ROOT, " %6.2f |", us));
                            }
                            for (DeviceArray a : owned) a.close();
                        }
                    }
                    System.out.println(line);
                }
    }
}
