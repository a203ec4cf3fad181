package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * {@link CudaFlashAttentionBackward}'s kernels run as host C++ without a GPU (g++, CUDA's half-precision headers,
 * {@code emulation/flash_backward/}: a block's threads as threads, barriers, warp shuffles, and {@code mma.sync} and
 * {@code ldmatrix} emulated from PTX's fragment layouts in place of the kernels' own primitives,
 * {@link CudaFlashAttentionBackward#MMA_PRIMITIVES}), launched as the backend launches them, against plain float64 loops
 * in the driver (dk and dv: the heads' parts summed over each group; the stats, L and D, too): the tensor-core form
 * (bf16 and f16, head sizes 64 and 128: causal and not, grouped-query heads, T < S, a window, a soft cap, lengths off
 * the tiles) within 16-bit rounding (1e-2 of each output's largest element); the tiled rows form (f32 at head size 64,
 * the training step's, with lengths on, one short of and one past its tiles of 64 and 16; at 7, 80, 128 and 256, each
 * with its own tiles; bf16 at 32; f64 at 64 and 128) within float32's (1e-5) and float64's (1e-12); the simple form (f64 at head
 * size 256) within float64's. dq, dk, dv and the stats start as NaN, so an element no kernel writes (or the stats kernel
 * fails to zero)
 * shows. Not checked here: the device's memory model, speed (FlashAttentionBackwardGpuTest). Skipped where g++ or
 * CUDA's headers are absent.
 */
class FlashAttentionBackwardEmulationTest {
    static final Path CUDA_INCLUDE = Path.of("/usr/local/cuda/include");

    record Program(DType type, int d) {}

    @Test
    void theKernelsMatchFloat64Loops(@TempDir Path dir) throws Exception {
        Path gxx = HostCompiler.gxx();
        assumeTrue(gxx != null && Files.exists(CUDA_INCLUDE.resolve("cuda_fp16.h")), "g++ or CUDA's headers are absent: skipping the emulation");
        HostCompiler.copy(dir, "/emulation/flash_backward/", "harness.h", "fb_mma.h", "driver.cpp");
        var cases = new Object[][]{
                {new Program(DType.BF16, 64), new String[]{"1 4 2 100 100 1 0 0", "2 4 1 70 130 1 0 0", "1 2 1 150 150 1 40 0", "1 4 4 64 200 0 0 0"}},
                {new Program(DType.BF16, 128), new String[]{"1 2 1 70 130 1 30 2"}},
                {new Program(DType.F16, 64), new String[]{"1 2 2 90 90 1 0 5"}},
                // the tiled rows form at the training shape's head size (64 rows a block, key or query tiles of 16): lengths on,
                // one short of and one past the tiles, T < S, grouped-query heads, a window, a soft cap, not causal
                {new Program(DType.F32, 64), new String[]{"1 4 2 100 100 1 0 0", "2 4 1 70 130 1 0 0", "1 2 1 150 150 1 40 0", "1 2 2 90 90 1 0 5",
                        "1 4 4 64 200 0 0 0", "1 2 1 63 63 1 0 0", "1 2 1 65 65 1 0 0", "1 1 1 17 16 0 0 0", "1 1 1 2 3 1 0 0", "1 2 2 128 128 1 16 0"}},
                {new Program(DType.F32, 80), new String[]{"1 4 2 40 60 1 0 0", "1 2 1 30 50 1 20 3"}},   // head padded to 96
                {new Program(DType.F32, 128), new String[]{"1 2 1 70 130 1 30 2", "1 4 2 33 33 0 0 0"}},
                {new Program(DType.F32, 256), new String[]{"1 2 1 20 33 1 0 0", "1 2 2 17 17 0 0 4"}},
                {new Program(DType.F32, 7), new String[]{"1 2 1 33 45 1 0 3", "1 4 2 40 40 0 0 0"}},
                {new Program(DType.BF16, 32), new String[]{"1 4 2 70 70 1 0 0"}},                         // 16-bit off the tensor cores
                {new Program(DType.F64, 64), new String[]{"1 4 2 40 40 0 0 0", "1 2 1 50 70 1 20 3"}},
                {new Program(DType.F64, 128), new String[]{"1 2 1 30 41 1 0 0"}},
                {new Program(DType.F64, 256), new String[]{"1 2 1 20 30 1 0 2"}}};    // the simple form
        for (Object[] c : cases) {
            Program p = (Program) c[0];
            Path exe = build(gxx, dir, p);
            double tol = p.type() == DType.F64 ? 1e-12 : p.type() == DType.F32 ? 1e-5 : 1e-2;
            for (String args : (String[]) c[1]) {
                String out = run(exe, args);
                var lines = out.strip().lines().toList();
                assertThat(lines).as("%s %s:%n%s", p, args, out).hasSize(4);
                for (String line : lines) {
                    String[] f = line.split(" ");
                    double rel = f[1].contains("nan") ? Double.NaN : f[1].contains("inf") ? Double.POSITIVE_INFINITY : Double.parseDouble(f[1]);
                    assertThat(rel).as("%s, args %s, %s (%s form):%n%s", p, args, f[0], CudaFlashAttentionBackward.form(p.type(), p.d()), out).isLessThan(tol);
                }
            }
        }
    }

    /**
     * The tiles of every head size the op takes fit what the rows kernels assume: whole warps, a row's column groups
     * among one warp's lanes (their shuffles), the padded head a multiple of the groups' four-element reads, under 48 KiB
     * of static shared memory. Only f64 past head size 128 goes to the simple form.
     */
    @Test
    void everyHeadSizeHasTilesTheRowsKernelsCanRun() {
        for (DType t : List.of(DType.F32, DType.BF16, DType.F16, DType.F64))
            for (int d = 1; d <= 256; d++) {
                String form = CudaFlashAttentionBackward.form(t, d);
                if (form.equals("mma")) continue;
                assertThat(form).as("%s at head size %d", t, d).isEqualTo(t == DType.F64 && d > 128 ? "simple" : "rows");
                if (form.equals("simple")) continue;
                var x = CudaFlashAttentionBackward.tiles(t, d).orElseThrow();
                int groups = x.columnGroups();
                assertThat(x.br() % x.tr() == 0 && x.bc() % x.tc() == 0).as("%s %d %s", t, d, x).isTrue();
                assertThat(x.threads() % 32 == 0 && x.threads() <= 1024 && 32 % groups == 0).as("%s %d %s", t, d, x).isTrue();
                assertThat(x.fdp() >= d && x.fdp() % (4 * groups) == 0).as("%s %d %s", t, d, x).isTrue();
                int size = t == DType.F64 ? 8 : 4, ld = x.fdp() + 4;
                long shared = (long) size * (2L * x.br() * ld + 2L * x.bc() * ld + (long) x.bc() * (x.br() + 4) + 2L * Math.max(x.br(), x.bc()));
                assertThat(shared).as("%s %d %s", t, d, x).isLessThanOrEqualTo(48 * 1024);
            }
    }

    /** The program of {@code p} with the emulated primitives, compiled with the driver. */
    private static Path build(Path gxx, Path dir, Program p) throws Exception {
        String source = CudaFlashAttentionBackward.source(p.type(), p.d());
        boolean mma = CudaFlashAttentionBackward.form(p.type(), p.d()).equals("mma");
        if (mma) {
            assertThat(source).contains(CudaFlashAttentionBackward.MMA_PRIMITIVES);
            source = source.replace(CudaFlashAttentionBackward.MMA_PRIMITIVES, "#include \"fb_mma.h\"\n");
        }
        String name = "fb_" + p.type().shortName() + "_" + p.d();
        Files.writeString(dir.resolve(name + ".h"), source.replace("extern \"C\" ", ""));
        var cmd = new ArrayList<>(List.of(gxx.toString(), "-std=c++20", "-O1", "-pthread", "-w", "-I" + CUDA_INCLUDE, "-I" + dir,
                "-DKERNEL=\"" + name + ".h\"", "driver.cpp", "-o", name));
        String form = CudaFlashAttentionBackward.form(p.type(), p.d());
        if (!mma) cmd.add(form.equals("rows") ? "-DROWSFORM" : "-DSIMPLEFORM");
        String log = HostCompiler.exec(new ProcessBuilder(cmd).directory(dir.toFile()), 300);
        assertThat(dir.resolve(name)).as("g++ for %s:%n%s", p, log).exists();
        return dir.resolve(name);
    }

    private static String run(Path exe, String args) throws Exception {
        var cmd = new ArrayList<String>();
        cmd.add(exe.toString());
        cmd.addAll(List.of(args.split(" ")));
        return HostCompiler.exec(new ProcessBuilder(cmd), 300);
    }
}
