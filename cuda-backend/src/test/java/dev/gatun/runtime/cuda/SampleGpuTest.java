package dev.gatun.runtime.cuda;

import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.host.SampleHostTest;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * {@code sample} on the GPU draws the host backend's tokens, token for token: rows of a vocabulary's width and short
 * ones, f32, bf16 and f16, every row its own parameters (temperature 0 among them, top-k, top-p, min-p, penalties, a
 * context with repeats and ids outside the vocabulary) and seed, over several steps; and again in the same session
 * (nothing carried over from the call before).
 */
@RequiresGpu
class SampleGpuTest {
    @Test
    void theGpuDrawsTheHostsTokens() {
        for (int cols : new int[]{128256, 1000, 7})
            for (DType t : List.of(DType.F32, DType.BF16, DType.F16)) {
                int rows = 24;
                var graph = SampleHostTest.graph(rows, cols, t, 8, 1);
                var calls = SampleHostTest.randomCalls(rows, cols, t, cols + t.ordinal(), 3);
                try (var gpu = Session.compile(graph, CompileOptions.world(1).backend("cuda"));
                     var host = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
                    assertThat(gpu.device()).startsWith("cuda");
                    for (int k = 0; k < calls.size(); k++) {
                        NDArray want = host.runToHost(calls.get(k)).get("next");
                        for (int again = 0; again < 2; again++) {
                            NDArray got = gpu.runToHost(calls.get(k)).get("next");
                            for (int r = 0; r < rows; r++)
                                assertThat(got.getLong(r)).as("%s cols %d call %d row %d (try %d)", t, cols, k, r, again).isEqualTo(want.getLong(r));
                        }
                    }
                }
            }
    }
}
