package dev.gatun.runtime.bench;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * How the host backend scales with the size of a graph, through the public API: a ladder of two 8x8 f32 streams
 * where each layer is {@code a = t0 * 0.5 + t1; b = t1 * 0.5 + a; t0 = allReduce(a, avg); t1 = b}, so about one
 * op in five is an all-reduce (the two pointwise pairs of a layer fuse into one kernel). World 2.
 *
 * <pre>HostScaleBench [layers ...]   (default 1500 3000 6000 12000 24000: 7.5k to 120k ops)</pre>
 *
 * Prints one markdown row per size: graph nodes, all-reduces, plan steps and kernels, the time to build the graph,
 * to compile it (lowering and planning), the first call and the median of five more.
 */
public final class HostScaleBench {
    private HostScaleBench() {}

    static final int WORLD = 2;
    static final long[] SHAPE = {8, 8};

    /** The ladder of {@code layers} layers; outputs the last two tensors. */
    public static Graph ladder(int layers) {
        var g = Gatun.graph("ladder_" + layers);
        Tensor t0 = g.input("x0", DType.F32, 8, 8), t1 = g.input("x1", DType.F32, 8, 8);
        for (int l = 0; l < layers; l++) {
            Tensor a = t0.mul(0.5).add(t1);
            Tensor b = t1.mul(0.5).add(a);
            t0 = a.allReduce(ReduceOp.AVG);
            t1 = b;
        }
        g.output("y0", t0);
        g.output("y1", t1);
        return g.build();
    }

    /** Inputs of every rank: x0 and x1 from fixed seeds. */
    public static List<Map<String, NDArray>> inputs() {
        var in = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < WORLD; r++) in.add(Map.of("x0", NDArray.random(DType.F32, 10 + r, SHAPE), "x1", NDArray.random(DType.F32, 20 + r, SHAPE)));
        return in;
    }

    /** The same ladder in float64 with plain loops: {@code out[rank][0 or 1][element]}. */
    public static double[][][] reference(int layers, List<Map<String, NDArray>> in) {
        int n = (int) (SHAPE[0] * SHAPE[1]);
        double[][] t0 = new double[WORLD][n], t1 = new double[WORLD][n];
        for (int r = 0; r < WORLD; r++)
            for (int i = 0; i < n; i++) { t0[r][i] = in.get(r).get("x0").get(i); t1[r][i] = in.get(r).get("x1").get(i); }
        for (int l = 0; l < layers; l++) {
            double[][] a = new double[WORLD][n];
            for (int r = 0; r < WORLD; r++)
                for (int i = 0; i < n; i++) {
                    a[r][i] = t0[r][i] * 0.5 + t1[r][i];
                    t1[r][i] = t1[r][i] * 0.5 + a[r][i];
                }
            for (int i = 0; i < n; i++) {
                double avg = 0;
                for (int r = 0; r < WORLD; r++) avg += a[r][i];
                for (int r = 0; r < WORLD; r++) t0[r][i] = avg / WORLD;
            }
        }
        double[][][] out = new double[WORLD][][];
        for (int r = 0; r < WORLD; r++) out[r] = new double[][]{t0[r], t1[r]};
        return out;
    }

    public static void main(String[] args) {
        int[] sizes = args.length == 0 ? new int[]{1500, 3000, 6000, 12000, 24000} : Arrays.stream(args).mapToInt(Integer::parseInt).toArray();
        var in = inputs();
        System.out.println("| layers | graph nodes | all-reduces | plan steps | kernels | build ms | compile ms | first call ms | median call ms (5) |");
        System.out.println("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
        for (int layers : sizes) {
            long t0 = System.nanoTime();
            Graph g = ladder(layers);
            long t1 = System.nanoTime();
            try (var s = Session.compile(g, CompileOptions.world(WORLD).backend("host"))) {
                long t2 = System.nanoTime();
                s.runToHost(in);
                long t3 = System.nanoTime();
                double[] calls = new double[5];
                for (int i = 0; i < calls.length; i++) {
                    long c0 = System.nanoTime();
                    s.runToHost(in);
                    calls[i] = (System.nanoTime() - c0) / 1e6;
                }
                Arrays.sort(calls);
                System.out.printf("| %d | %d | %d | %d | %d | %.0f | %.0f | %.0f | %.0f |%n", layers, g.nodes().size(), layers,
                        s.plan().steps().size(), s.plan().kernels().size(), (t1 - t0) / 1e6, (t2 - t1) / 1e6, (t3 - t2) / 1e6, calls[calls.length / 2]);
            }
        }
    }
}
