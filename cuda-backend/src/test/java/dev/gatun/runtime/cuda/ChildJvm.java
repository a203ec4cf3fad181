package dev.gatun.runtime.cuda;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;

/**
 * A main class of these tests run in a JVM of its own on this JVM's class path: where a check ends in a trap, which
 * leaves the process's CUDA context unusable.
 */
final class ChildJvm {
    private ChildJvm() {}

    /** What the child printed (stdout and stderr) and its exit status. */
    record Result(String log, int exit) {}

    /** {@code main} with {@code arg}, waited for at most {@code seconds} (asserted: the child finished). */
    static Result run(Class<?> main, String arg, int seconds) throws IOException, InterruptedException {
        String java = Path.of(System.getProperty("java.home"), "bin", "java").toString();
        var command = List.of(java, "--enable-native-access=ALL-UNNAMED", "-cp", System.getProperty("java.class.path"), main.getName(), arg);
        Process p = new ProcessBuilder(command).redirectErrorStream(true).start();
        byte[] out = p.getInputStream().readAllBytes();   // until the child exits (it halts itself)
        assertThat(p.waitFor(seconds, TimeUnit.SECONDS)).as("the check finished").isTrue();
        return new Result(new String(out, StandardCharsets.UTF_8), p.exitValue());
    }
}
