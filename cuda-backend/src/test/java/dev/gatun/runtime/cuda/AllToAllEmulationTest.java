package dev.gatun.runtime.cuda;

import dev.gatun.ir.graph.AllToAllCounts;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.regex.Pattern;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * {@link SymmetricAllToAll}'s kernel source run as host C++ (g++ through {@code emulation/emulate.h}, as
 * {@link KernelEmulationTest} runs the other kernels): the group's block barrier stubbed to the block's own
 * {@code __syncthreads}, and the ranks' launches made one after another, which leaves what concurrent ranks leave
 * (each rank writes rows no other rank writes, and reads only what every rank wrote before its first barrier). Random
 * cases of worlds 1 to 4, rows of 1 to 128 bytes (every word width the copy picks), offsets that break 16-byte
 * alignment, grids of one to three blocks, even and uneven counts (empty parts, everything to one rank), pushed into
 * receive buffers and pulled, against plain loops; and counts {@link AllToAllCounts} refuses: the kernel traps with
 * the refusal the host rule finds first (kind, member, total, bound), having moved nothing. Not checked here: the
 * device's memory model and the cross-rank barrier (the GPU tests). Skipped where g++ or CUDA's headers are absent.
 */
class AllToAllEmulationTest {
    @TempDir static Path dir;
    static Path emulator;

    static final String DRIVER = """
            // AllToAllEmulationTest's driver: case.txt holds "world rows row_bytes capacity even push grid block in_off counts_off
            // out_off" then the counts (world x world); in<r>.bin each rank's rows; writes out<r>.bin (each rank's result, or its
            // receive buffer) and prints TRAP with the record where the kernel trapped.
            #include "emulate.h"
            typedef unsigned int u32;
            typedef unsigned long long u64;
            // the group's barrier: the ranks run one after another here, so only the block's own threads meet
            inline void block_barrier(u32* const*, int, int, u32*, u64, const volatile u32*) { __syncthreads(); }
            #include "kernels.inc"
            #include <algorithm>
            #include <cstdio>
            #include <cstdlib>
            #include <string>
            #include <fstream>
            #include <iterator>
            #include <vector>

            int main() {
                std::ifstream in("case.txt");
                long long world, rows, row_bytes, capacity, even, push, grid, block, in_off, counts_off, out_off;
                in >> world >> rows >> row_bytes >> capacity >> even >> push >> grid >> block >> in_off >> counts_off >> out_off;
                std::vector<std::vector<char>*> pools, outs;
                std::vector<const char*> in_peers;
                std::vector<char*> out_peers;
                long long out_bytes = capacity * row_bytes;
                for (int r = 0; r < world; r++) {
                    auto* pool = new std::vector<char>(in_off + rows * row_bytes + counts_off + 8 * world + 64, (char) 0x5a);
                    std::ifstream f("in" + std::to_string(r) + ".bin", std::ios::binary);
                    std::vector<char> rowsIn((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
                    std::copy(rowsIn.begin(), rowsIn.end(), pool->begin() + in_off);
                    for (int d = 0; d < world; d++) {
                        long long c;
                        in >> c;
                        std::memcpy(pool->data() + counts_off + 8 * d, &c, 8);
                    }
                    pools.push_back(pool);
                    in_peers.push_back(pool->data());
                    auto* out = new std::vector<char>(out_off + out_bytes + 16, (char) 0x77);   // stale bytes: every one must be written
                    outs.push_back(out);
                    out_peers.push_back(out->data());
                }
                int claim = 0;
                gatun_fault rec{};
                for (int r = 0; r < world; r++) {
                    bool ok = emu_launch((unsigned) grid, 1, (unsigned) block, true, [&] {
                        gatun_all_to_all(in_peers.data(), in_off, in_peers.data(), even ? -1 : counts_off, push ? out_peers.data() : nullptr, out_off,
                                push ? nullptr : out_peers[r] + out_off, rows, row_bytes, capacity, even ? rows / world : 0, r, (int) world,
                                nullptr, nullptr, 0, nullptr, &claim, &rec, 7);
                    });
                    if (!ok) {
                        std::printf("TRAP rank %d code %d step %d v %lld %lld %lld %lld\\n", r, rec.code, rec.step, rec.v[0], rec.v[1], rec.v[2], rec.v[3]);
                        break;
                    }
                }
                for (int r = 0; r < world; r++) {
                    std::ofstream f("out" + std::to_string(r) + ".bin", std::ios::binary);
                    f.write(outs[r]->data() + out_off, out_bytes);
                }
                return 0;
            }
            """;

