package dev.gatun.cuda;

import dev.gatun.cuda.testing.RequiresGpu;

import static org.junit.jupiter.api.Assumptions.assumeTrue;

/** Base of GPU tests: tagged {@code gpu}; every test is reported skipped, with the probe's reason, where there is no GPU. */
@RequiresGpu
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

    static void requireDevices(int n) {
        assumeTrue(Device.count() >= n, "needs " + n + " GPUs, have " + Device.count());
    }
}
