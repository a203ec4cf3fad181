package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Device;
import dev.gatun.cuda.testing.RequiresGpu;
import dev.gatun.dsl.Gatun;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.testing.DeviceArrayContract;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.Map;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** Device arrays on the CUDA backend: the contract every backend meets (inherited), and what only a GPU has. */
@RequiresGpu
class DeviceArrayGpuTest extends DeviceArrayContract {
    DeviceArrayGpuTest() { super("cuda"); }

    @Test
    void wrapsADevicePointerAndRefusesOthers() {
        NDArray x = NDArray.random(F32, 5, 4, 8);
        try (Device d = Device.open(0); var buf = d.allocate(x.byteSize())) {
            buf.copyFrom(x.segment());
            wrapsExternalMemory(buf.address(), x);
            var g = Gatun.graph("w");
            g.output("y", g.input("x", F32, 4, 8).add(0));
            try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
                assertThatThrownBy(() -> s.wrap(x.segment().address(), F32, new long[]{4, 8}, null)).isInstanceOf(GatunRuntimeException.class)
                        .hasMessageContaining("not device memory");
                assertThatThrownBy(() -> s.wrap(buf.address(), F32, new long[]{64, 8}, null)).isInstanceOf(GatunRuntimeException.class)
                        .hasMessageContaining("allocation ends");
            }
        }
    }

    /** A host array from allocateHost is page-locked memory the session frees on close: used later, it is an error, not a crash. */
    @Test
    void pinnedHostArraysRoundTripAndDieWithTheSession() {
        var g = Gatun.graph("twice");
        g.output("y", g.input("x", F32, 256, 256).mul(2));
        NDArray pinnedIn, pinnedOut;
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"))) {
            pinnedIn = s.allocateHost(F32, 256, 256);
            pinnedOut = s.allocateHost(F32, 256, 256);
            for (int i = 0; i < 256 * 256; i++) pinnedIn.set(i, i % 97);
            s.run(Map.of("x", pinnedIn)).get("y").copyTo(pinnedOut);
            for (int i = 0; i < 256 * 256; i += 101) assertThat(pinnedOut.get(i)).isEqualTo(2.0 * (i % 97));
        }
        NDArray gone = pinnedOut;
        assertThatThrownBy(() -> gone.get(0)).isInstanceOf(IllegalStateException.class);
    }

    /**
     * Ordinary host arrays of several MiB (cut into parts through the page-locked staging, one of them not a whole
     * chunk) in and out, from memory other threads may copy and from a thread-confined arena: every element right, call
     * after call.
     */
    @Test
    void largeHostArraysRoundTripInChunks() {
        int rows = 1031, cols = 1279;   // 5.03 MiB of f32: six parts, the last one short
        var g = Gatun.graph("chunks");
        g.output("y", g.input("x", F32, rows, cols).mul(3).add(1));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda"));
             var confined = java.lang.foreign.Arena.ofConfined()) {
            for (int call = 0; call < 3; call++) {
                NDArray x = call == 2 ? NDArray.wrap(F32, confined.allocate(4L * rows * cols, 16), new long[]{rows, cols}) : NDArray.zeros(F32, rows, cols);
                for (int i = 0; i < rows * cols; i++) x.set(i, (i * 7 + call) % 1009);
                NDArray y = s.runToHost(Map.of("x", x)).get("y");
                NDArray into = NDArray.wrap(F32, confined.allocate(4L * rows * cols, 16), new long[]{rows, cols});
                s.run(Map.of("x", x)).get("y").copyTo(into);
                for (int i = 0; i < rows * cols; i++) {
                    double want = 3.0 * ((i * 7 + call) % 1009) + 1;
                    if (y.get(i) != want || into.get(i) != want)
                        throw new AssertionError("call " + call + " element " + i + ": " + y.get(i) + " and " + into.get(i) + ", want " + want);
                }
            }
        }
    }

    /** Inputs at a new address on every call: a few captures, then they are staged; every result stays right. */
    @Test
    void inputsAtNewAddressesEveryCallStayCorrect() {
        var g = Gatun.graph("inc");
        g.output("y", g.input("x", F32, 64, 64).add(1));
        try (var s = Session.compile(g.build(), CompileOptions.world(1).backend("cuda").cudaGraphs(true))) {
            var arrays = new ArrayList<DeviceArray>();
            for (int call = 0; call < 20; call++) {
                NDArray x = NDArray.full(F32, call, 64, 64);
                DeviceArray d = s.toDevice(x);
                arrays.add(d); // kept open, so every call's input is at a new address
                assertThat(s.run(Map.of("x", d)).get("y").toHost().toFloatArray()).as("call %d", call).containsOnly(call + 1f);
            }
            // and an earlier address again
            assertThat(s.run(Map.of("x", arrays.get(3))).get("y").toHost().toFloatArray()).containsOnly(4f);
            arrays.forEach(DeviceArray::close);
        }
    }

    /** Ranks sharing the GPU in one process each have their own arrays; device inputs and outputs chain per rank. */
    @Test
    void ranksSharingTheGpuHaveTheirOwnArrays() {
        int world = 2;
        var g = Gatun.graph("ar").world(world);
        g.output("y", g.input("x", F32, 16, 16).add(1).allReduce(dev.gatun.ir.graph.ReduceOp.SUM));
        dev.gatun.runtime.distributed.LocalWorld.run(world, rv -> {
            int rank = rv.rank();
            var options = SharedGpuGpuTest.shared(world, rv).backend("cuda");
            try (var s = Session.compile(g.build(), options)) {
                DeviceArray x = s.toDevice(NDArray.full(F32, rank + 1, 16, 16));
                DeviceArray y = s.run(Map.of("x", x)).get("y");
                // (1+1) + (2+1) = 5; fed back: (5+1) * 2 = 12
                assertThat(y.toHost().toFloatArray()).containsOnly(5f);
                assertThat(s.run(Map.of("x", y)).get("y").toHost().toFloatArray()).containsOnly(12f);
                x.close();
            }
        });
    }
}
