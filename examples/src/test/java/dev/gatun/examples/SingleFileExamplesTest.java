package dev.gatun.examples;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * Runs every single-file example under examples/single-file exactly as the README says:
 * {@code java --enable-preview --enable-native-access=ALL-UNNAMED -cp "$(./gatun-classpath)" examples/single-file/Name.java}.
 */
class SingleFileExamplesTest {

    static Stream<String> examples() {
        try (var files = Files.list(Checkout.root().resolve("examples/single-file"))) {
            return files.map(p -> p.getFileName().toString()).filter(n -> n.endsWith(".java")).sorted().toList().stream();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    @Test
    void theIssuesExamplesAreThere() {
        assertThat(examples().toList()).contains("Seeds.java", "TensorParallelMlp.java", "SymmetricUserOp.java",
                "GraphInputPath2.java", "DynamicShapeNccl.java", "LlamaGreedy.java", "AnyDecoder.java", "LinearRegression.java", "FineTune.java");
    }

    @Test
    void theClassPathHoldsEveryModule() {
        var entries = List.of(Checkout.classPath().split(File.pathSeparator));
        for (String m : List.of("ir", "lowering", "dsl", "planner", "runtime", "ffm-cuda", "cuda-backend", "models"))
            assertThat(entries).as("module " + m).anyMatch(e -> e.contains(File.separator + m + File.separator + "target" + File.separator));
        for (String e : entries) assertThat(Path.of(e)).exists();
    }

    @ParameterizedTest(name = "{0}")
    @MethodSource("examples")
    void runsAndVerifiesItself(String file) {
        String java = Checkout.javaHome().resolve("bin/java").toString();
        var r = Checkout.run(List.of(java, "--enable-preview", "--enable-native-access=ALL-UNNAMED", "-cp", Checkout.classPath(),
                "examples/single-file/" + file), null, 120);
        assertThat(r.exitCode()).as("exit code of %s; output:%n%s", file, r.output()).isZero();
        assertThat(r.output().lines()).as("output of %s", file).anyMatch(l -> l.startsWith("verified: "));
        assertThat(r.output()).as("output of %s", file).doesNotContain("WRONG").doesNotContain("Exception");
    }
}
