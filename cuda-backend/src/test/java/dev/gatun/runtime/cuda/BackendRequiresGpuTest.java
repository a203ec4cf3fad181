package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Cuda;
import dev.gatun.cuda.testing.GpuSkips;
import org.junit.jupiter.api.Test;

import static org.junit.jupiter.api.Assumptions.assumeFalse;

/** Without a GPU, the backend's GPU test classes report each of their tests as skipped with the reason ({@link GpuSkips}). */
class BackendRequiresGpuTest {

    @Test
    void withoutAGpuEachGpuTestIsReportedSkippedWithTheReason() {
        assumeFalse(Cuda.isAvailable(), "this machine has a GPU, so the GPU tests run");
        GpuSkips.assertEachTestSkippedWithTheReason(CudaBackendGpuTest.class);
        GpuSkips.assertEachTestSkippedWithTheReason(SharedGpuGpuTest.class);
    }
}
