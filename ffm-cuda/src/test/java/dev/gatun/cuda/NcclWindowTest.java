package dev.gatun.cuda;

import dev.gatun.cuda.internal.LazyDowncall;
import org.junit.jupiter.api.Test;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.Set;

import static java.lang.foreign.ValueLayout.JAVA_INT;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/**
 * NCCL windows without a GPU: the missing-symbol path of an old libnccl (a lookup that lacks the symbols), the
 * argument checks, and the window's life cycle against fake NCCL calls (what is called, in which order, how often).
 */
class NcclWindowTest {
    /** Records every call; {@code register} returns a fake window, NULL where {@code decline}, or throws. */
    static final class FakeCalls implements NcclWindowCalls {
        final List<String> log = new ArrayList<>();
        boolean decline;
        RuntimeException registerFails, deregisterFails;

        @Override public long memAlloc(long bytes) { log.add("memAlloc " + bytes); return 0x7000_0000L; }
        @Override public void memFree(long address) { log.add("memFree " + Long.toHexString(address)); }

        @Override
        public MemorySegment register(MemorySegment comm, long address, long bytes, int flags) {
            log.add("register " + Long.toHexString(address) + " " + bytes + " flags " + flags);
            if (registerFails != null) throw registerFails;
            return decline ? MemorySegment.NULL : MemorySegment.ofAddress(0xABCL);
        }

        @Override
        public void deregister(MemorySegment comm, MemorySegment window) {
            log.add("deregister " + Long.toHexString(window.address()));
            if (deregisterFails != null) throw deregisterFails;
        }
    }

    static final class FakeComm implements NcclWindow.Owner {
        boolean closed;
        @Override public MemorySegment commHandle() { return MemorySegment.ofAddress(0xC0); }
        @Override public boolean isClosed() { return closed; }
    }

    private static final SymbolLookup NOTHING = name -> Optional.empty();

    @Test
    void anOldLibncclWithoutTheSymbolsGivesAClearErrorNamingSymbolAndVersion() {
        var calls = new RealNcclWindowCalls(NOTHING, () -> "libnccl.so.2 at /opt/old/libnccl.so.2 (NCCL 2.18.3)");
        assertThat(calls.hasWindows()).isFalse();
        assertThatThrownBy(() -> calls.register(MemorySegment.NULL, 0x1000, 256, NcclWindow.COLL_SYMMETRIC))
                .isInstanceOf(CudaUnavailableException.class)
                .hasMessageContaining("ncclCommWindowRegister").hasMessageContaining("NCCL 2.27 or newer")
                .hasMessageContaining("NCCL 2.18.3").hasMessageContaining("GATUN_CUDA_NCCL_PATH");
        assertThatThrownBy(() -> calls.deregister(MemorySegment.NULL, MemorySegment.NULL))
                .isInstanceOf(CudaUnavailableException.class).hasMessageContaining("ncclCommWindowDeregister");
        assertThatThrownBy(() -> calls.memAlloc(256)).isInstanceOf(CudaUnavailableException.class)
                .hasMessageContaining("ncclMemAlloc").hasMessageContaining("NCCL 2.19 or newer");
        assertThatThrownBy(() -> calls.memFree(0x1000)).isInstanceOf(CudaUnavailableException.class)
                .hasMessageContaining("ncclMemFree");
    }

    @Test
    void aLibncclWithMemAllocButNoWindowsHasNoWindows() {
        SymbolLookup only = name -> Set.of("ncclMemAlloc", "ncclMemFree").contains(name)
                ? Optional.of(MemorySegment.ofAddress(0x1)) : Optional.empty();
        var calls = new RealNcclWindowCalls(only, () -> "NCCL 2.26.2");
        assertThat(calls.hasWindows()).isFalse();
    }

    @Test
    void aLazyDowncallResolvesAndCallsAPresentSymbol() {
        SymbolLookup libc = Linker.nativeLinker().defaultLookup();
        var abs = new LazyDowncall("abs", FunctionDescriptor.of(JAVA_INT, JAVA_INT), "libc 1", libc, () -> "libc", "none");
        assertThat(abs.isPresent()).isTrue();
        assertThat(abs.handle()).isSameAs(abs.handle());
        var missing = new LazyDowncall("gatun_no_such_symbol", FunctionDescriptor.of(JAVA_INT), "libfoo 9.9", libc,
                () -> { throw new IllegalStateException("cannot read"); }, "use libbar");
        assertThat(missing.isPresent()).isFalse();
        assertThatThrownBy(missing::handle).isInstanceOf(CudaUnavailableException.class)
                .hasMessageContaining("gatun_no_such_symbol").hasMessageContaining("libfoo 9.9 or newer")
                .hasMessageContaining("could not be read").hasMessageContaining("use libbar");
    }

