package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.cuda.Stream;
import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.offset;

/**
 * A few rows by a weight read transposed ({@code x @ w.mT}, a decode step's linear layer) against plain loops in
 * float64: the weight-streaming kernel's shapes (1 to 8 rows, row counts that are no power of two; the Llama-3.2-1B
 * layers' shapes, k-sliced or not; rows of the weight that end mid-way through a step; one column; columns that fill
 * no whole tile), the cuBLAS shapes around it (nine rows, a row length that is no whole number of 16-byte vectors),
 * both kernels of the 16-bit types called directly, and products written into their slices of a concatenation (rows
 * of the output further apart than its width).
 */
@RequiresGpu
class GemvGpuTest {
    static final List<DType> TYPES = List.of(DType.BF16, DType.F16, DType.F32);

    /** {@code y[i, j] = sum_p x[i, p] w[j, p]} in float64, from the inputs' stored values. */
    static double[] linear(NDArray x, NDArray w, int m, int n, int k) {
        double[] xs = x.toDoubleArray(), ws = w.toDoubleArray(), y = new double[m * n];
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                double acc = 0;
                for (int p = 0; p < k; p++) acc += xs[i * k + p] * ws[j * k + p];
                y[i * n + j] = acc;
            }
        return y;
    }

    /** Within a tolerance of the dtype's rounding, scaled with the typical size of a sum of k products of N(0, 1) values. */
    static void check(String what, DType t, double[] want, double[] got, int k) {
        double tol = (t == DType.F32 ? 1e-5 : t == DType.F16 ? 2e-3 : 1e-2) * Math.sqrt(k);
        assertThat(got).as(what).hasSameSizeAs(want);
        for (int i = 0; i < want.length; i++) assertThat(got[i]).as("%s element %d", what, i).isCloseTo(want[i], offset(tol * (1 + Math.abs(want[i]) / Math.sqrt(k))));
    }

    static void throughASession(DType t, int m, int n, int k) {
        var g = Gatun.graph("linear");
        g.output("y", g.input("x", t, m, k).matmul(g.input("w", t, n, k).transpose(0, 1)));
        var x = NDArray.randn(t, 1 + m, m, k);
        var w = NDArray.randn(t, 2 + n, n, k);
        double[] want = linear(x, w, m, n, k);
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
            for (int call = 0; call < 2; call++)
                check(t + " m " + m + " n " + n + " k " + k + " call " + call, t, want, s.runToHost(Map.of("x", x, "w", w)).get("y").toDoubleArray(), k);
        }
    }

    @Test
    void oneToEightRowsOfSmallAndOddShapesMatchPlainLoops() {
        // {n, k}: one column of one vector (k 8: one vector in 16 bits, two in float32), columns that fill no tile, a row
        // that ends mid-way through a step, many short rows, a single 16-byte vector of 16 bits
        for (DType t : TYPES)
            for (int m : new int[]{1, 2, 3, 5, 8})
                for (int[] nk : new int[][]{{1, 8}, {37, 2056}, {1000, 2048}, {17, 24}, {3, 16}, {4099, 64}})
                    throughASession(t, m, nk[0], nk[1]);
    }

    @Test
    void theLlamaLayersShapesMatchPlainLoops() {
        // {n, k}: fused qkv, o_proj, down_proj (few columns, long rows: k-sliced), and their tensor-parallel halves
        for (DType t : TYPES)
            for (int m : new int[]{1, 3, 8})
                for (int[] nk : new int[][]{{3072, 2048}, {2048, 2048}, {2048, 8192}, {1536, 2048}, {2048, 4096}})
                    throughASession(t, m, nk[0], nk[1]);
        // fused gate|up (many columns) in the type the model runs in
        for (int m : new int[]{1, 8}) throughASession(DType.BF16, m, 16384, 2048);
    }

    @Test
    void rowCountsAndLengthsTheKernelDoesNotTakeGoToCublas() {
        for (DType t : TYPES)
            for (int[] mnk : new int[][]{{9, 37, 2056}, {16, 64, 64}, {2, 17, 12}}) {
                int m = mnk[0], n = mnk[1], k = mnk[2];
                if (t == DType.F32 && k == 12) k = 13;   // not a whole number of 16-byte vectors in any dtype: cuBLAS
                throughASession(t, m, n, k);
            }
    }

    /** Both kernels of the 16-bit types (the session takes the tensor cores'), and float32's, called directly, y's rows ldc apart. */
    @Test
    void bothKernelsCalledDirectlyMatchPlainLoops() {
        String cudaHome = System.getenv().getOrDefault("CUDA_HOME", "/usr/local/cuda");
        try (Device d = Device.open(0); Stream stream = d.createStream()) {
            var gemv = new CudaGemv((name, source) -> CudaExecutable.compile(d, cudaHome, "gemv-test", name, source),
                    d.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT));
            for (DType t : TYPES)
                for (int[] nk : new int[][]{{1, 8}, {37, 2056}, {2048, 8192}, {333, 1024}}) {
                    int n = nk[0], k = nk[1], ldc = n + 5;
                    var w = NDArray.randn(t, 4 + n, n, k);
                    for (int m : new int[]{1, 2, 3, 5, 8}) {
                        var x = NDArray.randn(t, 3 + m, m, k);
                        double[] want = linear(x, w, m, n, k);
                        for (CudaGemv.Path path : CudaGemv.Path.values()) {
                            if (path == CudaGemv.Path.TENSOR_CORES && t == DType.F32) continue;
                            long yBytes = (long) m * ldc * t.byteSize();
                            try (DeviceBuffer xb = d.allocate(x.byteSize()); DeviceBuffer wb = d.allocate(w.byteSize()); DeviceBuffer yb = d.allocate(yBytes)) {
                                xb.copyFrom(x.segment());
                                wb.copyFrom(w.segment());
                                yb.memset(0x3f);   // the gaps between rows must keep this (a finite value in every type)
                                gemv.run(path, t, m, n, k, ldc, xb.address(), wb.address(), yb.address(), stream);
                                stream.synchronize();
                                var y = NDArray.zeros(t, m, ldc);
                                yb.copyTo(y.segment());
                                double[] all = y.toDoubleArray(), got = new double[m * n];
                                var filler = NDArray.zeros(t, 1);
                                filler.segment().fill((byte) 0x3f);
                                double gap = filler.toDoubleArray()[0];
                                for (int i = 0; i < m; i++) {
                                    System.arraycopy(all, i * ldc, got, i * n, n);
                                    for (int j = n; j < ldc; j++) assertThat(all[i * ldc + j]).as("%s %s m %d n %d: row %d's gap, column %d", path, t, m, n, i, j).isEqualTo(gap);
                                }
                                check(path + " " + t + " m " + m + " n " + n + " k " + k, t, want, got, k);
                            }
                        }
                    }
                }
        }
    }

    /**
     * Either kernel loading its weight's first loop before the wait ({@code constantWeight}, a programmatic launch and a
     * plain one) gives the very bits it gives without: only when the loads are issued moves. So does a grid capped at
     * fewer warps a multiprocessor than the launch's blocks (a plan's {@code resident}): which block computes a tile moves.
     */
    @Test
    void loadingTheWeightBeforeTheWaitChangesNoBit() {
        String cudaHome = System.getenv().getOrDefault("CUDA_HOME", "/usr/local/cuda");
        try (Device d = Device.open(0); Stream stream = d.createStream()) {
            int sms = d.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT);
            for (boolean programmatic : new boolean[]{false, true}) {
                var gemv = new CudaGemv((name, source) -> CudaExecutable.compile(d, cudaHome, "gemv-test", name, source), sms, programmatic);
                for (DType t : TYPES)
                    for (int m : new int[]{1, 3, 8})   // one row: the CUDA cores' kernel; more, of 16-bit types: the tensor cores'
                        for (int[] nk : new int[][]{{3072, 2048}, {2048, 8192}, {37, 2056}, {16384, 2048}}) {
                            int n = nk[0], k = nk[1];
                            var w = NDArray.randn(t, 7 + n, n, k);
                            var x = NDArray.randn(t, 5 + k, m, k);
                            double[] want = linear(x, w, m, n, k);
                            byte[][] out = new byte[4][];
                            String what = t + " m " + m + " n " + n + " k " + k + " programmatic " + programmatic;
                            // 0, 1: the whole grid without and with the preload; 2, 3: the grid capped at 16 and 8 warps a
                            // multiprocessor (LaunchChoice.Gemv#resident), preloading, its blocks past the grid looped over
                            for (int form = 0; form < 4; form++)
                                try (DeviceBuffer xb = d.allocate(x.byteSize()); DeviceBuffer wb = d.allocate(w.byteSize());
                                     DeviceBuffer yb = d.allocate((long) m * n * t.byteSize())) {
                                    xb.copyFrom(x.segment());
                                    wb.copyFrom(w.segment());
                                    if (form < 2) gemv.run(t, m, n, k, n, xb.address(), wb.address(), yb.address(), form == 1, stream);
                                    else gemv.run(CudaGemv.launch(t, CudaGemv.Path.auto(t, m), m, n, k, sms), true, form == 2 ? 16 : 8, m, n, k, n,
                                            xb.address(), wb.address(), yb.address(), stream);
                                    stream.synchronize();
                                    var y = NDArray.zeros(t, m, n);
                                    yb.copyTo(y.segment());
                                    check("form " + form + " " + what, t, want, y.toDoubleArray(), k);
                                    out[form] = y.segment().toArray(java.lang.foreign.ValueLayout.JAVA_BYTE);
                                }
                            for (int form = 1; form < 4; form++) assertThat(out[form]).as("form " + form + " " + what).isEqualTo(out[0]);
                        }
            }
        }
    }

    /**
     * A product joined with the SwiGLU after it ({@code Step.TiledProduct}, one launch of the GEMV where it takes the
     * product: 16-bit types at 1 to 8 rows, float32 at one) gives the very bits of the product and the kernel apart, in
     * either rounding of the plan, and the values of float64 loops.
     */
    @Test
    void aSwiGluEpilogueGivesTheBitsOfTheProductAndItsKernelApart() {
        for (DType t : TYPES)
            for (int m : new int[]{1, 3, 8})
                for (int[] hk : new int[][]{{8192, 2048}, {37, 2056}, {1000, 64}})
                    for (boolean roundEachOp : new boolean[]{false, true}) {
                        int h = hk[0], k = hk[1];
                        if (roundEachOp && (t == DType.F32 || h == 8192)) continue;
                        var x = NDArray.randn(t, 11 + m, m, k);
                        var w = NDArray.randn(t, 13 + h, 2 * h, k);
                        String what = t + " m " + m + " h " + h + " k " + k + (roundEachOp ? " rounding each op" : "");
                        double[][] ys = new double[2][];
                        for (int joined = 0; joined < 2; joined++) {
                            var g = Gatun.graph("mlp");
                            // x computed into the pool and dead after the product: apart, the SwiGLU may write over it
                            var y = g.input("x", t, m, k).neg().matmul(g.input("w", t, 2 * h, k).transpose(0, 1));
                            g.output("out", y.slice(1, 0, h).silu().mul(y.slice(1, h, 2 * h)));
                            var options = CompileOptions.world(1).backend("cuda").productEpilogues(joined == 1);
                            if (roundEachOp) options = options.roundEachOp();
                            try (var s = Session.compile(g.build(), options)) {
                                assertThat(s.plan().toString().contains("launch tiled_0 {")).as(what + "\n" + s.plan()).isEqualTo(joined == 1 && m <= 8 && (t != DType.F32 || m == 1));
                                ys[joined] = s.runToHost(Map.of("x", x, "w", w)).get("out").toDoubleArray();
                            }
                        }
                        assertThat(ys[1]).as(what + ": joined against apart").containsExactly(ys[0]);
                        double[] gateUp = linear(x, w, m, 2 * h, k);
                        for (int i = 0; i < gateUp.length; i++) gateUp[i] = -gateUp[i];   // of -x
                        double tol = t == DType.F32 ? 1e-5 * Math.sqrt(k) : t == DType.F16 ? 4e-3 : 2e-2;
                        for (int r = 0; r < m; r++)
                            for (int j = 0; j < h; j++) {
                                double gate = gateUp[r * 2 * h + j], up = gateUp[r * 2 * h + h + j];
                                double want = gate / (1 + Math.exp(-gate)) * up;
                                assertThat(ys[1][r * h + j]).as("%s row %d column %d", what, r, j)
                                        .isCloseTo(want, offset(tol * (Math.sqrt(k) + Math.abs(want))));
                            }
                    }
    }

    /** Rotate-half RoPE of the last dimension (d) of {@code x} by tables [1, d], as the Llama decoder writes it. */
    static dev.gatun.dsl.Tensor rope(dev.gatun.dsl.Tensor x, dev.gatun.dsl.Tensor cos, dev.gatun.dsl.Tensor sin, int d) {
        var x1 = x.slice(-1, 0, d / 2);
        var x2 = x.slice(-1, d / 2, d);
        return x1.mul(cos.slice(-1, 0, d / 2)).sub(x2.mul(sin.slice(-1, 0, d / 2))).cat(-1, x2.mul(cos.slice(-1, d / 2, d)).add(x1.mul(sin.slice(-1, d / 2, d))));
    }

    /**
     * A q|k|v product joined with the rotary embedding of its query and key heads ({@code Step.TiledProduct}: one
     * rotary kernel at one row, two at several; one launch of the GEMV where it takes the product) gives the very bits
     * of the product and the kernels apart, in either rounding of the plan, and the values of float64 loops.
     */
    @Test
    void aRotaryEpilogueGivesTheBitsOfTheProductAndItsKernelsApart() {
        for (DType t : TYPES)
            for (int m : new int[]{1, 3, 8})
                for (int[] shape : new int[][]{{32, 8, 64, 2048}, {4, 2, 16, 64}, {3, 1, 128, 256}})
                    for (boolean roundEachOp : new boolean[]{false, true}) {
                        int hq = shape[0], hk = shape[1], d = shape[2], k = shape[3], h = hq + 2 * hk, n = h * d;
                        if (roundEachOp && (t == DType.F32 || k == 2048)) continue;
                        var x = NDArray.randn(t, 17 + m, m, k);
                        var w = NDArray.randn(t, 19 + n, n, k);
                        var cos = NDArray.zeros(t, 1, d);
                        var sin = NDArray.zeros(t, 1, d);
                        for (int e = 0; e < d; e++) {
                            double angle = 0.7 * (e % (d / 2) + 1);
                            cos.set(e, Math.cos(angle));
                            sin.set(e, Math.sin(angle));
                        }
                        String what = t + " m " + m + " heads " + hq + "+" + hk + "+" + hk + " of " + d + " k " + k + (roundEachOp ? " rounding each op" : "");
                        double[][][] got = new double[2][][];
                        for (int joined = 0; joined < 2; joined++) {
                            var g = Gatun.graph("qkv");
                            var c = g.input("cos", t, 1, d);
                            var sn = g.input("sin", t, 1, d);
                            // x computed into the pool and dead after the product
                            var y = g.input("x", t, m, k).neg().matmul(g.input("w", t, n, k).transpose(0, 1)).reshape(m, 1, h, d);
                            if (m == 1) {
                                var qk = rope(y.slice(2, 0, hq + hk).transpose(1, 2), c, sn, d);
                                g.output("q", qk.slice(1, 0, hq));
                                g.output("k", qk.slice(1, hq, hq + hk));
                            } else {
                                g.output("q", rope(y.slice(2, 0, hq).transpose(1, 2), c, sn, d));
                                g.output("k", rope(y.slice(2, hq, hq + hk).transpose(1, 2), c, sn, d));
                            }
                            g.output("v", y.slice(2, hq + hk, h).transpose(1, 2));
                            var options = CompileOptions.world(1).backend("cuda").productEpilogues(joined == 1);
                            if (roundEachOp) options = options.roundEachOp();
                            try (var s = Session.compile(g.build(), options)) {
                                assertThat(s.plan().toString().contains("launch tiled_0 {")).as(what + "\n" + s.plan()).isEqualTo(joined == 1 && (t != DType.F32 || m == 1));
                                var out = s.runToHost(Map.of("x", x, "w", w, "cos", cos, "sin", sin));
                                got[joined] = new double[][]{out.get("q").toDoubleArray(), out.get("k").toDoubleArray(), out.get("v").toDoubleArray()};
                            }
                        }
                        for (int o = 0; o < 3; o++) assertThat(got[1][o]).as(what + ": joined against apart, output " + o).containsExactly(got[0][o]);
                        double[] p = linear(x, w, m, n, k), cs = cos.toDoubleArray(), sc = sin.toDoubleArray();
                        double tol = t == DType.F32 ? 1e-5 * Math.sqrt(k) : t == DType.F16 ? 4e-3 : 2e-2;
                        for (int r = 0; r < m; r++)
                            for (int head = 0; head < h; head++)
                                for (int e = 0; e < d; e++) {
                                    double x1 = -p[r * n + head * d + e % (d / 2)], x2 = -p[r * n + head * d + d / 2 + e % (d / 2)];
                                    double want = head >= hq + hk ? -p[r * n + head * d + e]
                                            : e < d / 2 ? x1 * cs[e] - x2 * sc[e] : x2 * cs[e] + x1 * sc[e];
                                    double have = head < hq ? got[1][0][(r * hq + head) * d + e]
                                            : head < hq + hk ? got[1][1][(r * hk + head - hq) * d + e] : got[1][2][(r * hk + head - hq - hk) * d + e];
                                    assertThat(have).as("%s row %d head %d element %d", what, r, head, e).isCloseTo(want, offset(tol * (Math.sqrt(k) + Math.abs(want))));
                                }
                    }
    }

    @Test
    void productsWrittenIntoTheirSlicesOfAConcatenation() {
        for (int m : new int[]{1, 4}) {
            int k = 256, n1 = 24, n2 = 40;
            var g = Gatun.graph("two");
            var x = g.input("x", DType.BF16, m, k);
            g.output("y", x.matmul(g.input("w1", DType.BF16, n1, k).transpose(0, 1)).cat(1, x.matmul(g.input("w2", DType.BF16, n2, k).transpose(0, 1))));
            var xv = NDArray.randn(DType.BF16, 7, m, k);
            var w1 = NDArray.randn(DType.BF16, 8, n1, k);
            var w2 = NDArray.randn(DType.BF16, 9, n2, k);
            try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
                assertThat(s.plan().kernels()).as("both products write straight into the concatenation").isEmpty();
                double[] got = s.runToHost(Map.of("x", xv, "w1", w1, "w2", w2)).get("y").toDoubleArray();
                double[] a = linear(xv, w1, m, n1, k), b = linear(xv, w2, m, n2, k), want = new double[m * (n1 + n2)];
                for (int i = 0; i < m; i++) {
                    System.arraycopy(a, i * n1, want, i * (n1 + n2), n1);
                    System.arraycopy(b, i * n2, want, i * (n1 + n2) + n1, n2);
                }
                check("cat of " + m + " rows", DType.BF16, want, got, k);
            }
        }
    }
}
