package dev.gatun.runtime.cuda;

import dev.gatun.runtime.GatunRuntimeException;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatCode;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The decisions every rank takes from the all-gathered (GPU, process, multiprocessors, MPS) facts; no GPU needed. */
class GpuSharingTest {
    static GpuSharing.Rank rank(int r, String gpu, long pid, boolean mps) { return new GpuSharing.Rank(r, gpu, pid, 132, mps); }

    @Test
    void ranksOnTheirOwnGpusNeedNothing() {
        var s = new GpuSharing(List.of(rank(0, "GPU-a", 1, false), rank(1, "GPU-b", 2, false)), 1, 8);
        assertThat(s.mostRanksOnOneGpu()).isEqualTo(1);
        assertThatCode(() -> s.check("p", true, true)).doesNotThrowAnyException();
    }

    @Test
    void threadsSharingAGpuDivideItsMultiprocessors() {
        var s = new GpuSharing(List.of(rank(0, "GPU-a", 7, false), rank(1, "GPU-a", 7, false), rank(2, "GPU-a", 7, false),
                new GpuSharing.Rank(3, "GPU-b", 7, 114, false)), 3, 8);
        assertThat(s.mostRanksOnOneGpu()).isEqualTo(3);
        assertThat(s.fewestMultiprocessors()).isEqualTo(114);
        assertThatCode(() -> s.check("p", true, false)).doesNotThrowAnyException();
    }

    @Test
    void sharingWithoutAskingIsRefusedWithTheFix() {
        var s = new GpuSharing(List.of(rank(0, "GPU-a", 1, false), rank(1, "GPU-a", 2, false)), 1, 8);
        assertThatThrownBy(() -> s.check("seeds", false, false)).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("plan 'seeds': ranks [0, 1] all run on GPU GPU-a")
                .hasMessageContaining("ranksPerGpu(2)").hasMessageContaining("--ranks-per-gpu 2");
    }

    @Test
    void ncclWithRanksSharingAGpuIsRefused() {
        var s = new GpuSharing(List.of(rank(0, "GPU-a", 1, false), rank(1, "GPU-a", 1, false)), 2, 8);
        assertThatThrownBy(() -> s.check("p", false, true)).hasMessageContaining("NCCL, which refuses two ranks on one device");
    }

    @Test
    void moreRanksOfOneProcessThanHardwareQueuesAreRefused() {
        var ranks = new java.util.ArrayList<GpuSharing.Rank>();
        for (int r = 0; r < 9; r++) ranks.add(rank(r, "GPU-a", 1, false));
        assertThatThrownBy(() -> new GpuSharing(ranks, 9, 8).check("p", true, false)).hasMessageContaining("9 ranks of one process share GPU GPU-a")
                .hasMessageContaining("CUDA_DEVICE_MAX_CONNECTIONS=32");
        assertThatCode(() -> new GpuSharing(ranks, 9, 32).check("p", true, false)).doesNotThrowAnyException();
    }

    @Test
    void processesTimeSlicedOnOneGpuAreRefusedOnlyWhenTheyWouldSpin() {
        var noMps = new GpuSharing(List.of(rank(0, "GPU-a", 1, false), rank(1, "GPU-a", 2, false)), 2, 8);
        assertThatThrownBy(() -> noMps.check("p", true, false)).hasMessageContaining("separate processes without the Multi-Process Service")
                .hasMessageContaining("threads of one process").hasMessageContaining("nvidia-cuda-mps-control -d");
        assertThatCode(() -> noMps.check("p", false, false)).as("no barrier, nothing spins").doesNotThrowAnyException();
        var mps = new GpuSharing(List.of(rank(0, "GPU-a", 1, true), rank(1, "GPU-a", 2, true)), 2, 8);
        assertThatCode(() -> mps.check("p", true, false)).doesNotThrowAnyException();
    }
}
