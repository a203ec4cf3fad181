package dev.gatun.runtime.cuda;

import dev.gatun.dsl.Gatun;
import dev.gatun.ir.DType;
import dev.gatun.lowering.Lowering;
import dev.gatun.lowering.LoweringOptions;
import dev.gatun.planner.Planner;
import dev.gatun.planner.Step;
import org.junit.jupiter.api.Test;

import java.util.ArrayList;
import java.util.List;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

/**
 * The packing of a tiled product's columns into blocks and of its epilogues' items into runs ({@link TiledProductCodegen}),
 * checked from the plan's tiles alone: every column computed once, every group of columns in one block, every item run
 * once, by the block that holds its group. No GPU needed: the tables are what the kernel reads.
 */
class TiledProductCodegenTest {
    static final int SMS = 132;

    /** The tiled products of a product of {@code m} rows by {@code n} columns followed by each spelling of the GPU test. */
    static List<Step.TiledProduct> tiledProducts(DType t, int m) {
        var out = new ArrayList<Step.TiledProduct>();
        for (var sp : ProductEpiloguesGpuTest.SPELLINGS) {
            var g = Gatun.graph("epi");
            var y = g.input("x", t, m, ProductEpiloguesGpuTest.K).matmul(g.input("w", t, ProductEpiloguesGpuTest.N, ProductEpiloguesGpuTest.K).transpose(0, 1));
            g.output("out", sp.after().apply(g, y, m));
            var plan = Planner.plan(Lowering.lower(g.build(), LoweringOptions.world(1)), dev.gatun.planner.PlanOptions.DEFAULT.withProductEpilogues(true));
            var tiled = plan.steps().stream().filter(s -> s instanceof Step.TiledProduct).map(s -> (Step.TiledProduct) s).toList();
            assertThat(tiled).as(sp.name() + "\n" + plan).hasSize(1);
            out.addAll(tiled);
        }
        return out;
    }

    @Test
    void everyColumnOnceEveryGroupInOneBlockEveryItemOnceInItsGroupsBlock() {
        for (DType t : List.of(DType.BF16, DType.F32))
            for (int m : new int[]{1, 4}) {
                if (t == DType.F32 && m > 1) continue;
                for (Step.TiledProduct tp : tiledProducts(t, m)) {
                    var src = TiledProductCodegen.generate(tp, SMS);
                    var tiles = tp.tiles();
                    int per = src.positions() / src.launch().blocks();
                    String what = tp.format().lines().findFirst().orElse("") + " " + t + " m " + m;
                    assertThat(per * src.launch().blocks()).as(what).isEqualTo(src.positions());
                    assertThat(per).as(what + ": a block holds its largest tile").isGreaterThanOrEqualTo(tiles.largest());
                    int[] blockOfColumn = new int[tiles.columns()];
                    java.util.Arrays.fill(blockOfColumn, -1);
                    for (int p = 0; p < src.positions(); p++) {
                        int c = src.cols()[p];
                        if (c < 0) continue;
                        assertThat(blockOfColumn[c]).as(what + ": column " + c + " once").isEqualTo(-1);
                        blockOfColumn[c] = p / per;
                    }
                    int[] blockOfGroup = new int[tiles.groups()];
                    java.util.Arrays.fill(blockOfGroup, -1);
                    for (int c = 0; c < tiles.columns(); c++) {
                        assertThat(blockOfColumn[c]).as(what + ": column " + c + " computed").isNotNegative();
                        int g = tiles.groupOf(c);
                        if (blockOfGroup[g] < 0) blockOfGroup[g] = blockOfColumn[c];
                        assertThat(blockOfColumn[c]).as(what + ": group " + g + " in one block").isEqualTo(blockOfGroup[g]);
                    }
                    long[] items = src.items();
                    int blocks = src.launch().blocks();
                    for (int e = 0; e < tp.epilogues().size(); e++) {
                        int[] groups = tiles.itemGroups(e);
                        int[] runBy = new int[groups.length];
                        java.util.Arrays.fill(runBy, -1);
                        for (int b = 0; b < blocks; b++) {
                            int h = 8 * (e * blocks + b);
                            var all = new ArrayList<long[]>();
                            if (items[h + 4] > 0) all.add(java.util.Arrays.copyOfRange(items, h + 2, h + 8));
                            for (long i = items[h]; i < items[h + 1]; i += 6) all.add(java.util.Arrays.copyOfRange(items, (int) i, (int) i + 6));
                            for (long[] bt : all)
                                for (long p = 0; p < bt[4]; p++)
                                    for (long q = 0; q < bt[2]; q++)
                                        for (long j = 0; j < bt[1]; j++) {
                                            long item = bt[0] + p * bt[5] + q * bt[3] + j;
                                            assertThat(runBy[(int) item]).as(what + ": epilogue " + e + " item " + item + " once").isEqualTo(-1);
                                            runBy[(int) item] = b;
                                        }
                        }
                        for (int item = 0; item < groups.length; item++) {
                            assertThat(runBy[item]).as(what + ": epilogue " + e + " item " + item + " run").isNotNegative();
                            if (groups[item] >= 0) assertThat(runBy[item]).as(what + ": item " + item + " in its group's block").isEqualTo(blockOfGroup[groups[item]]);
                        }
                    }
                    assertThat(src.source()).containsPattern("extern \"C\" __global__ void __launch_bounds__\\(\\d+, \\d+\\) " + tp.name() + "\\(");
                    if (m > 1 && !tp.epilogues().getFirst().kernel().isReduction())
                        assertThat(items[1] - items[0]).as(what + ": a block's runs, a row each (a rotation's two a head), are one batch").isZero();
                    for (var e : tp.epilogues()) assertThat(src.source()).contains(e.kernel().name() + "_tile(");
                }
            }
    }

