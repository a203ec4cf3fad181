// Fits a linear model y = x w + b by gradient descent on the host. One graph holds the forward pass (the mean
// squared error) and its gradients, which GraphBuilder.grad adds to the same graph; each step runs it and updates
// the weights in Java. Prints the falling loss, checks the first step's gradients against the formulas worked out by
// hand in plain loops, and the fitted weights against the ones the data was made with.
//
//   java --enable-preview --enable-native-access=ALL-UNNAMED -cp "$(./gatun-classpath)" examples/single-file/LinearRegression.java
import dev.gatun.dsl.Gatun;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.Map;
import java.util.Random;

import static dev.gatun.ir.DType.F64;

static final int N = 64, D = 3, STEPS = 120;
static final double RATE = 0.03;

void main() {
    // the data: y = x . [2, -3, 0.5] + 1, with a little noise
    double[] trueW = {2, -3, 0.5}, x = new double[N * D], y = new double[N];
    var rnd = new Random(7);
    for (int i = 0; i < N; i++) {
        y[i] = 1 + 0.01 * rnd.nextGaussian();
        for (int j = 0; j < D; j++) {
            x[i * D + j] = rnd.nextGaussian();
            y[i] += x[i * D + j] * trueW[j];
        }
    }

    var g = Gatun.graph("linear");
    var xs = g.input("x", F64, N, D);
    var ys = g.input("y", F64, N, 1);
    var w = g.input("w", F64, D, 1);
    var b = g.input("b", F64, 1);
    var err = xs.matmul(w).add(b).sub(ys);
    var loss = err.mul(err).mean();                   // mean squared error
    var grads = g.grad(loss, w, b);                   // backward nodes, added to this graph
    g.output("loss", loss).output("dw", grads[0]).output("db", grads[1]);

    double[] wv = new double[D], bv = new double[1];
    try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
        double first = 0, last = 0;
        for (int step = 0; step < STEPS; step++) {
            var out = s.runToHost(Map.of("x", NDArray.of(x, N, D), "y", NDArray.of(y, N, 1), "w", NDArray.of(wv, D, 1), "b", NDArray.of(bv, 1)));
            double l = out.get("loss").get(0);
            double[] dw = out.get("dw").toDoubleArray(), db = out.get("db").toDoubleArray();
            if (step == 0) {
                first = l;
                checkGradients(x, y, dw, db);
            }
            if (step % 10 == 0 || step == STEPS - 1) System.out.printf("step %3d  loss %.6f%n", step, l);
            for (int j = 0; j < D; j++) wv[j] -= RATE * dw[j];
            bv[0] -= RATE * db[0];
            last = l;
        }
        if (!(last < first * 1e-3)) throw new AssertionError("WRONG: the loss fell only from " + first + " to " + last);
    }
    for (int j = 0; j < D; j++)
        if (Math.abs(wv[j] - trueW[j]) > 0.01) throw new AssertionError("WRONG: w[" + j + "] = " + wv[j] + ", want about " + trueW[j]);
    if (Math.abs(bv[0] - 1) > 0.01) throw new AssertionError("WRONG: b = " + bv[0] + ", want about 1");
    System.out.printf("fitted w = [%.3f, %.3f, %.3f], b = %.3f%n", wv[0], wv[1], wv[2], bv[0]);
    System.out.println("verified: the first step's gradients equal 2/N x^T (x w + b - y), the loss fell, the weights are the data's");
}

/** At w = 0, b = 0 the error is -y: dL/dw = 2/N x^T (-y) and dL/db = 2/N sum(-y), in plain loops. */
static void checkGradients(double[] x, double[] y, double[] dw, double[] db) {
    double wantB = 0;
    for (int i = 0; i < N; i++) wantB += 2.0 / N * -y[i];
    if (Math.abs(db[0] - wantB) > 1e-12) throw new AssertionError("WRONG: db = " + db[0] + ", want " + wantB);
    for (int j = 0; j < D; j++) {
        double want = 0;
        for (int i = 0; i < N; i++) want += 2.0 / N * x[i * D + j] * -y[i];
        if (Math.abs(dw[j] - want) > 1e-12) throw new AssertionError("WRONG: dw[" + j + "] = " + dw[j] + ", want " + want);
    }
}
