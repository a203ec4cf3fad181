package dev.gatun.runtime.cuda;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Path;
import java.util.Arrays;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The small products' kernels ({@link CudaSmallMatmul#SOURCE}) as written: every entry point waits first (the rule of
 * {@link Programmatic}); with nvcc ({@code -ptx -arch=sm_90}, warnings as errors; skipped where it is absent), the
 * source compiles to its twelve entry points (three types, 4 or 8 rows, 16-byte vectors or one column a lane), B is
 * read in 16-byte vectors, and a split's count is the one acquire-release add.
 */
class SmallMatmulCompileTest {
    @Test
    void everyEntryPointWaitsFirst() {
        var first = ProgrammaticLaunchTest.firstStatements(CudaSmallMatmul.SOURCE);
        assertThat(first).hasSize(1).containsOnly("GATUN_DEPENDENT_START();");   // one macro makes every entry point
        assertThat(CudaSmallMatmul.SOURCE).contains("{ GATUN_DEPENDENT_START(); small_matmul<T, M, VEC>(");
    }

    @Test
    void compilesForSm90(@TempDir Path dir) throws Exception {
        Path nvcc = CudaCodegenFixtures.nvcc().orElse(null);
        assumeTrue(nvcc != null, "nvcc is not on the PATH: skipping the compile check");
        var r = CudaCodegenFixtures.compile(nvcc, dir, "small_matmul", CudaSmallMatmul.SOURCE);
        assertThat(r.ok()).as(r.log()).isTrue();
        String[] entries = r.ptx().split("\\.entry ");
        var names = Arrays.stream(entries).skip(1).map(e -> e.substring(0, e.indexOf('(')).trim()).toList();
        for (String t : new String[]{"f32", "f16", "bf16"})
            for (int m : new int[]{4, 8})
                for (boolean vector : new boolean[]{true, false})
                    assertThat(names).contains(CudaSmallMatmul.kernel(dev.gatun.ir.DType.parse(t), m, vector));
        assertThat(names).hasSize(12);
        for (int i = 1; i < entries.length; i++) {
            String body = entries[i], name = names.get(i - 1);
            assertThat(body).as(name).contains("griddepcontrol.wait", "atom.acq_rel.gpu.global.add.u32", "ld.global.cg.f32");
            if (name.contains("_vec_")) assertThat(body).as(name + ": 16-byte loads of B").contains("ld.global.nc.v4");
        }
    }
}
