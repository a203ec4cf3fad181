package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.planner.ColumnTiles;
import dev.gatun.planner.PlanBuffer;
import dev.gatun.planner.Step;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;

/**
 * CUDA C of a product with epilogues ({@link Step.TiledProduct}): one kernel that runs the few-row product
 * ({@link CudaGemv}'s device code) on the columns each block holds, then, after a block barrier, every epilogue item
 * whose reads fall in those columns, each epilogue as its {@link CudaCodegen#tile tile function}.
 *
 * <p><b>Packing.</b> The plan's {@link ColumnTiles} says which columns must sit in one block (a group: the columns
 * one epilogue item reads, and the items that read what it stored). The GEMV's launch is widened until one block holds
 * the largest group in one pass ({@link CudaGemv#holding}); then the groups, in the order of their first column, fill
 * the blocks one after another, a group that no longer fits starting the next block. The blocks' columns, in order,
 * padded to whole blocks with -1, are the launch's column table ({@code cols}: position p computes column
 * {@code cols[p]}); a block of P positions computes positions {@code [b P, (b + 1) P)}. Where the plan caps the grid
 * ({@code LaunchChoice.Gemv#resident}), block i of the grid takes blocks i, i + grid, ... of the packing in turn, each
 * as it would alone: the products of all of them first (the GEMV's own loop), a barrier, then each one's epilogues
 * (with barriers around the copy of the next one's header).
 *
 * <p><b>Items.</b> Each epilogue's items (elements of a pointwise kernel, rows of a row kernel) go to the block of their
 * group; items that read no column of the product go to the blocks in even runs. A block's items of an epilogue are runs
 * of consecutive items; runs of one length evenly spaced are one batch, and batches alike evenly spaced are one too
 * ({@code lo, len, count, stride, count2, stride2}: a SwiGLU's block has a run a row, a rotation's two runs a head a
 * row, each one batch). The item table ({@code items}, 64-bit) starts with eight numbers per epilogue e and block b
 * (at {@code 8 (e blocks + b)}; copied into shared memory while the product runs, {@link #COPY}): where b's batches of e after the first begin and end, then the first batch (zeros
 * where there is none), which the kernel reads before the product, so its epilogues wait for nothing but the product;
 * then the other batches, six numbers each. A pointwise epilogue's tile function takes a batch and spreads all its elements over the block's threads at
 * once (one round trip to memory a batch, not one a run); a row kernel's takes each run's rows.
 *
 * <p>Why the result is the product's and its epilogues': a block stores its columns before the barrier, each epilogue
 * item reads only columns its block stored (or memory no item of the launch writes), and items that read what an earlier
 * epilogue stored run in the block that stored it ({@code ColumnTiles}; the planner's {@code ProductEpilogues} and
 * {@code PlanChecks.tiledProducts} check it). ABI: the GEMV's arguments ({@code x, w, y, n, k, ldc, rows, slices,
 * preload}) with n the table's positions, then {@code cols} and {@code items}, then each epilogue's arguments as its
 * kernel takes them ({@link CudaCodegen}), without bounds.
 */
final class TiledProductCodegen {
    private TiledProductCodegen() {}

    /**
     * A tiled product's kernel and its tables.
     *
     * @param launch          the GEMV's launch, over the packed blocks
     * @param positions       the column table's length (blocks times the positions a block holds)
     * @param cols            the column table
     * @param items           the item table
     * @param epilogueSymbols each epilogue's symbols, in the order its arguments take them
     */
    record TiledSource(String name, String source, DType dtype, int rows, int columns, int k, CudaGemv.Launch launch, int positions,
                       int[] cols, long[] items, List<List<String>> epilogueSymbols) {}

