package dev.gatun.planner;

import dev.gatun.ir.SymInt;
import dev.gatun.lowering.Buffer;
import dev.gatun.lowering.Expr;

import java.util.ArrayList;
import java.util.List;

/**
 * Fusion's index arithmetic over a loop's dimensions: which storages a body loads, how a load's dimensions map onto
 * the loading loop's ({@link #remap}) and onto a kernel's ({@link #toKernel}, {@link #match}), and the strides that put
 * a member's elements where its buffer holds them ({@link #placeStrides}). Pure functions of loads, shapes and
 * strides: no kernel or group is read here.
 */
final class LoopIndex {
    private LoopIndex() {}

    /** Adds the storages {@code e} loads that {@code out} does not hold yet (a body loads a few: a list, not a set). */
    static void collectLoads(Expr e, List<Buffer> out) {
        switch (e) {
            case Expr.Load l -> { if (!out.contains(l.storage())) out.add(l.storage()); }
            case Expr.Apply a -> { for (Expr x : a.args()) collectLoads(x, out); }
            case Expr.Cast c -> collectLoads(c.x(), out);
            case Expr.Constant c -> { }
        }
    }

    static List<Expr.Load> allLoadsOf(Expr e, Buffer target) {
        var out = new ArrayList<Expr.Load>();
        walk(e, target, out);
        return out;
    }

    static void walk(Expr e, Buffer target, List<Expr.Load> out) {
        switch (e) {
            case Expr.Load l -> { if (l.storage() == target) out.add(l); }
            case Expr.Apply a -> a.args().forEach(x -> walk(x, target, out));
            case Expr.Cast c -> walk(c.x(), target, out);
            case Expr.Constant c -> { }
        }
    }

    /**
     * For a load of row-major buffer {@code p}, which iteration dimension of the loading loop drives each of
     * p's dimensions (-1 for a dimension of size 1); null when the load is not such a plain remap.
     */
    static int[] remap(Expr.Load l, Buffer p) { return remap(l, p, null); }

    /**
     * The same, knowing the loading loop's extents ({@code loop}, one a stride of the load; null: not known): a loop
     * dimension of extent 1 may step p at any stride (its index is always 0), as a reduction over a middle dimension
     * of a batch of one reads [1, k, n] with its dimension of extent 1 at p's first stride.
     */
    static int[] remap(Expr.Load l, Buffer p, List<SymInt> loop) {
        if (!l.offset().equals(SymInt.ZERO)) return null;
        if (loop != null && loop.size() != l.strides().size()) loop = null;
        var shape = p.type().shape();
        List<SymInt> cs = shape.contiguousStrides();
        int[] map = new int[shape.rank()];
        boolean[] used = new boolean[l.strides().size()];
        for (int m = 0; m < shape.rank(); m++) {
            var d = shape.dim(m);
            map[m] = -1;
            if (d.isStatic() && d.size() == 1) continue;
            for (int k = 0; k < l.strides().size(); k++)
                if (!used[k] && l.strides().get(k).equals(cs.get(m))) { map[m] = k; used[k] = true; break; }
            if (map[m] < 0) return null;
        }
        for (int k = 0; k < used.length; k++)
            if (!used[k] && !l.strides().get(k).equals(SymInt.ZERO) && (loop == null || !loop.get(k).equals(SymInt.ONE))) return null;
        return map;
    }

    /**
     * The map of {@link #remap(Expr.Load, Buffer, List)} for a load it accepted (an absorbed producer's, read again
     * where the producer is inlined), whatever the loop's extents there: its dimensions of extent 1 stay unmapped.
     */
    static int[] remapAccepted(Expr.Load l, Buffer p) {
        List<SymInt> loop = new ArrayList<>(java.util.Collections.nCopies(l.strides().size(), SymInt.ONE));
        int[] map = remap(l, p, loop);
        if (map == null) throw new IllegalStateException("load of " + p + " at " + l.strides() + " is not a remap of it");
        return map;
    }

    static List<SymInt> concat(List<SymInt> a, List<SymInt> b) {
        var out = new ArrayList<SymInt>(a);
        out.addAll(b);
        return out;
    }

