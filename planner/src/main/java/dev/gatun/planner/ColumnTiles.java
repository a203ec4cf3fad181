package dev.gatun.planner;

import dev.gatun.ir.SymInt;
import dev.gatun.planner.kernel.KExpr;
import dev.gatun.planner.kernel.Kernel;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.StringJoiner;

/**
 * The tiles of a product's output that its epilogues need held together: which columns of {@code y = a @ w.mT}
 * ({@code [rows, columns]}) one block of the product must compute side by side so that each epilogue kernel can run,
 * on that block, every item of its loop that reads them. A few-row product (a GEMV) computes every row of the columns
 * a block holds, and a block may hold any set of columns (each is a row of the weight), so the rule is about columns
 * alone: the columns an item reads (an element of a pointwise kernel, a whole row of a row kernel) are one
 * <em>group</em>, and groups that share a column are one. An epilogue item then runs in the block that holds its
 * group, after that block has stored its columns, and reads nothing another block writes.
 *
 * <p>Nothing here knows what the kernels compute: a SwiGLU over the two halves gives groups {c, c + H}, a rotate-half
 * rotary embedding {c, c + D/2} within each head of D, a bias add single columns, a norm over each head (QK-norm)
 * whole heads, and a kernel that reads the output in any other way gives whatever groups its loads give. The groups
 * are found by evaluating every load of the product's output at every point of each epilogue's loop (the shapes are
 * static and small: a product of a few rows), so the rule holds by construction; {@code PlanChecks} checks it again.
 *
 * <p>{@link #groupOf} numbers the groups by their first column, {@link #itemGroups} gives, for each epilogue, each
 * item's group ({@code -1}: an item that reads none of the output, which any block may run).
 */
public final class ColumnTiles {
    /** The most evaluations of a load that one analysis makes; past it the kernels are too large to check. */
    static final long MAX_EVALUATIONS = 1L << 22;

    private final long rows;
    private final int columns;
    private final int[] groupOf;
    private final int groups;
    private final int largest;
    private final List<int[]> itemGroups;

    private ColumnTiles(long rows, int columns, int[] groupOf, int groups, int largest, List<int[]> itemGroups) {
        this.rows = rows;
        this.columns = columns;
        this.groupOf = groupOf;
        this.groups = groups;
        this.largest = largest;
        this.itemGroups = itemGroups;
    }

    /** Rows of the product's output. */
    public long rows() { return rows; }

    /** Columns of the product's output. */
    public int columns() { return columns; }

    /** How many groups the columns fall into (a column no epilogue reads is a group of its own). */
    public int groups() { return groups; }

    /** The most columns in one group. */
    public int largest() { return largest; }

    /** The group of column {@code c}. */
    public int groupOf(int c) { return groupOf[c]; }

    /** For epilogue {@code k}, the group of each item of its loop (elements in row-major order, or rows of a row kernel); -1 for none. */
    public int[] itemGroups(int k) { return itemGroups.get(k).clone(); }

    /**
     * One line for the plan: "2048 groups of 2 columns, e.g. {0, 2048}" or "16 groups of 64 columns, e.g. {0..63}, and
     * 1024 single columns".
     */
    public String describe() {
        int[] size = new int[groups];
        for (int g : groupOf) size[g]++;
        int[] count = new int[largest + 1];
        for (int s : size) count[s]++;
        var j = new StringJoiner(", ");
        for (int s = largest; s >= 2; s--)
            if (count[s] > 0) j.add(count[s] + (count[s] == 1 ? " group of " : " groups of ") + s + " columns, e.g. " + example(size, s));
        if (count[1] > 0) j.add(count[1] + (count[1] == 1 ? " single column" : " single columns"));
        return j.toString();
    }

    /** The columns of the first group of {@code s} columns: "{0, 2048}" or "{0..63}". */
    private String example(int[] size, int s) {
        int g = 0;
        while (size[g] != s) g++;
        var cols = new ArrayList<Integer>();
        for (int c = 0; c < columns; c++) if (groupOf[c] == g) cols.add(c);
        boolean run = cols.getLast() - cols.getFirst() == cols.size() - 1;
        if (run && cols.size() > 2) return "{" + cols.getFirst() + ".." + cols.getLast() + "}";
        var j = new StringJoiner(", ", "{", "}");
        for (int i = 0; i < Math.min(cols.size(), 4); i++) j.add(cols.get(i).toString());
        return cols.size() > 4 ? j.toString().replace("}", ", ...}") : j.toString();
    }