    /**
     * Every spelling's kernel compiles for sm_90 with registers that allow as many of its blocks on a multiprocessor as
     * the plain GEMV entry it is built on (nvcc's own report; registers go to a thread in eights, 64 K a
     * multiprocessor): the epilogues' batch header waits in shared memory, not in registers, while the product runs.
     * Skipped where nvcc is absent.
     */
    @Test
    void everyKernelKeepsTheRegistersOfItsGemv(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) throws Exception {
        var nvcc = CudaCodegenFixtures.nvcc().orElse(null);
        assumeTrue(nvcc != null, "nvcc is not on the PATH: skipping the compile check");
        var plain = registers(nvcc, dir, "gemv", CudaGemv.SOURCE);
        var report = new StringBuilder();
        for (DType t : List.of(DType.BF16, DType.F32))
            for (int m : new int[]{1, 8}) {
                if (t == DType.F32 && m > 1) continue;
                var products = tiledProducts(t, m);
                for (int i = 0; i < products.size(); i++) {
                    Step.TiledProduct tp = products.get(i);
                    String what = ProductEpiloguesGpuTest.SPELLINGS.get(i).name() + " " + t + " m " + m;
                    var src = TiledProductCodegen.generate(tp, SMS);
                    String gemv = CudaGemv.kernel(t, CudaGemv.Path.auto(t, m), m);
                    int joined = registers(nvcc, dir, "tiled" + i, src.source()).get(tp.name());
                    int block = 32 * src.launch().warps();
                    assertThat(blocksPerSm(joined, block)).as(what + ": blocks of " + block + " a multiprocessor at " + joined + " registers, beside its GEMV "
                            + gemv + "'s " + plain.get(gemv)).isGreaterThanOrEqualTo(blocksPerSm(plain.get(gemv), block));
                    report.append(what).append(": ").append(joined).append(" registers, ").append(gemv).append(' ').append(plain.get(gemv)).append('\n');
                }
            }
        System.out.print(report);
    }

    private static int blocksPerSm(int registers, int block) {
        return Math.min(2048 / block, 65536 / ((registers + 7) / 8 * 8 * block));
    }

    /** Each entry's registers as {@code nvcc -cubin -Xptxas -v} reports them; fails on a compile error. */
    private static java.util.Map<String, Integer> registers(java.nio.file.Path nvcc, java.nio.file.Path dir, String file, String source) throws Exception {
        var compiled = CudaCodegenFixtures.cubin(nvcc, dir, file, source);
        String log = compiled.log();
        assertThat(compiled.exit()).as(file + "\n" + log + "\n" + source).isZero();
        var out = new java.util.HashMap<String, Integer>();
        var entry = java.util.regex.Pattern.compile("Compiling entry function '(\\w+)'[\\s\\S]*?Used (\\d+) registers").matcher(log);
        while (entry.find()) out.put(entry.group(1), Integer.parseInt(entry.group(2)));
        return out;
    }
}