    /**
     * An asynchronous 8-byte copy from global to shared memory ({@code cp.async}, compute capability 8.0 and later; a
     * plain copy before), and the wait for a thread's copies. The header's numbers so stay out of registers while the
     * product runs: held in registers they raised the kernel's count from the GEMV's 64 to 90, halving its blocks a
     * multiprocessor.
     */
    static final String COPY = """
            __device__ __forceinline__ void gt_copy_async(long long* dst, const long long* src) {
            #if __CUDA_ARCH__ >= 800
                asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\\n" :: "r"((unsigned) __cvta_generic_to_shared(dst)), "l"(src) : "memory");
                asm volatile("cp.async.commit_group;\\n" ::: "memory");
            #else
                *dst = *src;
            #endif
            }
            __device__ __forceinline__ void gt_copy_wait() {
            #if __CUDA_ARCH__ >= 800
                asm volatile("cp.async.wait_all;\\n" ::: "memory");
            #endif
            }
            """;

    static TiledSource generate(Step.TiledProduct t, int sms) {
        Step.Matmul m = t.product();
        PlanBuffer y = m.output();
        if (!m.gemv()) throw new IllegalStateException(t.name() + ": the plan takes its product by the library, which has no epilogues");
        if (y.isView()) throw new IllegalStateException(t.name() + ": the product writes into a view of " + y.storage().name());
        DType type = m.a().dtype();
        long[] a = m.a().shape().sizes();
        int rows = Math.toIntExact(a[0]), k = Math.toIntExact(a[1]);
        ColumnTiles tiles = t.tiles();
        int columns = tiles.columns();
        CudaGemv.Path path = CudaGemv.Path.auto(type, rows);
        CudaGemv.Launch l = CudaGemv.holding(type, path, rows, columns, k, sms, tiles.largest());
        int per = CudaGemv.columnsPerTile(path) * l.tilesPerBlock();
        int[] blockOf = new int[tiles.groups()];
        int[] cols = pack(tiles, per, blockOf);
        int blocks = cols.length / per;
        long[] items = items(t, tiles, blockOf, blocks);
        int block = 32 * l.warps();

        var functions = new ArrayList<CudaCodegen.TileFunction>();
        for (Step.Launch e : t.epilogues()) functions.add(CudaCodegen.tile(e.kernel(), block, true));
        var helpers = new LinkedHashSet<String>();
        boolean vectors = false;
        for (var f : functions) {
            helpers.addAll(f.helpers());
            vectors |= f.vectors();
        }
        String T = CudaCodegen.storageType(type);
        var src = new StringBuilder();
        src.append("// ").append(t.name()).append(": ").append(m.format().strip().lines().findFirst().orElse("")).append(", then ")
                .append(t.epilogues().stream().map(e -> e.kernel().name()).toList()).append('\n');
        src.append("// generated by Gatun's CUDA backend: ").append(blocks).append(" blocks of ").append(per).append(" columns (")
                .append(tiles.describe()).append("), ").append(block).append(" threads a block\n");
        src.append(CudaGemv.DEVICE).append('\n').append(COPY).append('\n');
        src.append(CudaCodegen.prelude(false, false, vectors, helpers));
        for (var f : functions) src.append(f.source()).append('\n');
        var params = new ArrayList<>(List.of("const " + T + "* x", "const " + T + "* w", T + "* y", "int n", "int k", "long long ldc", "int rows",
                "int slices", "int preload", "const int* gt_cols", "const long long* gt_items"));
        for (int e = 0; e < functions.size(); e++) params.addAll(CudaCodegen.tileParams(t.epilogues().get(e).kernel(), functions.get(e), "e" + e + "_"));
        // at most 64 registers a thread, as the plain GEMV's entries take: as many blocks a multiprocessor as the product alone
        src.append("extern \"C\" __global__ void __launch_bounds__(").append(block).append(", ").append(Math.max(1, 65536 / (64 * block)))
                .append(") ").append(t.name()).append("(\n        ")
                .append(String.join(",\n        ", params)).append(")\n{\n");
        int header = 8 * functions.size();
        String headerOf = "gt_items[((long long) (j / 8) * " + blocks + " + gt_b) * 8 + j % 8]";
        src.append("    __shared__ long long gt_h[").append(header).append("];   // each epilogue's batches of this block: the rest's bounds, the first\n")
                .append("    for (int j = threadIdx.x, gt_b = blockIdx.x; j < ").append(header).append("; j += blockDim.x)   // the table is constant: copied while the product runs\n")
                .append("        gt_copy_async(&gt_h[j], &").append(headerOf).append(");\n");
        // the product of every block of the packing this block of the grid takes (blockIdx.x, then past a grid the plan
        // capped, LaunchChoice.Gemv#resident, blockIdx.x + gridDim.x, ...), then each one's epilogues: two loops, so that
        // nothing of the product stays live through the epilogues (one loop of both spilled registers)
        src.append("    ").append(path == CudaGemv.Path.TENSOR_CORES ? "gemv_mma<" + T + ">" : "gemv_fma<" + T + ", " + CudaGemv.rowsTemplate(rows) + ">")
                .append("(x, w, y, n, k, ldc, rows, slices, preload, gt_cols);   // this block's columns\n");
        src.append("    gt_copy_wait();\n    __syncthreads();   // stored by this block's threads, and the copied header: visible to them\n");
        src.append("    for (int gt_b = blockIdx.x; gt_b < ").append(blocks).append("; gt_b += gridDim.x) {\n");
        var body = new StringBuilder();
        body.append("    if (gt_b != (int) blockIdx.x) {   // a capped grid's next block: its header, once the last one's epilogues are done with it\n")
                .append("        __syncthreads();\n")
                .append("        for (int j = threadIdx.x; j < ").append(header).append("; j += blockDim.x) gt_h[j] = ").append(headerOf).append(";\n")
                .append("        __syncthreads();\n    }\n");
        for (int e = 0; e < functions.size(); e++) {
            var f = functions.get(e);
            String args = CudaCodegen.tileArgs(t.epilogues().get(e).kernel(), f, "e" + e + "_"), h = "gt_h[" + 8 * e + " + ";
            boolean rowKernel = t.epilogues().get(e).kernel().isReduction();
            body.append("    if (").append(h).append("6] > 0) {   // epilogue ").append(e).append(": the first batch\n");
            batchCall(body, f.name(), args, rowKernel, i -> h + (2 + i) + "]");
            body.append("    }\n    for (long long i = ").append(h).append("0]; i < ").append(h).append("1]; i += 6) {   // the others\n");
            batchCall(body, f.name(), args, rowKernel, i -> "gt_items[i + " + i + "]");
            body.append("    }\n");
            if (e + 1 < functions.size()) body.append("    __syncthreads();   // what it stored, for the next\n");
        }
        body.toString().lines().forEach(line -> src.append("    ").append(line).append('\n'));
        src.append("    }\n}\n");
        return new TiledSource(t.name(), src.toString(), type, rows, columns, k, l.withBlocks(blocks), cols.length, cols, items,
                functions.stream().map(CudaCodegen.TileFunction::symbols).toList());
    }