    /**
     * The joined kernel's driver: parts.txt holds "world grid block parts", then each part's "rows row_bytes capacity even
     * push in_off counts_off out_off" and counts (world x world); in<p>_<r>.bin each part's rows of each rank; writes
     * out<p>_<r>.bin and prints TRAP with the record where the kernel trapped.
     */
    static final String PARTS_DRIVER = """
            #include "emulate.h"
            typedef unsigned int u32;
            typedef unsigned long long u64;
            inline void block_barrier(u32* const*, int, int, u32*, u64, const volatile u32*) { __syncthreads(); }
            #include "kernels.inc"
            #include <cstdio>
            #include <string>
            #include <fstream>
            #include <iterator>
            #include <vector>

            struct spec { long long rows, row_bytes, capacity, even, push, in_off, counts_off, out_off; };
            int main() {
                std::ifstream in("parts.txt");
                long long world, grid, block, parts;
                in >> world >> grid >> block >> parts;
                std::vector<spec> sp(A2A_MAX_PARTS, spec{0, 0, 0, 1, 0, 0, 0, 0});
                std::vector<std::vector<const char*>> in_peers(A2A_MAX_PARTS);
                std::vector<std::vector<char*>> out_peers(A2A_MAX_PARTS);
                for (int p = 0; p < parts; p++) {
                    spec& s = sp[p];
                    in >> s.rows >> s.row_bytes >> s.capacity >> s.even >> s.push >> s.in_off >> s.counts_off >> s.out_off;
                    for (int r = 0; r < world; r++) {
                        auto* pool = new std::vector<char>(s.in_off + s.rows * s.row_bytes + s.counts_off + 8 * world + 64, (char) 0x5a);
                        std::ifstream f("in" + std::to_string(p) + "_" + std::to_string(r) + ".bin", std::ios::binary);
                        std::vector<char> rowsIn((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
                        std::copy(rowsIn.begin(), rowsIn.end(), pool->begin() + s.in_off);
                        for (int d = 0; d < world; d++) {
                            long long c;
                            in >> c;
                            std::memcpy(pool->data() + s.counts_off + 8 * d, &c, 8);
                        }
                        in_peers[p].push_back(pool->data());
                        out_peers[p].push_back((new std::vector<char>(s.out_off + s.capacity * s.row_bytes + 16, (char) 0x77))->data());
                    }
                }
                int claim = 0;
                gatun_fault rec{};
                for (int r = 0; r < world; r++) {
                    a2a_part P[A2A_MAX_PARTS] = {};
                    for (int p = 0; p < parts; p++) {
                        spec& s = sp[p];
                        P[p] = a2a_part{in_peers[p].data(), s.in_off, in_peers[p].data(), s.even ? -1 : s.counts_off, s.push ? out_peers[p].data() : nullptr,
                                s.out_off, s.push ? nullptr : out_peers[p][r] + s.out_off, s.rows, s.row_bytes, s.capacity, s.even ? s.rows / world : 0};
                    }
                    #define ARGS(i) P[i].in_peers, P[i].in_off, P[i].count_peers, P[i].counts_off, P[i].out_peers, P[i].out_off, P[i].out, \\
                            P[i].rows, P[i].row_bytes, P[i].capacity, P[i].even_rows
                    bool ok = emu_launch((unsigned) grid, 1, (unsigned) block, true, [&] {
                        gatun_all_to_all_parts((int) parts, %s, r, (int) world, nullptr, nullptr, 0, nullptr, &claim, &rec, 7);
                    });
                    if (!ok) {
                        std::printf("TRAP rank %%d code %%d step %%d v %%lld %%lld %%lld %%lld\\n", r, rec.code, rec.step, rec.v[0], rec.v[1], rec.v[2], rec.v[3]);
                        break;
                    }
                }
                for (int p = 0; p < parts; p++)
                    for (int r = 0; r < world; r++) {
                        std::ofstream f("out" + std::to_string(p) + "_" + std::to_string(r) + ".bin", std::ios::binary);
                        f.write(out_peers[p][r] + sp[p].out_off, sp[p].capacity * sp[p].row_bytes);
                    }
                return 0;
            }
            """.formatted(SymmetricAllToAll.each("ARGS"));
    static Path partsEmulator;

