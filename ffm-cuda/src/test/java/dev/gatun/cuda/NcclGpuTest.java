package dev.gatun.cuda;

import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/** NCCL with two devices driven from two threads of this process (one rank each). */
class NcclGpuTest extends GpuTest {
    interface RankBody {
        void run(Device d, Stream s, NcclComm comm) throws Exception;
    }

    private static void onTwoRanks(RankBody body) throws Exception {
        requireDevices(2);
        NcclUniqueId id = Nccl.uniqueId();
        ExecutorService ex = Executors.newFixedThreadPool(2);
        try {
            List<Future<?>> fs = new ArrayList<>();
            for (int rank = 0; rank < 2; rank++) {
                final int r = rank;
                fs.add(ex.submit(() -> {
                    try (Device d = Device.open(r); Stream s = d.createStream(); NcclComm comm = NcclComm.init(d, id, 2, r)) {
                        assertThat(comm.rank()).isEqualTo(r);
                        assertThat(comm.size()).isEqualTo(2);
                        body.run(d, s, comm);
                        comm.checkAsyncError();
                    }
                    return null;
                }));
            }
            for (Future<?> f : fs) {
                f.get(180, TimeUnit.SECONDS);
            }
        } finally {
            ex.shutdownNow();
        }
    }

    private static float[] filled(int n, float v) {
        float[] a = new float[n];
        java.util.Arrays.fill(a, v);
        return a;
    }

    @Test
    void collectives() throws Exception {
        onTwoRanks((d, s, comm) -> {
            int r = comm.rank();
            int n = 1 << 16;
            try (DeviceBuffer send = d.allocate(2L * n * 4); DeviceBuffer recv = d.allocate(2L * n * 4)) {
                send.copyFrom(filled(2 * n, r + 1));
                comm.allReduce(send, recv, 2L * n, Nccl.DataType.FLOAT32, Nccl.RedOp.SUM, s);
                s.synchronize();
                assertThat(recv.toFloatArray()).containsOnly(3f);

                comm.allReduce(send, recv, 2L * n, Nccl.DataType.FLOAT32, Nccl.RedOp.MAX, s);
                s.synchronize();
                assertThat(recv.toFloatArray()).containsOnly(2f);

                // reduce-scatter: each rank gets n reduced elements
                comm.reduceScatter(send, recv, n, Nccl.DataType.FLOAT32, Nccl.RedOp.SUM, s);
                s.synchronize();
                assertThat(recv.slice(0, n * 4L).toFloatArray()).containsOnly(3f);

                // all-gather: rank r contributes n values r+1
                comm.allGather(send.slice(0, n * 4L), recv, n, Nccl.DataType.FLOAT32, s);
                s.synchronize();
                float[] g = recv.toFloatArray();
                assertThat(g[0]).isEqualTo(1f);
                assertThat(g[n]).isEqualTo(2f);

                // broadcast from rank 1
                comm.broadcast(send, recv, 2L * n, Nccl.DataType.FLOAT32, 1, s);
                s.synchronize();
                assertThat(recv.toFloatArray()).containsOnly(2f);

                // send/recv exchange in a group
                recv.memset(0);
                Nccl.group(() -> {
                    comm.send(send, n, Nccl.DataType.FLOAT32, 1 - r, s);
                    comm.recv(recv, n, Nccl.DataType.FLOAT32, 1 - r, s);
                });
                s.synchronize();
                assertThat(recv.slice(0, n * 4L).toFloatArray()).containsOnly((float) (2 - r));
            }
            assertThat(comm.asyncError()).isZero();
        });
    }

    @Test
    void splitAndAbort() throws Exception {
        onTwoRanks((d, s, comm) -> {
            try (NcclComm alone = comm.split(comm.rank(), 0)) {
                assertThat(alone.size()).isEqualTo(1);
                assertThat(alone.rank()).isZero();
                try (DeviceBuffer b = d.allocate(1024)) {
                    b.copyFrom(filled(256, 5f));
                    alone.allReduce(b, b, 256, Nccl.DataType.FLOAT32, Nccl.RedOp.SUM, s);
                    s.synchronize();
                    assertThat(b.toFloatArray()).containsOnly(5f);
                }
                alone.abort();
                assertThat(alone.isClosed()).isTrue();
            }
        });
    }

    @Test
    void memAllocAndSymmetricWindowRegistration() throws Exception {
        onTwoRanks((d, s, comm) -> {
            assertThat(Nccl.hasWindows()).as("NCCL %d has ncclCommWindowRegister", Nccl.version()).isTrue();
            long bytes = 8L << 20;
            try (DeviceBuffer buf = Nccl.memAlloc(d, bytes)) {
                buf.copyFrom(filled((int) (bytes / 4), comm.rank() + 1));
                NcclWindow w = comm.registerWindow(buf);
                try {
                    System.out.println("[gpu] rank " + comm.rank() + ": " + w);
                    assertThat(w.isSymmetric()).isTrue();
                    assertThat(w.ownsMemory()).isFalse();
                    comm.allReduce(buf, buf, bytes / 4, Nccl.DataType.FLOAT32, Nccl.RedOp.SUM, s);
                    s.synchronize();
                    assertThat(buf.toFloatArray()).containsOnly(3f);
                } finally {
                    w.close();
                }
                w.close(); // idempotent: deregistered once (a second collective deregistration would hang or fail)
                assertThat(w.isClosed()).isTrue();
            }
        });
    }

    @Test
    void ownedWindowsRunSmallAllReducesInAGraphAndRefuseCudaMallocMemory() throws Exception {
        onTwoRanks((d, s, comm) -> {
            int n = 64; // 256 B: the symmetric kernels' low-latency range
            try (NcclWindow w = comm.allocateWindow(2L * n * 4)) {
                assertThat(w.ownsMemory()).isTrue();
                DeviceBuffer send = w.buffer().slice(0, n * 4L), recv = w.buffer().slice(n * 4L, n * 4L);
                float[] in = new float[n];
                for (int i = 0; i < n; i++) in[i] = (i % 7 + 1) * (comm.rank() + 1);
                send.copyFrom(in);
                CudaGraph graph;
                try (StreamCapture capture = s.beginCapture()) {
                    comm.allReduce(send, recv, n, Nccl.DataType.FLOAT32, Nccl.RedOp.SUM, s);
                    graph = capture.end();
                }
                try (graph; GraphExec exec = graph.instantiate()) {
                    for (int k = 0; k < 3; k++) exec.launch(s);
                    s.synchronize();
                }
                float[] out = recv.toFloatArray();
                for (int i = 0; i < n; i++) assertThat(out[i]).isEqualTo((i % 7 + 1) * 3f);
            }
            try (DeviceBuffer plain = d.allocate(4096)) {
                org.assertj.core.api.Assertions.assertThatThrownBy(() -> comm.registerWindow(plain))
                        .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("CUDA_MALLOC");
            }
        });
    }

    @Test
    void ncclErrorsCarryTheLastErrorText() throws Exception {
        onTwoRanks((d, s, comm) -> {
            try (DeviceBuffer b = d.allocate(64)) {
                org.assertj.core.api.Assertions.assertThatThrownBy(
                        () -> comm.send(b, 4, Nccl.DataType.FLOAT32, 7, s)) // no such peer
                        .isInstanceOfSatisfying(NcclException.class, e -> {
                            assertThat(e.call()).isEqualTo("ncclSend");
                            assertThat(e.errorName()).isNotBlank();
                            System.out.println("[gpu] expected NCCL error: " + e.getMessage());
                        });
            }
        });
    }
}
