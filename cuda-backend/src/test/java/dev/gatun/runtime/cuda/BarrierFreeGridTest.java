package dev.gatun.runtime.cuda;

import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A barrier-free all-reduce's grid follows its element count, whatever the dtype (sized by 16-byte vectors, a bf16
 * all-reduce got half the blocks of an f32 one of as many elements and twice the serial waits a thread), up to
 * {@link SymmetricKernels#BARRIER_FREE_MAX_BLOCKS} blocks: more stalled on two GPUs.
 */
class BarrierFreeGridTest {
    @Test
    void theGridCountsElementsNotBytes() {
        int perBlock = SymmetricKernels.THREADS * SymmetricKernels.BARRIER_FREE_ELEMENTS_PER_THREAD;
        assertThat(Distributed.barrierFreeGrid(64, 128)).isEqualTo(1);
        assertThat(Distributed.barrierFreeGrid(4096, 128)).isEqualTo(4096 / perBlock);
        assertThat(Distributed.barrierFreeGrid(65536, 128)).isEqualTo(65536 / perBlock);
        assertThat(Distributed.barrierFreeGrid(1L << 20, 128)).isEqualTo(SymmetricKernels.BARRIER_FREE_MAX_BLOCKS); // more stalled on two GPUs
        assertThat(Distributed.barrierFreeGrid(1L << 20, 16)).isEqualTo(16);                                        // the resident cap, where lower
        assertThat(Distributed.barrierFreeGrid(0, 128)).isEqualTo(1);
    }

    /** A fused barrier-free launch (all-reduce + RMSNorm over 256 rows) keeps to the same cap; a one-shot does not. */
    @Test
    void aFusedBarrierFreeLaunchKeepsToTheCap() {
        var free = new CollectiveCodegen.FusedSource("f", "", 256, 8192, 1, 1024, dev.gatun.ir.DType.BFLOAT16, true, java.util.List.of(), java.util.List.of());
        var shot = new CollectiveCodegen.FusedSource("f", "", 256, 8192, 1, 1024, dev.gatun.ir.DType.BFLOAT16, false, java.util.List.of(), java.util.List.of());
        assertThat(free.grid(128)).isEqualTo(SymmetricKernels.BARRIER_FREE_MAX_BLOCKS);
        assertThat(shot.grid(128)).isEqualTo(128);
        assertThat(free.grid(8)).isEqualTo(8);
    }
}
