package dev.gatun.runtime.cuda;

import dev.gatun.cuda.Kernel;
import dev.gatun.cuda.Module;

/**
 * A built-in CUDA program (argmax, the one-row product, index_select, the float64 product) compiled and loaded once,
 * when its first kernel is asked for; a program with several entry points (one per dtype, a clearing kernel) is one
 * NVRTC compile and one module, its kernels looked up in it by name.
 */
final class LazyProgram {
    /** Compiles and loads a program for the executable's device (NVRTC, cached on disk). */
    interface Compiler {
        Module compile(String programName, String source);
    }

    private final Compiler compiler;
    private final String name, source;
    private Module module;

    LazyProgram(Compiler compiler, String name, String source) {
        this.compiler = compiler;
        this.name = name;
        this.source = source;
    }

    /** The entry point {@code entry} of the program, compiling it on the first call. */
    Kernel kernel(String entry) {
        if (module == null) module = compiler.compile(name, source);
        return module.kernel(entry);
    }

    /**
     * Compiles and loads the program and its entry points now. Where ranks share a GPU, loading may wait for every
     * kernel of the context, a peer's spinning collective included, so it must not happen in the middle of a call.
     */
    void loadNow(String... entries) {
        for (String e : entries) kernel(e);
    }
}
