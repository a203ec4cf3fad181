package dev.gatun.cuda;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;

import static org.assertj.core.api.Assertions.assertThat;

/** IPC, VMM file-descriptor import and NCCL across two processes on two GPUs. */
class MultiProcessGpuTest extends GpuTest {
    private static final long SIZE = 1 << 21;

    private static byte[] pattern(long n) {
        byte[] b = new byte[(int) n];
        for (int i = 0; i < b.length; i++) {
            b[i] = TestChild.pattern(i);
        }
        return b;
    }

    private static void checkEnvInherited(ChildJvm child) throws Exception {
        for (String k : new java.util.TreeSet<>(Multicast.KILL_SWITCHES.keySet())) {
            // the child prints them in KILL_SWITCHES order; find each
            String line = child.expect("ENV ");
            String name = line.substring(0, line.indexOf('='));
            assertThat(line.substring(line.indexOf('=') + 1)).as(name).isEqualTo(String.valueOf(System.getenv(name)));
            assertThat(k).isNotNull();
        }
    }

    @Test
    void ipcHandleOpenedInAnotherProcessOnTheOtherGpu() throws Exception {
        // on a single-GPU machine the child opens the handle on the same GPU, as ranks sharing it do
        try (Device d0 = Device.open(0); DeviceBuffer buf = d0.allocate(SIZE)) {
            buf.copyFrom(pattern(SIZE));
            IpcMemHandle h = buf.ipcHandle();
            try (ChildJvm child = ChildJvm.start("ipc", h.toHex(), Long.toString(SIZE))) {
                checkEnvInherited(child);
                child.expect("READ_OK");
                child.expect("WROTE");
                assertThat(buf.toByteArray()).containsOnly((byte) 0x5A);
                child.in.close();
                assertThat(child.waitFor()).isZero();
            }
        }
    }

    private static void vmmRoundTrip(String transport, Path dir) throws Exception {
        // the child maps the memory on GPU 1 where there is one, else on the same GPU
        try (Device d0 = Device.open(0)) {
            long g = PhysicalMemory.granularity(d0, false);
            long size = PhysicalMemory.roundUp(SIZE, g);
            try (PhysicalMemory mem = PhysicalMemory.create(d0, size); VirtualRange range = VirtualRange.reserve(d0, size)) {
                range.map(0, mem);
                range.setAccess(0, size, d0);
                DeviceBuffer view = range.buffer(0, size);
                view.copyFrom(pattern(size));
                int fd = mem.exportFileDescriptor();
                ChildJvm child;
                if (transport.equals("pidfd")) {
                    child = ChildJvm.start("vmm-pidfd", Long.toString(ProcessHandle.current().pid()),
                            Integer.toString(fd), Long.toString(size));
                } else {
                    Path sock = dir.resolve("vmm.sock");
                    try (FileDescriptors.Channel server = FileDescriptors.Channel.listen(sock)) {
                        child = ChildJvm.start("vmm-socket", sock.toString(), Long.toString(size));
                        CompletableFuture<Void> sent = CompletableFuture.runAsync(() -> {
                            try (FileDescriptors.Channel peer = server.accept()) {
                                peer.send(fd);
                            }
                        });
                        sent.get(60, java.util.concurrent.TimeUnit.SECONDS);
                    }
                }
                try (child) {
                    checkEnvInherited(child);
                    child.expect("READ_OK");
                    child.expect("WROTE");
                    assertThat(view.toByteArray()).containsOnly((byte) 0xA5);
                    child.in.close();
                    assertThat(child.waitFor()).isZero();
                } finally {
                    FileDescriptors.close(fd);
                }
            }
        }
    }

    @Test
    void vmmFileDescriptorImportedInAnotherProcessViaPidfd(@TempDir Path dir) throws Exception {
        vmmRoundTrip("pidfd", dir);
    }

    @Test
    void vmmFileDescriptorImportedInAnotherProcessViaScmRights(@TempDir Path dir) throws Exception {
        vmmRoundTrip("socket", dir);
    }

    @Test
    void ncclAllReduceAcrossTwoProcesses() throws Exception {
        requireDevices(2);
        NcclUniqueId id = Nccl.uniqueId();
        System.out.println("[gpu] NCCL version " + Nccl.version());
        try (ChildJvm child = ChildJvm.start("nccl", id.toHex(), "2", "1")) {
            CompletableFuture<String> childSum = CompletableFuture.supplyAsync(() -> {
                try {
                    return child.expect("SUM_OK");
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            try (Device d0 = Device.open(0); Stream s = d0.createStream(); NcclComm comm = NcclComm.init(d0, id, 2, 0);
                 DeviceBuffer buf = d0.allocate(4L << 20)) {
                float[] v = new float[1 << 20];
                java.util.Arrays.fill(v, 1f);
                buf.copyFrom(v);
                comm.allReduce(buf, buf, 1 << 20, Nccl.DataType.FLOAT32, Nccl.RedOp.SUM, s);
                s.synchronize();
                assertThat(buf.toFloatArray()).containsOnly(3f);
            }
            assertThat(childSum.get(120, java.util.concurrent.TimeUnit.SECONDS)).isEqualTo("3.0");
            assertThat(child.waitFor()).isZero();
        }
    }
}
