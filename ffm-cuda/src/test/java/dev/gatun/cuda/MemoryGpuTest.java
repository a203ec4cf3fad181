package dev.gatun.cuda;

import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class MemoryGpuTest extends GpuTest {
    /** Stream-ordered memory holds what work on its stream writes; freed on the stream, or plainly once the stream is gone. */
    @Test
    void streamOrderedMemoryIsUsableOnItsStreamAndFreedWithOrWithoutIt() {
        try (Device d = Device.open(0); Stream s = d.createStream()) {
            float[] src = new float[4096];
            for (int i = 0; i < src.length; i++) src[i] = i - 7.25f;
            try (PinnedHostBuffer pin = d.allocatePinned(src.length * 4L)) {
                pin.segment().copyFrom(MemorySegment.ofArray(src));
                DeviceBuffer a = s.allocate(src.length * 4L), b = s.allocate(src.length * 4L);
                a.copyFromAsync(pin, s);
                b.copyFromAsync(a, s);
                a.close(); // freed on the stream, after the copy that reads it
                pin.segment().fill((byte) 0);
                b.copyToAsync(pin, s);
                s.synchronize();
                float[] back = new float[src.length];
                pin.copyTo(back);
                assertThat(back).containsExactly(src);
                a.close(); // idempotent
                s.close();
                b.close(); // its stream is gone: freed plainly
                assertThat(b.isClosed()).isTrue();
            }
            assertThatThrownBy(() -> s.allocate(16)).isInstanceOf(IllegalStateException.class).hasMessageContaining("closed");
        }
    }

    @Test
    void copiesArraysSegmentsAndPinnedMemorySyncAndAsync() {
        try (Device d = Device.open(0); Stream s = d.createStream()) {
            int n = 1 << 16;
            float[] src = new float[n];
            for (int i = 0; i < n; i++) {
                src[i] = i * 0.5f;
            }
            try (DeviceBuffer a = d.allocate(n * 4L); DeviceBuffer b = d.allocate(n * 4L);
                 PinnedHostBuffer pin = d.allocatePinned(n * 4L)) {
                a.copyFrom(src);
                assertThat(a.toFloatArray()).containsExactly(src);
                // device to device, async
                b.copyFromAsync(a, s);
                pin.segment().fill((byte) 0);
                b.copyToAsync(pin, s);
                s.synchronize();
                float[] back = new float[n];
                pin.copyTo(back);
                assertThat(back).containsExactly(src);
                // pinned -> device async
                for (int i = 0; i < n; i++) {
                    pin.segment().setAtIndex(ValueLayout.JAVA_FLOAT, i, -i);
                }
                a.copyFromAsync(pin, s);
                s.synchronize();
                assertThat(a.toFloatArray()[n - 1]).isEqualTo(-(n - 1));
                // other element types, offsets and native segments
                int[] ints = {1, 2, 3, 4};
                a.copyFrom(MemorySegment.ofArray(ints), 16);
                int[] got = new int[4];
                a.copyTo(MemorySegment.ofArray(got), 16);
                assertThat(got).containsExactly(1, 2, 3, 4);
                try (Arena arena = Arena.ofConfined()) {
                    MemorySegment seg = arena.allocate(8);
                    seg.set(ValueLayout.JAVA_LONG, 0, 0x1122334455667788L);
                    a.copyFrom(seg);
                    long[] l = new long[1];
                    a.copyTo(l);
                    assertThat(l[0]).isEqualTo(0x1122334455667788L);
                }
                // memset, sync and async, and slices
                a.memset(0);
                a.slice(8, 8).memsetAsync(0xFF, s);
                s.synchronize();
                byte[] bytes = new byte[24];
                a.copyTo(bytes);
                assertThat(bytes).startsWith(0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1, 0);
                assertThatThrownBy(() -> a.copyFrom(new float[n + 1])).isInstanceOf(IndexOutOfBoundsException.class);
                assertThatThrownBy(() -> a.copyFromAsync(MemorySegment.ofArray(new float[4]), 0, s))
                        .isInstanceOf(IllegalArgumentException.class);
            }
        }
    }

    @Test
    void cudaErrorsCarryCallNameAndText() {
        try (Device d = Device.open(0)) {
            assertThatThrownBy(() -> d.allocate(1L << 50))
                    .isInstanceOfSatisfying(CudaException.class, e -> {
                        assertThat(e.call()).startsWith("cudaMalloc");
                        assertThat(e.errorName()).isEqualTo("cudaErrorMemoryAllocation");
                        assertThat(e.description()).isNotBlank();
                    });
        }
    }
}
