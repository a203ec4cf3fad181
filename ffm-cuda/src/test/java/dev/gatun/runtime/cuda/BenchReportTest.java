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

    private static String python() {
        for (String d : System.getenv().getOrDefault("PATH", "").split(":"))
            if (Files.isExecutable(Path.of(d, "python3"))) return Path.of(d, "python3").toString();
        return null;
    }
}
