package dev.gatun.runtime.cuda;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;
import dev.gatun.runtime.cuda.CudaExpressions.Domain;
import dev.gatun.runtime.cuda.KernelScope.RowAccess;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Function;

import static dev.gatun.runtime.cuda.CudaCodegen.storageType;
import static dev.gatun.runtime.cuda.CudaCodegen.valueType;
import static dev.gatun.runtime.cuda.CudaExpressions.identity;
import static dev.gatun.runtime.cuda.KernelScope.loadsOf;

/**
 * The body of a <em>transposing</em> row kernel: a row kernel whose element store is transposed (consecutive rows
 * adjacent in memory) and which needs one pass over the row runs 8 to 32 rows a block (whole 32-byte sectors of each
 * column), written through a shared tile so every store is coalesced; its block is {@link #TILE_THREADS} threads.
 * {@link #transposedStores} decides whether a row kernel is one, and the tile's shape.
 */
final class TiledRowBody {
    /** Threads per block of a transposing row kernel. */
    static final int TILE_THREADS = 256;
    /** Most shared memory the tiles of a transposing row kernel take together. */
    static final int MAX_TILE_BYTES = 36 * 1024;

    private final KernelScope scope;
    private final CudaExpressions ex;
    private final Kernel k;
    private final DType[] inTypes, outTypes;
    private final int rank;

    TiledRowBody(KernelScope scope, CudaExpressions ex) {
        this.scope = scope;
        this.ex = ex;
        k = scope.k;
        inTypes = scope.inTypes;
        outTypes = scope.outTypes;
        rank = scope.rank;
    }

    /** Rows per block and the columns of its tiles (0: not transposing), as {@link #transposedStores} chose them. */
    private int tileRows, tileColumns;
    // what write notes for its parts: the stores through the tiles, reductions, rows a warp takes, warp-wide passes
    private List<Integer> tiled;
    private int phases, per, passes;
    /** The locals a pass computes. */
    private boolean[] needed;
    /** The distinct loads of the inputs read along the rows ({@code "input|base"}), a pass's elements in registers. */
    private final List<String> rows = new ArrayList<>();
    private final List<KExpr.Load> rowLoads = new ArrayList<>();
    /** The digits a pass's loads and direct stores, the tiles' stores and the per-row stores index by. */
    private final Set<Integer> fillDims = new TreeSet<>(), flushDims = new TreeSet<>(), rowDims = new TreeSet<>();

    /**
     * The element stores a transposing row kernel ({@link #write}) writes through its tiles, or none when this
     * row kernel is not one. A store is transposed when consecutive rows are next to each other in memory (stride 1
     * on the last row dimension) and consecutive elements of a row are not: one block per row would write every
     * element to a memory sector of its own. The kernel is transposing when it has such a store and one pass over
     * the row does: one element dimension, no reduction and no element value reading a reduction's result, every
     * load along the row or once per row. Chooses the tiles' shape too: call it before {@link #write}.
     */
    List<Integer> transposedStores() {
        var out = new ArrayList<Integer>();
        if (k.reductionRanges().size() != 1 || rank == 0) return out;
        int[] phase = k.phases();
        for (var r : k.reductions()) if (phase[r.local()] > 0) return out;
        for (var st : k.stores()) if (!st.perRow() && phase[st.local()] > 0) return out;
        for (KExpr.Load l : scope.loads()) if (scope.rowAccess(l) == RowAccess.GENERAL) return out;
        for (int s = 0; s < outTypes.length; s++) {
            var st = k.stores().get(s);
            if (st.perRow() || st.strides() == null) continue;
            SymInt lastRow = st.strides().get(rank - 1), along = st.strides().get(rank);
            if (lastRow.equals(SymInt.ONE) && !along.equals(SymInt.ONE) && !along.equals(SymInt.ZERO) && !k.ranges().get(rank - 1).equals(SymInt.ONE)) out.add(s);
        }
        if (out.isEmpty()) return out;
        // as few rows a block as still write whole 32-byte sectors of each column: more blocks to share the GPU
        // (4096 rows of f32 make 512 blocks of 8 rows, not 128 of 32; measured on an H100: 0.83 of copy, not 0.69)
        int narrowest = 8;
        for (int s : out) narrowest = Math.min(narrowest, outTypes[s].byteSize());
        tileRows = Math.clamp(32 / narrowest, 8, 32);
        for (int e = 8; e >= 1; e /= 2) {
            int columns = 32 * e;
            long bytes = 0;
            for (int s : out) bytes += (long) tileRows * (columns + tilePad(outTypes[s])) * outTypes[s].byteSize();
            if (bytes <= MAX_TILE_BYTES) {
                tileColumns = columns;
                return out;
            }
        }
        out.clear();
        return out;
    }

