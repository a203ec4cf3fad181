package dev.gatun.runtime.cuda;

import dev.gatun.runtime.spi.Broadcast;

import dev.gatun.cuda.Blas;
import dev.gatun.cuda.Device;
import dev.gatun.cuda.DeviceAttribute;
import dev.gatun.cuda.DeviceBuffer;
import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;
import dev.gatun.planner.LaunchChoice;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Step;
import dev.gatun.runtime.GatunRuntimeException;

import java.util.Arrays;
import java.util.Map;

/**
 * Row-major (batched, broadcast) matrix products through cuBLAS: C = A B row-major is C^T = B^T A^T
 * column-major, so cuBLAS gets B first; an operand that lies transposed (the plan's {@code .mT}) is passed with
 * cuBLAS's transpose flag and its own leading dimension, never copied. float64, which the bound GEMM does not cover,
 * runs a plain kernel. The output is written at its own strides: row-major, or the slice of a concatenation it is
 * written straight into, its rows a leading dimension ({@code ldc}) apart and each batch at its own offset. A batch
 * whose products lie a constant distance apart in A, B and C (the usual case, a broadcast operand included) is one
 * strided-batched cuBLAS call; other batches are a call per product. One to eight rows by a weight that lies transposed (a
 * decode step's linear layer at batch 1 to 8) go to {@link CudaGemv}, which streams the weight about as fast as cuBLAS
 * or faster there, and whose kernels, unlike cuBLAS's, can be programmatic dependent launches.
 */
final class CudaMatmul {
    private static final String F64_SOURCE = """
            // C[m,n] = A[m,k] B[k,n], row-major (C's rows ldc apart), float64: one thread per output element; ta / tb: the
            // operand lies transposed ([k,m] / [n,k] in memory)
            extern "C" __global__ void matmul_f64(const double* a, const double* b, double* c, long long m, long long n, long long k, long long ldc,
                                                  int ta, int tb) {
                long long i = blockIdx.x * (long long) blockDim.x + threadIdx.x;
                if (i >= m * n) return;
                long long r = i / n, col = i % n;
                double acc = 0;
                for (long long p = 0; p < k; p++) acc += a[ta ? p * m + r : r * k + p] * b[tb ? col * k + p : p * n + col];
                c[r * ldc + col] = acc;
            }
            """;

    private final Device device;
    private final Blas blas;
    private final LazyProgram f64;
    private final CudaGemv gemv;

    /** Loads the built-in programs now, every shape's (see {@link LazyProgram#loadNow}); cuBLAS loads its own on first use. */
    void loadNow() {
        gemv.loadNow();
        f64.loadNow("matmul_f64");
    }