    @Test
    void anOwnedWindowDeregistersThenFreesExactlyOnce() throws Exception {
        var calls = new FakeCalls();
        var comm = new FakeComm();
        NcclWindow w = NcclWindow.allocate(null, comm, 4096, calls);
        assertThat(w.isSymmetric()).isTrue();
        assertThat(w.ownsMemory()).isTrue();
        assertThat(w.size()).isEqualTo(4096);
        assertThat(w.buffer().address()).isEqualTo(0x7000_0000L);
        Thread[] ts = new Thread[8];
        for (int i = 0; i < ts.length; i++) ts[i] = Thread.ofPlatform().start(w::close);
        for (Thread t : ts) t.join();
        w.close();
        assertThat(calls.log).containsExactly("memAlloc 4096", "register 70000000 4096 flags 1", "deregister abc",
                "memFree 70000000");
        assertThatThrownBy(w::handle).isInstanceOf(IllegalStateException.class).hasMessageContaining("closed");
        assertThatThrownBy(w::buffer).isInstanceOf(IllegalStateException.class);
    }

    @Test
    void aFailedRegistrationFreesTheMemoryItAllocated() {
        var calls = new FakeCalls();
        calls.registerFails = new CudaException("ncclCommWindowRegister failed (test)");
        assertThatThrownBy(() -> NcclWindow.allocate(null, new FakeComm(), 1 << 20, calls))
                .hasMessageContaining("ncclCommWindowRegister failed (test)");
        assertThat(calls.log).containsExactly("memAlloc 1048576", "register 70000000 1048576 flags 1", "memFree 70000000");
    }

    @Test
    void aDeclinedWindowIsNotSymmetricAndIsNotDeregistered() {
        var calls = new FakeCalls();
        calls.decline = true;
        NcclWindow w = NcclWindow.allocate(null, new FakeComm(), 256, calls);
        assertThat(w.isSymmetric()).isFalse();
        assertThat(w.handle()).isEqualTo(MemorySegment.NULL);
        assertThat(w.toString()).contains("declined by NCCL");
        w.close();
        assertThat(calls.log).containsExactly("memAlloc 256", "register 70000000 256 flags 1", "memFree 70000000");
    }

    @Test
    void afterTheCommunicatorClosedOnlyTheMemoryIsFreed() {
        var calls = new FakeCalls();
        var comm = new FakeComm();
        NcclWindow w = NcclWindow.allocate(null, comm, 256, calls);
        comm.closed = true; // NCCL released its windows with the communicator
        w.close();
        assertThat(calls.log).containsExactly("memAlloc 256", "register 70000000 256 flags 1", "memFree 70000000");
    }

    @Test
    void aFailedDeregistrationStillFreesOwnedMemoryAndReportsTheFailure() {
        var calls = new FakeCalls();
        calls.deregisterFails = new CudaException("ncclCommWindowDeregister failed (test)");
        NcclWindow w = NcclWindow.allocate(null, new FakeComm(), 256, calls);
        assertThatThrownBy(w::close).hasMessageContaining("ncclCommWindowDeregister failed (test)");
        assertThat(calls.log).endsWith("deregister abc", "memFree 70000000");
        w.close(); // nothing more
        assertThat(calls.log).hasSize(4);
    }

    @Test
    void aRegisteredBufferStaysTheCallersOnClose() {
        var calls = new FakeCalls();
        DeviceBuffer view = DeviceBuffer.wrap(null, 0x5000, 8192);
        NcclWindow w = NcclWindow.register(null, new FakeComm(), view, calls);
        assertThat(w.ownsMemory()).isFalse();
        assertThat(w.address()).isEqualTo(0x5000);
        w.close();
        assertThat(calls.log).containsExactly("register 5000 8192 flags 1", "deregister abc");
    }

    @Test
    void badArgumentsAreRefusedBeforeAnyNcclCall() {
        var calls = new FakeCalls();
        var comm = new FakeComm();
        assertThatThrownBy(() -> NcclWindow.allocate(null, comm, 0, calls)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("NcclComm.allocateWindow").hasMessageContaining("positive");
        assertThatThrownBy(() -> NcclWindow.allocate(null, comm, -8, calls)).isInstanceOf(IllegalArgumentException.class);
        for (DeviceBuffer.Kind k : List.of(DeviceBuffer.Kind.CUDA_MALLOC, DeviceBuffer.Kind.STREAM_ORDERED, DeviceBuffer.Kind.IPC)) {
            DeviceBuffer b = new DeviceBuffer(null, 0x9000, 4096, k); // never closed: it holds no memory
            assertThatThrownBy(() -> NcclWindow.register(null, comm, b, calls)).isInstanceOf(IllegalArgumentException.class)
                    .hasMessageContaining(k.name()).hasMessageContaining("ncclMemAlloc").hasMessageContaining("allocateWindow");
        }
        DeviceBuffer closed = DeviceBuffer.wrap(null, 0x9000, 4096);
        closed.close();
        assertThatThrownBy(() -> NcclWindow.register(null, comm, closed, calls)).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("closed");
        comm.closed = true;
        assertThatThrownBy(() -> NcclWindow.allocate(null, comm, 256, calls)).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("communicator is closed");
        assertThat(calls.log).isEmpty();
    }

    @Test
    void memAllocRefusesANonPositiveSizeBeforeLookingForCuda() {
        assertThatThrownBy(() -> Nccl.memAlloc(null, 0)).isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("Nccl.memAlloc").hasMessageContaining("positive");
    }
}
