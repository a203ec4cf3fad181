package dev.gatun.cuda.internal;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.EnumMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;

/**
 * Finds the CUDA libraries by probing and loads them with {@link System#load} before any generated binding class
 * is touched (the bindings resolve symbols through {@code SymbolLookup.loaderLookup()}).
 *
 * <p>Order for each library: an explicit path (system property {@code gatun.cuda.<key>.path}, then environment
 * variable {@code GATUN_CUDA_<KEY>_PATH}; an explicit path is authoritative, there is no fall-back past it), then
 * {@code $CUDA_HOME/lib64}, {@code $CUDA_HOME/lib}, {@code /usr/local/cuda/lib64}, each folder of
 * {@code LD_LIBRARY_PATH}, the entries of the dynamic loader's cache ({@code ldconfig -p}) and the standard library
 * folders, always by the versioned soname.
 */
public final class NativeLibraries {

    /** The native libraries of the CUDA layer, in load order. */
    public enum Lib {
        DRIVER("cuda", "libcuda.so.1", true),
        CUDART("cudart", "libcudart.so.13", true),
        NVRTC("nvrtc", "libnvrtc.so.13", false),
        CUBLASLT("cublaslt", "libcublasLt.so.13", false),
        CUBLAS("cublas", "libcublas.so.13", false),
        NCCL("nccl", "libnccl.so.2", false);

        public final String key;
        public final String soname;
        /** Whether CUDA as a whole is unavailable without this library. */
        public final boolean essential;

        Lib(String key, String soname, boolean essential) {
            this.key = key;
            this.soname = soname;
            this.essential = essential;
        }

        public String property() { return "gatun.cuda." + key + ".path"; }

        public String envVar() { return "GATUN_CUDA_" + key.toUpperCase(java.util.Locale.ROOT) + "_PATH"; }
    }

    /** Outcome of loading one library: the path it was loaded from, or why it was not. */
    public record LoadResult(Lib lib, String path, String error) {
        public boolean loaded() { return path != null; }
    }

    /** What the probe looks at; replaceable in tests. */
    public record Environment(Function<String, String> env, Function<String, String> props,
                              java.util.function.Supplier<List<String>> ldconfigPaths,
                              java.util.function.Predicate<Path> exists, Loader loader) {
        public static Environment system() {
            return new Environment(System::getenv, System::getProperty, NativeLibraries::ldconfigPaths,
                    Files::isRegularFile, path -> System.load(path));
        }
    }

    /** Loads a library by absolute path; throws {@link UnsatisfiedLinkError} with the loader's message. */
    @FunctionalInterface
    public interface Loader {
        void load(String absolutePath);
    }

    private static final String[] STANDARD_DIRS = {
        "/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu",
        "/usr/lib64", "/lib64", "/usr/lib/wsl/lib", "/usr/lib"
    };

    private static volatile Map<Lib, LoadResult> loaded;

    private NativeLibraries() {}

    /** Loads every library once (per class loader) and returns the outcome for each. Never throws. */
    public static Map<Lib, LoadResult> loadAll() {
        Map<Lib, LoadResult> result = loaded;
        if (result == null) {
            synchronized (NativeLibraries.class) {
                result = loaded;
                if (result == null) {
                    result = loadAll(Environment.system());
                    loaded = result;
                }
            }
        }
        return result;
    }

    /** Whether {@code lib} was loaded by {@link #loadAll()}. */
    public static boolean isLoaded(Lib lib) {
        return loadAll().get(lib).loaded();
    }

    /** Loads each library in order with the given environment. Never throws. */
    public static Map<Lib, LoadResult> loadAll(Environment environment) {
        Map<Lib, LoadResult> out = new EnumMap<>(Lib.class);
        for (Lib lib : Lib.values()) {
            out.put(lib, load(lib, environment));
        }
        return Collections.unmodifiableMap(out);
    }

