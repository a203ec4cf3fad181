package dev.gatun.examples;

import org.junit.jupiter.api.Test;

import java.nio.file.Files;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * ./gatun-run from the checkout after the README's build: {@code --main} without {@code --cp} runs a class of any
 * module (here the examples', which the launcher's own class path, runtime and ir, does not hold).
 */
class GatunRunScriptTest {

    @Test
    void mainWithoutClassPathRunsAClassOfTheProject() {
        var script = Checkout.root().resolve("gatun-run");
        assumeTrue(Files.isExecutable(script), "gatun-run is not executable at " + script);
        var r = Checkout.run(List.of(script.toString(), "--nproc", "1", "--main", "dev.gatun.examples.Seeds", "2", "4"), null, 120);
        assertThat(r.exitCode()).as("exit code; output:%n%s", r.output()).isZero();
        assertThat(r.output()).contains("[rank 0] verified: d = 42 on every rank").doesNotContain("ClassNotFoundException");
    }
}
