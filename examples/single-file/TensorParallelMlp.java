// A tensor-parallel MLP block on 2 ranks (Megatron style): y = gelu(x @ W1) @ W2, with W1 split by
// columns and W2 split by rows. Every rank holds x whole and its own shard of the weights: W1[:, shard]
// and W2[shard, :]. The column-parallel matmul and gelu need no communication; the row-parallel matmul
// gives each rank a partial sum of y, and one all-reduce adds them. Checked against a single-rank
// session of the full MLP and against plain Java loops.
//
//   java --enable-preview --enable-native-access=ALL-UNNAMED -cp "$(./gatun-classpath)" examples/single-file/TensorParallelMlp.java [world]
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;

static final int B = 8, D = 16, H = 64;   // tokens, model width, hidden width (H splits across ranks)

/** The block as one rank sees it: hidden width h (H / world on each of world ranks), all-reduce when sharded. */
static Graph mlp(String name, int h, boolean sharded) {
    var g = Gatun.graph(name);
    var x = g.input("x", F32, B, D);
    var w1 = g.input("w1", F32, D, h);
    var w2 = g.input("w2", F32, h, D);
    var y = x.matmul(w1).gelu().matmul(w2);          // column-parallel matmul, gelu, row-parallel matmul
    g.output("y", sharded ? y.allReduce(SUM) : y);    // the partial sums of the ranks add up to y
    return g.build();
}

/** Columns [c0, c1) of a row-major [rows, cols] matrix. */
static NDArray columns(NDArray m, int c0, int c1) {
    long rows = m.shape()[0];
    var out = NDArray.zeros(m.dtype(), rows, c1 - c0);
    for (int i = 0; i < rows; i++)
        for (int j = c0; j < c1; j++) out.set(i * (long) (c1 - c0) + (j - c0), m.get(i, j));
    return out;
}

/** Rows [r0, r1) of a row-major [rows, cols] matrix. */
static NDArray rows(NDArray m, int r0, int r1) {
    long cols = m.shape()[1];
    var out = NDArray.zeros(m.dtype(), r1 - r0, cols);
    for (int i = r0; i < r1; i++)
        for (int j = 0; j < cols; j++) out.set((i - r0) * cols + j, m.get(i, j));
    return out;
}

/** erf by Abramowitz and Stegun 7.1.26 (error below 1.5e-7), for the exact GELU. */
static double erf(double z) {
    double t = 1 / (1 + 0.3275911 * Math.abs(z));
    double y = 1 - t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))) * Math.exp(-z * z);
    return z >= 0 ? y : -y;
}

/** The MLP in plain Java, in double precision. */
static double[] plainMlp(NDArray x, NDArray w1, NDArray w2) {
    var h = new double[B * H];
    for (int i = 0; i < B; i++)
        for (int j = 0; j < H; j++) {
            double acc = 0;
            for (int k = 0; k < D; k++) acc += x.get(i, k) * w1.get(k, j);
            h[i * H + j] = 0.5 * acc * (1 + erf(acc / Math.sqrt(2)));
        }
    var y = new double[B * D];
    for (int i = 0; i < B; i++)
        for (int j = 0; j < D; j++) {
            double acc = 0;
            for (int k = 0; k < H; k++) acc += h[i * H + k] * w2.get(k, j);
            y[i * D + j] = acc;
        }
    return y;
}

void main(String[] args) {
    int world = args.length > 0 ? Integer.parseInt(args[0]) : 2;
    if (H % world != 0) throw new IllegalArgumentException("the hidden width " + H + " does not split over " + world + " ranks");
    int shard = H / world;

    var x = NDArray.random(F32, 1, B, D);
    var w1 = NDArray.random(F32, 2, D, H);
    var w2 = NDArray.random(F32, 3, H, D);

    // every rank: x whole, its columns of W1 and its rows of W2
    var inputs = new ArrayList<Map<String, NDArray>>();
    for (int r = 0; r < world; r++)
        inputs.add(Map.of("x", x, "w1", columns(w1, r * shard, (r + 1) * shard), "w2", rows(w2, r * shard, (r + 1) * shard)));

    List<Map<String, NDArray>> parallel;
    try (var s = Session.compile(mlp("tp_mlp", shard, true), CompileOptions.world(world))) {
        IO.println(s.graph());
        IO.println("");
        IO.println(s.explain());
        IO.println("");
        IO.println(s.plan());
        IO.println("");
        parallel = s.runToHost(inputs);
        IO.println("backend " + s.backendName() + ", world " + world);
    }

    // the same block on one rank with the whole weights
    NDArray single;
    try (var s = Session.compile(mlp("mlp", H, false), CompileOptions.world(1))) {
        single = s.runToHost(Map.of("x", x, "w1", w1, "w2", w2)).get("y");
    }
    double[] plain = plainMlp(x, w1, w2);

    boolean ok = true;
    for (int r = 0; r < world; r++) {
        NDArray y = parallel.get(r).get("y");
        IO.println("rank " + r + ": y = " + y);
        String why = y.mismatch(single, 1e-4, 1e-5);
        if (why != null) { IO.println("rank " + r + " differs from the single-rank session: " + why); ok = false; }
        for (int i = 0; i < plain.length; i++)
            if (Math.abs(y.get(i) - plain[i]) > 1e-4 + 1e-4 * Math.abs(plain[i])) {
                IO.println("rank " + r + " differs from plain Java at element " + i + ": " + y.get(i) + " vs " + plain[i]);
                ok = false;
                break;
            }
    }
    IO.println("single rank: y = " + single);
    if (!ok) {
        IO.println("WRONG: the tensor-parallel MLP does not match the single-rank computation");
        System.exit(1);
    }
    IO.println("verified: tensor-parallel MLP on " + world + " ranks (each with 1/" + world + " of W1 and W2) matches the single-rank MLP and plain Java ("
            + B + "x" + D + " -> " + H + " -> " + D + ")");
}
