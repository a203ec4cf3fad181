package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.planner.Planner;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * No kernel a one-GPU Llama decoder loads needs a stack frame (ptxas's own report, {@code nvcc -cubin -Xptxas -v},
 * sm_90): loading one that does, as a kernel calling {@code printf}, makes the driver reserve local memory for every
 * thread the GPU can hold, 67 MB on an H200 (measured by {@code MemoryProbe}), which counts against the decoder's
 * memory budget. Covers the fixed kernels (index_select, update_slice, argmax, GEMV, the small products, topk, gather
 * and scatter_add) and every kernel the planner
 * makes for the Llama-3.2-1B-shaped prefill (512 tokens) and decode (batch 1 and 8) plans. Skipped where nvcc is
 * absent.
 */
class KernelStackTest {
    static Path nvcc;

    @BeforeAll
    static void findNvcc() {
        nvcc = CudaCodegenFixtures.nvcc().orElse(null);
        assumeTrue(nvcc != null, "nvcc is not on the PATH: skipping the stack-frame check");
    }

    static final Pattern FUNCTION = Pattern.compile("Function properties for (\\S+)\\s*\\n\\s*(\\d+) bytes stack frame");

    /** Each entry function's stack frame in bytes, as ptxas reports it for {@code source}. */
    static Map<String, Integer> stackFrames(Path dir, String name, String source) throws IOException, InterruptedException {
        Path cu = dir.resolve(name + ".cu");
        Files.writeString(cu, source, StandardCharsets.UTF_8);
        Process p = new ProcessBuilder(nvcc.toString(), "-cubin", "-arch=sm_90", "-I/usr/local/cuda/include", "-std=c++17", "-Xptxas", "-v",
                cu.toString(), "-o", dir.resolve(name + ".cubin").toString()).directory(dir.toFile()).redirectErrorStream(true).start();
        String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(600, TimeUnit.SECONDS)).as("nvcc finished").isTrue();
        assertThat(p.exitValue()).as(log).isZero();
        var frames = new LinkedHashMap<String, Integer>();
        var m = FUNCTION.matcher(log);
        while (m.find()) frames.put(m.group(1), Integer.parseInt(m.group(2)));
        assertThat(frames).as("ptxas reported its functions:\n" + log).isNotEmpty();
        return frames;
    }

    @Test
    void theFixedKernelsNeedNoStack(@TempDir Path dir) throws Exception {
        var sources = Map.of("index_select", CudaIndexSelect.SOURCE, "update_slice", CudaUpdateSlice.SOURCE, "argmax", CudaArgmax.SOURCE,
                "gemv", CudaGemv.SOURCE, "attention", CudaAttention.SOURCE, "topk", CudaTopK.SOURCE, "gather_scatter", CudaGatherScatter.SOURCE,
                "expert_matmul", CudaExpertMatmul.SOURCE);
        for (var e : sources.entrySet())
            assertThat(stackFrames(dir, e.getKey(), e.getValue())).as(e.getKey()).allSatisfy((fn, bytes) -> assertThat(bytes).as(fn).isZero());
    }

    @Test
    void theLlamaPlansKernelsNeedNoStack(@TempDir Path dir) throws Exception {
        var c = new LlamaConfig(2048, 16, 32, 8, 8192, 128256, 500000, 1e-5, true);
        var graphs = List.of(LlamaDecoder.prefill(c, 512, 544, 1, DType.BFLOAT16), LlamaDecoder.decode(c, 1, 544, 1, DType.BFLOAT16),
                LlamaDecoder.decode(c, 8, 544, 1, DType.BFLOAT16),
                // float32, as the suite's token-for-token comparison with transformers runs it (LLAMA_DTYPE=f32)
                LlamaDecoder.prefill(c, 512, 544, 1, DType.FLOAT32), LlamaDecoder.decode(c, 1, 544, 1, DType.FLOAT32));
        var sources = new ArrayList<KernelSource>();
        var seen = new java.util.HashSet<String>();
        for (var g : graphs)
            for (var k : Planner.plan(Lowering.lower(g, LoweringOptions.world(1))).kernels()) {
                KernelSource src = CudaCodegen.generate(k);
                if (seen.add(src.source())) sources.add(src);
            }
        assertThat(sources).hasSizeGreaterThan(5);
        var unit = CudaCodegenFixtures.batch(sources);
        var frames = stackFrames(dir, "llama", unit.getKey());
        assertThat(frames.keySet()).as("every planned kernel reported").hasSizeGreaterThanOrEqualTo(sources.size());
        assertThat(frames).allSatisfy((fn, bytes) -> assertThat(bytes).as(fn).isZero());
    }
}
