package dev.gatun.cuda;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

class ProgramGpuTest extends GpuTest {
    @Test
    void nvrtcCompiledKernelGivesRightResults(@TempDir Path cacheDir) {
        KernelCache cache = KernelCache.at(cacheDir);
        try (Device d = Device.open(0); Stream s = d.createStream()) {
            Program p = Program.of("saxpy.cu", SAXPY);
            System.out.println("[gpu] NVRTC " + Program.nvrtcVersion() + ", arch " + d.arch());
            int n = 100_003;
            float[] x = new float[n];
            float[] y = new float[n];
            for (int i = 0; i < n; i++) {
                x[i] = i;
                y[i] = 2 * i + 1;
            }
            try (Module m = p.load(d, cache); DeviceBuffer dx = d.allocate(n * 4L); DeviceBuffer dy = d.allocate(n * 4L)) {
                assertThat(m.fromCache()).isFalse();
                dx.copyFrom(x);
                dy.copyFrom(y);
                m.kernel("saxpy").launch(LaunchConfig.cover(n, 256).withStream(s), 3.0f, dx, dy, n);
                s.synchronize();
                float[] out = dy.toFloatArray();
                for (int i = 0; i < n; i++) {
                    assertThat(out[i]).isEqualTo(3.0f * i + 2 * i + 1);
                }
            }
            try (Module again = p.load(d, cache)) {
                assertThat(again.fromCache()).isTrue();
                assertThat(again.kernel("add").name()).isEqualTo("add");
            }
            assertThat(cacheDir.resolve(p.cacheKey(d.arch()) + ".cubin")).exists();
        }
    }

    @Test
    void headersOptionsAndPtx() {
        try (Device d = Device.open(0)) {
            Program p = Program.of("scale.cu", """
                    #include "scale.h"
                    extern "C" __global__ void scale(float* x) { x[threadIdx.x] *= FACTOR * OFFSET; }
                    """).withHeader("scale.h", "#define OFFSET 2.0f\n")
                    .withOptions(ProgramOptions.parse("-DFACTOR=3.0f --use_fast_math"));
            assertThat(p.compileToPtx(d.arch())).contains(".target " + d.arch()).contains("scale");
            try (Module m = p.load(d, null); DeviceBuffer b = d.allocate(32 * 4)) {
                float[] in = new float[32];
                java.util.Arrays.fill(in, 1.5f);
                b.copyFrom(in);
                m.kernel("scale").launch(LaunchConfig.of(1, 32), b);
                assertThat(b.toFloatArray()).containsOnly(9.0f);
            }
        }
    }

    @Test
    void compileErrorCarriesTheLog() {
        Program bad = Program.of("bad.cu", "extern \"C\" __global__ void k() { undefined_thing = 1; }");
        assertThatThrownBy(() -> bad.compile("sm_90")).isInstanceOfSatisfying(CompileException.class, e -> {
            assertThat(e.log()).contains("undefined_thing");
            assertThat(e.getMessage()).contains("bad.cu").contains("NVRTC_ERROR_COMPILATION");
        });
        try (Device d = Device.open(0)) {
            assertThatThrownBy(() -> d.loadModule(new byte[] {1, 2, 3})).isInstanceOfSatisfying(CudaException.class,
                    e -> assertThat(e.call()).isEqualTo("cuModuleLoadData"));
        }
    }
}
