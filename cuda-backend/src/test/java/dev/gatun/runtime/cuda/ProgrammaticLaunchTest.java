package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.planner.Planner;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The rule that keeps programmatic dependent launches exact ({@link Programmatic}): every kernel that may be launched
 * that way waits for the kernel before it as its very first statement, before any memory access. Checked on the
 * source of every standalone kernel the planner makes (a few hundred random graphs and the Llama plans) and of the
 * fixed kernels launched that way (GEMV, index_select, update_slice, the small products); with nvcc, that the wait and the early launch
 * of dependents reach the PTX.
 */
class ProgrammaticLaunchTest {
    /** An entry point's signature up to the opening brace of its body, then the body's first statement. */
    static final Pattern ENTRY = Pattern.compile("extern \"C\" __global__ void[^{;]*?\\)\\s*(//[^\\n]*\\n\\s*)*\\{\\s*([^;]*;)", Pattern.DOTALL);

    /** The first statement of each entry point's body in {@code source} (after macro expansion of none). */
    static List<String> firstStatements(String source) {
        var out = new ArrayList<String>();
        var m = ENTRY.matcher(source);
        while (m.find()) out.add(m.group(2).trim());
        return out;
    }

    @Test
    void everyPlannedKernelWaitsFirst() {
        var sources = new ArrayList<KernelSource>(CudaCodegenFixtures.plannedSources(0, 120));
        var c = new LlamaConfig(2048, 16, 32, 8, 8192, 128256, 500000, 1e-5, true);
        for (var g : List.of(LlamaDecoder.prefill(c, 64, 96, 1, DType.BFLOAT16), LlamaDecoder.decode(c, 1, 96, 1, DType.BFLOAT16)))
            for (var k : Planner.plan(Lowering.lower(g, LoweringOptions.world(1))).kernels()) sources.add(CudaCodegen.generate(k));
        int checked = 0;
        for (KernelSource s : sources) {
            var first = firstStatements(s.source());
            assertThat(first).as(s.name() + ":\n" + s.source()).hasSize(1);
            assertThat(first.getFirst()).as(s.name()).isEqualTo("GATUN_DEPENDENT_START();");
            checked++;
        }
        assertThat(checked).isGreaterThan(60);
    }

    @Test
    void theFixedKernelsLaunchedThatWayWaitFirst() {
        assertThat(firstStatements(CudaIndexSelect.SOURCE)).as("index_select").containsExactly("GATUN_DEPENDENT_START();");
        assertThat(firstStatements(CudaUpdateSlice.SOURCE)).as("update_slice, one update and two").containsExactly("GATUN_DEPENDENT_START();",
                "GATUN_DEPENDENT_START();");
        // the GEMV entry points are made by two macros: both kernels wait after their setup of their grid's first block
        // and, where their weight is a graph input (`preload`), its first loop of the weight (and the column table a tiled
        // product passes, which is constant): nothing else is read before the wait (the PTX check below); the blocks a
        // capped grid loops over after it come after that wait
        for (String[] k : new String[][]{{"gemv_fma", "if (early) gv_fma_load<C>(a, wc, ok,", "xv", "b, b == (int) blockIdx.x)"},
                {"gemv_mma", "if (early) gv_mma_load<GV_MMA_UNROLL>(a, wr,", "xr", "blockIdx.x, true)"}}) {
            String body = CudaGemv.SOURCE.substring(CudaGemv.SOURCE.indexOf("__device__ __forceinline__ void " + k[0] + "_block("));
            String beforeWait = body.substring(0, body.indexOf("if (first) GATUN_DEPENDENT_START();"));
            assertThat(beforeWait).as(k[0] + ": nothing but the weight read before the wait").doesNotContain("__ldg(", k[2], "y[", "gv_add_slices")
                    .contains(k[1], "const bool early = preload && first;");
            String entry = CudaGemv.SOURCE.substring(CudaGemv.SOURCE.indexOf("__device__ void " + k[0] + "("));
            assertThat(entry.substring(0, entry.indexOf("\n}"))).as(k[0] + ": the grid's first block, and only it, waits")
                    .contains(k[0] + "_block", k[3]);
        }
        assertThat(CudaGemv.SOURCE.split("__global__", -1)).as("two entry macros").hasSize(3);
        // the attention loads its cache before the wait only where the step before is their update (`early`), q after it
        String at = CudaAttention.SOURCE.substring(CudaAttention.SOURCE.indexOf("__device__ void attention("));
        String atBefore = at.substring(0, at.indexOf("GATUN_DEPENDENT_START();"));
        assertThat(atBefore).contains("if (early) {").doesNotContain("qe[", "qs[e] = make_float4", "scratch[", "gatun_fail(");
        assertThat(atBefore.substring(0, atBefore.indexOf("if (early) {"))).as("nothing read outside the early block").doesNotContain("*(const", "kcol[", ".load(");
    }

    /**
     * In the PTX of every entry point of the fixed kernels launched that way (index_select, update_slice, the GEMV, the
     * small products, argmax, attention, topk, gather and scatter_add), the
     * wait comes before the first load from global memory, but the GEMV's streamed loads of its weight.
     */
    @Test
    void everyFixedEntryWaitsBeforeItsFirstLoad(@TempDir Path dir) throws Exception {
        Path nvcc = CudaCodegenFixtures.nvcc().orElse(null);
        assumeTrue(nvcc != null, "nvcc is not on the PATH");
        var entriesOf = Map.of("index_select", 1, "update_slice", 2, "gemv", 14, "argmax", 6, "attention", 33, "topk", 7, "gather_scatter", 12);
        var sources = Map.of("index_select", CudaIndexSelect.SOURCE, "update_slice", CudaUpdateSlice.SOURCE, "gemv", CudaGemv.SOURCE,
                "argmax", CudaArgmax.SOURCE, "attention", CudaAttention.SOURCE, "topk", CudaTopK.SOURCE, "gather_scatter", CudaGatherScatter.SOURCE);
        for (var e : sources.entrySet()) {
            var r = CudaCodegenFixtures.compile(nvcc, dir, e.getKey(), e.getValue());
            assertThat(r.ok()).as(r.log()).isTrue();
            assertThat(r.ptx()).contains("griddepcontrol.wait", "griddepcontrol.launch_dependents");
            String[] entries = r.ptx().split("\\.entry ");
            for (int i = 1; i < entries.length; i++) {
                String body = entries[i], name = body.substring(0, body.indexOf('('));
                // the GEMV's weight (streamed: ld.global.cs) may be loaded before the wait, where it is a graph input; the
                // attention's cache and position, where the step before is their update (the source check above)
                boolean streams = name.startsWith("gemv_");
                if (name.startsWith("attention_")) continue;
                int wait = body.indexOf("griddepcontrol.wait"), load = streams ? firstLoadOtherThanStreamed(body) : body.indexOf("ld.global");
                assertThat(wait).as(name).isGreaterThanOrEqualTo(0);
                if (load >= 0) assertThat(wait).as(name + ": the wait before the first load").isLessThan(load);
            }
            assertThat(entries.length - 1).as(e.getKey() + " entry points").isEqualTo(entriesOf.get(e.getKey()));
            if (e.getKey().equals("gemv")) assertThat(r.ptx()).contains("ld.global.cs");
        }
    }

    /** Where the first load from global memory that is not a streamed one ({@code ld.global.cs}) is, or -1. */
    static int firstLoadOtherThanStreamed(String ptx) {
        var m = java.util.regex.Pattern.compile("ld\\.global(?!\\.cs)").matcher(ptx);
        return m.find() ? m.start() : -1;
    }
}
