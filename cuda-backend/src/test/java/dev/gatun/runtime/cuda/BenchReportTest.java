package dev.gatun.runtime.cuda;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * bench/report.py, which turns both systems' rows into the benchmark tables: the ratio uses only correct peer
 * cells, failures and wrong results are shown rather than dropped, and every row reaches the CSV. Skipped
 * where python3 is absent.
 */
class BenchReportTest {
    @Test
    void ratioSkipsWrongPeersAndFailuresAreShown(@TempDir Path dir) throws Exception {
        Path script = Path.of("").toAbsolutePath().getParent().resolve("bench/report.py");
        assumeTrue(Files.exists(script), "bench/report.py not found from " + Path.of("").toAbsolutePath());
        assumeTrue(python() != null, "python3 is not on the PATH");
        String base = "\"workload\": \"all_reduce\", \"mode\": \"replay\", \"dtype\": \"f32\", \"shape\": \"8x8\", \"bytes\": 256, \"world\": 2, \"calls\": 200";
        Path rows = dir.resolve("rows.jsonl");
        Files.write(rows, List.of(
                "{\"system\": \"gatun\", \"variant\": \"auto\", " + base + ", \"median_us\": 10.0, \"pipelined_us\": 5.0, \"p10_us\": 9, \"p90_us\": 11, \"correct\": true, \"chosen\": \"one_shot\"}",
                "{\"system\": \"pytorch\", \"variant\": \"symm_one_shot\", " + base + ", \"median_us\": 20.0, \"pipelined_us\": 4.0, \"p10_us\": 19, \"p90_us\": 21, \"correct\": true}",
                // faster, but wrong: it must not become the best peer
                "{\"system\": \"pytorch\", \"variant\": \"nccl\", " + base + ", \"median_us\": 1.0, \"pipelined_us\": 1.0, \"correct\": false, \"max_rel_err\": 0.5}",
                "{\"system\": \"pytorch\", \"variant\": \"symm_two_shot\", " + base + ", \"median_us\": null, \"error\": \"RuntimeError: boom\"}"));
        Path md = dir.resolve("out.md"), csv = dir.resolve("out.csv");
        var p = new ProcessBuilder(python(), script.toString(), rows.toString(), "--md", md.toString(), "--csv", csv.toString(),
                "--json", dir.resolve("out.json").toString()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(60, TimeUnit.SECONDS)).isTrue();
        assertThat(p.exitValue()).as(out).isZero();
        assertThat(out).contains("10.0 / 5.00 (one_shot)", "0.50 / 1.25 (vs symm_one_shot)", "WRONG(5.0e-01)", "FAILED(RuntimeError) [1]",
                "RuntimeError: boom");
        assertThat(Files.readString(md)).contains("| 8x8 | f32 | replay | 256 B |", "0.50 / 1.25");
        assertThat(Files.readAllLines(csv)).hasSize(1 + 4);
    }

    /** The norms family: a bandwidth table beside the times (fraction of each row's own copy floor), floors never "unchecked". */
    @Test
    void normsGetABandwidthTable(@TempDir Path dir) throws Exception {
        Path script = Path.of("").toAbsolutePath().getParent().resolve("bench/report.py");
        assumeTrue(Files.exists(script), "bench/report.py not found from " + Path.of("").toAbsolutePath());
        assumeTrue(python() != null, "python3 is not on the PATH");
        String base = "\"workload\": \"layernorm\", \"mode\": \"replay\", \"dtype\": \"f32\", \"shape\": \"4096x4096\", \"bytes\": 67108864, "
                + "\"moved_bytes\": 134250496, \"world\": 1, \"calls\": 200, \"p10_us\": 1, \"p90_us\": 2";
        Path rows = dir.resolve("rows.jsonl");
        Files.write(rows, List.of(
                "{\"system\": \"gatun\", \"variant\": \"default\", " + base + ", \"median_us\": 120.0, \"pipelined_us\": 110.0, \"correct\": true, "
                        + "\"chosen\": \"3 kernels\", \"gbps\": 1220.6, \"copy_gbps\": 3196.0, \"of_copy\": 0.38188}",
                "{\"system\": \"gatun\", \"variant\": \"d2d_copy\", " + base + ", \"median_us\": 48.0, \"pipelined_us\": 42.0, \"correct\": null, "
                        + "\"chosen\": \"cudaMemcpyAsync device to device\", \"gbps\": 3196.0, \"copy_gbps\": 3196.0, \"of_copy\": 1.0, \"floor\": true}",
                "{\"system\": \"pytorch\", \"variant\": \"compile_nn\", " + base + ", \"median_us\": 60.0, \"pipelined_us\": 44.0, \"correct\": true, "
                        + "\"gbps\": 3051.1, \"copy_gbps\": 3274.0, \"of_copy\": 0.93192}",
                "{\"system\": \"pytorch\", \"variant\": \"eager\", " + base + ", \"median_us\": null, \"correct\": false, \"max_rel_err\": 0.03, "
                        + "\"error\": \"WrongResult: output 'y' relative error 0.03 > 1e-05 (checked before timing; not timed)\"}"));
        Path md = dir.resolve("out.md");
        var p = new ProcessBuilder(python(), script.toString(), rows.toString(), "--md", md.toString()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(60, TimeUnit.SECONDS)).isTrue();
        assertThat(p.exitValue()).as(out).isZero();
        assertThat(out).contains("== layernorm, world 1 ==", "120.0 / 110.0 (3 kernels)", "48.0 / 42.0", "2.00 / 2.50 (vs compile_nn)",
                "FAILED(WrongResult) [1]", "effective bandwidth", "1221 (0.38)", "3196 (1.00)", "3051 (0.93)", "128.0 MiB");
        assertThat(out).doesNotContain("unchecked", "cudaMemcpyAsync device to device");
        assertThat(Files.readString(md)).contains("| 4096x4096 | f32 | replay | 128.0 MiB | 1221 (0.38) | 3196 (1.00) |");
    }

    private static String python() {
        for (String d : System.getenv().getOrDefault("PATH", "").split(":"))
            if (Files.isExecutable(Path.of(d, "python3"))) return Path.of(d, "python3").toString();
        return null;
    }
}