    @BeforeAll
    static void build() throws Exception {
        Path gxx = HostCompiler.gxx();
        assumeTrue(gxx != null && Files.exists(KernelEmulationTest.CUDA_INCLUDE.resolve("cuda_fp16.h")), "g++ or CUDA's headers are absent: skipping the emulation");
        HostCompiler.copy(dir, "/emulation/", "emulate.h");
        Files.writeString(dir.resolve("kernels.inc"), DeviceFault.SOURCE + SymmetricAllToAll.SOURCE);
        emulator = compile(gxx, "a2a", DRIVER);
        partsEmulator = compile(gxx, "parts", PARTS_DRIVER);
    }

    /** {@code driver} written to {@code <name>.cpp} and built by g++ into {@code <name>}, checked to build. */
    private static Path compile(Path gxx, String name, String driver) throws Exception {
        Files.writeString(dir.resolve(name + ".cpp"), driver);
        Process p = new ProcessBuilder(gxx.toString(), "-std=c++20", "-O1", "-pthread", "-I" + KernelEmulationTest.CUDA_INCLUDE, "-I" + dir, name + ".cpp", "-o", name)
                .directory(dir.toFile()).redirectErrorStream(true).start();
        String log = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(300, TimeUnit.SECONDS)).as("g++ finished").isTrue();
        assertThat(p.exitValue()).as(log).isZero();
        return dir.resolve(name);
    }

    /** The joined kernel's run of {@code parts} (one world, grid and block): each part's results per rank, and the trap's line. */
    record PartsRun(byte[][][] outs, String trap) {}

    static PartsRun runParts(List<Case> parts) throws Exception {
        Path at = Files.createTempDirectory(dir, "parts");
        Case first = parts.getFirst();
        var text = new StringBuilder(first.world + " " + first.grid + " " + first.block + " " + parts.size() + "\n");
        for (int p = 0; p < parts.size(); p++) {
            Case c = parts.get(p);
            long countsOff = c.inOff + c.rows * c.rowBytes + 8 - (c.inOff + c.rows * c.rowBytes) % 8;
            text.append(c.rows).append(' ').append(c.rowBytes).append(' ').append(c.capacity).append(' ').append(c.counts == null ? 1 : 0).append(' ')
                    .append(c.push ? 1 : 0).append(' ').append(c.inOff).append(' ').append(countsOff).append(' ').append(c.outOff).append('\n');
            for (int s = 0; s < c.world; s++) {
                for (int d = 0; d < c.world; d++) text.append(c.counts == null ? 0 : c.counts[s][d]).append(' ');
                text.append('\n');
                Files.write(at.resolve("in" + p + "_" + s + ".bin"), c.inputs[s]);
            }
        }
        Files.writeString(at.resolve("parts.txt"), text);
        Process p = new ProcessBuilder(partsEmulator.toString()).directory(at.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(120, TimeUnit.SECONDS)).as("the emulation finished").isTrue();
        assertThat(p.exitValue()).as(out).isZero();
        byte[][][] outs = new byte[parts.size()][first.world][];
        for (int q = 0; q < parts.size(); q++)
            for (int r = 0; r < first.world; r++) outs[q][r] = Files.readAllBytes(at.resolve("out" + q + "_" + r + ".bin"));
        return new PartsRun(outs, out.lines().filter(l -> l.startsWith("TRAP")).findFirst().orElse(null));
    }

    /** Two to four random parts of one world, grid and block (each even or uneven, pushed or pulled, its own rows and offsets). */
    static List<Case> randomParts(SplittableRandom rnd) {
        Case first = random(rnd, rnd.nextInt(3) == 0);
        var parts = new ArrayList<Case>(List.of(first));
        int n = 2 + rnd.nextInt(SymmetricAllToAll.MAX_PARTS - 1);
        while (parts.size() < n) {
            Case c = random(rnd, rnd.nextInt(3) == 0);
            if (c.world != first.world) continue;
            parts.add(new Case(c.world, c.rows, c.rowBytes, c.counts, c.capacity, c.push, first.grid, first.block, c.inOff, c.outOff, c.inputs));
        }
        return parts;
    }

    /** The joined kernel (one barrier pair around two to four parts) leaves what each part alone leaves, by plain loops. */
    @Test
    void joinedPartsLeaveWhatEachPartAloneLeaves() throws Exception {
        var rnd = new SplittableRandom(4242);
        int pushed = 0, pulled = 0;
        for (int trial = 0; trial < 40; trial++) {
            var parts = randomParts(rnd);
            PartsRun r = runParts(parts);
            assertThat(r.trap()).as(parts.toString()).isNull();
            for (int p = 0; p < parts.size(); p++) {
                Case c = parts.get(p);
                if (c.push) pushed++;
                else pulled++;
                for (int d = 0; d < c.world; d++) assertThat(r.outs()[p][d]).as("%s: part %d of %s, rank %d", parts, p, c, d).isEqualTo(expected(c, d));
            }
        }
        assertThat(pushed).as("pushed parts").isPositive();
        assertThat(pulled).as("pulled parts").isPositive();
    }

    /**
     * A part whose counts the host rule refuses: the kernel traps with the rule's finding and the part's number (kind +
     * 256 x part), that part and every later one moved nothing; the parts before it moved as they would alone.
     */
    @Test
    void aRefusedPartTrapsNamingItselfAndTheLaterPartsMoveNothing() throws Exception {
        var rnd = new SplittableRandom(77);
        int trapped = 0;
        for (int trial = 0; trial < 30; trial++) {
            var parts = randomParts(rnd);
            int bad = rnd.nextInt(parts.size());
            Case ok = parts.get(bad);
            if (ok.counts == null || ok.world < 2) continue;
            long[][] counts = Arrays.stream(ok.counts).map(long[]::clone).toArray(long[][]::new);
            counts[rnd.nextInt(ok.world)][rnd.nextInt(ok.world)] = -1;   // a negative count: always refused
            parts.set(bad, new Case(ok.world, ok.rows, ok.rowBytes, counts, ok.capacity, ok.push, ok.grid, ok.block, ok.inOff, ok.outOff, ok.inputs));
            var members = new ArrayList<Integer>();
            for (int r = 0; r < ok.world; r++) members.add(r);
            String why = AllToAllCounts.refusal("a2a", counts, members, ok.rows, ok.capacity);
            var m = NEGATIVE.matcher(why);
            assertThat(m.find()).as(why).isTrue();
            PartsRun r = runParts(parts);
            assertThat(r.trap()).as(parts.toString()).isEqualTo("TRAP rank 0 code " + DeviceFault.ALL_TO_ALL + " step 7 v " + (1 + 256 * bad) + " "
                    + m.group(1) + " " + m.group(2) + " " + m.group(3));
            trapped++;
            for (int p = 0; p < parts.size(); p++) {
                Case c = parts.get(p);
                // rank 0 trapped: the ranks after it never ran; rank 0 moved the parts before the refused one (where its one
                // block ran: the emulation runs blocks in turn, and block 0's trap ends the launch before the next block)
                if (p < bad && !c.push && c.grid == 1) assertThat(r.outs()[p][0]).as("part %d, rank 0", p).isEqualTo(expected(c, 0));
                if (p >= bad) {
                    byte[] stale = new byte[Math.toIntExact(c.capacity * c.rowBytes)];
                    Arrays.fill(stale, (byte) 0x77);
                    for (int k = 0; k < c.world; k++) assertThat(r.outs()[p][k]).as("part %d (refused: %d), rank %d untouched", p, bad, k).isEqualTo(stale);
                }
            }
        }
        assertThat(trapped).isPositive();
    }

    /** One case: the ranks' rows, counts (null: even), capacity, push or pull, grid and block, slot offsets. */
    record Case(int world, long rows, int rowBytes, long[][] counts, long capacity, boolean push, int grid, int block, long inOff, long outOff,
                byte[][] inputs) {
        @Override public String toString() {
            return "world " + world + ", " + rows + " rows of " + rowBytes + " B, " + (counts == null ? "even" : "counts " + Arrays.deepToString(counts)
                    + ", capacity " + capacity) + (push ? ", push" : ", pull") + ", grid " + grid + " x " + block + ", offsets " + inOff + "/" + outOff;
        }
    }

    /** What the emulation left: each rank's result, and the trap's line (null where none). */
    record Run(byte[][] outs, String trap) {}

    static Run run(Case c) throws Exception {
        Path at = Files.createTempDirectory(dir, "case");
        var text = new StringBuilder();
        long countsOff = c.inOff + c.rows * c.rowBytes + 8 - (c.inOff + c.rows * c.rowBytes) % 8;   // i64 counts, 8-byte aligned as a plan's slots are
        text.append(c.world).append(' ').append(c.rows).append(' ').append(c.rowBytes).append(' ').append(c.capacity).append(' ')
                .append(c.counts == null ? 1 : 0).append(' ').append(c.push ? 1 : 0).append(' ').append(c.grid).append(' ').append(c.block).append(' ')
                .append(c.inOff).append(' ').append(countsOff).append(' ').append(c.outOff).append('\n');
        for (int s = 0; s < c.world; s++) {
            for (int d = 0; d < c.world; d++) text.append(c.counts == null ? 0 : c.counts[s][d]).append(' ');
            text.append('\n');
            Files.write(at.resolve("in" + s + ".bin"), c.inputs[s]);
        }
        Files.writeString(at.resolve("case.txt"), text);
        Process p = new ProcessBuilder(emulator.toString()).directory(at.toFile()).redirectErrorStream(true).start();
        String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertThat(p.waitFor(120, TimeUnit.SECONDS)).as("the emulation finished").isTrue();
        assertThat(p.exitValue()).as(out).isZero();
        byte[][] outs = new byte[c.world][];
        for (int r = 0; r < c.world; r++) outs[r] = Files.readAllBytes(at.resolve("out" + r + ".bin"));
        return new Run(outs, out.lines().filter(l -> l.startsWith("TRAP")).findFirst().orElse(null));
    }

    /** Rank d's result by plain loops: from each sender in turn its part for d, packed; zero bytes after them. */
    static byte[] expected(Case c, int d) {
        byte[] want = new byte[Math.toIntExact(c.capacity * c.rowBytes)];
        int at = 0;
        for (int s = 0; s < c.world; s++) {
            long first = 0, n;
            if (c.counts == null) {
                n = c.rows / c.world;
                first = d * n;
            } else {
                for (int k = 0; k < d; k++) first += c.counts[s][k];
                n = c.counts[s][d];
            }
            for (long i = first * c.rowBytes; i < (first + n) * c.rowBytes; i++) want[at++] = c.inputs[s][(int) i];
        }
        return want;
    }

    static long[][] counts(SplittableRandom rnd, int world, long rows) { return dev.gatun.runtime.testing.RandomCounts.of(rnd, world, rows); }

    static Case random(SplittableRandom rnd, boolean even) {
        int world = 1 + rnd.nextInt(4);
        int rowBytes = new int[]{1, 2, 3, 4, 8, 12, 16, 32, 128}[rnd.nextInt(9)];
        long rows = even ? (long) world * rnd.nextInt(4) : rnd.nextInt(9);
        long[][] counts = even ? null : counts(rnd, world, rows);
        long most = 0;
        if (!even)
            for (int d = 0; d < world; d++) {
                long got = 0;
                for (long[] k : counts) got += k[d];
                most = Math.max(most, got);
            }
        long capacity = even ? rows : most + rnd.nextInt(3);
        byte[][] inputs = new byte[world][];
        for (int r = 0; r < world; r++) {
            inputs[r] = new byte[Math.toIntExact(rows * rowBytes)];
            rnd.nextBytes(inputs[r]);
        }
        long[] offsets = {0, 16, 4, 8, 1, 256};
        return new Case(world, rows, rowBytes, counts, capacity, !even && rnd.nextBoolean(), 1 + rnd.nextInt(3), 32 << rnd.nextInt(2),
                offsets[rnd.nextInt(offsets.length)], offsets[rnd.nextInt(offsets.length)], inputs);
    }

    @Test
    void randomEvenAndUnevenCasesLeaveWhatPlainLoopsLeave() throws Exception {
        var rnd = new SplittableRandom(2026);
        int pushed = 0;
        for (int trial = 0; trial < 60; trial++) {
            Case c = random(rnd, trial % 3 == 0);
            if (c.push) pushed++;
            Run r = run(c);
            assertThat(r.trap()).as(c.toString()).isNull();
            for (int d = 0; d < c.world; d++) assertThat(r.outs()[d]).as("%s: rank %d", c, d).isEqualTo(expected(c, d));
        }
        assertThat(pushed).as("pushed cases").isPositive();
    }

    private static final Pattern NEGATIVE = Pattern.compile("rank (\\d+) sends (-\\d+) rows to rank (\\d+)"),
            SENDER = Pattern.compile("rank (\\d+)'s counts \\[[^]]*] add up to (\\d+) rows, but its input has (\\d+)"),
            RECEIVER = Pattern.compile("rank (\\d+) would receive (\\d+) rows \\([^)]*\\) but the capacity is (\\d+) rows");

    /** Counts the host rule refuses: the kernel traps with the rule's first finding, and no rank's result was written. */
    @Test
    void refusedCountsTrapWithTheHostRulesFirstFindingHavingMovedNothing() throws Exception {
        var rnd = new SplittableRandom(38);
        int[] kinds = new int[4];
        for (int trial = 0; trial < 45; trial++) {
            Case ok = random(rnd, false);
            if (ok.world < 2) ok = random(rnd, false);
            long[][] counts = Arrays.stream(ok.counts).map(long[]::clone).toArray(long[][]::new);
            int s = rnd.nextInt(ok.world), d = rnd.nextInt(ok.world);
            long capacity = ok.capacity;
            switch (trial % 3) {
                case 0 -> counts[s][d] = -1 - rnd.nextInt(3);                        // a negative count
                case 1 -> counts[s][d] += ok.rows + 1;                                // a sender's counts past its rows
                default -> capacity = Math.max(0, capacity - 1 - rnd.nextInt(2));     // a receiver past the capacity (if any receives)
            }
            Case c = new Case(ok.world, ok.rows, ok.rowBytes, counts, capacity, ok.push, ok.grid, ok.block, ok.inOff, ok.outOff, ok.inputs);
            var members = new ArrayList<Integer>();
            for (int r = 0; r < c.world; r++) members.add(r);
            String why = AllToAllCounts.refusal("a2a", counts, members, c.rows, capacity);
            Run r = run(c);
            if (why == null) {
                assertThat(r.trap()).as(c.toString()).isNull();
                continue;
            }
            assertThat(r.trap()).as(c + ": " + why).isNotNull();
            var m1 = NEGATIVE.matcher(why);
            var m2 = SENDER.matcher(why);
            var m3 = RECEIVER.matcher(why);
            String want = m1.find() ? "1 " + m1.group(1) + " " + m1.group(2) + " " + m1.group(3)
                    : m2.find() ? "2 " + m2.group(1) + " " + m2.group(2) + " " + m2.group(3)
                    : m3.find() ? "3 " + m3.group(1) + " " + m3.group(2) + " " + m3.group(3) : null;
            assertThat(want).as("the host rule's words: " + why).isNotNull();
            kinds[want.charAt(0) - '0']++;
            assertThat(r.trap()).as(c + ": " + why).isEqualTo("TRAP rank 0 code " + DeviceFault.ALL_TO_ALL + " step 7 v " + want);
            byte[] stale = new byte[Math.toIntExact(c.capacity * c.rowBytes)];
            Arrays.fill(stale, (byte) 0x77);
            for (int k = 0; k < c.world; k++) assertThat(r.outs()[k]).as("%s: rank %d's result untouched", c, k).isEqualTo(stale);
        }
        assertThat(kinds[1]).as("negative counts").isPositive();
        assertThat(kinds[2]).as("senders past their rows").isPositive();
        assertThat(kinds[3]).as("receivers past the capacity").isPositive();
    }
}
