package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.dsl.Tensor;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.NDArray;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

/**
 * The {@code norms} family of the GPU suite (one GPU, world 1): LayerNorm, RMSNorm and softmax over the last dim,
 * and the "loop ordering" seed, each written from the DSL's primitives as a user would (no fused op), with their
 * inputs and float64 references. The PyTorch peer ({@code bench/torch_suite.py --workload norms}) writes the same
 * functions the same way.
 *
 * <ul>
 *   <li>{@code layernorm}: {@code d = x - mean(x, -1, keepdim); y = d * rsqrt(mean(d * d, -1, keepdim) + 1e-5) * w + b};
 *   <li>{@code rmsnorm}: {@code y = x * rsqrt(mean(x * x, -1, keepdim) + 1e-6) * w};
 *   <li>{@code softmax}: {@code e = exp(x - amax(x, -1, keepdim)); y = e / sum(e, -1, keepdim)};
 *   <li>{@code loop_order}: {@code y = sum(sum(x, -1)); z = x / 10; z_t = z.t().contiguous().t()}, outputs y and z_t.
 * </ul>
 *
 * <p>Graphs compute in the dtype of the workload, as the DSL does (a bf16 graph's intermediates are bf16 values;
 * reductions accumulate in float inside a kernel). References are computed in float64 from the inputs as they are
 * held (after rounding to the dtype).
 */
final class NormWorkloads {
    private NormWorkloads() {}

    static final double LAYERNORM_EPS = 1e-5, RMSNORM_EPS = 1e-6;

    enum Op {
        LAYERNORM("layernorm"), RMSNORM("rmsnorm"), SOFTMAX("softmax"), LOOP_ORDER("loop_order");

        final String id;

        Op(String id) { this.id = id; }
    }

    /** The suite's cells: each norm at [4096, 4096] and [32768, 1024] in f32 and bf16, and the loop-ordering seed at 4096x4096 f32. */
    static List<Case> cases() {
        var out = new ArrayList<Case>();
        for (Op op : List.of(Op.LAYERNORM, Op.RMSNORM, Op.SOFTMAX))
            for (int[] s : new int[][]{{4096, 4096}, {32768, 1024}})
                for (DType t : List.of(DType.F32, DType.BF16)) out.add(new Case(op, t, s[0], s[1]));
        out.add(new Case(Op.LOOP_ORDER, DType.F32, 4096, 4096));
        return out;
    }

    /** One cell: an op at [rows, cols] in a dtype. */
    record Case(Op op, DType dtype, int rows, int cols) {
        String shape() { return rows + "x" + cols; }

        /** The "bytes" column: x. */
        long bytes() { return (long) rows * cols * dtype.byteSize(); }

        /** Bytes read once plus bytes written once: the least any implementation moves. */
        long movedBytes() {
            long x = bytes(), v = (long) cols * dtype.byteSize();
            return switch (op) {
                case LAYERNORM -> 2 * x + 2 * v;    // x, w, b in; y out
                case RMSNORM -> 2 * x + v;          // x, w in; y out
                case SOFTMAX -> 2 * x;              // x in; y out
                case LOOP_ORDER -> 2 * x + dtype.byteSize(); // x in; z_t and the scalar y out
            };
        }

        Graph graph() {
            return switch (op) {
                case LAYERNORM -> layerNorm(dtype, rows, cols);
                case RMSNORM -> rmsNorm(dtype, rows, cols);
                case SOFTMAX -> softmax(dtype, rows, cols);
                case LOOP_ORDER -> loopOrder(dtype, rows, cols);
            };
        }

        Map<String, NDArray> inputs() { return NormWorkloads.inputs(op, dtype, rows, cols); }

        /** float64 references per output, row-major in the output's logical order. */
        Map<String, double[]> reference(Map<String, NDArray> in) { return NormWorkloads.reference(op, in, rows, cols); }

        double tolerance() { return GpuSuite.tolerance(dtype); }

        @Override public String toString() {
            return op.id + " " + shape() + " " + (dtype == DType.F32 ? "f32" : dtype == DType.BF16 ? "bf16" : dtype.name().toLowerCase(Locale.ROOT));
        }
    }

    // ------------------------------------------------------------------ graphs, from primitives

    static Graph layerNorm(DType t, long rows, long cols) {
        var g = Gatun.graph("layernorm");
        Tensor x = g.input("x", t, rows, cols), w = g.input("w", t, cols), b = g.input("b", t, cols);
        Tensor d = x.sub(x.mean(true, -1));
        Tensor var = d.mul(d).mean(true, -1);
        g.output("y", d.mul(var.add(LAYERNORM_EPS).rsqrt()).mul(w).add(b));
        return g.build();
    }

    static Graph rmsNorm(DType t, long rows, long cols) {
        var g = Gatun.graph("rmsnorm");
        Tensor x = g.input("x", t, rows, cols), w = g.input("w", t, cols);
        g.output("y", x.mul(x.mul(x).mean(true, -1).add(RMSNORM_EPS).rsqrt()).mul(w));
        return g.build();
    }

