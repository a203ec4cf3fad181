package dev.gatun.planner;

import net.jqwik.api.ForAll;
import net.jqwik.api.Property;
import net.jqwik.api.constraints.IntRange;
import net.jqwik.api.constraints.LongRange;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.stream.Stream;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

class OffsetAssignerTest {

    static OffsetAssigner.Item item(String id, long lo, long hi, long size) { return new OffsetAssigner.Item(id, lo, hi, size, 1); }

    /** Violations: two items alive at once whose byte ranges overlap, misaligned offsets, or an item beyond the size. */
    static List<String> violations(List<OffsetAssigner.Item> items, OffsetAssigner.Result r) {
        var bad = new ArrayList<String>();
        long[] off = r.offsets();
        for (int i = 0; i < items.size(); i++) {
            var a = items.get(i);
            if (off[i] < 0 || off[i] + a.size() > r.size()) bad.add(a.id() + " at " + off[i] + " beyond size " + r.size());
            if (off[i] % a.alignment() != 0) bad.add(a.id() + " at " + off[i] + " not aligned to " + a.alignment());
            for (int j = i + 1; j < items.size(); j++) {
                var b = items.get(j);
                boolean time = a.lower() < b.upper() && b.lower() < a.upper();
                boolean mem = off[i] < off[j] + b.size() && off[j] < off[i] + a.size() && a.size() > 0 && b.size() > 0;
                if (time && mem) bad.add(a + "@" + off[i] + " overlaps " + b + "@" + off[j]);
            }
        }
        return bad;
    }

    /** Brute-force max-live: the largest sum of sizes alive at any integer time. */
    static long bruteMaxLive(List<OffsetAssigner.Item> items) {
        long lo = items.stream().mapToLong(OffsetAssigner.Item::lower).min().orElse(0);
        long hi = items.stream().mapToLong(OffsetAssigner.Item::upper).max().orElse(0);
        long best = 0;
        for (long t = lo; t < hi; t++) {
            long live = 0;
            for (var it : items) if (it.lower() <= t && t < it.upper()) live += it.size();
            best = Math.max(best, live);
        }
        return best;
    }

    @Test
    void emptyInstance() {
        var r = OffsetAssigner.assign(List.of());
        assertThat(r.size()).isZero();
        assertThat(r.maxLive()).isZero();
        assertThat(r.offsets()).isEmpty();
    }

    @Test
    void disjointLifetimesShareOneSlot() {
        var items = List.of(item("a", 0, 2, 100), item("b", 2, 4, 100), item("c", 4, 6, 100));
        var r = OffsetAssigner.assign(items);
        assertThat(r.offsets()).containsOnly(0L);
        assertThat(r.size()).isEqualTo(100).isEqualTo(r.maxLive());
    }

    @Test
    void halfOpenIntervalsTouchingAtAnEndDoNotOverlap() {
        var items = List.of(item("a", 0, 3, 64), item("b", 3, 5, 64));
        assertThat(OffsetAssigner.maxLive(items)).isEqualTo(64);
        assertThat(OffsetAssigner.assign(items).size()).isEqualTo(64);
    }

    @Test
    void simultaneousBuffersStack() {
        var items = List.of(item("a", 0, 4, 10), item("b", 0, 4, 20), item("c", 0, 4, 30));
        var r = OffsetAssigner.assign(items);
        assertThat(r.size()).isEqualTo(60).isEqualTo(r.maxLive());
        assertThat(violations(items, r)).isEmpty();
        // largest first: c at 0, b at 30, a at 50
        assertThat(r.offsets()).containsExactly(50L, 30L, 0L);
    }

