package dev.gatun.cuda;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.util.Random;

import static org.assertj.core.api.Assertions.assertThat;

class BlasGpuTest extends GpuTest {
    @ParameterizedTest
    @EnumSource(Blas.Precision.class)
    void gemmMatchesFloat64Reference(Blas.Precision precision) {
        int m = 96, n = 80, k = 112;
        Random r = new Random(42);
        float[] a = new float[m * k];
        float[] b = new float[k * n];
        for (int i = 0; i < a.length; i++) a[i] = (float) r.nextGaussian();
        for (int i = 0; i < b.length; i++) b[i] = (float) r.nextGaussian();
        // reference on the values as rounded to the input precision, column-major
        double[] ar = rounded(a, precision);
        double[] br = rounded(b, precision);
        double[] ref = new double[m * n];
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double s = 0;
                for (int p = 0; p < k; p++) s += ar[i + p * m] * br[p + j * k];
                ref[i + j * m] = s;
            }
        double tol = switch (precision) {
            case FP32 -> 1e-4;
            case TF32, FP16, BF16 -> 2e-2; // TF32 rounds inputs to 10-bit mantissas inside the tensor cores
        };
        try (Device d = Device.open(0); Stream s = d.createStream(); Blas blas = Blas.create(d);
             DeviceBuffer da = d.allocate((long) a.length * precision.elementBytes());
             DeviceBuffer db = d.allocate((long) b.length * precision.elementBytes());
             DeviceBuffer dc = d.allocate((long) m * n * 4)) {
            upload(da, a, precision);
            upload(db, b, precision);
            dc.memset(0);
            blas.gemm(precision, false, false, m, n, k, 1f, da, m, db, k, 0f, dc, m, s);
            s.synchronize();
            check(dc.toFloatArray(), ref, tol, precision + " cublasGemmEx");
            dc.memset(0);
            blas.matmulLt(precision, m, n, k, 1f, da, m, db, k, 0f, dc, m, s);
            s.synchronize();
            check(dc.toFloatArray(), ref, tol, precision + " cublasLtMatmul");
        }
    }

    private static void check(float[] got, double[] ref, double tol, String what) {
        double maxErr = 0;
        for (int i = 0; i < ref.length; i++) {
            maxErr = Math.max(maxErr, Math.abs(got[i] - ref[i]) / Math.max(1.0, Math.abs(ref[i])));
        }
        System.out.println("[gpu] " + what + " max relative error " + maxErr);
        assertThat(maxErr).as(what).isLessThan(tol);
    }

    private static double[] rounded(float[] v, Blas.Precision p) {
        double[] out = new double[v.length];
        for (int i = 0; i < v.length; i++) {
            out[i] = switch (p) {
                case FP32, TF32 -> v[i];
                case FP16 -> Float.float16ToFloat(Float.floatToFloat16(v[i]));
                case BF16 -> Blas.fromBFloat16(Blas.toBFloat16(v[i]));
            };
        }
        return out;
    }

    private static void upload(DeviceBuffer d, float[] v, Blas.Precision p) {
        switch (p) {
            case FP32, TF32 -> d.copyFrom(v);
            case FP16 -> d.copyFrom(Blas.toFloat16(v));
            case BF16 -> d.copyFrom(Blas.toBFloat16(v));
        }
    }
}
