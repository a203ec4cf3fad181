package dev.gatun.runtime.testing;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.ir.graph.Graph;
import dev.gatun.runtime.CompileOptions;
import dev.gatun.runtime.DeviceArray;
import dev.gatun.runtime.GatunRuntimeException;
import dev.gatun.runtime.NDArray;
import dev.gatun.runtime.Session;
import dev.gatun.runtime.spi.DeviceMemory;

import org.junit.jupiter.api.Test;

import java.lang.foreign.MemorySegment;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import static dev.gatun.ir.DType.F32;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * What every backend's device arrays must do: a backend's test extends this with its name ("host", "cuda") and
 * inherits the tests. Expected values come from plain loops over the host arrays, never from a session.
 */
public abstract class DeviceArrayContract {
    private final String backend;

    protected DeviceArrayContract(String backend) { this.backend = backend; }

    private CompileOptions options() { return CompileOptions.world(1).backend(backend); }

    static final int R = 4, C = 8;

    /** y = a * b + 1 */
    static Graph mulAdd() {
        var g = Gatun.graph("muladd");
        g.output("y", g.input("a", F32, R, C).mul(g.input("b", F32, R, C)).add(1));
        return g.build();
    }

    /** y = x + k */
    static Graph plus(String name, String in, double k) {
        var g = Gatun.graph(name);
        g.output("y", g.input(in, F32, R, C).add(k));
        return g.build();
    }

    static NDArray values(long seed) { return NDArray.random(F32, seed, R, C); }

    static double[] mulAddExpected(NDArray a, NDArray b) {
        double[] out = new double[R * C];
        for (int i = 0; i < out.length; i++) out[i] = (double) (float) a.get(i) * (float) b.get(i) + 1;
        return out;
    }

    static void assertValues(NDArray got, double[] want) {
        assertThat(got.numel()).isEqualTo(want.length);
        for (int i = 0; i < want.length; i++) assertThat(got.get(i)).as("element %d", i).isCloseTo(want[i], org.assertj.core.data.Offset.offset(1e-5 * (1 + Math.abs(want[i]))));
    }

    static double[] plusK(NDArray x, double k) {
        double[] out = new double[(int) x.numel()];
        for (int i = 0; i < out.length; i++) out[i] = (float) ((float) x.get(i) + k);
        return out;
    }

    /** Host and device inputs mix in one call; outputs stay on the session's device until read. */
    @Test
    public void mixesHostAndDeviceInputs() {
        NDArray a = values(1), b = values(2);
        try (var s = Session.compile(mulAdd(), options()); var bd = s.toDevice(b); var ad = s.toDevice(a)) {
            assertThat(bd.device()).isEqualTo(s.device());
            for (var in : java.util.List.<Map<String, Object>>of(Map.of("a", a, "b", bd), Map.of("a", ad, "b", b), Map.of("a", ad, "b", bd))) {
                var typed = new HashMap<String, dev.gatun.runtime.ArrayLike>();
                in.forEach((k, v) -> typed.put(k, (dev.gatun.runtime.ArrayLike) v));
                DeviceArray y = s.run(typed).get("y");
                assertThat(y.device()).isEqualTo(s.device());
                assertThat(y.shape()).containsExactly(R, C);
                assertValues(y.toHost(), mulAddExpected(a, b));
            }
            assertValues(s.runToHost(Map.of("a", a, "b", b)).get("y"), mulAddExpected(a, b));
        }
    }

    /** An output of one session is an input of another, call after call, and back again, with no host copy between. */
    @Test
    public void outputsChainIntoAnotherSession() {
        try (var first = Session.compile(plus("first", "x", 1), options()); var second = Session.compile(plus("second", "y", 10), options())) {
            for (int call = 0; call < 5; call++) {
                NDArray x = values(100 + call);
                DeviceArray y = first.run(Map.of("x", x)).get("y");
                DeviceArray z = second.run(Map.of("y", y)).get("y");
                // and back: the second's output into the first, whose own last output is still being read
                DeviceArray w = first.run(Map.of("x", z)).get("y");
                double[] want = plusK(NDArray.of(plusK(NDArray.of(plusK(x, 1), R, C), 10), R, C), 1);
                assertValues(w.toHost(), want);
            }
        }
    }

    /** A session's own output fed to its next call is read before the call overwrites it. */
    @Test
    public void ownOutputFeedsTheNextCall() {
        NDArray x = values(7);
        try (var s = Session.compile(plus("step", "x", 1), options())) {
            DeviceArray y = s.run(Map.of("x", x)).get("y");
            for (int i = 0; i < 6; i++) y = s.run(Map.of("x", y)).get("y");
            assertValues(y.toHost(), plusK(x, 7));
        }
    }