    /**
     * Loads the elements of the pass starting at {@code c} of each input read along the rows into registers, every
     * load in flight at once: the first pass before the loop, each next one while the tile of the last goes out.
     */
    private void tileLoads(int indent, String c) {
        if (rowLoads.isEmpty()) return;
        var loadDims = new TreeSet<Integer>();
        for (KExpr.Load l : rowLoads) loadDims.addAll(scope.rowDigits(l));
        scope.line(indent, "#pragma unroll", null);
        scope.line(indent, "for (int m = 0; m < " + per + "; m++) {", "the elements of the pass from " + c + ", all loads in flight at once");
        scope.line(indent + 1, "const long long o = o0 + warp + " + (TILE_THREADS / 32) + " * m;", null);
        scope.unravel(indent + 1, "o", 0, rank, loadDims);
        scope.line(indent + 1, "#pragma unroll", null);
        scope.line(indent + 1, "for (int e = 0; e < " + passes + "; e++) {", null);
        scope.line(indent + 2, "const long long r = " + c + " + e * 32 + lane;", null);
        for (int q = 0; q < rowLoads.size(); q++)
            scope.line(indent + 2, "if (o < total && r < count) gt_x" + q + "[m][e] = in" + rowLoads.get(q).input() + "[" + scope.rowBase(rowLoads.get(q)) + " + r];", null);
        scope.line(indent + 1, "}", null);
        scope.line(indent, "}", null);
    }


    /**
     * Elements a tile row is padded by: rows {@code 32 / tileRows} words apart modulo 32 banks, so a warp reading
     * {@code tileRows} rows of {@code 32 / tileRows} columns hits 32 banks (4 bytes for 32 rows).
     */
    private int tilePad(DType t) { return Math.max(1, 4 * (32 / tileRows) / t.byteSize()); }

    /**
     * A transposing row kernel: each block takes {@code tileRows} consecutive rows (8 to 32), each of its 8 warps an
     * eighth of them, and walks the rows together, {@code tileColumns} elements at a time. A warp reads a row's
     * elements at consecutive addresses (lane {@code l} takes elements {@code l, l + 32, ...} of the pass), folds them
     * into the row's reductions and writes the element values of each transposed store into a shared tile of those
     * rows; once the tile is full, each warp writes whole columns of it, the tile's rows at consecutive addresses (at
     * least 32 bytes). Other element stores are written directly. After the last pass, warp shuffles finish each row's
     * reductions and lane 0 writes the per-row values. The row is read once and every store is coalesced.
     *
     * @param tiled the stores written through the tiles, from {@link #transposedStores}
     */
    KernelLayout write(List<Integer> tiled) {
        this.tiled = tiled;
        phases = k.reductions().size();
        per = tileRows / (TILE_THREADS / 32);
        passes = tileColumns / 32;
        notePasses();
        scope.extents();
        scope.line(1, "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;", "8 warps: warp w takes rows w, w + 8, ... of the block's " + tileRows);
        for (int s : tiled)
            scope.line(1, "__shared__ " + storageType(outTypes[s]) + " gt_tile" + s + "[" + tileRows + "][" + (tileColumns + tilePad(outTypes[s])) + "];",
                    k.stores().get(s).buffer().name() + ": " + tileRows + " rows of " + tileColumns + " elements, padded against bank conflicts");
        scope.line(1, "for (long long o0 = (long long) blockIdx.x * " + tileRows + "; o0 < total; o0 += (long long) gridDim.x * " + tileRows + ") {", tileRows + " rows per block");
        for (int p = 0; p < phases; p++) {
            var r = k.reductions().get(p);
            Domain acc = Domain.of(k.locals().get(r.local()).dtype());
            scope.line(2, acc.c + " acc" + p + "[" + per + "];", "r" + p + " = " + r.fn().opName() + " of t" + r.local() + ", this lane's part, per row");
            scope.line(2, "for (int m = 0; m < " + per + "; m++) acc" + p + "[m] = " + identity(r.fn(), acc) + ";", null);
        }
        for (int q = 0; q < rowLoads.size(); q++)
            scope.line(2, storageType(inTypes[rowLoads.get(q).input()]) + " gt_x" + q + "[" + per + "][" + passes + "];", k.inputs().get(rowLoads.get(q).input()).name() + ": this lane's elements of a pass");
        tileLoads(2, "0");
        scope.line(2, "for (long long c0 = 0; c0 < count; c0 += " + tileColumns + ") {", tileColumns + " elements of each row per pass");
        fill();
        scope.line(3, "__syncthreads();", "the tile is written");
        tileLoads(3, "c0 + " + tileColumns);
        flush();
        scope.line(3, "__syncthreads();", "read before the next pass writes it");
        scope.line(2, "}", null);
        if (k.stores().stream().anyMatch(Kernel.Store::perRow)) rowValues();
        scope.line(1, "}", null);
        return KernelLayout.transposing(tileRows, tileColumns);
    }