    /** Loads one library: the explicit path if one is given, else the first candidate that loads. */
    public static LoadResult load(Lib lib, Environment environment) {
        String explicit = explicitPath(lib, environment);
        if (explicit != null) {
            String source = environment.props().apply(lib.property()) != null
                    ? "system property " + lib.property() : "environment variable " + lib.envVar();
            try {
                environment.loader().load(Path.of(explicit).toAbsolutePath().toString());
                return new LoadResult(lib, explicit, null);
            } catch (UnsatisfiedLinkError | RuntimeException e) {
                return new LoadResult(lib, null, lib.soname + " from " + source + " (" + explicit + ") did not load: "
                        + e.getMessage());
            }
        }
        List<String> candidates = candidates(lib, environment);
        List<String> errors = new ArrayList<>();
        for (String candidate : candidates) {
            if (!environment.exists().test(Path.of(candidate))) {
                continue;
            }
            try {
                environment.loader().load(candidate);
                return new LoadResult(lib, candidate, null);
            } catch (UnsatisfiedLinkError | RuntimeException e) {
                errors.add(candidate + ": " + e.getMessage());
            }
        }
        if (errors.isEmpty()) {
            return new LoadResult(lib, null, lib.soname + " not found (looked in " + directories(candidates) + ")");
        }
        return new LoadResult(lib, null, lib.soname + " did not load: " + String.join("; ", errors));
    }

    static String explicitPath(Lib lib, Environment environment) {
        String p = environment.props().apply(lib.property());
        if (p == null || p.isBlank()) {
            p = environment.env().apply(lib.envVar());
        }
        return p == null || p.isBlank() ? null : p.trim();
    }

    /** Candidate absolute paths for {@code lib} in probing order (explicit paths excluded), duplicates removed. */
    public static List<String> candidates(Lib lib, Environment environment) {
        LinkedHashSet<String> out = new LinkedHashSet<>();
        String cudaHome = environment.env().apply("CUDA_HOME");
        if (cudaHome == null || cudaHome.isBlank()) {
            cudaHome = environment.env().apply("CUDA_PATH");
        }
        if (cudaHome != null && !cudaHome.isBlank()) {
            out.add(Path.of(cudaHome, "lib64", lib.soname).toString());
            out.add(Path.of(cudaHome, "lib", lib.soname).toString());
            out.add(Path.of(cudaHome, "targets", "x86_64-linux", "lib", lib.soname).toString());
        }
        out.add("/usr/local/cuda/lib64/" + lib.soname);
        String ldPath = environment.env().apply("LD_LIBRARY_PATH");
        if (ldPath != null) {
            for (String dir : ldPath.split(":")) {
                if (!dir.isBlank()) {
                    out.add(Path.of(dir, lib.soname).toString());
                }
            }
        }
        for (String entry : environment.ldconfigPaths().get()) {
            Path p = Path.of(entry);
            if (p.getFileName() != null && p.getFileName().toString().equals(lib.soname)) {
                out.add(entry);
            }
        }
        for (String dir : STANDARD_DIRS) {
            out.add(dir + "/" + lib.soname);
        }
        return List.copyOf(out);
    }

    private static String directories(List<String> candidates) {
        LinkedHashSet<String> dirs = new LinkedHashSet<>();
        for (String c : candidates) {
            Path parent = Path.of(c).getParent();
            dirs.add(parent == null ? c : parent.toString());
        }
        return String.join(", ", dirs) + ", ldconfig cache";
    }

    /** Paths listed by {@code ldconfig -p} (x86-64 entries), or an empty list where it cannot run. */
    static List<String> ldconfigPaths() {
        for (String exe : new String[] {"/sbin/ldconfig", "/usr/sbin/ldconfig", "/bin/ldconfig", "ldconfig"}) {
            if (exe.startsWith("/") && !Files.isExecutable(Path.of(exe))) {
                continue;
            }
            try {
                Process p = new ProcessBuilder(exe, "-p").redirectErrorStream(true).start();
                List<String> out = parseLdconfig(new BufferedReader(
                        new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8)).lines().toList());
                if (!p.waitFor(10, TimeUnit.SECONDS)) {
                    p.destroyForcibly();
                }
                return out;
            } catch (Exception e) {
                // try the next one
            }
        }
        return List.of();
    }

    /** Parses {@code ldconfig -p} output lines such as {@code libcuda.so.1 (libc6,x86-64) => /usr/lib/libcuda.so.1}. */
    public static List<String> parseLdconfig(List<String> lines) {
        List<String> out = new ArrayList<>();
        for (String line : lines) {
            int arrow = line.indexOf("=>");
            if (arrow < 0) {
                continue;
            }
            String meta = line.substring(0, arrow);
            if (meta.contains("(") && !meta.contains("x86-64") && !meta.contains("64bit")) {
                continue; // 32-bit or foreign-arch entry
            }
            String path = line.substring(arrow + 2).trim();
            if (!path.isEmpty()) {
                out.add(path);
            }
        }
        return out;
    }

    /** A short description of one result, for probes and messages. */
    public static String describe(LoadResult r) {
        return r.loaded() ? r.lib().soname + " <- " + r.path() : Objects.requireNonNullElse(r.error(), "not loaded");
    }
}