    /** Maps the dimensions of {@code own} other than size 1, in order, onto those of {@code target}; null if they differ. */
    static int[] match(List<SymInt> own, List<SymInt> target) {
        int[] map = new int[own.size()];
        int t = 0;
        for (int d = 0; d < own.size(); d++) {
            map[d] = -1;
            if (own.get(d).equals(SymInt.ONE)) continue;
            while (t < target.size() && target.get(t).equals(SymInt.ONE)) t++;
            if (t == target.size() || !target.get(t).equals(own.get(d))) return null;
            map[d] = t++;
        }
        while (t < target.size() && target.get(t).equals(SymInt.ONE)) t++;
        return t == target.size() ? map : null;
    }

    /**
     * A loop over {@code ranges} onto kernel dimensions {@code dims} (its dimensions of size 1 to none, -1) so that a
     * load with {@code strides} reads a buffer lying in the kernel as {@code want} says, one dimension to one; null when
     * no such order exists (loop ordering after fusion: a reader of a member in another order joins in the kernel's).
     */
    static int[] order(List<SymInt> ranges, List<SymInt> strides, List<SymInt> want, List<SymInt> dims) {
        int[] map = new int[ranges.size()];
        boolean[] used = new boolean[dims.size()];
        for (int d = 0; d < ranges.size(); d++) {
            map[d] = -1;
            if (ranges.get(d).equals(SymInt.ONE)) continue;
            for (int k = 0; k < dims.size() && map[d] < 0; k++)
                if (!used[k] && !dims.get(k).equals(SymInt.ONE) && dims.get(k).equals(ranges.get(d)) && want.get(k).equals(strides.get(d))) {
                    map[d] = k;
                    used[k] = true;
                }
            if (map[d] < 0) return null;
        }
        for (int k = 0; k < dims.size(); k++) if (!used[k] && !dims.get(k).equals(SymInt.ONE)) return null;
        return map;
    }

    static int nonOneCount(List<SymInt> xs) {
        int n = 0;
        for (SymInt x : xs) if (!x.equals(SymInt.ONE)) n++;
        return n;
    }

    static int[] identity(int n) {
        int[] map = new int[n];
        for (int i = 0; i < n; i++) map[i] = i;
        return map;
    }

    static List<SymInt> toKernel(List<SymInt> strides, int[] dims, int rank) {
        var out = new ArrayList<SymInt>(rank);
        for (int k = 0; k < rank; k++) out.add(SymInt.ZERO);
        for (int d = 0; d < strides.size() && d < dims.length; d++) if (dims[d] >= 0) out.set(dims[d], out.get(dims[d]).plus(strides.get(d)));
        return out;
    }

    /**
     * Strides over the kernel's dimensions ({@code dims}) that put each element of a member at its place in its buffer
     * ({@code bufferStrides}: row-major, or its slice of a concatenation), or null when that is the kernel's own
     * row-major order (every member but a reordered one or a strided slice).
     */
    static List<SymInt> placeStrides(List<SymInt> bufferStrides, int[] own, List<SymInt> dims) {
        var rowMajor = bufferStrides;
        var out = new ArrayList<SymInt>(dims.size());
        for (int k = 0; k < dims.size(); k++) out.add(SymInt.ZERO);
        for (int d = 0; d < rowMajor.size(); d++) if (own[d] >= 0) out.set(own[d], rowMajor.get(d));
        var kernelRowMajor = new SymInt[dims.size()];
        SymInt step = SymInt.ONE;
        for (int k = dims.size() - 1; k >= 0; k--) {
            kernelRowMajor[k] = step;
            step = step.times(dims.get(k));
        }
        for (int k = 0; k < dims.size(); k++) if (!dims.get(k).equals(SymInt.ONE) && !out.get(k).equals(kernelRowMajor[k])) return out;
        return null;
    }

    static boolean isIdentity(int[] dims, int rank) {
        if (dims.length != rank) return false;
        for (int i = 0; i < rank; i++) if (dims[i] != i) return false;
        return true;
    }
}