    /** What a pass needs: the locals it computes, the inputs it reads along the rows, the digits each part indexes by. */
    private void notePasses() {
        needed = new boolean[k.locals().size()];
        for (var r : k.reductions()) needed[r.local()] = true;
        for (var st : k.stores()) if (!st.perRow()) needed[st.local()] = true;
        k.withReads(needed);
        // the pass's elements of each input read along the rows, loaded into registers before any is used
        for (int i = 0; i < needed.length; i++)
            if (needed[i])
                for (KExpr.Load l : loadsOf(k.locals().get(i)))
                    if (scope.rowAccess(l) == RowAccess.ALONG && scope.movesWithRow(l) && !rows.contains(l.input() + "|" + scope.rowBase(l))) {
                        rows.add(l.input() + "|" + scope.rowBase(l));
                        rowLoads.add(l);
                    }
        // the digits each part of the kernel indexes by: the rows' for loads, every stored dimension for stores
        for (int i = 0; i < needed.length; i++)
            if (needed[i]) for (KExpr.Load l : loadsOf(k.locals().get(i))) if (!rows.contains(l.input() + "|" + scope.rowBase(l))) fillDims.addAll(scope.rowDigits(l));
        for (int s = 0; s < outTypes.length; s++) {
            var st = k.stores().get(s);
            if (st.strides() == null) continue;
            var into = st.perRow() ? rowDims : tiled.contains(s) ? flushDims : fillDims;
            for (int d = 0; d < st.strides().size(); d++) if (!st.strides().get(d).equals(SymInt.ZERO)) into.add(d);
        }
    }

    /** How a pass reads a load: from this lane's registers of the pass, or memory. */
    private String load(KExpr.Load l) {
        return switch (scope.rowAccess(l)) {
            case ALONG -> rows.contains(l.input() + "|" + scope.rowBase(l)) ? "gt_x" + rows.indexOf(l.input() + "|" + scope.rowBase(l)) + "[m][e]"
                    : "in" + l.input() + "[" + scope.rowBase(l) + " + r]";
            case ROW -> "in" + l.input() + "[" + scope.rowBase(l) + "]";
            case GENERAL -> throw new IllegalStateException("a transposing row kernel has no general loads");
        };
    }

