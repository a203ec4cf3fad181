package dev.gatun.examples;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The package rules the architecture rests on, checked on the main sources of every module: backends read the
 * plan's own types, never the compiler's lowered IR or a planner pass; the CUDA library knows nothing of Gatun's compiler; the
 * environment is read only by the edge classes that turn it into options.
 */
class ArchitectureTest {
    static final Path ROOT = Path.of("..").toAbsolutePath().normalize();

    /** Main source files under {@code dir} (relative to the repository), as (path, text). */
    static List<String[]> sources(String dir) throws IOException {
        var out = new ArrayList<String[]>();
        try (Stream<Path> files = Files.walk(ROOT.resolve(dir))) {
            for (Path f : files.filter(p -> p.toString().endsWith(".java")).toList())
                out.add(new String[]{ROOT.relativize(f).toString(), Files.readString(f)});
        }
        return out;
    }

    static List<String> offenders(List<String[]> files, String needle) {
        return files.stream().filter(f -> f[1].contains(needle)).map(f -> f[0]).toList();
    }

    @Test
    void noBackendImportsTheLoweredIr() throws IOException {
        var backends = new ArrayList<String[]>();
        backends.addAll(sources("runtime/src/main/java/dev/gatun/runtime/host"));
        backends.addAll(sources("runtime/src/main/java/dev/gatun/runtime/spi"));
        backends.addAll(sources("cuda-backend/src/main/java/dev/gatun/runtime/cuda"));
        assertThat(backends).hasSizeGreaterThan(20);
        assertThat(offenders(backends, "dev.gatun.ir.lower")).isEmpty();
    }

    /**
     * A backend runs what the plan says and decides nothing else: it reads the plan's own types (its steps, buffers,
     * pools, kernels and the tiles a step holds), never a planner pass or a matcher that would let it find, on its own,
     * a pattern the printed plan does not show.
     */
    @Test
    void noBackendImportsAPlannerPass() throws IOException {
        var backends = new ArrayList<String[]>();
        backends.addAll(sources("runtime/src/main/java/dev/gatun/runtime/host"));
        backends.addAll(sources("runtime/src/main/java/dev/gatun/runtime/spi"));
        backends.addAll(sources("cuda-backend/src/main/java/dev/gatun/runtime/cuda"));
        var contract = Set.of("Plan", "PlanBuffer", "Step", "Pool", "PlanOptions", "ColumnTiles", "RotatingSlots", "kernel.Kernel", "kernel.KExpr");
        var bad = new ArrayList<String>();
        var use = java.util.regex.Pattern.compile("dev\\.gatun\\.planner\\.((?:kernel\\.)?[A-Z][A-Za-z0-9]*)");
        for (String[] f : backends) {
            var m = use.matcher(f[1]);
            while (m.find()) if (!contract.contains(m.group(1))) bad.add(f[0] + ": " + m.group(1));
        }
        assertThat(bad).isEmpty();
    }

    @Test
    void theCudaLibraryKnowsNothingOfGatunsCompiler() throws IOException {
        var lib = sources("ffm-cuda/src/main/java/dev/gatun/cuda");
        assertThat(lib).hasSizeGreaterThan(20);
        for (String pkg : List.of("dev.gatun.ir", "dev.gatun.dsl", "dev.gatun.planner", "dev.gatun.runtime"))
            assertThat(offenders(lib, pkg)).as(pkg).isEmpty();
    }

    @Test
    void onlyTheEdgeReadsTheEnvironment() throws IOException {
        var all = new ArrayList<String[]>();
        for (String m : List.of("ir", "dsl", "planner", "runtime", "ffm-cuda", "cuda-backend", "models", "examples")) all.addAll(sources(m + "/src/main/java"));
        // the classes that turn the environment into options, the launcher, and the CUDA library's NVLink-multicast
        // interlock (a safety check that must see the real environment, never an option)
        var edge = Set.of(
                "runtime/src/main/java/dev/gatun/runtime/World.java",
                "runtime/src/main/java/dev/gatun/runtime/CompileOptions.java",
                "runtime/src/main/java/dev/gatun/runtime/distributed/LaunchEnvironment.java",
                "runtime/src/main/java/dev/gatun/runtime/distributed/Rendezvous.java",
                "runtime/src/main/java/dev/gatun/runtime/distributed/Launcher.java",
                "ffm-cuda/src/main/java/dev/gatun/cuda/Multicast.java",
                "ffm-cuda/src/main/java/dev/gatun/cuda/internal/RealMulticastDriverSupport.java");
        var readers = offenders(all, "System.getenv(");
        assertThat(readers).isNotEmpty();
        assertThat(readers.stream().filter(f -> !edge.contains(f)).toList()).isEmpty();
    }
}
