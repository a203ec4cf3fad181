package dev.gatun.runtime.host;

import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.testing.DeviceArrayContract;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.util.List;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;

/** Device arrays on the host backend: the contract every backend meets (inherited), and the host's own cases. */
class HostDeviceArrayTest extends DeviceArrayContract {
    HostDeviceArrayTest() { super("host"); }

    @Test
    void wrapsMemoryTheCallerAllocated() {
        NDArray x = NDArray.random(F32, 5, 4, 8);
        try (Arena arena = Arena.ofConfined()) {
            var seg = arena.allocate(x.byteSize(), 16);
            seg.copyFrom(x.segment());
            wrapsExternalMemory(seg.address(), x);
        }
    }

    /** Each simulated rank has arrays of its own; the all-reduce of device inputs sums them. */
    @Test
    void everyRankOfAWorldHasItsOwnArrays() {
        try (var s = Session.compile(HostSessionTest.seeds(4), CompileOptions.world(2).backend("host"))) {
            var x0 = NDArray.full(F32, 1, 4, 4);
            var x1 = NDArray.full(F32, 2, 4, 4);
            DeviceArray d0 = s.toDevice(0, x0), d1 = s.toDevice(1, x1);
            assertThat(d0.address()).isNotEqualTo(d1.address());
            var direct = s.runToHost(List.of(Map.of("x", x0), Map.of("x", x1)));
            var out = s.run(List.of(Map.of("x", d0), Map.of("x", d1)));
            for (int r = 0; r < 2; r++) assertThat(out.get(r).get("d").toHost().toFloatArray()).containsExactly(direct.get(r).get("d").toFloatArray());
            // rank 1's output feeds rank 0's next call, rank 0's rank 1's
            var swapped = s.runToHost(List.of(Map.of("x", out.get(1).get("d")), Map.of("x", out.get(0).get("d"))));
            var want = s.runToHost(List.of(Map.of("x", direct.get(1).get("d")), Map.of("x", direct.get(0).get("d"))));
            for (int r = 0; r < 2; r++) assertThat(swapped.get(r).get("d").toFloatArray()).containsExactly(want.get(r).get("d").toFloatArray());
        }
    }
}
