package dev.gatun.cuda;

import org.junit.jupiter.api.Test;

import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class DeviceGpuTest extends GpuTest {
    @Test
    void reportsPropertiesAndComputeCapability() {
        CudaProbe p = Cuda.probe();
        System.out.println("[gpu] " + p);
        assertThat(p.deviceCount()).isPositive();
        assertThat(p.driverVersion()).isGreaterThanOrEqualTo(13000);
        try (Device d = Device.open(0)) {
            System.out.println("[gpu] device 0: " + d.name() + " cc " + d.computeCapability() + " SMs "
                    + d.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT));
            assertThat(d.name()).isNotBlank();
            assertThat(d.computeCapability().major()).isGreaterThanOrEqualTo(7);
            assertThat(d.arch()).matches("sm_\\d+");
            assertThat(d.attribute(DeviceAttribute.WARP_SIZE)).isEqualTo(32);
            assertThat(d.attribute(DeviceAttribute.MAX_THREADS_PER_BLOCK)).isEqualTo(1024);
            assertThat(d.attribute(DeviceAttribute.MULTIPROCESSOR_COUNT)).isPositive();
            long[] mem = d.memoryInfo();
            assertThat(mem[0]).isPositive().isLessThanOrEqualTo(mem[1]);
        }
        assertThatThrownBy(() -> Device.open(Device.count())).isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void peerAccessBetweenTwoDevices() {
        requireDevices(2);
        try (Device d0 = Device.open(0); Device d1 = Device.open(1)) {
            boolean can = d0.canAccessPeer(d1);
            System.out.println("[gpu] peer access 0->1: " + can);
            if (can) {
                d0.enablePeerAccess(d1);
                d0.enablePeerAccess(d1); // idempotent
                try (DeviceBuffer a = d0.allocate(1024); DeviceBuffer b = d1.allocate(1024)) {
                    b.memset(7);
                    a.copyFrom(b); // peer copy
                    assertThat(a.toByteArray()).containsOnly((byte) 7);
                }
            }
        }
    }

    @Test
    void closingTheDeviceClosesItsChildrenIdempotently() {
        Device d = Device.open(0);
        DeviceBuffer buf = d.allocate(4096);
        Stream s = d.createStream();
        Event e = d.createEvent();
        assertThat(d.openChildren()).isEqualTo(3);
        buf.close();
        buf.close();
        assertThat(d.openChildren()).isEqualTo(2);
        d.close();
        assertThat(s.isClosed()).isTrue();
        assertThat(e.isClosed()).isTrue();
        d.close();
        assertThatThrownBy(() -> s.synchronize()).isInstanceOf(IllegalStateException.class);
        assertThatThrownBy(() -> d.allocate(16)).isInstanceOf(IllegalStateException.class);
    }

    @Test
    void concurrentCloseIsSafe() throws Exception {
        try (Device d = Device.open(0)) {
            List<DeviceBuffer> bufs = new ArrayList<>();
            for (int i = 0; i < 16; i++) {
                bufs.add(d.allocate(1 << 16));
            }
            try (var ex = Executors.newFixedThreadPool(8)) {
                List<Future<?>> fs = new ArrayList<>();
                for (int t = 0; t < 8; t++) {
                    fs.add(ex.submit(() -> bufs.forEach(DeviceBuffer::close)));
                }
                for (Future<?> f : fs) {
                    f.get();
                }
            }
            assertThat(d.openChildren()).isZero();
        }
    }

    @Test
    void worksFromManyVirtualThreads() throws Exception {
        try (Device d = Device.open(0); var ex = Executors.newVirtualThreadPerTaskExecutor()) {
            List<Future<float[]>> fs = new ArrayList<>();
            for (int t = 0; t < 64; t++) {
                final int v = t;
                fs.add(ex.submit(() -> {
                    try (DeviceBuffer b = d.allocate(256 * 4)) {
                        float[] in = new float[256];
                        java.util.Arrays.fill(in, v);
                        b.copyFrom(in);
                        Thread.yield();
                        return b.toFloatArray();
                    }
                }));
            }
            for (int t = 0; t < 64; t++) {
                assertThat(fs.get(t).get()).containsOnly((float) t);
            }
        }
    }
}
