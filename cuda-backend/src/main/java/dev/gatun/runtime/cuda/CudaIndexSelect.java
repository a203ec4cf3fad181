package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Dim3;
import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.LaunchConfig;
import dev.gatun.cuda.Stream;
import dev.gatun.ir.DType;

/**
 * {@code index_select} on the GPU: one block per index (grid-stride), copying its row of the table as bytes, in
 * 16-byte vectors where aligned, so any dtype is one kernel. An index outside the table writes the executable's
 * {@link DeviceFault} record (the index, its position, the table's rows) and traps, as PyTorch's device-side assert
 * does: the call fails with a message naming the step, nothing is read from outside the table. Checking on the host
 * instead would cost a copy and a wait on every call.
 */
final class CudaIndexSelect {
    static final String SOURCE = Programmatic.SOURCE + DeviceFault.SOURCE + """
            extern "C" __global__ void gatun_index_select(const char* table, const void* ids, int ids64, char* out, long long n,
                                                          long long rows, long long row_bytes, int* claim, gatun_fault* fault, int step) {
                GATUN_DEPENDENT_START();
                for (long long k = blockIdx.x; k < n; k += gridDim.x) {
                    long long row = ids64 ? ((const long long*) ids)[k] : (long long) ((const int*) ids)[k];
                    if (row < 0 || row >= rows) gatun_fail(claim, fault, 1, step, row, k, rows, 0);
                    const char* src = table + row * row_bytes;
                    char* dst = out + k * row_bytes;
                    if ((((unsigned long long) src | (unsigned long long) dst | (unsigned long long) row_bytes) & 15ull) == 0)
                        for (long long i = threadIdx.x * 16ll; i < row_bytes; i += blockDim.x * 16ll) *(uint4*) (dst + i) = *(const uint4*) (src + i);
                    else
                        for (long long i = threadIdx.x; i < row_bytes; i += blockDim.x) dst[i] = src[i];
                }
            }
            """;

    private final Kernel kernel;

    CudaIndexSelect(LazyProgram.Compiler compiler) { this.kernel = new LazyProgram(compiler, "gatun_index_select", SOURCE).kernel("gatun_index_select"); }

    /**
     * Rows {@code ids[k]} of {@code table} ({@code rows} of {@code rowBytes}) into {@code out}, for {@code n} indices;
     * a bad index is reported in {@code fault} as plan step {@code step}; launched programmatically where asked.
     */
    void run(long table, long ids, DType idType, long out, long n, long rows, long rowBytes, DeviceFault fault, int step, boolean programmatic,
             Stream stream) {
        if (n == 0 || rowBytes == 0) return;
        int grid = (int) Math.min(n, 65_535);
        Programmatic.launch(kernel, programmatic, new LaunchConfig(Dim3.of(grid), Dim3.of(128), 0, stream), table, ids, idType == DType.INT64 ? 1 : 0, out, n, rows, rowBytes,
                fault.claim(), fault.record(), step);
    }
}