    /** The analysis of {@code y} read by {@code kernels}: tiles, or why there are none. */
    record Analysis(ColumnTiles tiles, String misfit) {
        static Analysis no(String why) { return new Analysis(null, why); }
    }

    /**
     * The groups the epilogues {@code kernels} need of {@code y}, the whole {@code [rows, columns]} row-major output of
     * a product, the kernels run in order by each block (a block barrier between them). An epilogue may read what an
     * earlier one stored: an element so read ties the reading item to the tile of the item that stored it (so Hugging
     * Face's {@code rotate_half}, a concatenation one kernel writes and the next reads, stays within a head). Refused,
     * saying why, where a loop or a place is symbolic, a load of {@code y} falls outside it, an item reads what an item
     * of no tile stored, the kernels are too large to check, or a group has more than {@code most} columns.
     */
    static Analysis of(PlanBuffer y, List<Kernel> kernels, int most) {
        long rows = y.shape().sizes()[0];
        int columns = Math.toIntExact(y.shape().sizes()[1]);
        int[] parent = new int[columns];
        for (int c = 0; c < columns; c++) parent[c] = c;
        // per storage an earlier epilogue stores into: for each element, 1 + a column of the storing item's tile, -1 for an
        // item of no tile, 0 for not stored by an epilogue
        var stored = new java.util.IdentityHashMap<PlanBuffer, int[]>();
        var firsts = new ArrayList<int[]>();   // per kernel, per item: 1 + a column of its tile, or 0
        for (Kernel k : kernels) {
            var loop = Loop.of(k, y, stored.keySet());
            if (loop.misfit != null) return Analysis.no(k.name() + ": " + loop.misfit);
            int[] first = new int[Math.toIntExact(loop.items)];
            String why = loop.eachRead((item, storage, at) -> {
                int column;
                if (storage == y.storage()) {
                    if (at < 0 || at >= rows * columns) return "a load of the product's output falls outside it (element " + at + ")";
                    column = (int) (at % columns);
                } else {
                    int w = stored.get(storage)[(int) at];
                    if (w == 0) return null;   // an element no epilogue stored: read as it was before the launch
                    if (w < 0) return "it reads " + storage.name() + "[" + at + "], which an item of no tile stored";
                    column = w - 1;
                }
                if (first[(int) item] == 0) first[(int) item] = column + 1;
                else union(parent, first[(int) item] - 1, column);
                return null;
            });
            if (why != null) return Analysis.no(k.name() + ": " + why);
            why = loop.eachStore((item, storage, at) -> {
                int[] into = stored.computeIfAbsent(storage, b -> new int[Math.toIntExact(b.shape().numel())]);
                if (at < 0 || at >= into.length) return "a store falls outside " + storage.name();
                into[(int) at] = first[(int) item] == 0 ? -1 : first[(int) item];
                return null;
            });
            if (why != null) return Analysis.no(k.name() + ": " + why);
            firsts.add(first);
        }
        int[] groupOf = new int[columns], size = new int[columns];
        int[] number = new int[columns];
        Arrays.fill(number, -1);
        int groups = 0, largest = 0;
        for (int c = 0; c < columns; c++) {
            int r = find(parent, c);
            if (number[r] < 0) number[r] = groups++;
            groupOf[c] = number[r];
            largest = Math.max(largest, ++size[number[r]]);
        }
        if (largest > most)
            return Analysis.no("a tile of " + largest + " columns is more than one block of the product holds (" + most + ")");
        var items = new ArrayList<int[]>();
        for (int[] first : firsts) {
            int[] g = new int[first.length];
            for (int i = 0; i < first.length; i++) g[i] = first[i] == 0 ? -1 : groupOf[first[i] - 1];
            items.add(g);
        }
        return new Analysis(new ColumnTiles(rows, columns, groupOf, groups, largest, List.copyOf(items)), null);
    }

    private static int find(int[] parent, int c) {
        while (parent[c] != c) c = parent[c] = parent[parent[c]];
        return c;
    }

    private static void union(int[] parent, int a, int b) {
        int ra = find(parent, a), rb = find(parent, b);
        if (ra != rb) parent[Math.max(ra, rb)] = Math.min(ra, rb);
    }

