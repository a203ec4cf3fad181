package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import org.junit.jupiter.api.Test;

import java.lang.foreign.Arena;
import java.util.ArrayList;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;

/** Ordinary host arrays page-locked in place on their second use ({@link HostRegistrations}): values and the rule. */
@RequiresGpu
class HostRegistrationsGpuTest {
    private static final int N = 1024; // 4 MiB of f32: above HostRegistrations.MIN_BYTES

    /**
     * Arrays reused in and out over many calls (staged on the first, copied straight after): every output equals plain
     * loops over that call's input, and an input changed right after {@code run} returns does not reach that call.
     */
    @Test
    void reusedArraysRoundTripExactlyAndInputsMayChangeOnceRunReturns() {
        var g = Gatun.graph("twice");
        g.output("y", g.input("x", F32, N, N).mul(2).add(1));
        NDArray x = NDArray.zeros(F32, N, N), out = NDArray.zeros(F32, N, N);
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
            for (int call = 0; call < 6; call++) {
                for (int i = 0; i < N * N; i += 7) x.set(i, (i + call) % 1013);
                DeviceArray y = s.run(Map.of("x", x)).get("y");
                for (int i = 0; i < N * N; i += 7) x.set(i, -5);   // after run returned: not this call's input
                y.copyTo(out);
                for (int i = 0; i < N * N; i += 7)
                    assertThat(out.get(i)).as("call %d element %d", call, i).isEqualTo(2.0 * ((i + call) % 1013) + 1);
                assertThat(out.get(1)).isEqualTo(1.0);
                for (int i = 0; i < N * N; i += 7) x.set(i, 0);
            }
            NDArray fresh = s.runToHost(Map.of("x", x)).get("y");
            assertThat(fresh.get(7)).isEqualTo(1.0);
        }
    }

    /** The rule: owned arrays of at least 1 MiB, on their second use; wrapped memory never; the capacity is kept. */
    @Test
    void locksOwnedArraysOnTheSecondUseWithinTheCapacity() {
        try (Device d = Device.open(0); var buf = d.allocate(4L * N * N)) {
            var copies = new AtomicInteger();
            Runnable copy = copies::incrementAndGet;
            var r = new HostRegistrations(d, 9L << 20); // two 4 MiB arrays fit, a third does not
            var locked = new ArrayList<NDArray>();
            for (int k = 0; k < 3; k++) {
                NDArray a = NDArray.zeros(F32, N, N);
                assertThat(r.copyDirect(a, copy)).as("first use").isFalse();
                assertThat(r.copyDirect(a, copy)).as("second use").isTrue();
                assertThat(r.copyDirect(a, copy)).as("third use").isTrue();
                locked.add(a);
                assertThat(r.lockedBytes()).isLessThanOrEqualTo(9L << 20);
            }
            assertThat(r.lockedBytes()).isEqualTo(8L << 20);
            assertThat(copies.get()).isEqualTo(6);
            NDArray small = NDArray.zeros(F32, 16, 16);
            assertThat(r.copyDirect(small, copy) || r.copyDirect(small, copy)).isFalse();
            try (Arena arena = Arena.ofConfined()) {
                NDArray wrapped = NDArray.wrap(F32, arena.allocate(4L * N * N, 64), N, N);
                assertThat(r.copyDirect(wrapped, copy) || r.copyDirect(wrapped, copy)).as("wrapped memory").isFalse();
            }
            // a locked array's memory is one the copy engine reads: a DMA in and out of it round-trips
            NDArray a = locked.getLast();
            for (int i = 0; i < N * N; i += 3) a.set(i, i % 101);
            NDArray back = NDArray.zeros(F32, N, N);
            try (var st = d.createStream()) {
                assertThat(r.copyDirect(a, () -> { buf.copyFromAsync(a.segment(), 0, st); st.synchronize(); })).isTrue();
                buf.copyTo(back.segment());
            }
            for (int i = 0; i < N * N; i += 3) assertThat(back.get(i)).isEqualTo(i % 101);
            var failed = new ArrayList<RuntimeException>();
            r.close(failed);
            assertThat(failed).isEmpty();
            assertThat(r.lockedBytes()).isZero();
        }
    }
}
