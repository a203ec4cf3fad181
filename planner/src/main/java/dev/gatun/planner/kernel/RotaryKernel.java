package dev.gatun.planner.kernel;

import dev.gatun.ir.DType;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.PointwiseFn;
import dev.gatun.planner.PlanBuffer;

import java.util.List;

/**
 * A generated kernel read as the rotary embedding of a run of heads of a product's output: for each row r, head h of
 * {@code heads} from {@code firstHead} on (a head is {@code 2 * half} columns of the product), and element
 * {@code e < half}, with {@code x1 = x[r, h, e]} and {@code x2 = x[r, h, half + e]},
 * <pre>
 *   first[r, h, e]  = x1 * cos[e] - x2 * sin[e]
 *   second[r, h, e] = x2 * cos[half + e] + x1 * sin[half + e]
 * </pre>
 * (rotate-half RoPE, a decode step's queries or keys), {@code first} and {@code second} the two halves of each head of
 * the result, at {@code r * rowStride + (h - firstHead) * headStride + e} of their buffers. Each multiplication is
 * rounded as the kernel's type and {@code roundsEachOp} say, as the generated kernel computes it, so a kernel that
 * computes from these fields (a product that stores the rotation of its own sums: {@code Step.RotaryProduct}) stores
 * its bits.
 *
 * <p>{@link #read} takes the kernel exactly in that form: iterated over {@code [rows, heads, 1, half]}; the product's
 * output its input 0, whole, loaded at the head's two halves; two tables of the product's type, each read at
 * {@code e} and {@code half + e} only; six values, the two rotated halves stored, each into a buffer of the product's
 * type through the same strides (the halves of one concatenation, as rope's {@code cat} places them).
 */
