package dev.gatun.cuda;

import dev.gatun.cuda.internal.Errors;
import dev.gatun.cuda.internal.LazyDowncall;
import dev.gatun.cuda.internal.NativeLibraries;
import dev.gatun.cuda.internal.NativeLibraries.Lib;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.foreign.ValueLayout;
import java.util.function.Supplier;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

/**
 * The real window calls, each a {@link LazyDowncall}: {@code ncclMemAlloc}/{@code ncclMemFree} appeared in NCCL 2.19,
 * {@code ncclCommWindowRegister}/{@code ncclCommWindowDeregister} in NCCL 2.27. On an older libnccl the first use
 * throws {@link CudaUnavailableException} naming the symbol, the version it needs and the library that was loaded.
 */
final class RealNcclWindowCalls implements NcclWindowCalls {
    static final String MEM_VERSION = "NCCL 2.19";
    static final String WINDOW_VERSION = "NCCL 2.27";
    private static final String REMEDY = "install a newer NCCL or point GATUN_CUDA_NCCL_PATH at one; without windows, "
            + "use NcclComm's collectives on ordinary (cudaMalloc'd) buffers";

    /** The calls against the libraries {@link NativeLibraries} loaded. */
    static final RealNcclWindowCalls SYSTEM = new RealNcclWindowCalls(SymbolLookup.loaderLookup(), RealNcclWindowCalls::loaded);

    private final LazyDowncall memAlloc, memFree, register, deregister;

    RealNcclWindowCalls(SymbolLookup lookup, Supplier<String> loadedLibrary) {
        memAlloc = new LazyDowncall("ncclMemAlloc", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG), MEM_VERSION,
                lookup, loadedLibrary, REMEDY);
        memFree = new LazyDowncall("ncclMemFree", FunctionDescriptor.of(JAVA_INT, ADDRESS), MEM_VERSION, lookup,
                loadedLibrary, REMEDY);
        register = new LazyDowncall("ncclCommWindowRegister",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, JAVA_INT), WINDOW_VERSION, lookup,
                loadedLibrary, REMEDY);
        deregister = new LazyDowncall("ncclCommWindowDeregister", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS),
                WINDOW_VERSION, lookup, loadedLibrary, REMEDY);
    }

    /** Whether the loaded libnccl has the window calls (NCCL 2.27 or newer); never throws for a missing symbol. */
    boolean hasWindows() {
        return register.isPresent() && deregister.isPresent();
    }

    /** "libnccl.so.2 at PATH (NCCL 2.26.2)", for messages. */
    private static String loaded() {
        var r = NativeLibraries.loadAll().get(Lib.NCCL);
        if (!r.loaded()) return Lib.NCCL.soname + " (not loaded: " + r.error() + ")";
        int v = Nccl.version();
        return Lib.NCCL.soname + " at " + r.path() + " (NCCL " + v / 10000 + "." + v / 100 % 100 + "." + v % 100 + ")";
    }

    @Override
    public long memAlloc(long bytes) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment p = arena.allocate(ValueLayout.ADDRESS);
            Errors.nccl(call(memAlloc, p, bytes), "ncclMemAlloc(" + bytes + ")", null);
            return p.get(ValueLayout.ADDRESS, 0).address();
        }
    }

    @Override
    public void memFree(long address) {
        Errors.nccl(call(memFree, MemorySegment.ofAddress(address)), "ncclMemFree", null);
    }

    @Override
    public MemorySegment register(MemorySegment comm, long address, long bytes, int flags) {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment w = arena.allocate(ValueLayout.ADDRESS); // zeroed: NCCL leaves it alone where it declines
            Errors.nccl(call(register, comm, MemorySegment.ofAddress(address), bytes, w, flags),
                    "ncclCommWindowRegister(" + bytes + " B)", comm);
            return w.get(ValueLayout.ADDRESS, 0);
        }
    }

    @Override
    public void deregister(MemorySegment comm, MemorySegment window) {
        Errors.nccl(call(deregister, comm, window), "ncclCommWindowDeregister", comm);
    }

    private static int call(LazyDowncall f, Object... args) {
        var h = f.handle();
        try {
            return (int) h.invokeWithArguments(args);
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new CudaException(f.symbol() + " failed: " + t);
        }
    }
}
