package dev.gatun.runtime.cuda;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * bench/arch_torch.py, the transformers side of the bandwidth table and the table itself, on the host (no torch needed:
 * the table and the argument parsing do not import it): the fractions are the hand numbers, a refusal and a failure are
 * shown rather than dropped, and bad arguments are refused naming the option. Skipped where python3 is absent.
 */
class ArchTableTest {
    @TempDir Path dir;

    private static Path script() {
        return Path.of("").toAbsolutePath().getParent().resolve("bench/arch_torch.py");
    }

    /**
     * By hand: llama's step reads 2.4 GB in 1 ms, 2.4 TB/s, 0.500 of 4.8 TB/s (transformers' 20 ms: 0.025); Qwen3's 3.24 GB
     * in 0.9 ms, 3.6 TB/s, 0.750, 1.500 times llama's; Mixtral's 0.6 GB of top-2 experts in 0.25 ms, 0.500 (its 1.2 GB
     * of every expert at that time: 1.000), transformers' 12 ms 0.0104; Gemma refused, its transformers 5 GB in 25 ms 0.0417.
     */
    @Test
    void theTableIsTheHandNumbers() throws Exception {
        assumePython();
        row("gatun-arch-llama", "\"step_weight_bytes\": 2400000000, \"dense_weight_bytes\": 2400000000, \"tokens\": [1, 2, 3, 4], \"decode_ms\": 1.0");
        row("torch-arch-llama", "\"tokens\": [1, 2, 9, 4], \"decode_ms\": 20.0");
        row("gatun-arch-qwen3", "\"step_weight_bytes\": 3240000000, \"dense_weight_bytes\": 3240000000, \"tokens\": [1], \"decode_ms\": 0.9");
        row("torch-arch-qwen3", "\"error\": \"RuntimeError: boom\"");
        row("gatun-arch-gemma", "\"step_weight_bytes\": 5000000000, \"dense_weight_bytes\": 5000000000, "
                + "\"refused\": \"CompilationException: plan 'llama_prefill': topk has no CUDA kernel yet\"");
        row("torch-arch-gemma", "\"tokens\": [7], \"decode_ms\": 25.0");
        row("gatun-arch-mixtral", "\"step_weight_bytes\": 600000000, \"dense_weight_bytes\": 1200000000, \"tokens\": [5, 6], \"decode_ms\": 0.25");
        row("torch-arch-mixtral", "\"tokens\": [5, 6], \"decode_ms\": 12.0");
        row("gatun-arch-phi3", "\"step_weight_bytes\": 1900000000, \"dense_weight_bytes\": 1900000000, \"failed\": \"GatunRuntimeException: CUDA error 700\"");
        Path md = dir.resolve("t.md");
        var r = run("table", "--out-dir", dir.toString(), "--archs", "llama,qwen3,gemma,mixtral,phi3", "--md", md.toString());
        assertThat(r.code).as(r.out).isZero();
        String table = Files.readString(md);
        assertThat(table).contains("| llama | 1.000 | 20.000 | 2.400 | 0.500 | 0.025 | 1.000 | 2/4 |",
                "| qwen3 | 0.900 | failed (below) | 3.240 | 0.750 | - | 1.500 | - |",
                "| gemma | refused (below) | 25.000 | 5.000 | - | 0.042 | - | - |",
                "| mixtral | 0.250 | 12.000 | 0.600 | 0.500 | 0.010 | 1.000 | 2/2 |",
                "| phi3 | failed (below) | no row | 1.900 | - | - | - | - |",
                "phi3: Gatun failed: GatunRuntimeException: CUDA error 700",
                "mixtral: Gatun computes every expert (MixtureOfExperts): its step reads 1.200 GB, 1.000 of 4.8 TB/s at its time",
                "gemma: Gatun refused: CompilationException: plan 'llama_prefill': topk has no CUDA kernel yet",
                "qwen3: transformers failed: RuntimeError: boom");
        assertThat(r.out).contains("gemma: Gatun refused: CompilationException");
        // another peak: llama's fraction at 2.4 TB/s is 1.000
        var other = run("table", "--out-dir", dir.toString(), "--archs", "llama", "--peak-tbps", "2.4");
        assertThat(other.out).contains("Gatun of 2.4 TB/s").containsPattern("llama +1\\.000 +20\\.000 +2\\.400 +1\\.000 +0\\.050 +1\\.000");
    }

    /** The arguments: the plan of a dry run, and each bad option refused by name before torch is imported. */
    @Test
    void argumentsAreParsedAndBadOnesRefusedByName() throws Exception {
        assumePython();
        var plan = run("measure", "--root", "/r", "--out-dir", "/o", "--archs", "gemma,qwen3_moe", "--prompt", "64", "--dry-run");
        assertThat(plan.code).as(plan.out).isZero();
        assertThat(plan.out.replaceAll("\\s+", " ")).contains("\"gemma\": \"/r/gemma\"", "\"qwen3_moe\": \"/r/qwen3_moe\"", "\"prompt\": 64",
                "\"new\": 32", "\"runs\": 6", "\"warmup\": 2");
        var bogus = run("measure", "--root", "/r", "--out-dir", "/o", "--archs", "llama,bogus", "--dry-run");
        assertThat(bogus.code).isEqualTo(2);
        assertThat(bogus.out).contains("argument --archs: unknown architecture(s) ['bogus']");
        var twice = run("measure", "--root", "/r", "--out-dir", "/o", "--archs", "llama,llama", "--dry-run");
        assertThat(twice.out).contains("named twice");
        var runs = run("measure", "--root", "/r", "--out-dir", "/o", "--runs", "1", "--dry-run");
        assertThat(runs.code).isEqualTo(2);
        assertThat(runs.out).contains("argument --runs: 1 is under 2");
        var peak = run("table", "--out-dir", "/o", "--peak-tbps", "0");
        assertThat(peak.out).contains("argument --peak-tbps: 0 is not a positive number");
        var missing = run("measure", "--out-dir", "/o");
        assertThat(missing.out).contains("the following arguments are required: --root");
    }

    private void row(String name, String fields) throws Exception {
        Files.writeString(dir.resolve(name + ".json"), "{" + fields + "}");
    }

    private record Result(int code, String out) {}

    private static Result run(String... args) throws Exception {
        var cmd = new ArrayList<>(List.of(python(), script().toString()));
        cmd.addAll(List.of(args));
        var p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(60, TimeUnit.SECONDS)).isTrue();
        return new Result(p.exitValue(), out);
    }

    private static void assumePython() {
        assumeTrue(Files.exists(script()), "bench/arch_torch.py not found from " + Path.of("").toAbsolutePath());
        assumeTrue(python() != null, "python3 is not on the PATH");
    }

    private static String python() {
        for (String d : System.getenv().getOrDefault("PATH", "").split(":"))
            if (Files.isExecutable(Path.of(d, "python3"))) return Path.of(d, "python3").toString();
        return null;
    }
}