    static Graph softmax(DType t, long rows, long cols) {
        var g = Gatun.graph("softmax");
        Tensor x = g.input("x", t, rows, cols);
        Tensor e = x.sub(x.max(true, -1)).exp();
        g.output("y", e.div(e.sum(true, -1)));
        return g.build();
    }

    /**
     * The loop-ordering seed: {@code y = sum(sum(x, -1)); z = x / 10; z_t = z.t().contiguous().t()}. The DSL's
     * {@code copy()} is a materialized contiguous copy, so {@code z.t().copy()} is PyTorch's
     * {@code z.t().contiguous()} and the final {@code t()} a view of it: z_t has z's values, stored transposed
     * (strides [1, rows]), as in PyTorch.
     */
    static Graph loopOrder(DType t, long rows, long cols) {
        var g = Gatun.graph("loop_order");
        Tensor x = g.input("x", t, rows, cols);
        g.output("y", x.sum(-1).sum());
        g.output("z_t", x.div(10).t().copy().t());
        return g.build();
    }

    // ------------------------------------------------------------------ inputs

    /** Seeded inputs: x normal (loop_order: uniform in [0, 2), so the sum is far from 0), w in [0.5, 1.5), b in [-0.5, 0.5). */
    static Map<String, NDArray> inputs(Op op, DType t, int rows, int cols) {
        var in = new LinkedHashMap<String, NDArray>();
        if (op == Op.LOOP_ORDER) {
            in.put("x", affine(NDArray.random(t, 4100, rows, cols), 1, 1));
            return in;
        }
        in.put("x", NDArray.randn(t, 4000, rows, cols));
        if (op == Op.LAYERNORM || op == Op.RMSNORM) in.put("w", affine(NDArray.random(t, 4001, cols), 0.5, 1));
        if (op == Op.LAYERNORM) in.put("b", affine(NDArray.random(t, 4002, cols), 0.5, 0));
        return in;
    }

    /** a * scale + shift, element by element, rounded to a's dtype. */
    static NDArray affine(NDArray a, double scale, double shift) {
        for (long i = 0; i < a.numel(); i++) a.set(i, a.get(i) * scale + shift);
        return a;
    }

    // ------------------------------------------------------------------ float64 references

    static Map<String, double[]> reference(Op op, Map<String, NDArray> in, int rows, int cols) {
        double[] x = in.get("x").toDoubleArray();
        var out = new LinkedHashMap<String, double[]>();
        switch (op) {
            case LAYERNORM -> out.put("y", layerNormReference(x, in.get("w").toDoubleArray(), in.get("b").toDoubleArray(), rows, cols));
            case RMSNORM -> out.put("y", rmsNormReference(x, in.get("w").toDoubleArray(), rows, cols));
            case SOFTMAX -> out.put("y", softmaxReference(x, rows, cols));
            case LOOP_ORDER -> {
                double s = 0;
                for (double v : x) s += v;
                out.put("y", new double[]{s});
                for (int i = 0; i < x.length; i++) x[i] /= 10;
                out.put("z_t", x); // z_t's logical values are z's
            }
        }
        return out;
    }

    static double[] layerNormReference(double[] x, double[] w, double[] b, int rows, int cols) {
        double[] y = new double[x.length];
        for (int r = 0; r < rows; r++) {
            int o = r * cols;
            double mean = 0;
            for (int c = 0; c < cols; c++) mean += x[o + c];
            mean /= cols;
            double var = 0;
            for (int c = 0; c < cols; c++) var += (x[o + c] - mean) * (x[o + c] - mean);
            double inv = 1 / Math.sqrt(var / cols + LAYERNORM_EPS);
            for (int c = 0; c < cols; c++) y[o + c] = (x[o + c] - mean) * inv * w[c] + b[c];
        }
        return y;
    }

    static double[] rmsNormReference(double[] x, double[] w, int rows, int cols) {
        double[] y = new double[x.length];
        for (int r = 0; r < rows; r++) {
            int o = r * cols;
            double ms = 0;
            for (int c = 0; c < cols; c++) ms += x[o + c] * x[o + c];
            double inv = 1 / Math.sqrt(ms / cols + RMSNORM_EPS);
            for (int c = 0; c < cols; c++) y[o + c] = x[o + c] * inv * w[c];
        }
        return y;
    }

    static double[] softmaxReference(double[] x, int rows, int cols) {
        double[] y = new double[x.length];
        for (int r = 0; r < rows; r++) {
            int o = r * cols;
            double m = Double.NEGATIVE_INFINITY;
            for (int c = 0; c < cols; c++) m = Math.max(m, x[o + c]);
            double s = 0;
            for (int c = 0; c < cols; c++) s += y[o + c] = Math.exp(x[o + c] - m);
            for (int c = 0; c < cols; c++) y[o + c] /= s;
        }
        return y;
    }
}
