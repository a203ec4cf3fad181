package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.models.llama.LlamaConfig;
import dev.gatun.models.llama.LlamaDecoder;
import dev.gatun.planner.Planner;
import org.junit.jupiter.api.Test;

import java.util.HashSet;

import static org.assertj.core.api.Assertions.assertThat;

/** Which generated sources {@link SameSourceKernels} takes for one program, compiled once. */
class SameSourceKernelsTest {

    @Test
    void sourcesEqualButForTheirEntryNameAndCommentsAreOneProgram() {
        String a = "// kernel fused_add_1(buf3) -> buf4\nextern \"C\" __global__ void fused_add_1(float* x) { x[0] += 1; }  // buf4\n";
        String b = "// kernel fused_add_7(buf9) -> buf10\nextern \"C\" __global__ void fused_add_7(float* x) { x[0] += 1; }  // buf10\n";
        String c = "extern \"C\" __global__ void fused_add_8(float* x) { x[0] += 2; }\n";
        assertThat(SameSourceKernels.canonical(a, "fused_add_1")).isEqualTo(SameSourceKernels.canonical(b, "fused_add_7"));
        assertThat(SameSourceKernels.canonical(c, "fused_add_8")).isNotEqualTo(SameSourceKernels.canonical(a, "fused_add_1"));
    }

    @Test
    void aLongerNameThatStartsWithTheEntrysIsNotReplaced() {
        String a = "__device__ void fused_add_1_tile(float* x) { }\nextern \"C\" __global__ void fused_add_1(float* x) { fused_add_1_tile(x); }\n";
        assertThat(SameSourceKernels.canonical(a, "fused_add_1")).contains("fused_add_1_tile(x)", "void gatun_entry(");
    }

    @Test
    void anEntryNameInAStringLiteralIsNeverShared() {
        String a = "extern \"C\" __global__ void k_1(float* x) { printf(\"k_1 failed\"); }\n";
        assertThat(SameSourceKernels.canonical(a, "k_1")).isNull();
    }

    /** A four-layer decoder's kernels: the layers' kernels are the same programs, so far fewer programs than kernels. */
    @Test
    void aDecodersLayersShareTheirPrograms() {
        var c = new LlamaConfig(256, 4, 4, 2, 512, 1000, 500000, 1e-5, true);
        var plan = Planner.plan(Lowering.lower(LlamaDecoder.decode(c, 1, 64, 1, DType.BFLOAT16), LoweringOptions.world(1)));
        var programs = new HashSet<String>();
        int kernels = 0;
        for (var k : plan.kernels()) {
            var src = CudaCodegen.generate(k);
            String key = SameSourceKernels.canonical(src.source(), src.name());
            assertThat(key).as(src.name()).isNotNull();
            programs.add(key);
            kernels++;
        }
        assertThat(kernels).isGreaterThan(8);
        assertThat(programs.size()).as("programs of " + kernels + " kernels").isLessThan(kernels / 2);
    }
}
