package dev.gatun.examples;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.regex.Pattern;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * The package rules the architecture rests on, checked on the main sources of every module: backends read the
 * plan's own types, never the compiler's lowered IR or a planner pass; the CUDA library knows nothing of Gatun's
 * compiler; the environment is read only by the edge classes that turn it into options; every library module is a
 * JPMS module whose exports are its documented API (docs/API.md), and an implementation package is exported only to
 * the modules that read it.
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

    /** The library modules, each with a module descriptor (examples is an application on the class path). */
    static final List<String> MODULES = List.of("ir", "lowering", "dsl", "planner", "runtime", "ffm-cuda", "cuda-backend", "models");

    static final Pattern EXPORTS = Pattern.compile("(?m)^\\s*exports\\s+([\\w.]+)\\s*(?:to\\s+([\\w.,\\s]+))?;");
    static final Pattern MODULE_NAME = Pattern.compile("(?m)^\\s*module\\s+([\\w.]+)\\s*\\{");

    static String descriptor(String module) throws IOException {
        return Files.readString(ROOT.resolve(module + "/src/main/java/module-info.java"));
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
        assertThat(offenders(backends, "dev.gatun.lowering")).isEmpty();
    }

    /**
     * A backend runs what the plan says and decides nothing else: it reads the plan's own types (its steps and the typed
     * views of their fields, buffers, pools, kernels, the tiles a step holds and each step's launch choices), never a
     * planner pass or a matcher that would let it find, on its own, a pattern the printed plan does not show.
     */
    @Test
    void noBackendImportsAPlannerPass() throws IOException {
        var backends = new ArrayList<String[]>();
        backends.addAll(sources("runtime/src/main/java/dev/gatun/runtime/host"));
        backends.addAll(sources("runtime/src/main/java/dev/gatun/runtime/spi"));
        backends.addAll(sources("cuda-backend/src/main/java/dev/gatun/runtime/cuda"));
        // UpdateSliceCall and AttentionCall: typed views of a step's fields (Step.OpCall of those ops), which find nothing
        var contract = Set.of("Plan", "PlanBuffer", "Step", "UpdateSliceCall", "AttentionCall", "Pool", "PlanOptions", "ColumnTiles", "RotatingSlots",
                "LaunchChoice", "kernel.Kernel", "kernel.KExpr");
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
        for (String pkg : List.of("dev.gatun.ir", "dev.gatun.lowering", "dev.gatun.dsl", "dev.gatun.planner", "dev.gatun.runtime"))
            assertThat(offenders(lib, pkg)).as(pkg).isEmpty();
    }

    @Test
    void onlyTheEdgeReadsTheEnvironment() throws IOException {
        var all = new ArrayList<String[]>();
        for (String m : List.of("ir", "lowering", "dsl", "planner", "runtime", "ffm-cuda", "cuda-backend", "models", "examples")) all.addAll(sources(m + "/src/main/java"));
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

    /**
     * A user's bad argument to the DSL, the runtime (its host backend and reference interpreter included) or the models
     * is a {@code GatunException} naming the call and the argument, never a bare {@code IllegalArgumentException}; an
     * invariant only a Gatun bug can break is an {@code IllegalStateException}. None is allowed here: a file that needs
     * one goes in {@code allowed} with the reason.
     */
    @Test
    void noBareIllegalArgumentExceptionInTheUserFacingModules() throws IOException {
        var files = new ArrayList<String[]>();
        for (String m : List.of("dsl", "runtime", "models")) files.addAll(sources(m + "/src/main/java"));
        assertThat(files).hasSizeGreaterThan(100);
        Set<String> allowed = Set.of();
        var bad = offenders(files, "new IllegalArgumentException").stream().filter(f -> !allowed.contains(f)).toList();
        assertThat(bad).as("throw a GatunException family member (or IllegalStateException for a Gatun bug) instead").isEmpty();
    }

    /** No exception is thrown only to be caught a few lines on (a {@code NumberFormatException} made to reach a parse's catch). */
    @Test
    void noParseExceptionIsThrownAsControlFlow() throws IOException {
        var all = new ArrayList<String[]>();
        for (String m : MODULES) all.addAll(sources(m + "/src/main/java"));
        assertThat(offenders(all, "throw new NumberFormatException")).isEmpty();
    }

    @Test
    void everyLibraryModuleHasADescriptor() {
        for (String m : MODULES)
            assertThat(ROOT.resolve(m + "/src/main/java/module-info.java")).as(m + " needs a module-info.java").isRegularFile();
    }

    /** The packages docs/API.md's table lists are exactly the packages the modules export to everyone. */
    @Test
    void theExportsAreTheDocumentedApi() throws IOException {
        var exported = new TreeSet<String>();
        for (String m : MODULES) {
            var e = EXPORTS.matcher(descriptor(m));
            while (e.find()) if (e.group(2) == null) exported.add(e.group(1));
        }
        var documented = new TreeSet<String>();
        var row = Pattern.compile("(?m)^\\| `[\\w-]+` `(dev\\.gatun[\\w.]*)` \\|").matcher(Files.readString(ROOT.resolve("docs/API.md")));
        while (row.find()) documented.add(row.group(1));
        assertThat(exported).contains("dev.gatun.models.llama", "dev.gatun.models.text");
        assertThat(documented).isEqualTo(exported);
    }

    /** A package exported to named modules only ({@code exports p to m}) is one each of them really reads. */
    @Test
    void qualifiedExportsGoOnlyWhereTheyAreUsed() throws IOException {
        var moduleDirs = new TreeMap<String, String>();
        for (String m : MODULES) {
            var name = MODULE_NAME.matcher(descriptor(m));
            assertThat(name.find()).as(m).isTrue();
            moduleDirs.put(name.group(1), m);
        }
        var qualified = new ArrayList<Map.Entry<String, String>>();
        for (String m : MODULES) {
            var e = EXPORTS.matcher(descriptor(m));
            while (e.find()) {
                if (e.group(2) == null) continue;
                for (String to : e.group(2).split(",")) qualified.add(Map.entry(e.group(1), to.strip()));
            }
        }
        assertThat(qualified).contains(Map.entry("dev.gatun.ir.json", "dev.gatun.models"));
        for (var q : qualified) {
            assertThat(moduleDirs).as("exports " + q.getKey() + " to " + q.getValue() + ": no such module").containsKey(q.getValue());
            var readers = offenders(sources(moduleDirs.get(q.getValue()) + "/src/main/java"), q.getKey() + ".");
            assertThat(readers).as("exports " + q.getKey() + " to " + q.getValue() + ", whose main code never reads it").isNotEmpty();
        }
    }

    @Test
    void theModelsKnowNothingOfTheCudaBackend() throws IOException {
        var models = sources("models/src/main/java");
        assertThat(models).hasSizeGreaterThan(20);
        for (String pkg : List.of("dev.gatun.cuda", "dev.gatun.runtime.cuda", "dev.gatun.runtime.host"))
            assertThat(offenders(models, pkg)).as(pkg).isEmpty();
    }
}