    @Test
    void bestFitTakesTheTightestGap() {
        // x (0..100) and z (150..250) live all the time; y is dead, leaving a hole of 50 at 100;
        // w needs 40 bytes while the top is free too: best fit takes the hole
        var items = List.of(item("x", 0, 10, 100), item("y", 0, 1, 50), item("z", 0, 10, 100), item("w", 5, 10, 40));
        var r = OffsetAssigner.assign(items);
        assertThat(violations(items, r)).isEmpty();
        assertThat(r.size()).isEqualTo(250);
        assertThat(r.offsets()[3]).as("w reuses y's hole").isEqualTo(r.offsets()[1]);
    }

    @Test
    void alignmentIsHonouredAndCostsSpace() {
        var items = List.of(new OffsetAssigner.Item("a", 0, 2, 12, 16), new OffsetAssigner.Item("b", 0, 2, 12, 16), new OffsetAssigner.Item("c", 0, 2, 64, 128));
        var r = OffsetAssigner.assign(items);
        assertThat(violations(items, r)).isEmpty();
        assertThat(r.maxLive()).isEqualTo(88);
        assertThat(r.size()).isEqualTo(64 + 16 + 12);
    }

    @Test
    void zeroSizedAndZeroLengthItems() {
        var items = List.of(item("z", 0, 5, 0), item("e", 3, 3, 8), item("a", 0, 5, 8));
        var r = OffsetAssigner.assign(items);
        assertThat(violations(items, r)).isEmpty();
        assertThat(r.maxLive()).isEqualTo(8);
    }

    @Test
    void badItemsAreRejected() {
        assertThatThrownBy(() -> item("a", 5, 4, 1)).isInstanceOf(dev.gatun.ir.CompilationException.class).hasMessageContaining("upper");
        assertThatThrownBy(() -> item("a", 0, 4, -1)).isInstanceOf(dev.gatun.ir.CompilationException.class).hasMessageContaining("negative");
        assertThatThrownBy(() -> new OffsetAssigner.Item("a", 0, 1, 1, 0)).isInstanceOf(dev.gatun.ir.CompilationException.class);
    }

    @Property(tries = 300)
    void randomInstancesAreValidAndAtLeastMaxLive(@ForAll @LongRange(min = 0, max = Long.MAX_VALUE / 2) long seed,
                                                  @ForAll @IntRange(min = 1, max = 60) int n) {
        var rnd = new Random(seed);
        var items = new ArrayList<OffsetAssigner.Item>();
        for (int i = 0; i < n; i++) {
            long lo = rnd.nextInt(40), hi = lo + rnd.nextInt(15);
            long size = rnd.nextInt(10) == 0 ? 0 : 1 + rnd.nextInt(rnd.nextBoolean() ? 64 : 4096);
            long align = 1L << rnd.nextInt(8);
            items.add(new OffsetAssigner.Item("b" + i, lo, hi, size, align));
        }
        var r = OffsetAssigner.assign(items);
        assertThat(violations(items, r)).isEmpty();
        assertThat(r.maxLive()).isEqualTo(bruteMaxLive(items));
        assertThat(r.size()).isGreaterThanOrEqualTo(r.maxLive());
        // deterministic
        assertThat(OffsetAssigner.assign(items).offsets()).containsExactly(r.offsets());
    }

    @Test
    void timeOrderedBestFitPlacesTheLargerOfItemsStartingTogetherFirst() {
        // a (16 B) and b (64 B) start together: b first at 0, a on top at 64; c (16 B) and d (64 B) start together once
        // both have ended (the pool is empty again): d first at 0, c on top at 64
        var items = List.of(item("a", 0, 2, 16), item("b", 0, 2, 64), item("c", 2, 4, 16), item("d", 2, 4, 64));
        var r = OffsetAssigner.assign(items, new OffsetAssigner.Options(0, 0, 0, 0));
        assertThat(r.offsets()).containsExactly(64, 0, 64, 0);
    }

