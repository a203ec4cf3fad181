package dev.gatun.runtime.cuda;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * {@link CudaAttention}'s kernels run as host C++ without a GPU (g++, CUDA's half-precision headers,
 * {@code emulation/attention/}: a block's threads as threads, barriers and warp shuffles emulated, the step's counter add
 * in place of its PTX), launched as the backend launches them (the grid of {@link CudaAttention.Cut}, every launch
 * reusing the scratch and counters), against plain float64 loops over a mirror of the caches in the driver: every cut
 * (32, 16 and 8 positions a warp), every dtype and head size the kernels take, positions at both ends of the cache and
 * inside it, one slice and many (more than 32, so the merge reads its slices in rounds), query rows that are not a
 * multiple of four, the early-load form, the update form (the new key and value taken from strided sources and written
 * into the caches, checked element by element against the mirror) and a position outside the cache (the trap and its
 * fault record). Every launch must leave the counters at 0 for the next. Not checked here: the device's memory model
 * (the arrival order of the slices' warps is the blocks' order), speed ({@code AttentionGpuTest},
 * {@code AttentionBench}). Skipped where g++ or CUDA's headers are absent.
 */
class AttentionEmulationTest {
    static final Path CUDA_INCLUDE = Path.of("/usr/local/cuda/include");
    /** The counter add the kernel makes in PTX, and the emulation's. */
    static final String ARRIVE = "asm volatile(\"atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;\" : \"=r\"(before) : \"l\"(counters + tile) : \"memory\");";

    @TempDir static Path dir;
    static Path exe;

    @BeforeAll
    static void build() throws Exception {
        Path gxx = HostCompiler.gxx();
        assumeTrue(gxx != null && Files.exists(CUDA_INCLUDE.resolve("cuda_fp16.h")), "g++ or CUDA's headers are absent: skipping the emulation");
        HostCompiler.copy(dir, "/emulation/attention/", "harness.h", "driver.cpp");
        assertThat(CudaAttention.SOURCE).contains(ARRIVE);
        Files.writeString(dir.resolve("attention.h"), CudaAttention.SOURCE.replace(ARRIVE, "before = at_emu_arrive(counters + tile);").replace("extern \"C\" ", ""));
        String log = HostCompiler.exec(new ProcessBuilder(gxx.toString(), "-std=c++20", "-O1", "-pthread", "-w", "-I" + CUDA_INCLUDE, "-I" + dir, "driver.cpp", "-o", "attention")
                .directory(dir.toFile()), 600);
        assertThat(dir.resolve("attention")).as("g++:%n%s", log).exists();
        exe = dir.resolve("attention");
    }

    record Form(int batch, int rows, int len, int heads, boolean update, boolean early, boolean pos64) {
        String args() { return batch + " " + rows + " " + len + " " + heads + " " + (update ? 1 : 0) + " " + (early ? 1 : 0) + " " + (pos64 ? 1 : 0); }
    }

    static double tolerance(String t) { return t.equals("f32") ? 1e-6 : t.equals("f16") ? 1e-3 : 1e-2; }

    /** Runs {@code form} at {@code positions} (one launch each) and checks every launch's line. */
    static void check(String t, int d, int p, Form form, long... positions) throws Exception {
        var cmd = new ArrayList<>(List.of(exe.toString(), t, String.valueOf(d), String.valueOf(p)));
        cmd.addAll(List.of(form.args().split(" ")));
        for (long x : positions) cmd.add(String.valueOf(x));
        String out = HostCompiler.exec(new ProcessBuilder(cmd), 600);
        var lines = out.strip().lines().toList();
        String what = t + " d " + d + ", " + p + " positions a warp, " + form + " at " + Arrays.toString(positions);
        assertThat(lines).as("%s:%n%s", what, out).hasSize(positions.length);
        for (int i = 0; i < lines.size(); i++) {
            String[] f = lines.get(i).split(" ");
            assertThat(f[0]).as("%s: %s", what, out).isEqualTo("ok");
            double err = f[1].contains("nan") ? Double.NaN : Double.parseDouble(f[1]);
            assertThat(err).as("%s, launch %d: the largest error", what, i).isLessThan(tolerance(t));
            assertThat(f[2]).as("%s, launch %d: counters left nonzero", what, i).isEqualTo("0");
            assertThat(f[3]).as("%s, launch %d: cache elements unlike the mirror", what, i).isEqualTo("0");
        }
    }

    static final String[][] PROGRAMS = {{"f32", "16"}, {"f16", "16"}, {"bf16", "16"}, {"f32", "32"}, {"f16", "32"}, {"bf16", "32"},
            {"f32", "64"}, {"f16", "64"}, {"bf16", "64"}, {"f16", "128"}, {"bf16", "128"}};

    /** Every cut, dtype and head size: several slices (merged), five rows (two row blocks), the ends of the cache and inside. */
    @Test
    void everyCutDtypeAndHeadSizeAgainstFloat64Loops() throws Exception {
        for (int p : CudaAttention.CUTS)
            for (String[] prog : PROGRAMS) check(prog[0], Integer.parseInt(prog[1]), p, new Form(2, 5, 70, 1, false, false, false), 69, 0, 33);
    }

    /** One slice (a cache of the cut's length: no partials), and more than 32 (the merge reads them in rounds of 32). */
    @Test
    void oneSliceAndMoreThanThirtyTwo() throws Exception {
        for (int p : CudaAttention.CUTS) {
            check("f16", 32, p, new Form(1, 8, p, 1, false, false, false), p - 1, 3);
            check("bf16", 64, p, new Form(2, 4, 40 * p + 3, 1, false, false, true), 40L * p + 2, 20L * p + 5, 31L * p);
        }
    }

    /**
     * The early-load form (the slice loaded before the wait, the position again after) and the update form (a decode
     * layer: the new key and value from strided sources, written into the caches by the position's lanes), call after
     * call at positions 0, 1, 2, ... and the last: every launch sees its own key and value and the earlier ones'.
     */
    @Test
    void theEarlyAndUpdateForms() throws Exception {
        for (int p : CudaAttention.CUTS) {
            check("bf16", 128, p, new Form(2, 3, 100, 1, false, true, false), 99, 50, 0);
            for (String[] prog : new String[][]{{"bf16", "64"}, {"f32", "16"}, {"f16", "128"}})
                check(prog[0], Integer.parseInt(prog[1]), p, new Form(4, 4, 40, 2, true, true, true), 0, 1, 2, 39, 17);
            check("f32", 64, p, new Form(2, 4, 40, 1, true, false, false), 0, 1, 9, 8);
        }
    }

    /** A position outside the cache traps with the fault record: code 3 (attention), the step, the position and the length. */
    @Test
    void aPositionOutsideTheCacheTraps() throws Exception {
        for (int p : CudaAttention.CUTS)
            for (long position : new long[]{70, -1}) {
                var cmd = List.of(exe.toString(), "bf16", "64", String.valueOf(p), "2", "4", "70", "1", "0", "0", "1", String.valueOf(position));
                String out = HostCompiler.exec(new ProcessBuilder(cmd), 600).strip();
                assertThat(out).as("%d positions a warp, position %d", p, position).isEqualTo("trap " + DeviceFault.ATTENTION + " 7 " + position + " 70");
            }
    }
}
