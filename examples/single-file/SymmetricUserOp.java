// A user op whose input must live in symmetric memory (declared with symmetricInput(0)), with a host
// implementation (host backend) and a CUDA C kernel (CUDA backend). explain() shows how Gatun realized
// each call's input: x * 3, computed by a Gatun kernel, is written straight into the pool (path 1, zero
// copies); the graph input x gets a persistent symmetric buffer and an async copy per call (path 2).
//
//   java --enable-preview --enable-native-access=ALL-UNNAMED -cp "$(./gatun-classpath)" examples/single-file/SymmetricUserOp.java [world]
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.graph.TensorSpec;
import dev.gatun.ir.graph.UserOp;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static dev.gatun.ir.graph.ReduceOp.SUM;

static final int N = 256;

/** y = 2 x + 1, elementwise; its input must be in symmetric memory of the call's group. */
static UserOp scaleShift() {
    return UserOp.builder("scale_shift")
            .input(TensorSpec.of("x", F32, "n"))
            .output(TensorSpec.of("y", F32, "n"))
            .symmetricInput(0)
            .host((in, out, rank, world) -> {
                for (long i = 0; i < in.get(0).numel(); i++) out.get(0).set(i, 2 * in.get(0).get(i) + 1);
            })
            .cuda("scale_shift", """
                    extern "C" __global__ void scale_shift(const float* x, float* y, long long n) {
                        for (long long i = blockIdx.x * (long long) blockDim.x + threadIdx.x; i < n;
                             i += (long long) gridDim.x * blockDim.x)
                            y[i] = 2.0f * x[i] + 1.0f;
                    }""")
            .build();
}

void main(String[] args) {
    int world = args.length > 0 ? Integer.parseInt(args[0]) : 2;

    var op = scaleShift();
    IO.println(op);
    var g = Gatun.graph("symmetric_user_op").register(op);
    var x = g.input("x", F32, N);
    g.output("y", g.call1("scale_shift", x.mul(3)).allReduce(SUM));   // input computed by Gatun: path 1
    g.output("z", g.call1("scale_shift", x));                          // input is a graph input: path 2

    try (var s = Session.compile(g.build(), CompileOptions.world(world))) {
        IO.println(s.graph());
        IO.println("");
        IO.println(s.explain());
        IO.println("");
        IO.println(s.plan());
        IO.println("");

        var inputs = new ArrayList<Map<String, NDArray>>();
        for (int r = 0; r < world; r++) inputs.add(Map.of("x", NDArray.random(F32, 10 + r, N)));
        List<Map<String, NDArray>> out = s.runToHost(inputs);
        IO.println("backend " + s.backendName() + ", world " + world);

        // plain computation: y = sum over ranks of (2 * 3x + 1), z = 2x + 1 of this rank
        boolean ok = s.explain().contains("path 1") && s.explain().contains("path 2");
        if (!ok) IO.println("explain() does not show both realization paths");
        for (int r = 0; r < world; r++) {
            var y = out.get(r).get("y");
            var z = out.get(r).get("z");
            IO.println("rank " + r + ": y = " + y);
            IO.println("rank " + r + ": z = " + z);
            for (int i = 0; i < N; i++) {
                double wantY = 0;
                for (int q = 0; q < world; q++) wantY += 2 * (3 * inputs.get(q).get("x").get(i)) + 1;
                double wantZ = 2 * inputs.get(r).get("x").get(i) + 1;
                if (Math.abs(y.get(i) - wantY) > 1e-5 * (1 + Math.abs(wantY)) || Math.abs(z.get(i) - wantZ) > 1e-5 * (1 + Math.abs(wantZ))) {
                    IO.println("rank " + r + " element " + i + ": y = " + y.get(i) + " (want " + wantY + "), z = " + z.get(i) + " (want " + wantZ + ")");
                    ok = false;
                    break;
                }
            }
        }
        if (!ok) {
            IO.println("WRONG: the user op's results do not match the plain computation");
            System.exit(1);
        }
        IO.println("verified: user op scale_shift with a symmetric-memory input (path 1 and path 2) on " + world + " ranks matches 2x+1");
    }
}