    @Property(tries = 200)
    void timeOrderedBestFitIsValidWithManyItemsStartingTogether(@ForAll @LongRange(min = 0, max = Long.MAX_VALUE / 2) long seed,
                                                                @ForAll @IntRange(min = 1, max = 200) int n) {
        // the allocator of huge pools (forced here: no pool is small enough for the greedy orders); few distinct start
        // times, so many items of different sizes start together and are placed largest first
        var rnd = new Random(seed);
        var items = new ArrayList<OffsetAssigner.Item>();
        for (int i = 0; i < n; i++) {
            long lo = rnd.nextInt(8), hi = lo + rnd.nextInt(6);
            long size = rnd.nextInt(10) == 0 ? 0 : 1 + rnd.nextInt(300);
            items.add(new OffsetAssigner.Item("b" + i, lo, hi, size, 1L << rnd.nextInt(6)));
        }
        var options = new OffsetAssigner.Options(0, 0, 0, 0);
        var r = OffsetAssigner.assign(items, options);
        assertThat(r.method()).isEqualTo("time-ordered-best-fit");
        assertThat(violations(items, r)).isEmpty();
        assertThat(r.maxLive()).isEqualTo(bruteMaxLive(items));
        assertThat(r.size()).isGreaterThanOrEqualTo(r.maxLive());
        assertThat(OffsetAssigner.assign(items, options).offsets()).containsExactly(r.offsets());
    }

    @Test
    void chainOfEqualBuffersReachesTheBound() {
        // a pipeline: each buffer lives two steps, so at most two are alive: max-live is reached
        var items = new ArrayList<OffsetAssigner.Item>();
        for (int i = 0; i < 50; i++) items.add(item("b" + i, i, i + 2, 256));
        var r = OffsetAssigner.assign(items);
        assertThat(violations(items, r)).isEmpty();
        assertThat(r.size()).isEqualTo(512).isEqualTo(r.maxLive());
    }

    // ------------------------------------------------------------------ MiniMalloc instances

    static List<OffsetAssigner.Item> parse(String csv) {
        var items = new ArrayList<OffsetAssigner.Item>();
        for (String line : csv.split("\\R")) {
            line = line.strip();
            if (line.isEmpty() || line.startsWith("id")) continue;
            String[] f = line.split(",");
            items.add(new OffsetAssigner.Item(f[0], Long.parseLong(f[1]), Long.parseLong(f[2]), Long.parseLong(f[3]), 1));
        }
        return items;
    }

    static void checkInstance(String name, List<OffsetAssigner.Item> items) {
        assertThat(items).isNotEmpty();
        var r = OffsetAssigner.assign(items);
        assertThat(violations(items, r)).as(name).isEmpty();
        assertThat(r.size()).isGreaterThanOrEqualTo(r.maxLive());
        System.out.printf("minimalloc %s: %d buffers, size %d, max-live %d, size/max-live %.3f%n",
                name, items.size(), r.size(), r.maxLive(), (double) r.size() / r.maxLive());
    }

    @ParameterizedTest
    @ValueSource(strings = {"A.1048576.csv", "C.1048576.csv"})
    void miniMallocInstancesArePlacedValidly(String file) throws IOException {
        try (InputStream in = getClass().getResourceAsStream("/minimalloc/" + file)) {
            assertThat(in).as(file).isNotNull();
            checkInstance(file, parse(new String(in.readAllBytes(), StandardCharsets.UTF_8)));
        }
    }

    /** Every instance of a folder of MiniMalloc benchmarks named by -Dgatun.minimalloc.dir, when given. */
    @Test
    void allMiniMallocInstancesOfAFolder() throws IOException {
        String given = System.getProperty("gatun.minimalloc.dir");
        assumeTrue(given != null && Files.isDirectory(Path.of(given)), "no folder of MiniMalloc instances given (-Dgatun.minimalloc.dir)");
        Path dir = Path.of(given);
        try (Stream<Path> files = Files.list(dir)) {
            for (Path f : files.filter(p -> p.toString().endsWith(".csv")).sorted().toList())
                checkInstance(f.getFileName().toString(), parse(Files.readString(f)));
        }
    }
}