    /** The call of a tile function on the batch whose six numbers {@code at} gives: once, or for each run's rows (a row kernel). */
    private static void batchCall(StringBuilder src, String function, String args, boolean rowKernel, java.util.function.IntFunction<String> at) {
        if (rowKernel)
            src.append("        for (long long p = 0; p < ").append(at.apply(4)).append("; p++)\n")
                    .append("            for (long long q = 0; q < ").append(at.apply(2)).append("; q++) {   // each run's rows\n")
                    .append("                const long long lo = ").append(at.apply(0)).append(" + p * ").append(at.apply(5)).append(" + q * ").append(at.apply(3)).append(";\n")
                    .append("                ").append(function).append("(").append(args).append(", lo, lo + ").append(at.apply(1)).append(");\n            }\n");
        else {
            src.append("        ").append(function).append("(").append(args);
            for (int i = 0; i < 6; i++) src.append(", ").append(at.apply(i));
            src.append(");\n");
        }
    }

    /** The column table: groups in order of their first column, filling blocks of {@code per} positions; {@code blockOf} gets each group's block. */
    static int[] pack(ColumnTiles tiles, int per, int[] blockOf) {
        int groups = tiles.groups(), columns = tiles.columns();
        int[] start = new int[groups + 1];   // group g's columns, in order, are members[start[g] .. start[g + 1])
        for (int c = 0; c < columns; c++) start[tiles.groupOf(c) + 1]++;
        for (int g = 0; g < groups; g++) start[g + 1] += start[g];
        int[] members = new int[columns], fill = Arrays.copyOf(start, groups);
        for (int c = 0; c < columns; c++) members[fill[tiles.groupOf(c)]++] = c;
        int[] table = new int[per];
        int n = 0, block = 0;
        for (int g = 0; g < groups; g++) {
            int s = start[g + 1] - start[g];
            if (s > per) throw new IllegalStateException("a group of " + s + " columns in blocks of " + per);
            if (n + s > (block + 1) * per) {   // the rest of this block stays empty: the next one
                Arrays.fill(table, n, (block + 1) * per, -1);
                n = ++block * per;
            }
            if (n + s > table.length) table = Arrays.copyOf(table, Math.max(2 * table.length, (block + 1) * per));
            System.arraycopy(members, start[g], table, n, s);
            blockOf[g] = block;
            n += s;
        }
        table = Arrays.copyOf(table, (block + 1) * per);
        Arrays.fill(table, n, table.length, -1);
        return table;
    }

