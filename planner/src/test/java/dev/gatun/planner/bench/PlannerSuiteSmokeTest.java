package dev.gatun.planner.bench;

import dev.gatun.planner.OffsetAssigner;
import dev.gatun.planner.Plan;
import dev.gatun.planner.testing.PlanChecksAccess;
import dev.gatun.planner.Planner;
import dev.gatun.planner.tools.AssignOffsets;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

/** The planner suite in CI size: no timing assertions, only that it runs and its results are valid. */
class PlannerSuiteSmokeTest {

    @Test
    void assignCommandOnTheBundledMiniMallocInstances(@TempDir Path dir) throws IOException {
        for (String f : new String[]{"A.1048576.csv", "C.1048576.csv", "LICENSE"}) {
            try (InputStream in = getClass().getResourceAsStream("/minimalloc/" + f)) { Files.write(dir.resolve(f), in.readAllBytes()); }
        }
        var text = new ByteArrayOutputStream();
        var out = dir.resolve("offsets");
        var all = AssignOffsets.runDirectory(dir, OffsetAssigner.Options.DEFAULT, 1, out, new PrintStream(text, true, StandardCharsets.UTF_8));
        String table = text.toString(StandardCharsets.UTF_8);
        System.out.print(table);
        assertThat(all).hasSize(2);
        for (var o : all) {
            assertThat(o.violations()).as(o.name()).isEmpty();
            // checked again from the written file, independently of the command's own check
            var offsets = readOffsets(out.resolve(o.name().replace(".csv", ".offsets.csv")));
            long pool = checkedPoolSize(o.items(), offsets);
            assertThat(pool).isEqualTo(o.result().size());
            assertThat(pool).isGreaterThanOrEqualTo(sweepMaxLive(o.items())).isGreaterThanOrEqualTo(o.result().maxLive());
            assertThat(o.result().maxLive()).isEqualTo(sweepMaxLive(o.items()));
            // never worse than the historical single greedy order
            assertThat(pool).isLessThanOrEqualTo(OffsetAssigner.assign(o.items(), OffsetAssigner.Options.GREEDY_ONLY).size());
            // the table reports pool size, max-live and their ratio per instance
            assertThat(table).containsPattern(java.util.regex.Pattern.quote(o.name()) + " +" + o.items().size() + " +" + o.result().maxLive()
                    + " +" + pool + " +" + String.format("%.3f", o.ratio()).replace(".", "\\."));
        }
        assertThat(table).containsPattern("2 instances: mean ratio [0-9.]+, worst [0-9.]+, total [0-9]+ ms");
    }

    @Test
    void assignCommandOnOneFileWritesOffsets(@TempDir Path dir) throws IOException {
        Path csv = dir.resolve("C.1048576.csv");
        try (InputStream in = getClass().getResourceAsStream("/minimalloc/C.1048576.csv")) { Files.write(csv, in.readAllBytes()); }
        Path out = dir.resolve("C.offsets.csv");
        AssignOffsets.main(new String[]{"--nodes", "20000", "-o", out.toString(), csv.toString()});
        var items = AssignOffsets.parse(csv);
        long pool = checkedPoolSize(items, readOffsets(out));
        assertThat(pool).isGreaterThanOrEqualTo(sweepMaxLive(items));
    }

    /** id -> offset from an "id,offset" file. */
    static Map<String, Long> readOffsets(Path file) throws IOException {
        var lines = Files.readAllLines(file);
        assertThat(lines.getFirst()).isEqualTo("id,offset");
        var m = new HashMap<String, Long>();
        for (String l : lines.subList(1, lines.size())) {
            String[] f = l.split(",");
            assertThat(m.put(f[0], Long.parseLong(f[1]))).as("duplicate id " + f[0]).isNull();
        }
        return m;
    }

    /** The pool size the offsets need, after checking that no two buffers alive at once share a byte. */
    static long checkedPoolSize(List<OffsetAssigner.Item> items, Map<String, Long> offsets) {
        assertThat(offsets).hasSize(items.size());
        long pool = 0;
        for (int i = 0; i < items.size(); i++) {
            var a = items.get(i);
            long oa = offsets.get(a.id());
            assertThat(oa).as(a.id()).isNotNegative();
            if (a.size() > 0) pool = Math.max(pool, oa + a.size());
            for (int j = i + 1; j < items.size(); j++) {
                var b = items.get(j);
                long ob = offsets.get(b.id());
                boolean time = a.lower() < b.upper() && b.lower() < a.upper();
                boolean space = a.size() > 0 && b.size() > 0 && oa < ob + b.size() && ob < oa + a.size();
                assertThat(time && space).as("%s@%d and %s@%d overlap", a.id(), oa, b.id(), ob).isFalse();
            }
        }
        return pool;
    }

    /** Max-live by brute force over every start time. */
    static long sweepMaxLive(List<OffsetAssigner.Item> items) {
        long best = 0;
        for (var t : items) {
            long live = 0;
            for (var it : items) if (it.lower() <= t.lower() && t.lower() < it.upper()) live += it.size();
            best = Math.max(best, live);
        }
        return best;
    }

    @Test
    void malformedCsvNamesTheLine() {
        assertThatThrownBy(() -> AssignOffsets.parse("x.csv", "id,lower,upper,size\n0,1,2,3\n1,5,4,8\n"))
                .hasMessageContaining("x.csv:3").hasMessageContaining("upper 4 is before lower 5");
        assertThatThrownBy(() -> AssignOffsets.parse("x.csv", "id,lower,upper,size\n0,1,two,3\n"))
                .hasMessageContaining("x.csv:2").hasMessageContaining("upper \"two\" is not an integer");
        assertThatThrownBy(() -> AssignOffsets.parse("x.csv", "id,lower,upper,size\n0,1,2\n"))
                .hasMessageContaining("x.csv:2").hasMessageContaining("expected 4 fields, found 3");
        assertThatThrownBy(() -> AssignOffsets.parse("x.csv", "a,b\n")).hasMessageContaining("x.csv:1").hasMessageContaining("header");
        assertThatThrownBy(() -> AssignOffsets.parse("x.csv", "id,lower,upper,size\n0,1,2,3\n0,1,2,3\n")).hasMessageContaining("duplicate id");
    }

    @Test
    void planningSmokeAt10kNodes() {
        Plan p = Planner.plan(PlannerBench.lowered(10_000));
        assertThat(PlanChecksAccess.all(p)).isEmpty();
        assertThat(p.estimatedPeak()).isLessThanOrEqualTo(p.plainOrderPeak());
        var t = PlannerBench.time(1_000, 1, System.out);
        assertThat(t.arena()).isGreaterThanOrEqualTo(t.arenaMaxLive());
        assertThat(t.planMs()).isPositive();
        // the fitted exponent is the log-log slope: exact on a power law
        double[] x = {1e3, 1e4, 1e5, 1e6}, y = new double[4];
        for (int i = 0; i < 4; i++) y[i] = 3 * Math.pow(x[i], 1.125);
        assertThat(PlannerBench.slope(x, y)).isCloseTo(1.125, org.assertj.core.data.Offset.offset(1e-9));
    }

    @Test
    void orderingReportRunsAndNeverLosesToThePlainOrder() {
        var rows = PlannerBench.ordering();
        PlannerBench.printOrdering(rows, System.out);
        assertThat(rows).allSatisfy(r -> assertThat(r.chosenPeak()).isLessThanOrEqualTo(r.plainPeak()));
    }
}
