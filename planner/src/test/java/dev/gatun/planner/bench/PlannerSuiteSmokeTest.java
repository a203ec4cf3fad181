package dev.gatun.planner.bench;

import dev.gatun.planner.OffsetAssigner;
import dev.gatun.planner.Plan;
import dev.gatun.planner.PlanChecksAccess;
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
        System.out.print(text.toString(StandardCharsets.UTF_8));
        assertThat(all).hasSize(2);
        for (var o : all) {
            assertThat(o.violations()).as(o.name()).isEmpty();
            assertThat(o.result().size()).isGreaterThanOrEqualTo(o.result().maxLive());
            // never worse than the historical single greedy order
            assertThat(o.result().size()).isLessThanOrEqualTo(OffsetAssigner.assign(o.items(), OffsetAssigner.Options.GREEDY_ONLY).size());
            var lines = Files.readAllLines(out.resolve(o.name().replace(".csv", ".offsets.csv")));
            assertThat(lines.getFirst()).isEqualTo("id,offset");
            assertThat(lines).hasSize(o.items().size() + 1);
        }
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
    }

    @Test
    void orderingReportRunsAndNeverLosesToThePlainOrder() {
        var rows = PlannerBench.ordering();
        PlannerBench.printOrdering(rows, System.out);
        assertThat(rows).allSatisfy(r -> assertThat(r.chosenPeak()).isLessThanOrEqualTo(r.plainPeak()));
    }
}