    /** The item table: per epilogue and block, where its runs begin; then the runs. */
    static long[] items(Step.TiledProduct t, ColumnTiles tiles, int[] blockOf, int blocks) {
        int epilogues = t.epilogues().size();
        var runs = new ArrayList<List<long[]>>();
        for (int e = 0; e < epilogues; e++) {
            int[] groups = tiles.itemGroups(e);
            int loose = 0;
            for (int g : groups) if (g < 0) loose++;
            var perBlock = new ArrayList<List<long[]>>(blocks);
            for (int b = 0; b < blocks; b++) perBlock.add(new ArrayList<>());
            for (int i = 0, j = 0; i < groups.length; i++) {
                int b = groups[i] >= 0 ? blockOf[groups[i]] : (int) ((long) j++ * blocks / loose);
                var list = perBlock.get(b);
                if (!list.isEmpty() && list.getLast()[1] == i) list.getLast()[1] = i + 1;
                else list.add(new long[]{i, i + 1});
            }
            runs.addAll(perBlock);
        }
        var batches = runs.stream().map(TiledProductCodegen::batches).toList();
        // per (epilogue, block): where the batches after the first begin and end, then the first batch (zeros: none)
        int header = 8 * epilogues * blocks;
        long count = header;
        for (var r : batches) count += 6L * Math.max(0, r.size() - 1);
        long[] table = new long[Math.toIntExact(count)];
        int at = header;
        for (int e = 0; e < epilogues; e++)
            for (int b = 0; b < blocks; b++) {
                int h = 8 * (e * blocks + b);
                var list = batches.get(e * blocks + b);
                table[h] = at;
                if (!list.isEmpty()) System.arraycopy(list.getFirst(), 0, table, h + 2, 6);
                for (long[] batch : list.subList(Math.min(1, list.size()), list.size())) {
                    System.arraycopy(batch, 0, table, at, 6);
                    at += 6;
                }
                table[h + 1] = at;
            }
        return table;
    }

    /**
     * Runs {@code [lo, hi)} in order as batches {@code {lo, len, count, stride, count2, stride2}}: runs of one length evenly
     * spaced joined, then batches of one length, count and stride evenly spaced joined.
     */
    static List<long[]> batches(List<long[]> runs) {
        var level1 = new ArrayList<long[]>();
        long[] last = null;
        for (long[] r : runs) {
            long len = r[1] - r[0];
            if (last != null && last[1] == len && (last[2] == 1 ? r[0] > last[0] : r[0] == last[0] + last[2] * last[3])) {
                if (last[2] == 1) last[3] = r[0] - last[0];
                last[2]++;
                continue;
            }
            last = new long[]{r[0], len, 1, len, 1, 0};
            level1.add(last);
        }
        var out = new ArrayList<long[]>();
        last = null;
        for (long[] b : level1) {
            if (last != null && last[1] == b[1] && last[2] == b[2] && last[3] == b[3]
                    && (last[4] == 1 ? b[0] > last[0] : b[0] == last[0] + last[4] * last[5])) {
                if (last[4] == 1) last[5] = b[0] - last[0];
                last[4]++;
                continue;
            }
            last = b;
            out.add(last);
        }
        return out;
    }
}
