package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.cuda.Stream;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Programmatic dependent launches ({@link Programmatic}) and the small batched products they bring
 * ({@link CudaSmallMatmul}): the kernel called directly against plain loops in float64 (1 to 8 rows, k from 1 to
 * 1000, columns that fill no whole tile, batches, a shared B, C's rows further apart than its width; the attention's
 * shapes at 544 and 4096 positions, split and unsplit, vector and scalar, each run twice to the same bits); and a decode
 * step's attention with a one-row product and an in-place cache write, compiled with programmatic launches on, replayed
 * 30 times with new inputs each call, against the reference interpreter and the same session with them off.
 */
@RequiresGpu
class SmallMatmulGpuTest {
    static final List<DType> TYPES = List.of(DType.BF16, DType.F16, DType.F32);

    @Test
    void theKernelMatchesPlainLoops() {
        String cudaHome = System.getenv().getOrDefault("CUDA_HOME", "/usr/local/cuda");
        try (Device d = Device.open(0); Stream stream = d.createStream();
             var small = new CudaSmallMatmul(d, (name, source) -> CudaExecutable.compile(d, cudaHome, "small-matmul-test", name, source), false, stream)) {
            for (DType t : TYPES)
                for (int[] s : new int[][]{{1, 1, 1, 1}, {4, 64, 544, 8}, {4, 544, 64, 8}, {3, 7, 33, 2}, {8, 1000, 70, 3}, {5, 16, 31, 1}, {2, 64, 100, 5}}) {
                    int m = s[0], k = s[1], n = s[2], batches = s[3], ldc = n + 3;
                    boolean sharedB = batches == 5;   // one B for every product (its distance 0)
                    var a = NDArray.randn(t, 11 + m, batches, m, k);
                    var b = NDArray.randn(t, 12 + n, sharedB ? 1 : batches, k, n);
                    double[] as = a.toDoubleArray(), bs = b.toDoubleArray();
                    long cElems = (long) batches * m * ldc;
                    try (DeviceBuffer ab = d.allocate(a.byteSize()); DeviceBuffer bb = d.allocate(b.byteSize()); DeviceBuffer cb = d.allocate(cElems * t.byteSize())) {
                        ab.copyFrom(a.segment());
                        bb.copyFrom(b.segment());
                        cb.memset(0x3f);
                        small.run(t, m, n, k, ldc, ab.address(), (long) m * k, bb.address(), sharedB ? 0 : (long) k * n, cb.address(), (long) m * ldc,
                                batches, stream);
                        stream.synchronize();
                        var c = NDArray.zeros(t, cElems);
                        cb.copyTo(c.segment());
                        double[] all = c.toDoubleArray();
                        for (int i = 0; i < batches; i++) {
                            double[] want = new double[m * n], got = new double[m * n];
                            int bi = sharedB ? 0 : i;
                            for (int r = 0; r < m; r++)
                                for (int j = 0; j < n; j++) {
                                    double acc = 0;
                                    for (int p = 0; p < k; p++) acc += as[(i * m + r) * k + p] * bs[(bi * k + p) * n + j];
                                    want[r * n + j] = acc;
                                    got[r * n + j] = all[(int) ((long) i * m * ldc + (long) r * ldc + j)];
                                }
                            GemvGpuTest.check(t + " m " + m + " k " + k + " n " + n + " product " + i, t, want, got, k);
                        }
                    }
                }
        }
    }

    /**
     * The attention's products at a decode step of 8 KV heads of 4 query heads (head dim 128): scores at 544 positions
     * (k 128, n 544), probabilities times values at 544 and 4096 positions (k 544 and 4096, n 128), and scores at an
     * odd 545 positions (one column a lane: B's rows are no whole 16-byte vectors), in bf16 and float32, launched
     * programmatically where the GPU has it. Each product is run twice in a row: the second result is the first to the
     * bit, which it would not be if a split's counters were not back at zero after the first.
     */
    @Test
    void theAttentionShapesMatchPlainLoopsTwiceInARow() {
        String cudaHome = System.getenv().getOrDefault("CUDA_HOME", "/usr/local/cuda");
        try (Device d = Device.open(0); Stream stream = d.createStream();
             var small = new CudaSmallMatmul(d, (name, source) -> CudaExecutable.compile(d, cudaHome, "small-matmul-test", name, source),
                     d.computeCapability().major() >= 9, stream)) {
            int sms = d.attribute(dev.gatun.cuda.DeviceAttribute.MULTIPROCESSOR_COUNT);
            for (DType t : List.of(DType.BF16, DType.F32))
                for (int[] s : new int[][]{{4, 128, 544, 8}, {4, 544, 128, 8}, {4, 4096, 128, 8}, {4, 128, 545, 8}}) {
                    int m = s[0], k = s[1], n = s[2], batches = s[3];
                    var a = NDArray.randn(t, 21 + k, batches, m, k);
                    var b = NDArray.randn(t, 22 + n, batches, k, n);
                    double[] as = a.toDoubleArray(), bs = b.toDoubleArray();
                    long cElems = (long) batches * m * n;
                    try (DeviceBuffer ab = d.allocate(a.byteSize()); DeviceBuffer bb = d.allocate(b.byteSize()); DeviceBuffer cb = d.allocate(cElems * t.byteSize())) {
                        ab.copyFrom(a.segment());
                        bb.copyFrom(b.segment());
                        boolean vector = CudaSmallMatmul.vectorizable(t, n, bb.address(), (long) k * n);
                        assertThat(vector).as("16-byte loads of B at n " + n).isEqualTo(n % 2 == 0);
                        var cut = CudaSmallMatmul.split(t, vector, m, n, k, batches, sms);
                        String what = t + " m " + m + " k " + k + " n " + n + " batches " + batches + " (" + cut + ")";
                        var results = new java.util.ArrayList<NDArray>();
                        for (int call = 0; call < 2; call++) {
                            cb.memset(0x3f);
                            small.run(t, m, n, k, n, ab.address(), (long) m * k, bb.address(), (long) k * n, cb.address(), (long) m * n, batches, stream);
                            stream.synchronize();
                            var c = NDArray.zeros(t, cElems);
                            cb.copyTo(c.segment());
                            results.add(c);
                        }
                        assertThat(results.get(1).segment().mismatch(results.get(0).segment())).as(what + ": the second call as the first, to the bit").isEqualTo(-1L);
                        double[] all = results.getFirst().toDoubleArray();
                        for (int i = 0; i < batches; i++) {
                            double[] want = new double[m * n], got = new double[m * n];
                            for (int r = 0; r < m; r++)
                                for (int j = 0; j < n; j++) {
                                    double acc = 0;
                                    for (int p = 0; p < k; p++) acc += as[(i * m + r) * k + p] * bs[(i * k + p) * n + j];
                                    want[r * n + j] = acc;
                                    got[r * n + j] = all[(i * m + r) * n + j];
                                }
                            GemvGpuTest.check(what + " product " + i, t, want, got, k);
                        }
                    }
                }
        }
    }