    /** A pass's elements of each row: folded into the reductions, stored directly or into the tiles. */
    private void fill() {
        scope.line(3, "#pragma unroll", null);
        scope.line(3, "for (int m = 0; m < " + per + "; m++) {", null);
        scope.line(4, "const long long o = o0 + warp + " + (TILE_THREADS / 32) + " * m;", null);
        scope.unravel(4, "o", 0, rank, fillDims);
        scope.line(4, "#pragma unroll", null);
        scope.line(4, "for (int e = 0; e < " + passes + "; e++) {", null);
        scope.line(5, "const long long r = c0 + e * 32 + lane;", null);
        scope.line(5, "if (o < total && r < count) {", null);
        if (fillDims.contains(rank)) scope.line(6, "const long long i" + rank + " = r;", null);
        ex.locals(6, this::load, needed);
        for (int p = 0; p < phases; p++) {
            var r = k.reductions().get(p);
            KExpr folded = k.locals().get(r.local());
            Domain acc = Domain.of(folded.dtype());
            scope.line(6, "acc" + p + "[m] = " + ex.combine(r.fn(), acc, "acc" + p + "[m]", ex.convert("t" + r.local(), folded.dtype(), acc.type)) + ";", null);
        }
        for (int s = 0; s < outTypes.length; s++) {
            var st = k.stores().get(s);
            if (st.perRow()) continue;
            String v = ex.store("t" + st.local(), k.locals().get(st.local()).dtype(), outTypes[s]);
            if (tiled.contains(s)) scope.line(6, "gt_tile" + s + "[warp + " + (TILE_THREADS / 32) + " * m][e * 32 + lane] = " + v + ";", st.buffer().name() + ", through the tile");
            else scope.line(6, "out" + s + "[" + scope.place(st, "o * count + r", 0) + "] = " + v + ";", st.buffer().name());
        }
        scope.line(5, "}", null);
        scope.line(4, "}", null);
        scope.line(3, "}", null);
    }

    /** The full tiles out to memory: each warp whole columns, the tile's rows at consecutive addresses. */
    private void flush() {
        int across = 32 / tileRows;
        scope.line(3, "#pragma unroll 4", null);
        String column = across == 1 ? "warp + " + (TILE_THREADS / 32) + " * m" : "warp * " + across + " + lane / " + tileRows + " + " + (TILE_THREADS / tileRows) + " * m";
        String tileRow = across == 1 ? "lane" : "lane % " + tileRows;
        scope.line(3, "for (int m = 0; m < " + (tileColumns * tileRows / TILE_THREADS) + "; m++) {", "each warp writes " + across + " column(s) of the tile at a time, " + tileRows + " rows each");
        scope.line(4, "const long long r = c0 + " + column + ", o = o0 + " + tileRow + ";", null);
        scope.line(4, "if (r < count && o < total) {", null);
        scope.unravel(5, "o", 0, rank, flushDims);
        if (flushDims.contains(rank)) scope.line(5, "const long long i" + rank + " = r;", null);
        for (int s : tiled)
            scope.line(5, "out" + s + "[" + scope.place(k.stores().get(s), "o * count + r", 0) + "] = gt_tile" + s + "[" + tileRow + "][" + column + "];", k.stores().get(s).buffer().name());
        scope.line(4, "}", null);
        scope.line(3, "}", null);
    }

    /** After the last pass: each row's reductions across its warp, then lane 0 writes the row's per-row values. */
    private void rowValues() {
        boolean[] rowNeeds = RowBody.rowStoreNeeds(k);
        Function<KExpr.Load, String> rowLoad = l -> "in" + l.input() + "[" + scope.rowBase(l) + "]";
        scope.line(2, "#pragma unroll", null);
        scope.line(2, "for (int m = 0; m < " + per + "; m++) {", "each row's reductions, then its per-row values");
        scope.line(3, "const long long o = o0 + warp + " + (TILE_THREADS / 32) + " * m;", null);
        scope.line(3, "if (o >= total) break;", null);
        for (int p = 0; p < phases; p++) {
            var r = k.reductions().get(p);
            Domain acc = Domain.of(k.locals().get(r.local()).dtype());
            scope.line(3, acc.c + " a" + p + " = acc" + p + "[m];", null);
            scope.line(3, "for (int d = 16; d > 0; d >>= 1) a" + p + " = " + ex.combine(r.fn(), acc, "a" + p, "__shfl_down_sync(0xffffffffu, a" + p + ", d)") + ";", "across the warp");
            scope.line(3, "const " + valueType(r.dtype()) + " rd" + p + " = " + ex.result(r, acc, "a" + p) + ";", "lane 0's is the row's");
        }
        for (int i = 0; i < rowNeeds.length; i++) if (rowNeeds[i]) for (KExpr.Load l : loadsOf(k.locals().get(i))) rowDims.addAll(scope.rowDigits(l));
        scope.line(3, "if (lane == 0) {", null);
        scope.unravel(4, "o", 0, rank, rowDims);
        RowBody.rowStores(scope, ex, 4, rowLoad, rowNeeds);
        scope.line(3, "}", null);
        scope.line(2, "}", null);
    }
}
