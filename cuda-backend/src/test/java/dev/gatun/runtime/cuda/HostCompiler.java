package dev.gatun.runtime.cuda;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;

/**
 * What the emulation tests share to run CUDA kernels as host C++: the {@code g++} on the PATH, and running a built
 * program with a time limit, its output and errors as one string.
 */
final class HostCompiler {
    private HostCompiler() {}

    /**
     * The start of a host program that runs generated kernels: the emulation, the C++ headers a driver uses, no launch
     * bounds, and the device's once-rounded products and bit casts as host functions (built without contraction:
     * {@code -ffp-contract=off}).
     */
    static final String GENERATED_KERNELS_PRELUDE = """
            #include "emulate.h"
            #include <cstdio>
            #include <fstream>
            #include <iterator>
            #undef __launch_bounds__
            #define __launch_bounds__(...)
            inline float __fmul_rn(float a, float b) { return a * b; }
            inline double __dmul_rn(double a, double b) { return a * b; }
            inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
            inline double __longlong_as_double(long long i) { double f; std::memcpy(&f, &i, 8); return f; }
            """;

    /** The first {@code g++} on the PATH, or null (the emulation tests then skip). */
    static Path gxx() {
        return Arrays.stream(System.getenv().getOrDefault("PATH", "").split(":")).map(p -> Path.of(p, "g++")).filter(Files::isExecutable)
                .findFirst().orElse(null);
    }

    /**
     * Writes the emulation's resources {@code folder + f} for each of {@code files} into {@code dir}, and the header every
     * emulation includes ({@code emulation/emu_common.h}).
     */
    static void copy(Path dir, String folder, String... files) throws java.io.IOException {
        for (String f : files) write(folder + f, dir.resolve(f));
        write(COMMON, dir.resolve("emu_common.h"));
    }

    /** The header every emulation includes: the kernel qualifiers as host C++, the grid, the includes. */
    static final String COMMON = "/emulation/emu_common.h";

    private static void write(String resource, Path to) throws java.io.IOException {
        try (java.io.InputStream in = HostCompiler.class.getResourceAsStream(resource)) {
            if (in == null) throw new java.io.FileNotFoundException("no test resource " + resource);
            Files.write(to, in.readAllBytes());
        }
    }

    /** Runs {@code pb} to its end, at most {@code seconds}: its standard output and error, as one string. */
    static String exec(ProcessBuilder pb, int seconds) throws Exception {
        Process proc = pb.redirectErrorStream(true).start();
        String out = new String(proc.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        if (!proc.waitFor(seconds, TimeUnit.SECONDS)) {
            proc.destroyForcibly();
            throw new AssertionError("timed out after " + seconds + " s: " + pb.command() + "\n" + out);
        }
        return out;
    }
}