    /** q [b, 4, 64] against keys [b, 64, 40] written in place at a position, softmax, times values: as a decode step does. */
    static Graph attention(int batch, int positions) {
        var g = Gatun.graph("attention_step");
        var x = g.input("x", DType.BF16, 1, 256);
        var w = g.input("w", DType.BF16, batch * 4 * 64, 256);
        var q = x.matmul(w.transpose(0, 1)).reshape(batch, 4, 64);
        var pos = g.input("at", DType.I32);
        var keys = g.state("keys", DType.BF16, batch, 64, positions).updateSlice(2, g.input("k", DType.BF16, batch, 64, 1), pos);
        var scores = q.matmul(keys).mul(0.125);
        var e = scores.sub(scores.max(true, -1)).exp();
        var probs = e.div(e.sum(true, -1));
        g.output("y", probs.matmul(g.input("v", DType.BF16, batch, positions, 64)));
        g.output("keys", keys);
        return g.build();
    }

    @Test
    void aDecodeStepLaunchedProgrammaticallyIsRightOnEveryReplay() {
        int batch = 8, positions = 40;
        Graph graph = attention(batch, positions);
        var base = CompileOptions.world(1).backend("cuda");
        var on = base.execution(base.execution().withCuda(base.execution().cuda().withProgrammaticLaunch(true)));
        var w = NDArray.randn(DType.BF16, 5, batch * 4 * 64, 256);
        var v = NDArray.randn(DType.BF16, 6, batch, positions, 64);
        try (var s = Session.compile(graph, on); var plain = Session.compile(graph, base.execution(base.execution().withCuda(base.execution().cuda().withProgrammaticLaunch(false))))) {
            for (int call = 0; call < 30; call++) {
                int at = call % positions;
                var in = Map.of("x", NDArray.randn(DType.BF16, 100 + call, 1, 256), "w", w, "v", v,
                        "k", NDArray.randn(DType.BF16, 200 + call, batch, 64, 1), "at", NDArray.of(DType.I32, new double[]{at}));
                var got = s.runToHost(in);
                var other = plain.runToHost(in);
                assertThat(got.get("keys").mismatch(other.get("keys"), 0, 0)).as("call %d: the cache, programmatic against plain", call).isNull();
                assertThat(got.get("y").mismatch(other.get("y"), 2e-2, 2e-2)).as("call %d: y, programmatic against plain", call).isNull();
                // the reference interpreter from the cache as both sessions hold it before this call's write
                var ref = ReferenceInterpreter.evaluate(withoutState(batch, positions), List.of(Map.of("x", in.get("x"), "w", w, "v", v,
                        "keys", got.get("keys")))).getFirst();
                assertThat(got.get("y").mismatch(ref.get("y"), 3e-2, 3e-2)).as("call %d: y against the reference", call).isNull();
            }
        }
    }

    /** The same step with the (already written) cache as an input: what the reference interpreter checks y against. */
    static Graph withoutState(int batch, int positions) {
        var g = Gatun.graph("attention_ref");
        var x = g.input("x", DType.BF16, 1, 256);
        var w = g.input("w", DType.BF16, batch * 4 * 64, 256);
        var q = x.matmul(w.transpose(0, 1)).reshape(batch, 4, 64);
        var scores = q.matmul(g.input("keys", DType.BF16, batch, 64, positions)).mul(0.125);
        var e = scores.sub(scores.max(true, -1)).exp();
        var probs = e.div(e.sum(true, -1));
        g.output("y", probs.matmul(g.input("v", DType.BF16, batch, positions, 64)));
        return g.build();
    }
}
