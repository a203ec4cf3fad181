package dev.gatun.examples;

import org.junit.jupiter.api.Assumptions;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** The source checkout the tests run in (they skip where there is none, e.g. in the GPU bundle), and running its scripts. */
final class Checkout {
    private Checkout() {}

    /** The repository root: the nearest folder up from the working directory that holds gatun-classpath. */
    static Path root() {
        for (Path p = Path.of("").toAbsolutePath(); p != null; p = p.getParent())
            if (Files.isRegularFile(p.resolve("gatun-classpath")) && Files.isDirectory(p.resolve("examples/single-file"))) return p;
        Assumptions.abort("not in a Gatun source checkout (no gatun-classpath above " + Path.of("").toAbsolutePath() + ")");
        return null;
    }

    /** This JVM's JDK: what the scripts should use. */
    static Path javaHome() { return Path.of(System.getProperty("java.home")); }

    record Result(int exitCode, String output) {}

    /** Runs a command in the root with JAVA_HOME set to this JDK, stdin from {@code input}; stdout and stderr together. */
    static Result run(List<String> command, String input, long timeoutSeconds) {
        try {
            var pb = new ProcessBuilder(command).directory(root().toFile()).redirectErrorStream(true);
            pb.environment().put("JAVA_HOME", javaHome().toString());
            pb.environment().put("PATH", javaHome().resolve("bin") + ":" + pb.environment().getOrDefault("PATH", "/usr/bin:/bin"));
            Process p = pb.start();
            try (var in = p.getOutputStream()) {
                if (input != null) in.write(input.getBytes(StandardCharsets.UTF_8));
            }
            var out = new StringBuilder();
            Thread reader = Thread.ofPlatform().daemon().start(() -> {
                try {
                    out.append(new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8));
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
            if (!p.waitFor(timeoutSeconds, TimeUnit.SECONDS)) {
                p.descendants().forEach(ProcessHandle::destroyForcibly);
                p.destroyForcibly();
                p.waitFor();
                reader.join(5_000);
                throw new AssertionError(command + " did not finish in " + timeoutSeconds + " s; output so far:\n" + out);
            }
            reader.join();
            return new Result(p.exitValue(), out.toString());
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new AssertionError(e);
        }
    }

    /** What ./gatun-classpath prints. */
    static String classPath() {
        var r = run(List.of(root().resolve("gatun-classpath").toString()), null, 30);
        if (r.exitCode() != 0) throw new AssertionError("gatun-classpath failed (" + r.exitCode() + "):\n" + r.output());
        return r.output().strip();
    }
}
