package dev.gatun.examples;

import dev.gatun.planner.Plan;
import dev.gatun.planner.Step;
import dev.gatun.planner.viz.PlanSvg;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.File;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * Opens the seeds' plan picture in headless Chromium: an HTML page embeds the SVG, a small script counts the
 * {@code rect.buffer} elements the browser laid out (with a non-empty box) and writes the count into the DOM,
 * which {@code --dump-dom} prints. Also renders the standalone {@code .svg} file and takes a screenshot of it.
 * Skipped when no Chromium is installed ({@code GATUN_CHROMIUM} may name the binary).
 */
class PlanSvgBrowserTest {

    static Path chromium() {
        var candidates = new ArrayList<String>();
        String env = System.getenv("GATUN_CHROMIUM");
        if (env != null && !env.isBlank()) candidates.add(env);
        candidates.add("/usr/bin/chromium");
        for (String dir : System.getenv().getOrDefault("PATH", "").split(File.pathSeparator))
            for (String name : List.of("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"))
                candidates.add(Path.of(dir.isEmpty() ? "." : dir, name).toString());
        for (String c : candidates) {
            Path p = Path.of(c);
            if (Files.isRegularFile(p) && Files.isExecutable(p)) return p;
        }
        return null;
    }

    record Result(int exit, String stdout, String stderr) {}

    static Result run(Path browser, Path work, String... args) throws Exception {
        var cmd = new ArrayList<>(List.of(browser.toString(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                "--user-data-dir=" + Files.createTempDirectory(work, "profile")));
        cmd.addAll(List.of(args));
        Path out = Files.createTempFile(work, "out", ".txt"), err = Files.createTempFile(work, "err", ".txt");
        Process p = new ProcessBuilder(cmd).redirectInput(ProcessBuilder.Redirect.from(new File("/dev/null")))
                .redirectOutput(out.toFile()).redirectError(err.toFile()).start();
        if (!p.waitFor(120, TimeUnit.SECONDS)) {
            p.descendants().forEach(ProcessHandle::destroyForcibly);
            p.destroyForcibly();
            throw new AssertionError("chromium did not finish in 120 s: " + Files.readString(err));
        }
        return new Result(p.exitValue(), Files.readString(out), Files.readString(err));
    }

    static final String SCRIPT = """
            <script>
            (function () {
              var rects = document.querySelectorAll('svg.gatun-plan rect.buffer');
              var drawn = 0;
              rects.forEach(function (r) { var b = r.getBoundingClientRect(); if (b.width > 0 && b.height > 0) drawn++; });
              var out = document.createElement('pre');
              out.id = 'gatun-result';
              out.textContent = 'buffers=' + rects.length + ' drawn=' + drawn
                + ' maxlive=' + document.querySelectorAll('svg.gatun-plan line.max-live').length
                + ' commpanels=' + document.querySelectorAll('svg.gatun-plan g.panel.comm').length;
              document.body.appendChild(out);
            })();
            </script>
            """;

    @Test
    void chromiumRendersTheSeedsPlanWithOneRectanglePerPlacedBuffer(@TempDir Path dir) throws Exception {
        Path browser = chromium();
        assumeTrue(browser != null, "Chromium is not installed (apt-get install -y chromium); skipping the browser test");
        Plan plan = Pictures.plan(Seeds.graph(4), 2);
        long placed = plan.steps().stream().filter(s -> s instanceof Step.Place).count();
        assertThat(placed).isEqualTo(8);

        Path page = dir.resolve("seeds.html");
        Files.writeString(page, PlanSvg.html(plan).replace("</body>", SCRIPT + "</body>"), StandardCharsets.UTF_8);
        Result r = run(browser, dir, "--dump-dom", page.toUri().toString());
        var m = Pattern.compile("buffers=(\\d+) drawn=(\\d+) maxlive=(\\d+) commpanels=(\\d+)").matcher(r.stdout());
        assertThat(m.find()).as("chromium's DOM dump (exit %d):%n%s%nstderr:%n%s", r.exit(), r.stdout(), r.stderr()).isTrue();
        assertThat(Long.parseLong(m.group(1))).as("rect.buffer elements").isEqualTo(placed);
        assertThat(Long.parseLong(m.group(2))).as("rect.buffer elements laid out with a non-empty box").isEqualTo(placed);
        assertThat(Integer.parseInt(m.group(3))).as("max-live lines: one per pool and the legend's").isEqualTo(plan.pools().size() + 1);
        assertThat(Integer.parseInt(m.group(4))).as("communication panels").isEqualTo(1);

        // the standalone file opens as an SVG document and draws something
        Path svg = dir.resolve("seeds.plan.svg");
        Files.writeString(svg, PlanSvg.render(plan), StandardCharsets.UTF_8);
        Result dom = run(browser, dir, "--dump-dom", svg.toUri().toString());
        assertThat(Pattern.compile("<rect class=\"buffer[ \"]").matcher(dom.stdout()).results().count())
                .as("stdout:%n%s%nstderr:%n%s", dom.stdout(), dom.stderr()).isEqualTo(placed);
        Path png = dir.resolve("seeds.png");
        Result shot = run(browser, dir, "--hide-scrollbars", "--window-size=1000,800", "--screenshot=" + png, svg.toUri().toString());
        assertThat(png).as("screenshot; stderr:%n%s", shot.stderr()).isNotEmptyFile();
        byte[] head = Arrays.copyOf(Files.readAllBytes(png), 8);
        assertThat(head).startsWith((byte) 0x89, (byte) 'P', (byte) 'N', (byte) 'G');
        assertThat(Files.size(png)).isGreaterThan(10_000);
    }
}