    /**
     * A kernel's loop over static ranges, and the places it reads and stores that matter here: loads of {@code y}'s
     * storage or of a storage an earlier epilogue stores into, and every store, each as an element of its storage.
     */
    private record Loop(long items, long[] ranges, long[] reduction, List<Access> reads, List<Access> stores, String misfit) {
        /** Element {@code offset + sum(strides[d] * i_d)} of {@code storage}; {@code strides == null}: offset plus the row-major number. */
        record Access(PlanBuffer storage, long offset, long[] strides, boolean perRow) {}

        interface Visitor { String at(long item, PlanBuffer storage, long element); }

        static Loop of(Kernel k, PlanBuffer y, java.util.Set<PlanBuffer> stored) {
            if (!k.folds().isEmpty()) return no("it folds its rows, which needs the whole grid");
            long[] ranges = constants(k.ranges()), reduction = constants(k.reductionRanges());
            if (ranges == null || reduction == null) return no("its loop is of symbolic size");
            var all = new ArrayList<KExpr.Load>();
            for (KExpr e : k.locals()) KExpr.loads(e, all);
            var reads = new ArrayList<Access>();
            for (KExpr.Load ld : all) {
                PlanBuffer in = k.inputs().get(ld.input());
                if (in.storage() != y.storage() && !stored.contains(in.storage())) continue;
                long[] s = constants(ld.strides());
                if (s == null || !ld.offset().isConstant() || in.isView() && !in.offset().isConstant()) return no("it loads " + in.name() + " at a symbolic place");
                reads.add(new Access(in.storage(), (in.isView() ? in.offset().constant() : 0) + ld.offset().constant(), s, false));
            }
            var stores = new ArrayList<Access>();
            for (Kernel.Store st : k.stores()) {
                PlanBuffer out = st.buffer();
                long[] s = st.strides() == null ? null : constants(st.strides());
                if (st.strides() != null && s == null || !st.offset().isConstant() || out.isView() && !out.offset().isConstant()
                        || !out.storage().shape().isStatic() || out.storage().shape().numel() > MAX_EVALUATIONS)
                    return no("it stores into " + out.name() + " at a symbolic place");
                stores.add(new Access(out.storage(), (out.isView() ? out.offset().constant() : 0) + st.offset().constant(), s, st.perRow()));
            }
            long items = product(ranges), inner = product(reduction), work = (long) (reads.size() + stores.size() + 1);
            if (items > Integer.MAX_VALUE || Math.multiplyHigh(items, inner) != 0 || Math.multiplyHigh(items * inner, work) != 0
                    || items * inner * work > MAX_EVALUATIONS)
                return no("its loop is too large to check its reads (" + items + " items of " + inner + ")");
            return new Loop(items, ranges, reduction, reads, stores, null);
        }

        private static Loop no(String why) { return new Loop(0, null, null, List.of(), List.of(), why); }

        String eachRead(Visitor v) { return each(reads, v); }

        String eachStore(Visitor v) { return each(stores, v); }

        /** Calls {@code v} for each item and element of {@code accesses}; the first refusal {@code v} gives, or null. */
        private String each(List<Access> accesses, Visitor v) {
            int rank = ranges.length, dims = rank + reduction.length;
            long[] idx = new long[dims];
            long inner = product(reduction);
            for (long item = 0; item < items; item++) {
                unravel(item, ranges, idx, 0);
                for (long e = 0; e < inner; e++) {
                    unravel(e, reduction, idx, rank);
                    for (Access a : accesses) {
                        if (a.perRow && e > 0) continue;
                        long at = a.offset;
                        if (a.strides == null) at += a.perRow ? item : item * inner + e;
                        else for (int d = 0; d < a.strides.length; d++) at += a.strides[d] * idx[d];
                        String why = v.at(item, a.storage, at);
                        if (why != null) return why;
                    }
                }
            }
            return null;
        }
    }

    private static long[] constants(List<SymInt> xs) {
        long[] out = new long[xs.size()];
        for (int i = 0; i < out.length; i++) {
            if (!xs.get(i).isConstant()) return null;
            out[i] = xs.get(i).constant();
        }
        return out;
    }

    private static long product(long[] xs) {
        long p = 1;
        for (long x : xs) p = Math.multiplyExact(p, x);
        return p;
    }

    private static void unravel(long linear, long[] ranges, long[] idx, int from) {
        for (int d = ranges.length - 1; d >= 0; d--) {
            idx[from + d] = ranges[d] == 0 ? 0 : linear % ranges[d];
            linear = ranges[d] == 0 ? 0 : linear / ranges[d];
        }
    }
}