public record RotaryKernel(Kernel kernel, int firstHead, int heads, int half, PlanBuffer cos, PlanBuffer sin, PlanBuffer first,
                           PlanBuffer second, long rowStride, long headStride, boolean roundsEachOp) {

    /** Null where {@code k} is the rotary embedding of heads of the product output {@code x} ({@link #read}); else why not. */
    public static String misfit(PlanBuffer x, Kernel k) {
        try {
            read(x, k);
            return null;
        } catch (IllegalArgumentException e) {
            return e.getMessage();
        }
    }

    /** {@code k} read as the rotary embedding of heads of {@code x}, a product's whole output {@code [rows, columns]}; refuses, saying why, any other kernel. */
    public static RotaryKernel read(PlanBuffer x, Kernel k) {
        if (!x.shape().isStatic() || x.shape().rank() != 2 || x.isView() || x.part() != null)
            throw new IllegalArgumentException("the product's output is not a whole matrix of static shape");
        long rows = x.shape().sizes()[0], columns = x.shape().sizes()[1];
        DType t = x.dtype();
        if (k.isReduction() || !k.folds().isEmpty() || k.inputs().size() != 3 || k.inputs().getFirst().storage() != x.storage() || k.inputs().getFirst().isView())
            throw new IllegalArgumentException("the kernel is not pointwise over the product's output and two tables");
        List<SymInt> r = k.ranges();
        if (r.size() != 4 || !r.stream().allMatch(SymInt::isConstant) || r.get(0).constant() != rows || r.get(2).constant() != 1)
            throw new IllegalArgumentException("the kernel does not run over [" + rows + ", heads, 1, half a head]");
        long heads = r.get(1).constant(), half = r.get(3).constant();
        if (half < 1 || half % 4 != 0 || columns % (2 * half) != 0)
            throw new IllegalArgumentException("a half head of " + half + " columns (a multiple of 4 that halves each head of the " + columns + ")");
        if (k.locals().size() != 6 || k.stores().size() != 2) throw new IllegalArgumentException("the kernel is not one rotation of two halves");
        // t0 = x1 * c[e], t1 = x2 * s[e], t2 = t0 - t1, t3 = x2 * c[half + e], t4 = x1 * s[half + e], t5 = t3 + t4
        KExpr.Load[] m0 = product(k, 0, t), m1 = product(k, 1, t), m3 = product(k, 3, t), m4 = product(k, 4, t);
        long base = m0[0].offset().constant();
        if (base % (2 * half) != 0) throw new IllegalArgumentException("the first load is not at the start of a head");
        long firstHead = base / (2 * half);
        if (firstHead + heads > columns / (2 * half)) throw new IllegalArgumentException("the heads run past the product's columns");
        for (KExpr.Load ld : new KExpr.Load[]{m0[0], m1[0], m3[0], m4[0]}) productLoad(ld, rows, columns, half);
        if (m1[0].offset().constant() != base + half || m3[0].offset().constant() != base + half || m4[0].offset().constant() != base)
            throw new IllegalArgumentException("the loads are not of the two halves of each head, crossed as a rotation");
        int cos = m0[1].input(), sin = m1[1].input();
        if (cos == sin || m3[1].input() != cos || m4[1].input() != sin) throw new IllegalArgumentException("the tables are not read as cosines and sines");
        tableLoad(m0[1], 0, rows);
        tableLoad(m1[1], 0, rows);
        tableLoad(m3[1], half, rows);
        tableLoad(m4[1], half, rows);
        for (int i : new int[]{cos, sin}) {
            PlanBuffer table = k.inputs().get(i);
            if (table.dtype() != t || !table.shape().isStatic() || table.shape().numel() < 2 * half || !table.strides().equals(table.shape().contiguousStrides()))
                throw new IllegalArgumentException("the table " + table.name() + " is not a contiguous run of " + 2 * half + " of the product's type");
        }
        combines(k, 2, PointwiseFn.SUB, 0, 1, t, false);
        combines(k, 5, PointwiseFn.ADD, 3, 4, t, true);
        Kernel.Store a = k.stores().get(0).local() == 2 ? k.stores().get(0) : k.stores().get(1), b = k.stores().get(0).local() == 2 ? k.stores().get(1) : k.stores().get(0);
        if (a.local() != 2 || b.local() != 5) throw new IllegalArgumentException("the kernel does not store the two rotated halves");
        long[] sa = storeStrides(a, t, heads, half), sb = storeStrides(b, t, heads, half);
        if (sa[0] != sb[0] || sa[1] != sb[1]) throw new IllegalArgumentException("the two halves are stored through different strides");
        return new RotaryKernel(k, Math.toIntExact(firstHead), Math.toIntExact(heads), Math.toIntExact(half), k.inputs().get(cos), k.inputs().get(sin),
                a.buffer(), b.buffer(), sa[0], sa[1], !k.floatIntermediates() && t.isHalf());
    }

    /** Local {@code i}, a multiplication of a load of the product by a load of a table: {product's load, table's load}. */
    private static KExpr.Load[] product(Kernel k, int i, DType t) {
        if (!(k.locals().get(i) instanceof KExpr.Apply m) || m.fn() != PointwiseFn.MUL || m.args().size() != 2 || m.dtype() != t
                || !(m.args().get(0) instanceof KExpr.Load p) || !(m.args().get(1) instanceof KExpr.Load q) || p.dtype() != t || q.dtype() != t)
            throw new IllegalArgumentException("value " + i + " is not a product of two loads of the product's type");
        if (p.input() == 0 && q.input() != 0) return new KExpr.Load[]{p, q};
        if (q.input() == 0 && p.input() != 0) return new KExpr.Load[]{q, p};
        throw new IllegalArgumentException("value " + i + " does not multiply the product's output by a table");
    }

    /** Local {@code i}: {@code fn} of locals {@code a} and {@code b} (in either order where it commutes). */
    private static void combines(Kernel k, int i, PointwiseFn fn, int a, int b, DType t, boolean commutes) {
        boolean ok = k.locals().get(i) instanceof KExpr.Apply ap && ap.fn() == fn && ap.dtype() == t && ap.args().size() == 2
                && ap.args().get(0) instanceof KExpr.Local p && ap.args().get(1) instanceof KExpr.Local q
                && (p.index() == a && q.index() == b || commutes && p.index() == b && q.index() == a);
        if (!ok) throw new IllegalArgumentException("value " + i + " is not " + fn.name().toLowerCase() + " of values " + a + " and " + b);
    }

    /** A load of the product's output: a row {@code columns} apart (any distance where there is one row), a head {@code 2 half}, an element 1. */
    private static void productLoad(KExpr.Load ld, long rows, long columns, long half) {
        var s = ld.strides();
        if (!ld.offset().isConstant() || s.size() != 4 || !s.stream().allMatch(SymInt::isConstant)
                || rows > 1 && s.get(0).constant() != columns || s.get(1).constant() != 2 * half || s.get(3).constant() != 1)
            throw new IllegalArgumentException("a load of the product is not of whole heads of its rows");
    }

    /** A load of a table at {@code offset + e}, the same for every row and head. */
    private static void tableLoad(KExpr.Load ld, long offset, long rows) {
        var s = ld.strides();
        if (!ld.offset().isConstant() || ld.offset().constant() != offset || s.size() != 4 || !s.stream().allMatch(SymInt::isConstant)
                || rows > 1 && s.get(0).constant() != 0 || s.get(1).constant() != 0 || s.get(3).constant() != 1)
            throw new IllegalArgumentException("a table is not read at the element of the half head alone");
    }

    /** A store's strides of a row and of a head {row, head}: offset 0, the element's 1, into a buffer of the product's type. */
    private static long[] storeStrides(Kernel.Store st, DType t, long heads, long half) {
        var s = st.strides();
        if (st.perRow() || !st.offset().equals(SymInt.ZERO) || st.buffer().dtype() != t || s == null || s.size() != 4
                || !s.stream().allMatch(SymInt::isConstant) || s.get(3).constant() != 1)
            throw new IllegalArgumentException("a half is not stored element by element into a buffer of the product's type");
        return new long[]{s.get(0).constant(), heads == 1 ? 0 : s.get(1).constant()};
    }
}
