package dev.gatun.lowering;

import dev.gatun.ir.Dim;
import dev.gatun.ir.Shape;
import dev.gatun.ir.SymInt;
import dev.gatun.ir.graph.Op;

import java.util.ArrayList;
import java.util.List;

/**
 * What order a buffer's elements lie in at its strides: packed row-major (size-1 dimensions' strides ignored), packed
 * with its last two dimensions swapped, or a strided view a registered op reads as it lies. Lowering asks these to
 * decide where a view is read in place and where a copy is made.
 */
final class Strides {
    private Strides() {}

    /** Whether two shapes are the same but for dimensions of size 1 (loops fusion matches anyway). */
    static boolean sameIgnoringOnes(Shape a, Shape b) {
        var x = new ArrayList<Dim>();
        var y = new ArrayList<Dim>();
        for (Dim d : a.dims()) if (!(d.isStatic() && d.size() == 1)) x.add(d);
        for (Dim d : b.dims()) if (!(d.isStatic() && d.size() == 1)) y.add(d);
        return x.equals(y);
    }

    /** Whether registered op {@code r} reads input {@code input}, {@code b}, as it lies (a static strided view it takes). */
    static boolean readsStrided(Buffer b, Op.Registered r, int input) {
        if (b.layout().isFlexible()) return false;   // packed as it is (contiguous() keeps it)
        Shape s = b.type().shape();
        var strides = b.layout().fix().strides();
        if (!s.isStatic() || !strides.stream().allMatch(SymInt::isConstant)) return false;
        long[] sizes = new long[s.rank()], st = new long[s.rank()];
        for (int d = 0; d < sizes.length; d++) {
            sizes[d] = s.dim(d).size();
            st[d] = strides.get(d).eval(java.util.Map.of());
        }
        return r.spec().readsStrided(input, sizes, st, r.attrs());
    }

    /**
     * Whether {@code strides} lay out shape {@code s} row-major, ignoring the strides of dimensions of size 1 (which
     * step nowhere): such a view reads the same bytes as a packed array of its shape. Symbolic sizes compare as
     * polynomials.
     */
    static boolean rowMajorIgnoringOnes(Shape s, List<SymInt> strides) {
        var want = s.contiguousStrides();
        for (int d = 0; d < s.rank(); d++)
            if (!(s.dim(d).isStatic() && s.dim(d).size() == 1) && !strides.get(d).equals(want.get(d))) return false;
        return true;
    }

    /** Whether {@code b}'s strides are the packed strides of its shape with the last two dimensions swapped. */
    static boolean transposedPacked(Buffer b) {
        if (b.layout().isFlexible() || b.type().shape().rank() < 2) return false;
        Shape s = b.type().shape();
        int r = s.rank();
        var dims = new ArrayList<>(s.dims());
        java.util.Collections.swap(dims, r - 2, r - 1);
        var strides = new ArrayList<>(new Shape(dims).contiguousStrides());
        java.util.Collections.swap(strides, r - 2, r - 1);
        return b.layout().fix().strides().equals(strides);
    }

    /**
     * Row-major strides (a view may start at an offset; a slice of a concatenation is addressed from its start). A
     * dimension of size 1 is never stepped, so its stride does not matter: a slice of whole heads of a one-sequence
     * batch is packed.
     */
    static boolean packed(Buffer b) {
        return b.layout().isFlexible() || rowMajorIgnoringOnes(b.type().shape(), b.layout().fix().strides());
    }
}
