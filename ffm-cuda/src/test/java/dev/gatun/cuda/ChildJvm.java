package dev.gatun.cuda;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * A child JVM running {@link TestChild} with the same java binary and class path. It inherits this process's whole
 * environment, so NCCL_NVLS_ENABLE, TORCH_SYMM_MEM_DISABLE_MULTICAST and NVSHMEM_DISABLE_NVLS stay set.
 */
final class ChildJvm implements AutoCloseable {
    final Process process;
    final BufferedReader out;
    final PrintWriter in;

    private ChildJvm(Process p) {
        this.process = p;
        this.out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
        this.in = new PrintWriter(p.getOutputStream(), true, StandardCharsets.UTF_8);
    }

    static ChildJvm start(String... args) throws IOException {
        String java = ProcessHandle.current().info().command()
                .orElse(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        List<String> cmd = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED", "-cp", cp,
                TestChild.class.getName()));
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT);
        // ProcessBuilder starts from a copy of System.getenv(): the multicast kill switches are inherited.
        return new ChildJvm(pb.start());
    }

    /** Reads lines until one starts with {@code prefix}; returns the rest of it. */
    String expect(String prefix) throws IOException {
        String line;
        while ((line = out.readLine()) != null) {
            System.out.println("[child] " + line);
            if (line.startsWith(prefix)) {
                return line.substring(prefix.length()).trim();
            }
            if (line.startsWith("FAIL")) {
                throw new AssertionError("child failed: " + line);
            }
        }
        throw new AssertionError("child ended before printing " + prefix + " (exit " + waitFor() + ")");
    }

    int waitFor() {
        try {
            if (!process.waitFor(120, TimeUnit.SECONDS)) {
                process.destroyForcibly();
                return -1;
            }
            return process.exitValue();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return -1;
        }
    }

    @Override
    public void close() {
        if (process.isAlive()) {
            process.destroyForcibly();
        }
    }
}
