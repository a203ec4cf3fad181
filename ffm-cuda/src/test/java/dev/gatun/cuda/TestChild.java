package dev.gatun.cuda;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

/** The other process of the two-process GPU tests. Prints protocol lines on stdout; "FAIL ..." on errors. */
public final class TestChild {
    private TestChild() {}

    public static void main(String[] args) {
        try {
            for (String k : Multicast.KILL_SWITCHES.keySet()) {
                System.out.println("ENV " + k + "=" + System.getenv(k));
            }
            switch (args[0]) {
                case "ipc" -> ipc(IpcMemHandle.fromHex(args[1]), Long.parseLong(args[2]));
                case "vmm-pidfd" -> vmm(FileDescriptors.takeFrom(Long.parseLong(args[1]), Integer.parseInt(args[2])),
                        Long.parseLong(args[3]));
                case "vmm-socket" -> {
                    int fd;
                    try (FileDescriptors.Channel c = FileDescriptors.Channel.connect(Path.of(args[1]))) {
                        fd = c.receive();
                    }
                    vmm(fd, Long.parseLong(args[2]));
                }
                case "nccl" -> nccl(NcclUniqueId.fromHex(args[1]), Integer.parseInt(args[2]), Integer.parseInt(args[3]));
                default -> throw new IllegalArgumentException(args[0]);
            }
            System.out.flush();
            System.exit(0);
        } catch (Throwable t) {
            System.out.println("FAIL " + t);
            t.printStackTrace();
            System.out.flush();
            System.exit(1);
        }
    }

    static byte pattern(long i) {
        return (byte) (i % 251);
    }

    private static void verify(byte[] b) {
        for (int i = 0; i < b.length; i++) {
            if (b[i] != pattern(i)) {
                throw new AssertionError("byte " + i + " is " + b[i] + ", expected " + pattern(i));
            }
        }
    }

    private static void ipc(IpcMemHandle h, long size) throws Exception {
        try (Device d1 = Device.open(otherGpu()); DeviceBuffer b = d1.openIpcBuffer(h, size)) {
            verify(b.toByteArray());
            System.out.println("READ_OK");
            b.memset(0x5A);
            d1.synchronize();
            System.out.println("WROTE");
            waitForParent();
        }
    }

    private static void vmm(int fd, long size) throws Exception {
        try (Device d1 = Device.open(otherGpu())) {
            PhysicalMemory mem = PhysicalMemory.importFileDescriptor(d1, fd, size);
            FileDescriptors.close(fd);
            VirtualRange range = VirtualRange.reserve(d1, size);
            range.map(0, mem);
            range.setAccess(0, size, d1);
            DeviceBuffer view = range.buffer(0, size);
            verify(view.toByteArray());
            System.out.println("READ_OK");
            view.memset(0xA5);
            d1.synchronize();
            System.out.println("WROTE");
            waitForParent();
        }
    }

    private static void nccl(NcclUniqueId id, int nranks, int rank) throws Exception {
        try (Device d = Device.open(rank); Stream s = d.createStream();
             NcclComm comm = NcclComm.init(d, id, nranks, rank)) {
            int n = 1 << 20;
            try (DeviceBuffer buf = d.allocate(n * 4L)) {
                float[] v = new float[n];
                java.util.Arrays.fill(v, rank + 1);
                buf.copyFrom(v);
                comm.allReduce(buf, buf, n, Nccl.DataType.FLOAT32, Nccl.RedOp.SUM, s);
                s.synchronize();
                comm.checkAsyncError();
                float[] out = buf.toFloatArray();
                float expected = nranks * (nranks + 1) / 2f;
                for (float f : out) {
                    if (f != expected) {
                        throw new AssertionError("all-reduce gave " + f + ", expected " + expected);
                    }
                }
                System.out.println("SUM_OK " + out[0]);
            }
        }
    }

    /** Keeps the child's mappings alive until the parent has checked its side and closes stdin. */
    private static void waitForParent() throws Exception {
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
    }

    /** GPU 1 where there are two; on a single-GPU machine the parent's GPU 0 (IPC and VMM work within one GPU too). */
    static int otherGpu() { return Device.count() > 1 ? 1 : 0; }
}
