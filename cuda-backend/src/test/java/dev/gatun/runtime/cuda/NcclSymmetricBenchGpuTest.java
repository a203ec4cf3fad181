package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.Nccl;
import dev.gatun.cuda.testing.RequiresGpu;
import org.junit.jupiter.api.Test;

import java.nio.file.Path;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * {@link NcclSymmetricBench}'s cells, few calls each, on two GPUs: every element of every cell right, in and out of
 * place, on cudaMalloc'd memory and in windows NCCL accepted (NCCL 2.27 or newer).
 */
@RequiresGpu
class NcclSymmetricBenchGpuTest {
    @Test
    void everyCellIsRightAndTheWindowsAreSymmetric() {
        assumeTrue(Device.count() >= 2, "needs 2 GPUs (NCCL runs one rank a GPU)");
        assumeTrue(Nccl.hasWindows(), "needs NCCL 2.27 or newer for windows, have " + Nccl.version());
        var o = new NcclSymmetricBench.Options(2, 20, new long[]{8, 4096, 1 << 20},
                List.of(NcclSymmetricBench.Type.F32, NcclSymmetricBench.Type.BF16), Path.of("unused.jsonl"));
        List<NcclSymmetricBench.Row> rows = NcclSymmetricBench.measure(o, new String[1]);
        assertThat(rows).hasSize(2 * 3 * 2 * 2 * 2); // types x sizes x memories x placements x ranks
        for (var r : rows) {
            assertThat(r.wrong()).as("%s", r).isZero();
            assertThat(r.elements()).isEqualTo(r.bytes() / r.type().bytes());
            if (r.memory() == NcclSymmetricBench.Memory.NCCL_WINDOW) assertThat(r.symmetric()).as("%s", r).isTrue();
            else assertThat(r.symmetric()).isNull();
            assertThat(r.p10()).isPositive();
            assertThat(r.pipelined()).isPositive();
        }
    }
}
