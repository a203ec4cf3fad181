package dev.gatun.runtime.cuda;

import dev.gatun.cuda.RequiresGpu;
import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import dev.gatun.runtime.testing.RowPrograms;
import org.junit.jupiter.api.Test;

import java.util.List;

/**
 * Row kernels (softmax, norms, sibling reductions, reordered loops, size-1 dimensions, NaN) generated for the GPU,
 * against the reference interpreter: the small shapes of the host's test and rows long enough for every path of the
 * generated code (held on chip, looped, not a multiple of the vector width).
 */
@RequiresGpu
class RowKernelsGpuTest {

    static void check(List<RowPrograms.Case> cases) {
        for (var c : cases) {
            var want = ReferenceInterpreter.evaluate(c.graph(), List.of(c.inputs())).getFirst();
            try (var s = Session.compile(c.graph(), CompileOptions.world(1).backend("cuda"))) {
                for (int call = 0; call < 2; call++) CudaBackendGpuTest.assertMatches(c + " call " + call, c.graph(), want, s.runToHost(c.inputs()));
            }
        }
    }

    @Test
    void smallRowProgramsMatchTheReference() {
        check(RowPrograms.cases(11, 88, List.of(DType.F32, DType.BF16, DType.F16, DType.F64)));
    }

    @Test
    void longRowsMatchTheReference() {
        long[][] shapes = {{64, 4096}, {33, 1000}, {3, 20000}, {130, 1024}, {8, 1, 2048}, {2, 65536}};
        check(RowPrograms.cases(12, 33, List.of(DType.F32, DType.BF16), shapes));
    }

    /** Transposing row kernels (32 rows per block through a shared tile): partial tiles of rows and of elements, every dtype. */
    @Test
    void transposedStoresMatchTheReference() {
        long[][] shapes = {{33, 1000}, {130, 257}, {64, 4096}, {1, 300}, {2, 3, 40}, {32, 256}};
        check(RowPrograms.cases(13, List.of("loop_order"), List.of(DType.F32, DType.BF16, DType.F16, DType.F64), shapes));
    }
}
