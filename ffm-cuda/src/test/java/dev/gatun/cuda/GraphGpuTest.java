package dev.gatun.cuda;

import org.junit.jupiter.api.Test;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class GraphGpuTest extends GpuTest {
    @Test
    void capturedGraphOf100LaunchesReplaysUpdatesAndPrints() {
        int n = 4096;
        try (Device d = Device.open(0); Stream s = d.createStream(); Module m = Program.of("g.cu", SAXPY).load(d, null);
             DeviceBuffer x = d.allocate(n * 4L)) {
            Kernel add = m.kernel("add");
            x.memset(0);
            LaunchConfig cfg = LaunchConfig.cover(n, 256).withStream(s);
            CudaGraph graph;
            try (StreamCapture capture = s.beginCapture()) {
                assertThat(s.isCapturing()).isTrue();
                for (int i = 0; i < 100; i++) {
                    add.launch(cfg, x, 1.0f, n);
                }
                graph = capture.end();
            }
            assertThat(s.isCapturing()).isFalse();
            assertThat(graph.nodeCount()).isEqualTo(100);
            // nothing ran during capture
            assertThat(x.toFloatArray()).containsOnly(0f);
            try (GraphExec exec = graph.instantiate()) {
                exec.launch(s);
                s.synchronize();
                assertThat(x.toFloatArray()).containsOnly(100f);
                exec.launch(s);
                exec.launch(s);
                s.synchronize();
                assertThat(x.toFloatArray()).containsOnly(300f);

                // same topology, new argument: update in place
                CudaGraph g2;
                try (StreamCapture capture = s.beginCapture()) {
                    for (int i = 0; i < 100; i++) {
                        add.launch(cfg, x, 0.5f, n);
                    }
                    g2 = capture.end();
                }
                exec.update(g2);
                exec.launch(s);
                s.synchronize();
                assertThat(x.toFloatArray()).containsOnly(350f);
                g2.close();

                String dot = graph.toDot();
                assertThat(dot).contains("digraph").contains("add");
            }
            graph.close();
            graph.close();
        }
    }

    @Test
    void captureEndsEvenWhenTheBodyThrows() {
        try (Device d = Device.open(0); Stream s = d.createStream()) {
            StreamCapture[] ref = new StreamCapture[1];
            assertThatThrownBy(() -> {
                try (StreamCapture c = s.beginCapture()) {
                    ref[0] = c;
                    throw new IllegalStateException("boom");
                }
            }).isInstanceOf(IllegalStateException.class).hasMessage("boom");
            assertThat(s.isCapturing()).isFalse();
            try (CudaGraph empty = ref[0].graph()) {
                assertThat(empty.nodeCount()).isZero();
            }
            // the stream is usable again
            try (DeviceBuffer b = d.allocate(64)) {
                b.memsetAsync(1, s);
                s.synchronize();
                assertThat(b.toByteArray()).containsOnly((byte) 1);
            }
        }
    }
}
