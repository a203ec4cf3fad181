package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.graph.ReduceOp;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.function.BiFunction;

import static dev.gatun.ir.DType.F64;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.data.Offset.offset;

/**
 * Gradients through collectives with simulated ranks (world 2 and 4) on the host backend. The distributed loss is the
 * sum over ranks of each rank's {@code loss_r = sum(c_r * f(y_r))}, y_r the collective's result on rank r; each rank's
 * gradient of its x is checked against the same math done on one rank in plain loops: the collective written out over
 * every rank's x, then the chain rule by hand.
 */
class GradientCollectivesTest {
    static final int ROWS = 2, COLS = 3;

    /** Per rank: x and c, random, with x's and c's shapes as given. */
    record Data(double[][] x, double[][] c) {
        static Data random(int world, int xn, int cn, long seed) {
            var rnd = new Random(seed);
            double[][] x = new double[world][xn], c = new double[world][cn];
            for (int r = 0; r < world; r++) {
                for (int i = 0; i < xn; i++) x[r][i] = rnd.nextGaussian();
                for (int i = 0; i < cn; i++) c[r][i] = 0.5 + rnd.nextDouble();
            }
            return new Data(x, c);
        }
    }

    /** Runs {@code body(x, c) -> loss_r} on every rank and returns each rank's gradient of x. */
    static double[][] grads(int world, long[] xs, long[] cs, Data d, BiFunction<Tensor, Tensor, Tensor> body) {
        var g = Gatun.graph("dist").world(world);
        var x = g.input("x", F64, xs[0], xs[1]);
        var c = g.input("c", F64, cs[0], cs[1]);
        g.output("dx", g.grad(body.apply(x, c), x)[0]);
        var in = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) in.add(Map.of("x", NDArray.of(d.x()[r], xs), "c", NDArray.of(d.c()[r], cs)));
        try (var s = Session.compile(g.build(), CompileOptions.world(world).backend("host"))) {
            List<Map<String, NDArray>> out = s.runToHost(in);
            double[][] dx = new double[world][];
            for (int r = 0; r < world; r++) dx[r] = out.get(r).get("dx").toDoubleArray();
            return dx;
        }
    }

    static void assertClose(double[][] got, double[][] want) {
        for (int r = 0; r < want.length; r++)
            for (int i = 0; i < want[r].length; i++)
                assertThat(got[r][i]).as("rank %d element %d", r, i).isCloseTo(want[r][i], offset(1e-12 * (1 + Math.abs(want[r][i]))));
    }

    /** The collective's reduction of the ranks' values of one element. */
    static double reduce(ReduceOp op, double[] values) {
        double acc = switch (op) { case SUM, AVG -> 0; case MAX -> Double.NEGATIVE_INFINITY; case MIN -> Double.POSITIVE_INFINITY; };
        for (double v : values) acc = switch (op) { case SUM, AVG -> acc + v; case MAX -> Math.max(acc, v); case MIN -> Math.min(acc, v); };
        return op == ReduceOp.AVG ? acc / values.length : acc;
    }

    /** d Y / d x_s for one element: 1 (sum), 1/n (avg), 1 where x_s is the max or min (random values: no ties), else 0. */
    static double partial(ReduceOp op, double xs, double y, int world) {
        return switch (op) { case SUM -> 1; case AVG -> 1.0 / world; case MAX, MIN -> xs == y ? 1 : 0; };
    }

    /**
     * loss_r = sum(c_r * sin(Y)), Y the reduction over ranks of x: d/dx_s = sum_r c_r * cos(Y) * dY/dx_s (sum: 1, avg:
     * 1/n, max and min: 1 on the rank holding the result).
     */
    @ParameterizedTest
    @ValueSource(ints = {2, 4})
    void allReduce(int world) {
        for (ReduceOp op : ReduceOp.values()) {
            int n = ROWS * COLS;
            var d = Data.random(world, n, n, world * 10L + op.ordinal());
            double[][] want = new double[world][n];
            for (int i = 0; i < n; i++) {
                double c = 0;
                double[] xs = new double[world];
                for (int s = 0; s < world; s++) xs[s] = d.x()[s][i];
                double y = reduce(op, xs);
                for (int r = 0; r < world; r++) c += d.c()[r][i];
                for (int s = 0; s < world; s++) want[s][i] = c * Math.cos(y) * partial(op, xs[s], y, world);
            }
            long[] shape = {ROWS, COLS};
            assertClose(grads(world, shape, shape, d, (x, c) -> c.mul(x.allReduce(op).sin()).sum()), want);
        }
    }

    /** Y = cat(x_0..x_{n-1}) [n*ROWS, COLS]; loss_r = sum(c_r * Y^2): d/dx_s[i] = sum_r c_r[s*ROWS + i] * 2 x_s[i]. */
    @ParameterizedTest
    @ValueSource(ints = {2, 4})
    void allGather(int world) {
        int n = ROWS * COLS;
        var d = Data.random(world, n, world * n, world);
        double[][] want = new double[world][n];
        for (int s = 0; s < world; s++)
            for (int i = 0; i < n; i++) {
                double c = 0;
                for (int r = 0; r < world; r++) c += d.c()[r][s * n + i];
                want[s][i] = c * 2 * d.x()[s][i];
            }
        assertClose(grads(world, new long[]{ROWS, COLS}, new long[]{(long) world * ROWS, COLS}, d, (x, c) -> c.mul(x.allGather().pow(2)).sum()), want);
    }

    /**
     * y_r = all_to_all(x)_r: part s of y_r is part r of x_s (a part ROWS rows of [n*ROWS, COLS]); loss_r = sum(c_r *
     * y_r^2): d/dx_s[part r, j] = c_r[part s, j] * 2 x_s[part r, j].
     */
    @ParameterizedTest
    @ValueSource(ints = {2, 4})
    void allToAll(int world) {
        int n = ROWS * COLS;
        var d = Data.random(world, world * n, world * n, 7L * world);
        double[][] want = new double[world][world * n];
        for (int s = 0; s < world; s++)
            for (int r = 0; r < world; r++)
                for (int j = 0; j < n; j++) want[s][r * n + j] = d.c()[r][s * n + j] * 2 * d.x()[s][r * n + j];
        long[] shape = {(long) world * ROWS, COLS};
        assertClose(grads(world, shape, shape, d, (x, c) -> c.mul(x.allToAll().pow(2)).sum()), want);
    }

    /**
     * Y = the reduction over ranks of x [n*ROWS, COLS]; rank r keeps rows r*ROWS.. of it; loss_r = sum(c_r * y_r^3):
     * d/dx_s[k] = c_{k / ROWS}[k % ROWS] * 3 y^2 * dY/dx_s.
     */
    @ParameterizedTest
    @ValueSource(ints = {2, 4})
    void reduceScatter(int world) {
        for (ReduceOp op : ReduceOp.values()) {
            int n = ROWS * COLS, big = world * n;
            var d = Data.random(world, big, n, world * 7L + op.ordinal());
            double[][] want = new double[world][big];
            for (int k = 0; k < big; k++) {
                double[] xs = new double[world];
                for (int s = 0; s < world; s++) xs[s] = d.x()[s][k];
                double y = reduce(op, xs), c = d.c()[k / n][k % n];
                for (int s = 0; s < world; s++) want[s][k] = c * 3 * y * y * partial(op, xs[s], y, world);
            }
            assertClose(grads(world, new long[]{(long) world * ROWS, COLS}, new long[]{ROWS, COLS}, d,
                    (x, c) -> c.mul(x.reduceScatter(op).pow(3)).sum()), want);
        }
    }

    /**
     * Tensor-parallel MLP on world 2 and 4: each rank holds a column block of W1 and the matching row block of W2;
     * y = all_reduce(tanh(x W1_r) W2_r), loss_r = sum(c * y) with c the same on every rank. The gradient of W1_r
     * by hand: the world sum of c (every rank's loss reads y), through W2_r and tanh.
     */
    @ParameterizedTest
    @ValueSource(ints = {2, 4})
    void tensorParallelMlp(int world) {
        int b = 2, in = 3, hid = 2, out = 2;
        var rnd = new Random(world);
        double[] x = gauss(rnd, b * in), c = gauss(rnd, b * out);
        double[][] w1 = new double[world][], w2 = new double[world][];
        for (int r = 0; r < world; r++) {
            w1[r] = gauss(rnd, in * hid);
            w2[r] = gauss(rnd, hid * out);
        }
        var g = Gatun.graph("tp").world(world);
        var xt = g.input("x", F64, b, in);
        var w1t = g.input("w1", F64, in, hid);
        var w2t = g.input("w2", F64, hid, out);
        var ct = g.input("c", F64, b, out);
        var loss = xt.matmul(w1t).tanh().matmul(w2t).allReduce(ReduceOp.SUM).mul(ct).sum();
        var d = g.grad(loss, w1t, w2t);
        g.output("d1", d[0]).output("d2", d[1]);
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++)
            inputs.add(Map.of("x", NDArray.of(x, b, in), "w1", NDArray.of(w1[r], in, hid), "w2", NDArray.of(w2[r], hid, out), "c", NDArray.of(c, b, out)));
        List<Map<String, NDArray>> res;
        try (var s = Session.compile(g.build(), CompileOptions.world(world).backend("host"))) {
            res = s.runToHost(inputs);
        }
        for (int r = 0; r < world; r++) {
            // dL/dy = world * c (each rank's loss reads the same y); dL/dH = dy W2^T * (1 - tanh^2); dW1 = x^T dH; dW2 = tanh^T dy
            double[] h = new double[b * hid], dh = new double[b * hid], d1 = new double[in * hid], d2 = new double[hid * out];
            for (int i = 0; i < b; i++)
                for (int j = 0; j < hid; j++) {
                    double s = 0;
                    for (int k = 0; k < in; k++) s += x[i * in + k] * w1[r][k * hid + j];
                    h[i * hid + j] = Math.tanh(s);
                    double up = 0;
                    for (int o = 0; o < out; o++) up += world * c[i * out + o] * w2[r][j * out + o];
                    dh[i * hid + j] = up * (1 - h[i * hid + j] * h[i * hid + j]);
                }
            for (int k = 0; k < in; k++) for (int j = 0; j < hid; j++) for (int i = 0; i < b; i++) d1[k * hid + j] += x[i * in + k] * dh[i * hid + j];
            for (int j = 0; j < hid; j++) for (int o = 0; o < out; o++) for (int i = 0; i < b; i++) d2[j * out + o] += h[i * hid + j] * world * c[i * out + o];
            assertClose(new double[][]{res.get(r).get("d1").toDoubleArray()}, new double[][]{d1});
            assertClose(new double[][]{res.get(r).get("d2").toDoubleArray()}, new double[][]{d2});
        }
    }

    /**
     * A 2 x 2 mesh ("dp" x "tp"): all_gather along tp, then all_reduce(avg) along dp. Rank r = 2 dp + tp; y_r is the
     * dp-average of the tp-gathered x; loss_r = sum(c_r * y_r^2), so d/dx_s[i] = sum over the ranks r that read x_s's
     * block (same tp slice, either dp) of c_r[block of s] * 2 y_r / 2.
     */
    @org.junit.jupiter.api.Test
    void meshAxes() {
        int world = 4, n = ROWS * COLS;
        var d = Data.random(world, n, 2 * n, 99);
        var g = Gatun.graph("mesh").mesh("dp", 2, "tp", 2);
        var x = g.input("x", F64, ROWS, COLS);
        var c = g.input("c", F64, 2 * ROWS, COLS);
        g.output("dx", g.grad(c.mul(x.allGather("tp").allReduce(ReduceOp.AVG, "dp").pow(2)).sum(), x)[0]);
        var in = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) in.add(Map.of("x", NDArray.of(d.x()[r], ROWS, COLS), "c", NDArray.of(d.c()[r], 2 * ROWS, COLS)));
        List<Map<String, NDArray>> out;
        try (var s = Session.compile(g.build(), CompileOptions.world(world).backend("host"))) {
            out = s.runToHost(in);
        }
        // y for a dp-slice index: block b of y holds avg over dp of x[2 dp + b]; the same on both tp ranks of a dp row pair
        for (int s = 0; s < world; s++) {
            int block = s % 2;
            for (int i = 0; i < n; i++) {
                double y = (d.x()[block][i] + d.x()[2 + block][i]) / 2, want = 0;
                for (int r = 0; r < world; r++) want += d.c()[r][block * n + i] * 2 * y / 2;   // every rank reads block "block" of its y
                assertThat(out.get(s).get("dx").toDoubleArray()[i]).as("rank %d element %d", s, i).isCloseTo(want, offset(1e-12));
            }
        }
    }

    /** Ties of all_reduce(max) share the gradient evenly: x_0 = [1, 3], x_1 = [1, 2], loss_r = sum(y) on both ranks. */
    @org.junit.jupiter.api.Test
    void maxTiesSplitAcrossRanks() {
        var g = Gatun.graph("ties").world(2);
        var x = g.input("x", F64, 2);
        g.output("dx", g.grad(x.allReduce(ReduceOp.MAX).sum(), x)[0]);
        try (var s = Session.compile(g.build(), CompileOptions.world(2).backend("host"))) {
            var out = s.runToHost(List.of(Map.of("x", NDArray.of(new double[]{1, 3}, 2)), Map.of("x", NDArray.of(new double[]{1, 2}, 2))));
            assertThat(out.get(0).get("dx").toDoubleArray()).containsExactly(1, 2);   // the world's gradient is 2 per element
            assertThat(out.get(1).get("dx").toDoubleArray()).containsExactly(1, 0);
        }
    }

    /**
     * Data parallelism: each of 2 or 4 ranks holds a slice of the batch and the same weights, takes the gradient of its
     * own mean squared error of tanh(x w) and averages the gradients with all_reduce(avg); that is the full batch's
     * gradient on one rank, worked out in plain loops.
     */
    @ParameterizedTest
    @ValueSource(ints = {2, 4})
    void dataParallelGradientsAreTheFullBatchs(int world) {
        int batch = 8, in = 3, out = 2, per = batch / world;
        var rnd = new Random(5 + world);
        double[] x = gauss(rnd, batch * in), y = gauss(rnd, batch * out), w = gauss(rnd, in * out);
        var g = Gatun.graph("dp").world(world);
        var xs = g.input("x", F64, per, in);
        var ys = g.input("y", F64, per, out);
        var ws = g.input("w", F64, in, out);
        var err = xs.matmul(ws).tanh().sub(ys);
        g.output("dw", g.grad(err.mul(err).mean(), ws)[0].allReduce(ReduceOp.AVG));
        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++)
            inputs.add(Map.of("x", NDArray.of(java.util.Arrays.copyOfRange(x, r * per * in, (r + 1) * per * in), per, in),
                    "y", NDArray.of(java.util.Arrays.copyOfRange(y, r * per * out, (r + 1) * per * out), per, out), "w", NDArray.of(w, in, out)));
        double[] want = new double[in * out];   // d/dw of mean over the whole batch of (tanh(x w) - y)^2
        for (int b = 0; b < batch; b++)
            for (int o = 0; o < out; o++) {
                double s = 0;
                for (int k = 0; k < in; k++) s += x[b * in + k] * w[k * out + o];
                double t = Math.tanh(s), up = 2 * (t - y[b * out + o]) * (1 - t * t) / (batch * out);
                for (int k = 0; k < in; k++) want[k * out + o] += x[b * in + k] * up;
            }
        try (var s = Session.compile(g.build(), CompileOptions.world(world).backend("host"))) {
            var res = s.runToHost(inputs);
            for (int r = 0; r < world; r++) assertClose(new double[][]{res.get(r).get("dw").toDoubleArray()}, new double[][]{want});
        }
    }

    /** y_r = x_root for every r; loss_r = sum(c_r * sin(y)): d/dx_s = [s == root] sum_r c_r cos(x_root), zeros elsewhere. */
    @ParameterizedTest
    @ValueSource(ints = {2, 4})
    void broadcast(int world) {
        int n = ROWS * COLS;
        for (int root : new int[]{0, world - 1}) {
            var d = Data.random(world, n, n, world * 3L + root);
            double[][] want = new double[world][n];
            for (int i = 0; i < n; i++) {
                double c = 0;
                for (int r = 0; r < world; r++) c += d.c()[r][i];
                want[root][i] = c * Math.cos(d.x()[root][i]);
            }
            long[] shape = {ROWS, COLS};
            assertClose(grads(world, shape, shape, d, (x, c) -> c.mul(x.broadcast(root).sin()).sum()), want);
        }
    }

    /** A broadcast along the tp axis of a 2 x 2 mesh from group rank 1: each tp slice's rank 1 gets its slice's sum. */
    @org.junit.jupiter.api.Test
    void broadcastAlongAMeshAxis() {
        var g = Gatun.graph("mesh").mesh("dp", 2, "tp", 2);
        var x = g.input("x", F64, 3);
        var c = g.input("c", F64, 3);
        g.output("dx", g.grad(c.mul(x.broadcast(1, "tp").mul(x.broadcast(1, "tp"))).sum(), x)[0]);
        var d = Data.random(4, 3, 3, 11);
        var in = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < 4; r++) in.add(Map.of("x", NDArray.of(d.x()[r], 3), "c", NDArray.of(d.c()[r], 3)));
        try (var s = Session.compile(g.build(), CompileOptions.world(4).backend("host"))) {
            var out = s.runToHost(in);
            for (int r = 0; r < 4; r++) {
                int slice = r / 2, root = slice * 2 + 1;   // tp slices {0, 1} and {2, 3}; group rank 1 is rank 1 or 3
                for (int i = 0; i < 3; i++) {
                    double want = r != root ? 0 : (d.c()[slice * 2][i] + d.c()[slice * 2 + 1][i]) * 2 * d.x()[root][i];
                    assertThat(out.get(r).get("dx").toDoubleArray()[i]).as("rank %d element %d", r, i).isCloseTo(want, offset(1e-12));
                }
            }
        }
    }

    static double[] gauss(Random rnd, int n) {
        double[] v = new double[n];
        for (int i = 0; i < n; i++) v[i] = rnd.nextGaussian();
        return v;
    }
}
