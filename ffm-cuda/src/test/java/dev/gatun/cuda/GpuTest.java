package dev.gatun.cuda;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Tag;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** Base of GPU tests: tagged {@code gpu}; every test skips (assumption) where the probe finds no GPU. */
@Tag("gpu")
abstract class GpuTest {
    static final String SAXPY = """
            extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) y[i] = a * x[i] + y[i];
            }
            extern "C" __global__ void add(float* x, float v, int n) {
                int i = blockIdx.x * blockDim.x + threadIdx.x;
                if (i < n) x[i] += v;
            }
            extern "C" __global__ void empty() {}
            """;

    @BeforeAll
    static void requireGpu() {
        CudaProbe p = Cuda.probe();
        assumeTrue(p.available(), p.summary());
    }

    static void requireDevices(int n) {
        assumeTrue(Device.count() >= n, "needs " + n + " GPUs, have " + Device.count());
    }
}
