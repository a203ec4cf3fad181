package dev.gatun.cuda;

import dev.gatun.cuda.ffi.cublas.cublas;
import dev.gatun.cuda.ffi.cublas.cublasLtMatmulHeuristicResult_t;
import dev.gatun.cuda.internal.Errors;
import dev.gatun.cuda.internal.NativeLibraries.Lib;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/**
 * cuBLAS and cuBLASLt matrix products on a device. Matrices are column-major (as in BLAS). {@link #gemm} uses
 * {@code cublasGemmEx}; {@link #matmulLt} uses {@code cublasLtMatmul} with the heuristic's first algorithm.
 * A and B have the element type of the {@link Precision}; C is always float32.
 */
public final class Blas extends Resource {
    /** Input precision and compute mode. */
    public enum Precision {
        /** float32 inputs, float32 compute. */
        FP32,
        /** float32 inputs, TF32 tensor-core compute. */
        TF32,
        /** float16 inputs (use {@link Blas#toFloat16}), float32 accumulate. */
        FP16,
        /** bfloat16 inputs (use {@link Blas#toBFloat16}), float32 accumulate. */
        BF16;

        int dataType() {
            return switch (this) {
                case FP32, TF32 -> cublas.CUDA_R_32F();
                case FP16 -> cublas.CUDA_R_16F();
                case BF16 -> cublas.CUDA_R_16BF();
            };
        }

        int computeType() {
            return this == TF32 ? cublas.CUBLAS_COMPUTE_32F_FAST_TF32() : cublas.CUBLAS_COMPUTE_32F();
        }

        /** Bytes per input element. */
        public int elementBytes() {
            return this == FP32 || this == TF32 ? 4 : 2;
        }
    }

    private static final long LT_WORKSPACE = 32L << 20;
    private final MemorySegment handle;
    private final MemorySegment ltHandle;
    private final DeviceBuffer workspace;

    private Blas(Device device, MemorySegment handle, MemorySegment ltHandle, DeviceBuffer workspace) {
        super(device, true);
        this.handle = handle;
        this.ltHandle = ltHandle;
        this.workspace = workspace;
    }

