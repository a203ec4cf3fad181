package dev.gatun.runtime.cuda;

import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A barrier-free all-reduce's grid follows its element count, whatever the dtype: its loops are scalar, so a bf16
 * all-reduce sized by 16-byte vectors got half the blocks of an f32 one of as many elements and twice the serial
 * waits a thread.
 */
class BarrierFreeGridTest {
    @Test
    void theGridCountsElementsNotBytes() {
        int perBlock = SymmetricKernels.THREADS * SymmetricKernels.BARRIER_FREE_ELEMENTS_PER_THREAD;
        assertThat(Distributed.barrierFreeGrid(64, 128)).isEqualTo(1);
        assertThat(Distributed.barrierFreeGrid(4096, 128)).isEqualTo(4096 / perBlock);
        assertThat(Distributed.barrierFreeGrid(65536, 128)).isEqualTo(65536 / perBlock);
        assertThat(Distributed.barrierFreeGrid(1L << 20, 128)).isEqualTo(128); // the resident cap
        assertThat(Distributed.barrierFreeGrid(0, 128)).isEqualTo(1);
    }
}
