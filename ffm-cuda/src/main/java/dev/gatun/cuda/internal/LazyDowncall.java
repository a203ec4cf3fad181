package dev.gatun.cuda.internal;

import dev.gatun.cuda.CudaUnavailableException;

import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.util.Optional;
import java.util.function.Supplier;

/**
 * One native entry point that only newer versions of a library export, looked up on first use instead of when its
 * binding class loads.
 *
 * <p>Why not the generated bindings: jextract resolves each symbol in a static initializer with
 * {@code findOrThrow}, so calling a function that an older library lacks fails with an
 * {@code ExceptionInInitializerError} (then {@code NoClassDefFoundError} on every later call) that names neither the
 * library's version nor the version the call needs. Here a missing symbol is a {@link CudaUnavailableException} that
 * names the symbol, the version that introduced it and the library that was loaded; the lookup is retried on each
 * call until it succeeds (cheap, and nothing is cached in a broken state).
 */
public final class LazyDowncall {
    private final String symbol;
    private final FunctionDescriptor descriptor;
    private final String neededVersion;
    private final SymbolLookup lookup;
    private final Supplier<String> loadedLibrary;
    private final String remedy;
    private volatile MethodHandle handle;

    /**
     * @param symbol        the C name
     * @param descriptor    its signature
     * @param neededVersion the library version that introduced it, for the message (e.g. "NCCL 2.27")
     * @param lookup        where to find it (the libraries loaded by {@link NativeLibraries}, or a fake in tests)
     * @param loadedLibrary a description of the library that was loaded (its path and version), for the message;
     *                      called only when the symbol is missing
     * @param remedy        what to do instead, ending the message
     */
    public LazyDowncall(String symbol, FunctionDescriptor descriptor, String neededVersion, SymbolLookup lookup,
                        Supplier<String> loadedLibrary, String remedy) {
        this.symbol = symbol;
        this.descriptor = descriptor;
        this.neededVersion = neededVersion;
        this.lookup = lookup;
        this.loadedLibrary = loadedLibrary;
        this.remedy = remedy;
    }

    public String symbol() { return symbol; }

    /** Whether the symbol is there (resolving it if not done yet); never throws for a missing symbol. */
    public boolean isPresent() {
        return resolve().isPresent();
    }

    /** The downcall handle; throws {@link CudaUnavailableException} naming the symbol and the version it needs. */
    public MethodHandle handle() {
        return resolve().orElseThrow(() -> new CudaUnavailableException(symbol + " is not exported by "
                + describeLoaded() + ": it needs " + neededVersion + " or newer; " + remedy));
    }

    private Optional<MethodHandle> resolve() {
        MethodHandle h = handle;
        if (h != null) return Optional.of(h);
        Optional<MemorySegment> address = lookup.find(symbol);
        if (address.isEmpty()) return Optional.empty();
        h = Linker.nativeLinker().downcallHandle(address.get(), descriptor);
        handle = h;
        return Optional.of(h);
    }

    private String describeLoaded() {
        try {
            String d = loadedLibrary.get();
            return d == null || d.isBlank() ? "the loaded library" : d;
        } catch (RuntimeException e) {
            return "the loaded library (its version could not be read: " + e.getMessage() + ")";
        }
    }
}