    /** Creates cuBLAS and cuBLASLt handles for {@code device}. */
    public static Blas create(Device device) {
        Cuda.require(Lib.CUBLAS);
        Cuda.require(Lib.CUBLASLT);
        device.enter();
        DeviceBuffer ws = device.allocate(LT_WORKSPACE);
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment h = arena.allocate(ValueLayout.ADDRESS);
            Errors.cublas(cublas.cublasCreate_v2(h), "cublasCreate");
            MemorySegment lt = arena.allocate(ValueLayout.ADDRESS);
            Errors.cublasLt(cublas.cublasLtCreate(lt), "cublasLtCreate");
            return new Blas(device, h.get(ValueLayout.ADDRESS, 0), lt.get(ValueLayout.ADDRESS, 0), ws);
        }
    }

    /**
     * {@code C = alpha * op(A) * op(B) + beta * C} with {@code cublasGemmEx} on {@code stream}; op(A) is m x k,
     * op(B) is k x n, C is m x n (float32), all column-major with leading dimensions lda, ldb, ldc.
     */
    public void gemm(Precision precision, boolean transA, boolean transB, int m, int n, int k, float alpha,
                     DeviceBuffer a, int lda, DeviceBuffer b, int ldb, float beta, DeviceBuffer c, int ldc, Stream stream) {
        gemm(precision, transA, transB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false, stream);
    }

    /**
     * As {@link #gemm(Precision, boolean, boolean, int, int, int, float, DeviceBuffer, int, DeviceBuffer, int, float,
     * DeviceBuffer, int, Stream)}, with C in the inputs' element type when {@code cLikeInputs} (float32 accumulation
     * either way), so a half-precision product needs no float32 scratch.
     */
    public void gemm(Precision precision, boolean transA, boolean transB, int m, int n, int k, float alpha,
                     DeviceBuffer a, int lda, DeviceBuffer b, int ldb, float beta, DeviceBuffer c, int ldc,
                     boolean cLikeInputs, Stream stream) {
        onStream(stream, alpha, beta, "cublasGemmEx", (al, be) -> cublas.cublasGemmEx(handle, op(transA), op(transB), m, n, k, al,
                a.pointer(), precision.dataType(), lda, b.pointer(), precision.dataType(), ldb, be, c.pointer(),
                cLikeInputs ? precision.dataType() : cublas.CUDA_R_32F(), ldc, precision.computeType(), cublas.CUBLAS_GEMM_DEFAULT()));
    }

    /** A cuBLAS call on {@code stream}, given its alpha and beta as native floats; its status is checked. */
    private void onStream(Stream stream, float alpha, float beta, String name, java.util.function.BiFunction<MemorySegment, MemorySegment, Integer> call) {
        ensureOpen();
        device.enter();
        Errors.cublas(cublas.cublasSetStream_v2(handle, Stream.handleOf(stream)), "cublasSetStream");
        try (Arena arena = Arena.ofConfined()) {
            Errors.cublas(call.apply(arena.allocateFrom(ValueLayout.JAVA_FLOAT, alpha), arena.allocateFrom(ValueLayout.JAVA_FLOAT, beta)), name);
        }
    }

    /**
     * {@code batchCount} products of {@link #gemm(Precision, boolean, boolean, int, int, int, float, DeviceBuffer, int,
     * DeviceBuffer, int, float, DeviceBuffer, int, boolean, Stream) gemm}'s shape in one {@code cublasGemmStridedBatchedEx}
     * call: product i reads A at {@code i * strideA} elements (0: every product reads the same A), B at {@code i * strideB}
     * and writes C at {@code i * strideC}. The buffers span every product's matrix.
     */
    public void gemmStridedBatched(Precision precision, boolean transA, boolean transB, int m, int n, int k, float alpha,
                                   DeviceBuffer a, int lda, long strideA, DeviceBuffer b, int ldb, long strideB, float beta,
                                   DeviceBuffer c, int ldc, long strideC, int batchCount, boolean cLikeInputs, Stream stream) {
        onStream(stream, alpha, beta, "cublasGemmStridedBatchedEx", (al, be) -> cublas.cublasGemmStridedBatchedEx(handle, op(transA), op(transB),
                m, n, k, al, a.pointer(), precision.dataType(), lda, strideA, b.pointer(), precision.dataType(), ldb, strideB, be, c.pointer(),
                cLikeInputs ? precision.dataType() : cublas.CUDA_R_32F(), ldc, strideC, batchCount, precision.computeType(),
                cublas.CUBLAS_GEMM_DEFAULT()));
    }

    /** The same product with cuBLASLt ({@code cublasLtMatmul}, D = C in place), no transposes. */
    public void matmulLt(Precision precision, int m, int n, int k, float alpha, DeviceBuffer a, int lda,
                         DeviceBuffer b, int ldb, float beta, DeviceBuffer c, int ldc, Stream stream) {
        ensureOpen();
        device.enter();
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            Errors.cublasLt(cublas.cublasLtMatmulDescCreate(p, precision.computeType(), cublas.CUDA_R_32F()),
                    "cublasLtMatmulDescCreate");
            MemorySegment desc = p.get(ValueLayout.ADDRESS, 0);
            MemorySegment la = null;
            MemorySegment lb = null;
            MemorySegment lc = null;
            MemorySegment pref = null;
            try {
                Errors.cublasLt(cublas.cublasLtMatrixLayoutCreate(p, precision.dataType(), m, k, lda), "cublasLtMatrixLayoutCreate(A)");
                la = p.get(ValueLayout.ADDRESS, 0);
                Errors.cublasLt(cublas.cublasLtMatrixLayoutCreate(p, precision.dataType(), k, n, ldb), "cublasLtMatrixLayoutCreate(B)");
                lb = p.get(ValueLayout.ADDRESS, 0);
                Errors.cublasLt(cublas.cublasLtMatrixLayoutCreate(p, cublas.CUDA_R_32F(), m, n, ldc), "cublasLtMatrixLayoutCreate(C)");
                lc = p.get(ValueLayout.ADDRESS, 0);
                Errors.cublasLt(cublas.cublasLtMatmulPreferenceCreate(p), "cublasLtMatmulPreferenceCreate");
                pref = p.get(ValueLayout.ADDRESS, 0);
                MemorySegment wsBytes = arena.allocateFrom(ValueLayout.JAVA_LONG, LT_WORKSPACE);
                Errors.cublasLt(cublas.cublasLtMatmulPreferenceSetAttribute(pref,
                        cublas.CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES(), wsBytes, 8), "cublasLtMatmulPreferenceSetAttribute");
                MemorySegment results = cublasLtMatmulHeuristicResult_t.allocate(arena);
                MemorySegment count = arena.allocate(ValueLayout.JAVA_INT);
                Errors.cublasLt(cublas.cublasLtMatmulAlgoGetHeuristic(ltHandle, desc, la, lb, lc, lc, pref, 1, results, count),
                        "cublasLtMatmulAlgoGetHeuristic");
                if (count.get(ValueLayout.JAVA_INT, 0) == 0) {
                    throw new CudaException("cublasLtMatmulAlgoGetHeuristic found no algorithm for " + precision);
                }
                MemorySegment algo = cublasLtMatmulHeuristicResult_t.algo(results);
                MemorySegment al = arena.allocateFrom(ValueLayout.JAVA_FLOAT, alpha);
                MemorySegment be = arena.allocateFrom(ValueLayout.JAVA_FLOAT, beta);
                Errors.cublasLt(cublas.cublasLtMatmul(ltHandle, desc, al, a.pointer(), la, b.pointer(), lb, be,
                        c.pointer(), lc, c.pointer(), lc, algo, workspace.pointer(), LT_WORKSPACE,
                        Stream.handleOf(stream)), "cublasLtMatmul");
            } finally {
                if (pref != null) cublas.cublasLtMatmulPreferenceDestroy(pref);
                if (lc != null) cublas.cublasLtMatrixLayoutDestroy(lc);
                if (lb != null) cublas.cublasLtMatrixLayoutDestroy(lb);
                if (la != null) cublas.cublasLtMatrixLayoutDestroy(la);
                cublas.cublasLtMatmulDescDestroy(desc);
            }
        }
    }

    private static int op(boolean trans) {
        return trans ? cublas.CUBLAS_OP_T() : cublas.CUBLAS_OP_N();
    }

    /** IEEE half-precision bits of each value (round to nearest even). */
    public static short[] toFloat16(float[] values) {
        short[] out = new short[values.length];
        for (int i = 0; i < values.length; i++) {
            out[i] = Float.floatToFloat16(values[i]);
        }
        return out;
    }

    /** bfloat16 bits of each value (round to nearest even; NaN stays NaN). */
    public static short[] toBFloat16(float[] values) {
        short[] out = new short[values.length];
        for (int i = 0; i < values.length; i++) {
            out[i] = toBFloat16(values[i]);
        }
        return out;
    }

    public static short toBFloat16(float v) {
        int bits = Float.floatToRawIntBits(v);
        if (Float.isNaN(v)) {
            return (short) ((bits >>> 16) | 0x40);
        }
        int rounding = 0x7FFF + ((bits >>> 16) & 1);
        return (short) ((bits + rounding) >>> 16);
    }

    public static float fromBFloat16(short b) {
        return Float.intBitsToFloat((b & 0xFFFF) << 16);
    }

    @Override
    void release() {
        int rc1 = cublas.cublasLtDestroy(ltHandle);
        int rc2 = cublas.cublasDestroy_v2(handle);
        workspace.close();
        Errors.cublasLt(rc1, "cublasLtDestroy");
        Errors.cublas(rc2, "cublasDestroy");
    }
}
