package dev.gatun.runtime.host;

import dev.gatun.ir.DType;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import dev.gatun.runtime.testing.RowPrograms;
import org.junit.jupiter.api.Test;

import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;

/** Row kernels on the host backend (softmax, norms, sibling reductions, size-1 dims, NaN) against the reference interpreter. */
class RowKernelsDifferentialTest {

    @Test
    void rowProgramsMatchTheReference() {
        var cases = RowPrograms.cases(7, 160, List.of(DType.F32, DType.BF16, DType.F16, DType.F64));
        int rowKernels = 0;
        for (var c : cases) {
            var expected = ReferenceInterpreter.evaluate(c.graph(), List.of(c.inputs()));
            try (var s = Session.compile(c.graph(), CompileOptions.world(1).backend("host").roundEachOp())) {
                if (s.plan().kernels().stream().anyMatch(k -> k.reductions().size() > 1 || k.stores().stream().anyMatch(st -> !st.perRow()) && k.isReduction()))
                    rowKernels++;
                HostDifferentialTest.assertMatches(c.graph(), 0, expected, List.of(s.runToHost(c.inputs())));
            } catch (AssertionError e) {
                throw new AssertionError(c + ": " + e.getMessage(), e);
            }
        }
        // the cases do exercise kernels with several reductions or with element stores after a reduction
        assertThat(rowKernels).isGreaterThan(cases.size() / 2);
    }
}