    CudaMatmul(Device device, LazyProgram.Compiler compiler) {
        this.device = device;
        this.blas = Blas.create(device);
        try {
            this.f64 = new LazyProgram(compiler, "matmul_f64", F64_SOURCE);
            this.gemv = new CudaGemv(compiler, device.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT));
        } catch (RuntimeException e) {
            blas.close();
            throw e;
        }
    }

    /** Frees the cuBLAS handle (again: nothing). */
    void close() { blas.close(); }

    /**
     * {@code out = a @ b}; {@code gemv}: the plan took this product by the few-row kernel ({@link Step.Matmul#gemv}), which
     * runs it in the form the plan chose ({@code choice}: the kernel, k-slices, preload, a programmatic launch); else the
     * library's GEMM does. An operand of a GEMV product at an address the kernel cannot read (the plan
     * checked its own buffers, and the executable stages inputs that do not lie so) is refused, never run another way.
     */
    void run(Step.Matmul step, LaunchChoice choice, long a, long b, long out, Map<String, Long> env, Stream stream) {
        PlanBuffer aB = step.a(), bB = step.b(), outB = step.output();
        boolean transA = step.transA(), transB = step.transB();
        long[] sa = aB.type().shape().sizes(env), sb = bB.type().shape().sizes(env), so = outB.type().shape().sizes(env);
        int m = Math.toIntExact(sa[sa.length - 2]), k = Math.toIntExact(sa[sa.length - 1]), n = Math.toIntExact(sb[sb.length - 1]);
        DType t = aB.type().dtype();
        long[] batchShape = Arrays.copyOf(so, so.length - 2);
        long batches = 1;
        for (long d : batchShape) batches *= d;
        long[] idx = new long[batchShape.length];
        int e = t.byteSize();
        long[] st = new long[so.length];
        for (int d = 0; d < st.length; d++) st[d] = outB.strides().get(d).eval(env);
        if (so.length >= 1 && st[so.length - 1] != 1 && so[so.length - 1] > 1)
            throw new GatunRuntimeException("matmul into " + outB.name() + ": its columns are " + st[so.length - 1] + " elements apart; cuBLAS writes them next to each other");
        int ldc = Math.toIntExact(Math.max(n, st[so.length - 2]));
        // each product's element offsets into A, B and C
        long[] oa = new long[Math.toIntExact(batches)], ob = new long[oa.length], oc = new long[oa.length];
        for (int bi = 0; bi < oa.length; bi++) {
            long rem = bi, at = 0;
            for (int d = batchShape.length - 1; d >= 0; d--) { idx[d] = rem % batchShape[d]; rem /= batchShape[d]; at += idx[d] * st[d]; }
            oa[bi] = Broadcast.batchOffset(idx, sa, (long) m * k);
            ob[bi] = Broadcast.batchOffset(idx, sb, (long) k * n);
            oc[bi] = at;
        }
        if (oa.length == 0) return;   // an empty batch: no product
        // a few rows by a weight that lies transposed (a decode step's linear layer), where the plan says: the weight-streaming kernels
        if (step.gemv()) {
            gemvApplies(step, t, oa.length, m, k, a + oa[0] * e, b + ob[0] * e, out + oc[0] * e);
            if (choice.gemv() == null) throw new IllegalStateException(step.format().strip() + ": a GEMV product without the plan's form of it");
            gemv.run(t, choice.gemv(), choice.programmatic(), m, n, k, ldc, a + oa[0] * e, b + ob[0] * e, out + oc[0] * e, stream);
            return;
        }
        // products a constant distance apart in every operand (a broadcast one: distance 0) are one cuBLAS call
        if (oa.length > 1 && t != DType.FLOAT64 && m > 0 && n > 0 && evenlySpaced(oa) && evenlySpaced(ob) && evenlySpaced(oc)) {
            stridedBatched(t, m, n, k, ldc, a, transA, oa[1], b, transB, ob[1], out, oc[1], oa.length, stream);
            return;
        }
        for (int bi = 0; bi < oa.length; bi++) gemm(t, m, n, k, ldc, a + oa[bi] * e, transA, b + ob[bi] * e, transB, out + oc[bi] * e, stream);
    }

    /** Refuses, naming the step, a GEMV product of {@code m} rows whose operands this call gives at addresses the kernel cannot read. */
    void checkGemv(Step.Matmul step, DType t, int m, int k, long a, long b, long out) { gemvApplies(step, t, 1, m, k, a, b, out); }

    /** Refuses, naming the step, a GEMV product whose operands this call gives at addresses the kernel cannot read. */
    private static void gemvApplies(Step.Matmul step, DType t, long batches, int m, int k, long a, long b, long out) {
        if (!CudaGemv.applies(t, step.transA(), step.transB(), batches, m, k, a, b, out))
            throw new GatunRuntimeException(step.format().strip() + ": the plan takes this product by the GEMV, which reads its operands in "
                    + "16-byte vectors, but they lie at 0x" + Long.toHexString(a) + " and 0x" + Long.toHexString(b)
                    + " in this call; pass inputs that start 16-byte aligned (DeviceArray.copy() makes such a copy)");
    }

    /** Whether the offsets start at 0 and step by the same distance. */
    static boolean evenlySpaced(long[] offsets) {
        if (offsets[0] != 0) return false;
        for (int i = 2; i < offsets.length; i++) if (offsets[i] - offsets[i - 1] != offsets[1]) return false;
        return true;
    }

    private void stridedBatched(DType t, int m, int n, int k, int ldc, long a, boolean transA, long strideA, long b, boolean transB, long strideB,
                                long c, long strideC, int batches, Stream stream) {
        int e = t.byteSize();
        var A = DeviceBuffer.wrap(device, a, Math.max(1L, ((batches - 1) * strideA + (long) m * k) * e));
        var B = DeviceBuffer.wrap(device, b, Math.max(1L, ((batches - 1) * strideB + (long) k * n) * e));
        var C = DeviceBuffer.wrap(device, c, ((batches - 1) * strideC + (long) (m - 1) * ldc + n) * e);
        // row-major C = A B is column-major C^T = B^T A^T: B first, as in gemm
        blas.gemmStridedBatched(precision(t), transB, transA, n, m, k, 1f, B, ldB(transB, n, k), strideB, A, ldA(transA, m, k), strideA, 0f,
                C, ldc, strideC, batches, true, stream);
    }

    /**
     * Column-major leading dimensions. Row-major B [k,n] is column-major B^T [n,k] with leading dimension n; lying
     * transposed ([n,k] row-major) it is column-major [k,n], leading dimension k, and cuBLAS transposes it back.
     * Likewise A [m,k]: leading dimension k, or m where it lies transposed.
     */
    private static int ldB(boolean transB, int n, int k) { return Math.max(1, transB ? k : n); }

    private static int ldA(boolean transA, int m, int k) { return Math.max(1, transA ? m : k); }

    private static Blas.Precision precision(DType t) {
        return switch (t) {
            case FLOAT32 -> Blas.Precision.FP32;
            case FLOAT16 -> Blas.Precision.FP16;
            case BFLOAT16 -> Blas.Precision.BF16;
            default -> throw new GatunRuntimeException("matmul of " + t + " is not supported on the GPU");
        };
    }

    private void gemm(DType t, int m, int n, int k, int ldc, long a, boolean transA, long b, boolean transB, long c, Stream stream) {
        if (m == 0 || n == 0) return;
        if (t == DType.FLOAT64) {
            long total = (long) m * n;
            f64.kernel("matmul_f64").launch(new LaunchConfig(Dim3.of(Math.toIntExact(Math.ceilDiv(total, 256))), Dim3.of(256), 0, stream),
                    a, b, c, (long) m, (long) n, (long) k, (long) ldc, transA ? 1 : 0, transB ? 1 : 0);
            return;
        }
        Blas.Precision p = precision(t);
        int e = t.byteSize();
        var A = DeviceBuffer.wrap(device, a, Math.max(1L, (long) m * k * e));
        var B = DeviceBuffer.wrap(device, b, Math.max(1L, (long) k * n * e));
        var C = DeviceBuffer.wrap(device, c, ((long) (m - 1) * ldc + n) * e);
        // k == 0: cuBLAS with beta 0 writes zeros, as an empty sum should
        blas.gemm(p, transB, transA, n, m, k, 1f, B, ldB(transB, n, k), A, ldA(transA, m, k), 0f, C, ldc, true, stream);
    }
}
