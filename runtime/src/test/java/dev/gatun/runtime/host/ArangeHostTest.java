package dev.gatun.runtime.host;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.GraphException;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.reference.ReferenceInterpreter;
import org.junit.jupiter.api.Test;

import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** arange: 0..n-1 in any dtype that holds them, and the masks a decode step builds from it and a position given per call. */
class ArangeHostTest {

    @Test
    void zeroToNMinusOneInEveryDtypeThatHoldsThem() {
        for (DType t : List.of(DType.I32, DType.I64, DType.F32, DType.F64, DType.BF16, DType.F16, DType.I8)) {
            long n = t == DType.I8 ? 100 : t == DType.BF16 ? 257 : 300;
            var g = Gatun.graph("iota");
            g.output("i", g.arange(t, n));
            try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("host"))) {
                double[] got = s.runToHost(Map.<String, NDArray>of()).get("i").toDoubleArray();
                assertThat(got).hasSize((int) n);
                for (int i = 0; i < n; i++) assertThat(got[i]).as("%s element %d", t, i).isEqualTo(i);
            }
        }
        var empty = Gatun.graph("none");
        assertThat(empty.arange(DType.F32, 0).shape().dims()).hasSize(1);
    }

    @Test
    void aValueTheDtypeCannotHoldIsRefusedWithTheFix() {
        var g = Gatun.graph("bad");
        assertThatThrownBy(() -> g.arange(DType.BF16, 258)).isInstanceOf(GraphException.class)
                .hasMessageContaining("arange(258) in bf16: 257 is not exact in bf16 (it holds integers to 256)")
                .hasMessageContaining("use an integer dtype or a wider float and cast");
        assertThatThrownBy(() -> g.arange(DType.F32, -1)).hasMessageContaining("arange(-1): the length must not be negative");
        assertThatThrownBy(() -> g.arange(null, 3)).hasMessageContaining("the dtype is null");
    }

    @Test
    void aDecodeStepsMasksFromAPositionGivenPerCall() {
        int maxLen = 40;
        var g = Gatun.graph("masks");
        var pos = g.input("position", DType.I32, 1).cast(DType.F32);
        var idx = g.arange(DType.F32, maxLen);
        g.output("mask", idx.gt(pos).where(Double.NEGATIVE_INFINITY, 0).cast(DType.BF16));
        g.output("write", idx.eq(pos));
        var graph = g.build();
        try (var s = Session.compile(graph, CompileOptions.world(1).backend("host"))) {
            for (int p : new int[]{0, 17, maxLen - 1}) {
                var in = Map.of("position", NDArray.of(new int[]{p}, 1));
                var out = s.runToHost(in);
                var ref = ReferenceInterpreter.evaluate(graph, List.of(in)).getFirst();
                double[] mask = out.get("mask").toDoubleArray(), write = out.get("write").toDoubleArray();
                for (int j = 0; j < maxLen; j++) {
                    assertThat(mask[j]).as("position %d, mask %d", p, j).isEqualTo(j > p ? Double.NEGATIVE_INFINITY : 0);
                    assertThat(write[j]).as("position %d, write %d", p, j).isEqualTo(j == p ? 1 : 0);
                }
                assertThat(ref.get("mask").toDoubleArray()).containsExactly(mask);
            }
        }
    }
}
