package dev.gatun.cuda;

import org.junit.jupiter.api.Test;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import static org.assertj.core.api.Assertions.assertThat;

class StreamEventGpuTest extends GpuTest {
    @Test
    void eventsTimeAndOrderStreams() throws Exception {
        try (Device d = Device.open(0); Stream s1 = d.createStream(); Stream s2 = d.createStream();
             Event start = d.createEvent(); Event end = d.createEvent(); Event between = d.createEvent(Event.Flag.DISABLE_TIMING);
             DeviceBuffer big = d.allocate(256L << 20); DeviceBuffer copy = d.allocate(256L << 20)) {
            start.record(s1);
            big.memsetAsync(3, s1);
            s1.record(between);
            s2.waitFor(between);           // s2 waits for the memset on s1
            copy.copyFromAsync(big, s2);
            end.record(s2);
            end.synchronize();
            assertThat(end.isDone()).isTrue();
            float ms = Event.elapsedMillis(start, end);
            System.out.println("[gpu] memset+copy of 256 MiB: " + ms + " ms");
            assertThat(ms).isPositive();
            assertThat(copy.slice((256L << 20) - 16, 16).toByteArray()).containsOnly((byte) 3);
            assertThat(start.hasTiming()).isTrue();
            assertThat(between.hasTiming()).isFalse();
        }
    }

    @Test
    void hostCallbackRunsAfterPrecedingWork() throws Exception {
        try (Device d = Device.open(0); Stream s = d.createStream(); DeviceBuffer b = d.allocate(64L << 20)) {
            CountDownLatch done = new CountDownLatch(1);
            AtomicReference<String> thread = new AtomicReference<>();
            b.memsetAsync(1, s);
            s.onHost(() -> {
                thread.set(Thread.currentThread().getName());
                done.countDown();
            });
            s.onHost(() -> { throw new IllegalStateException("a throwing callback must not crash the JVM"); });
            assertThat(done.await(10, TimeUnit.SECONDS)).isTrue();
            s.synchronize();
            assertThat(s.isDone()).isTrue();
            assertThat(thread.get()).isNotNull();
        }
    }

    @Test
    void interprocessEventExportsA64ByteHandle() {
        try (Device d = Device.open(0); Event e = d.createEvent(Event.Flag.INTERPROCESS)) {
            assertThat(e.hasTiming()).isFalse();
            IpcEventHandle h = e.ipcHandle();
            assertThat(h.bytes()).hasSize(64);
            assertThat(h.bytes()).isNotEqualTo(new byte[64]);
        }
    }
}