    /** Bound inputs are copied once and kept: the source may change or close; rebinding and unbinding are explicit. */
    @Test
    public void bindsOnceAndRebinds() {
        NDArray a = values(11), b = values(12), b2 = values(13);
        try (var s = Session.compile(mulAdd(), options())) {
            DeviceArray bd = s.toDevice(b);
            s.bind("b", bd);
            bd.close(); // the session keeps its own copy
            assertThat(s.boundInputs()).containsExactly("b");
            for (int i = 0; i < 3; i++) assertValues(s.run(Map.of("a", a)).get("y").toHost(), mulAddExpected(a, b));
            assertThatThrownBy(() -> s.run(Map.of("a", a, "b", b))).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("'b' is bound");
            s.bind("b", b2);
            assertValues(s.run(Map.of("a", a)).get("y").toHost(), mulAddExpected(a, b2));
            s.unbind("b");
            assertThatThrownBy(() -> s.run(Map.of("a", a))).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("missing inputs [b]");
            assertValues(s.run(Map.of("a", a, "b", b)).get("y").toHost(), mulAddExpected(a, b));
            assertThatThrownBy(() -> s.bind("bb", b)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("did you mean 'b'");
            assertThatThrownBy(() -> s.bind("b", NDArray.zeros(F32, 2, 2))).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("'b' has shape [2, 2]");
        }
    }

    /**
     * An input bound in place is read where it lies by every call: a write into it between calls is seen, another
     * session's array is shared, nothing is copied; what cannot be read in place is refused by name.
     */
    @Test
    public void bindsInPlace() {
        NDArray a = values(31), b = values(32), b2 = values(33);
        try (var s = Session.compile(mulAdd(), options()); var other = Session.compile(plus("other", "x", 1), options())) {
            DeviceArray bd = s.toDevice(b);
            s.bindInPlace("b", bd);
            assertThat(s.boundInputs()).containsExactly("b");
            assertValues(s.run(Map.of("a", a)).get("y").toHost(), mulAddExpected(a, b));
            bd.copyFrom(b2);   // the next call reads the new contents: the array itself is the input
            for (int i = 0; i < 3; i++) assertValues(s.run(Map.of("a", a)).get("y").toHost(), mulAddExpected(a, b2));
            assertThatThrownBy(() -> s.run(Map.of("a", a, "b", b))).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("'b' is bound");
            DeviceArray shared = other.toDevice(b);   // memory of another session, read by this one
            s.bindInPlace("b", shared);
            assertValues(s.run(Map.of("a", a)).get("y").toHost(), mulAddExpected(a, b));
            DeviceArray y = s.run(Map.of("a", a)).get("y");
            assertThatThrownBy(() -> s.bindInPlace("b", y)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("copy() it first");
            assertThatThrownBy(() -> y.copyFrom(b)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("copy() it first");
            assertThatThrownBy(() -> s.bindInPlace("b", s.toDevice(NDArray.zeros(F32, C, R)))).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("'b' has shape [8, 4]");
            assertThatThrownBy(() -> bd.copyFrom(NDArray.zeros(F32, 2, 2))).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("cannot be copied into");
            shared.close();   // the caller's to keep open while bound: the next call says which input it was
            assertThatThrownBy(() -> s.run(Map.of("a", a))).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("input 'b'").hasMessageContaining("was closed");
            s.bind("b", b2);   // a bound copy replaces it
            assertValues(s.run(Map.of("a", a)).get("y").toHost(), mulAddExpected(a, b2));
            s.bindInPlace("b", bd);
            s.unbind("b");
            assertValues(s.run(Map.of("a", a, "b", b)).get("y").toHost(), mulAddExpected(a, b));
        }
    }

    /** Outputs are valid until the next call; a copy lives on; a stale output is refused by name, not read. */
    @Test
    public void staleOutputsAreRefused() {
        NDArray a = values(21), b = values(22), b2 = values(23);
        try (var s = Session.compile(mulAdd(), options())) {
            DeviceArray first = s.run(Map.of("a", a, "b", b)).get("y");
            DeviceArray kept = first.copy();
            s.run(Map.of("a", a, "b", b2));
            assertThatThrownBy(first::toHost).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("overwritten by a later call")
                    .hasMessageContaining("copy()");
            assertThatThrownBy(() -> s.run(Map.of("a", first, "b", b))).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("input 'a'").hasMessageContaining("overwritten");
            assertThat(first.toString()).contains("unusable");
            assertValues(kept.toHost(), mulAddExpected(a, b));
            kept.close();
            kept.close();
            assertThatThrownBy(kept::toHost).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("was closed");
        }
    }

    /** Arrays and sessions close in any order; anything used after its memory went is a clear error. */
    @Test
    public void closesInAnyOrder() {
        NDArray a = values(31), b = values(32);
        var s = Session.compile(mulAdd(), options());
        DeviceArray ad = s.toDevice(a), bd = s.toDevice(b);
        DeviceArray y = s.run(Map.of("a", ad, "b", bd)).get("y"), kept = y.copy();
        ad.close();
        assertThatThrownBy(() -> s.run(Map.of("a", ad, "b", bd))).isInstanceOf(GatunRuntimeException.class)
                .hasMessageContaining("input 'a'").hasMessageContaining("closed");
        s.close();
        for (DeviceArray gone : new DeviceArray[]{bd, y, kept})
            assertThatThrownBy(gone::toHost).as(gone.origin()).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("closed session");
        bd.close();
        kept.close();
        y.close();
        ad.close();
        // a second session outlives the arrays it was given
        try (var s2 = Session.compile(mulAdd(), options())) {
            DeviceArray a2 = s2.toDevice(a);
            assertValues(s2.run(Map.of("a", a2, "b", b)).get("y").toHost(), mulAddExpected(a, b));
            a2.close();
            assertValues(s2.run(Map.of("a", a, "b", b)).get("y").toHost(), mulAddExpected(a, b));
        }
    }

    /** A wrong shape, dtype or device is refused naming the input. */
    @Test
    public void wrongInputsAreNamed() {
        try (var s = Session.compile(mulAdd(), options())) {
            DeviceArray wrongShape = s.toDevice(NDArray.zeros(F32, C, R));
            assertThatThrownBy(() -> s.run(Map.of("a", wrongShape, "b", values(1)))).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("input 'a'").hasMessageContaining("[8, 4]").hasMessageContaining("f32[4,8]");
            DeviceArray wrongType = s.toDevice(NDArray.zeros(DType.I32, R, C));
            assertThatThrownBy(() -> s.run(Map.of("a", values(1), "b", wrongType))).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("input 'b'").hasMessageContaining("dtype i32");
            DeviceArray elsewhere = DeviceArray.borrowed(F32, new long[]{R, C}, new ElsewhereMemory(), "an array of another device");
            assertThatThrownBy(() -> s.run(Map.of("a", elsewhere, "b", values(1)))).isInstanceOf(GatunRuntimeException.class)
                    .hasMessageContaining("input 'a'").hasMessageContaining("cuda:7").hasMessageContaining(s.device());
        }
    }

    /** runAsync completes with outputs that are ready; a failing call completes exceptionally. */
    @Test
    public void runsAsynchronously() throws Exception {
        NDArray a = values(41), b = values(42);
        try (var s = Session.compile(mulAdd(), options())) {
            var future = s.runAsync(Map.of("a", a, "b", b));
            assertValues(future.get(60, TimeUnit.SECONDS).get("y").toHost(), mulAddExpected(a, b));
            var bad = s.runAsync(Map.of("a", a));
            assertThatThrownBy(() -> bad.get(60, TimeUnit.SECONDS)).hasCauseInstanceOf(GatunRuntimeException.class).hasMessageContaining("missing inputs [b]");
        }
    }

    /** toString names the array and reads only its first few values. */
    @Test
    public void printsAFewValues() {
        try (var s = Session.compile(plus("p", "x", 0.5), options())) {
            NDArray x = NDArray.zeros(F32, R, C);
            for (int i = 0; i < R * C; i++) x.set(i, i);
            String text = s.run(Map.of("x", x)).get("y").toString();
            assertThat(text).startsWith("DeviceArray f32[4,8] on " + s.device()).contains("[0.5, 1.5, 2.5, 3.5, 4.5, 5.5, ...]");
        }
    }

    /** Views {@code address} (a caller's allocation holding the values of {@code x}) and runs on it; release runs once, on close. */
    protected void wrapsExternalMemory(long address, NDArray x) {
        try (var s = Session.compile(plus("w", "x", 2), options())) {
            int[] released = {0};
            DeviceArray wrapped = s.wrap(address, F32, new long[]{R, C}, () -> released[0]++);
            assertThat(wrapped.address()).isEqualTo(address);
            assertValues(s.run(Map.of("x", wrapped)).get("y").toHost(), plusK(x, 2));
            wrapped.close();
            wrapped.close();
            assertThat(released[0]).isEqualTo(1);
            assertThatThrownBy(() -> s.wrap(0, F32, new long[]{R, C}, null)).isInstanceOf(GatunRuntimeException.class).hasMessageContaining("null");
        }
    }

    /** Memory that claims another device: what an array of another GPU looks like to a session. */
    private static final class ElsewhereMemory implements DeviceMemory {
        @Override public String device() { return "cuda:7"; }
        @Override public long address() { return 4096; }
        @Override public long byteSize() { return R * C * 4; }
        @Override public void read(long offset, MemorySegment dst, long bytes) { throw new AssertionError("must not be read"); }
        @Override public void write(long offset, MemorySegment src, long bytes) { throw new AssertionError("must not be written"); }
        @Override public DeviceMemory copy(long offset, long bytes) { throw new AssertionError("must not be copied"); }
        @Override public void close() {}
    }
}
